"""The Python API's per-process state: one loaded model (and the pipeline of the last options) shared by
``encode`` and every ``LongBertVectorizer``, and the in-memory window store."""
from __future__ import annotations

import contextlib
from typing import Any

from ..errors import PipelineError
from ..options.config import PipelineConfig

MEMORY = ":memory:"  # cache= value of the per-process in-memory window store (SQLite's own name for one)


_MEMORY_STORE: list = []  # the per-process in-memory WindowStore, opened on first use


def memory_store():
    """The in-memory window store of this process (pipeline.cache.store.WindowStore.open(None)), made once.

    One for every LongBertVectorizer and encode(cache=":memory:") of the process: entries are keyed
    by model sha256, dtype, quantization, pooling and the window's token ids (pipeline.model.window_cache),
    so other options never read a wrong vector. It grows with the distinct windows seen (about
    1.6 KB per window at 384 dimensions) and lives as long as the process; cache=None avoids it.
    """
    from ..cache.store import WindowStore

    if not _MEMORY_STORE:
        _MEMORY_STORE.append(WindowStore.open(None))
    return _MEMORY_STORE[0]


def cache_options(cache: str | None) -> tuple[str | None, bool]:
    """A ``cache=`` value -> (the config's cache folder, whether the in-memory store is used).

    Example: ":memory:" -> (None, True); "~/.cache/longbert" -> ("~/.cache/longbert", False); None -> (None, False).
    """
    if cache == MEMORY:
        return None, True
    return (None if cache is None else str(cache)), False


# One loaded model per process, shared by every LongBertVectorizer (clones, cross_val_score folds,
# set_params) and by encode(): {"key": model_key, "tokenizer", "model": the encode stage's Weights,
# "pipeline": ((cfg, memory), Pipeline)}.
_LOADED: dict[str, Any] = {}


def model_key(cfg: PipelineConfig) -> tuple:
    """The options that change the loaded model (or whether it may be used): another key loads again."""
    m = cfg.model
    return (m.model, m.device, m.dtype, m.quantize, m.threads, m.allow_pickle,
            any(f.pooling == "pooler" for f in cfg.feature_list()), model_identity(m.model))


def model_identity(name: str) -> tuple | None:
    """A local model's files as they are now (pipeline.model.checkpoint.folder_identity: path, size and
    mtime of config.json and the weights), so a folder saved again in place is loaded again; None for
    a hub id, or a name that does not resolve (the load then says why)."""
    from ..errors import ModelError
    from ..model.checkpoint import folder_identity
    from ..model.facts import DEFAULT_MODEL, is_local, resolve_model_path

    if name != DEFAULT_MODEL and not is_local(name):
        return None
    try:
        return folder_identity(resolve_model_path(name))
    except (ModelError, OSError):
        return None


def cached_pipeline(cfg: PipelineConfig, echo=None, memory: bool = False):
    """The pipeline for ``cfg``, weights loaded, its tokenizer and model from the per-process cache.

    ``memory``: the encode stage looks windows up in (and adds them to) ``memory_store()``; a
    ``cfg.write.cache`` folder is used otherwise.

    The first call (or one with another ``model_key``: another model, or the same folder saved again
    in place) loads the model, dropping the previous one first, so at most one model is held; other options (strategy, pooling, batch size, ...) reuse
    the loaded model. ``echo``: called with a one-line note before a load (None: silent).

    Raises:
        ConfigError / ModelError: as pipeline.engine.compose.Pipeline.from_config and the weights' load.
    """
    from ..engine.compose import Pipeline  # torch loads here, not on import

    key = model_key(cfg)
    cached = _LOADED.get("pipeline")
    if cached is not None and cached[0] == (cfg, memory) and _LOADED.get("key") == key:
        return cached[1]
    store = memory_store() if memory else None
    if _LOADED.get("key") == key:
        pipe = Pipeline.from_config(cfg, _LOADED["tokenizer"], model=_LOADED["model"], store=store)
        pipe.encode_stage().load()
    else:
        _LOADED.clear()  # free the old model before the new one loads
        if echo is not None:
            echo(f"loading model {cfg.model.model} ...")
        pipe = Pipeline.from_config(cfg, store=store)
        encode = pipe.encode_stage()
        encode.load()
        _LOADED.update(key=key, tokenizer=encode.tokenizer, model=encode.weights)
    _LOADED["pipeline"] = ((cfg, memory), pipe)
    return pipe


@contextlib.contextmanager
def forgotten_on_failure(pipe):
    """Run a call with ``pipe``; if it fails other than by a PipelineError about its input (a bug, an
    interrupt), drop it from the per-process cache: the next call builds a fresh one (the model stays)."""
    try:
        yield pipe
    except PipelineError:
        raise
    except BaseException:
        if _LOADED.get("pipeline", (None, None))[1] is pipe:
            del _LOADED["pipeline"]
        raise
