"""The ``encode`` stage: a block's unique windows -> their vectors, from the model or, with a window
store, from the store (``encode_unique``). The only stage that loads weights, on its first call.
"""
from __future__ import annotations

import copy
import dataclasses
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..batch import Batch
from ..counts import BlockCounts
from ..errors import ConfigError
from .prompts import pools_prompt
from ..options.config import EncodeConfig, Feature, ModelConfig, PipelineConfig
from ..options.features_config import is_late
from ..stage import Stage
from ..types import ModelFacts

if TYPE_CHECKING:
    from ..cache.store_api import Store
    from .encode import EncodeSpec


class Weights:
    """A model's weights loaded once, on first use, and shared by every Encode stage built with the
    same model options (a pipeline, the pipelines derived from it, the vectorizer's runs); thread-safe.

    Pickling keeps no weights: the unpickled Weights load them again, from the folder of the first
    config that asks (``encoder``; a model given in memory too), and refuse them (ModelError) when that
    folder's sha256 is no longer the one the weights were loaded with. ``copy.deepcopy`` returns the
    same Weights (shared, not copied).

    Args:
        model: an already loaded model (not loaded again), or None: loaded from the first spec's
            ``model`` options (name, device, dtype, quantize, threads).
    """

    def __init__(self, model=None):
        self.model = model
        self.given = model is not None  # an in-memory model (a pickled copy loads it from the config instead)
        self.sha256: str | None = None  # of the files the weights were loaded from (None: given, or a hub model)
        self._encoders: dict = {}       # EncodeSpec (model, features, batch limits) -> its Encoder
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        """What loads the weights again: the sha256 they were checked with (no model, lock or encoders)."""
        return {"sha256": self.sha256}

    def __setstate__(self, state: dict) -> None:
        self.model, self.given, self.sha256, self._encoders = None, False, state.get("sha256"), {}
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict) -> Weights:
        """The same Weights: a deep copy of a pipeline shares its loaded model, as derived pipelines do."""
        return self

    @property
    def loaded(self) -> bool:
        """Whether the weights are in memory."""
        return self.model is not None

    def encoder(self, spec: EncodeSpec, tokenizer, sha256: str | None = None):
        """A pipeline.model.encode.Encoder of its own (own counters and progress hook) over the shared
        weights, for ``spec``'s model options, pools and batch limits.

        Args:
            spec: pipeline.model.encode.EncodeSpec. tokenizer: the model's (its pad id).
            sha256: the hash of the model's files when the run's options were resolved (ModelFacts.sha256).

        Raises:
            ModelError: as pipeline.model.load.load_model; or the folder's files changed after the options
                were resolved (its vectors would be filed in the store under a hash that did not make them).
        """
        from .encode import Encoder   # torch loads here, not on import

        name = spec.model.model
        with self._lock:
            if spec not in self._encoders:
                fresh = self.model is None
                made = Encoder.from_config(spec, tokenizer, model=self.model)
                self.model = made.full_model
                if fresh:
                    now = _files_sha256(name)
                    if self.sha256 is not None and now is not None and now != self.sha256:
                        self.model = None   # unpickled, and the folder is no longer what was loaded
                        raise _changed(name, self.sha256, now, pickled=True)
                    self.sha256 = now
                self._encoders[spec] = made
            if sha256 is not None and self.sha256 is not None and self.sha256 != sha256:
                raise _changed(name, sha256, self.sha256)
            shared = self._encoders[spec]
        mine = copy.copy(shared)
        mine.stats, mine.on_batch = type(shared.stats)(), None
        return mine


class Encode(Stage):
    """``plan.unique`` -> ``encoded``: window vectors (every pooling of the features side by side, in
    first-asked order: pipeline.model.pool.feature_pools), from the model or from the window store;
    loads the weights on first use. Takes no reading or writing option.

    Args:
        model: the model options (name or folder, device, dtype, quantize, threads, prompt_name...).
        features: the features whose pooled window vectors are computed; a late feature's layers also
            make the per-token vectors it reads.
        tokenizer: the model's tokenizer (its pad id). facts: the model's facts (hidden size, layers,
            special ids; the store's keys use its sha256). Either None: read from ``model``'s folder here
            (its config.json and tokenizer files, pipeline.model.facts.model_facts; no weights load).
        encode: the batch limits (batch_size windows, token_budget padded tokens a forward pass).
        store: an open window store (any pipeline.cache.store_api.Store: the vectorizer's in-memory one,
            or another implementation), or a store's URI (--cache: a folder of the SQLite store, or
            s3://BUCKET/PREFIX), opened on the first call by pipeline.cache.stores.open_store; None: none.
        with_tokens: also keep each window's per-token vectors (per-token output).
        weights: an already loaded model for ``model``, or a ``Weights`` to share; None: loaded here.
        on_batch: called with (windows, tokens) after each forward pass (a progress bar), or None.

    Raises:
        ConfigError: no feature, or a value of the wrong kind. ModelError: tokenizer or facts None and
            the model cannot be read (as model_facts). ModelError / ConfigError: on the first call, as
            open_store (before the weights load), load_model and WindowCache.open.

    Example:
        >>> enc = Encode(ModelConfig(model=model_path()), [Feature("chunk", "mean")])
        >>> enc(batch).encoded.vectors.shape   # (n_unique_windows, enc.facts.hidden_size) float32
    """

    name, requires, fills = "encode", ("plan",), ("encoded",)

    def __init__(self, model: ModelConfig, features: Sequence[Feature], tokenizer=None, facts: ModelFacts | None = None,
                 encode: EncodeConfig = EncodeConfig(), store: Store | str | Path | None = None,
                 with_tokens: bool = False, weights: Any = None, on_batch: Callable[[int, int], None] | None = None):
        features = tuple(features)
        if not isinstance(model, ModelConfig) or not isinstance(encode, EncodeConfig):
            raise ConfigError(f"Encode takes model=longbert.ModelConfig(...) and encode=longbert.EncodeConfig(...); "
                              f"got {type(model).__name__} and {type(encode).__name__}")
        if not features or not all(isinstance(f, Feature) for f in features):
            raise ConfigError(f"Encode needs one or more longbert.Feature values, e.g. [longbert.Feature('chunk', "
                              f"'mean')]; got {list(features)!r}")
        if tokenizer is None or facts is None:
            from .facts import model_facts

            found, tokenizer = model_facts(model, tokenizer)
            facts = found if facts is None else facts
        self.model, self.features, self.encode = model, features, encode
        self.tokenizer, self.facts, self.with_tokens, self.on_batch = tokenizer, facts, with_tokens, on_batch
        self.store = str(store) if isinstance(store, Path) else store
        self.weights = weights if isinstance(weights, Weights) else Weights(weights)
        self._encoder = self._cache = self._opened = None
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, config: PipelineConfig, tokenizer, facts: ModelFacts, weights: Any = None,
                    store: Store | None = None, with_tokens: bool = False) -> Encode:
        """The stage for a run's config (max_length resolved): its model options, features and batch
        limits; ``store`` if given, else the --cache folder of its write options (None: no store).

        Raises:
            ConfigError: as the constructor.
        """
        return cls(config.model, config.feature_list(), tokenizer, facts, config.encode,
                   store if store is not None else (config.write.cache or None), with_tokens, weights)

    @property
    def spec(self) -> EncodeSpec:
        """pipeline.model.encode.EncodeSpec of this stage: what its Encoder and store keys are built from."""
        from .encode import EncodeSpec

        return EncodeSpec(self.model, self.features, self.encode)

    def __getstate__(self) -> dict:
        """The parameters only: the weights pickle as their sha256 (loaded again on the first call, see
        Weights), the store by its URI; the encoder, the open store and cache and the lock are made again."""
        state = dict(self.__dict__)
        state["_encoder"] = state["_cache"] = state["_lock"] = state["_opened"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict) -> Encode:
        """A copy that shares the weights and the store (an in-memory store is not emptied)."""
        memo[id(self.weights)], memo[id(self.store)] = self.weights, self.store
        new = object.__new__(Encode)
        memo[id(self)] = new
        new.__setstate__({k: copy.deepcopy(v, memo) for k, v in self.__getstate__().items()})
        return new

    def get_params(self, deep: bool = True) -> dict:
        return {"model": self.model, "features": self.features, "tokenizer": self.tokenizer, "facts": self.facts,
                "encode": self.encode, "store": self.store, "with_tokens": self.with_tokens,
                "weights": self.weights, "on_batch": self.on_batch}

    @property
    def loaded(self) -> bool:
        """Whether the weights are loaded."""
        return self.weights.loaded

    @property
    def encoder(self):
        """This stage's Encoder (loads the weights and opens the store on first use)."""
        self.load()
        return self._encoder

    def load(self) -> None:
        """Open the store (a URI: pipeline.cache.stores.open_store), then load the weights (once per
        Weights), so a store that cannot be opened fails before the model loads.

        Raises:
            ConfigError: as open_store and WindowCache.open. ModelError: as pipeline.model.load.load_model.
        """
        with self._lock:
            if self._encoder is not None:
                return
            from .window_cache import WindowCache

            spec = self.spec
            store = self._open_store()
            encoder = self.weights.encoder(spec, self.tokenizer, self.facts.sha256)
            encoder.pool_prompt = pools_prompt(self.facts)   # a window's prompt: pooled or not
            encoder.on_batch = self.on_batch
            if self.facts.sha256 is None:   # a hub model's files are on disk only now: hash them for the store
                sha = self.weights.sha256 or _files_sha256(self.model.model)
                if sha is not None:
                    self.facts = dataclasses.replace(self.facts, sha256=sha)
            self._cache = WindowCache.open(spec, self.facts, store or None)   # None without a store
            self._encoder = encoder

    def open_store(self) -> None:
        """Open the store a URI names (once; pipeline.cache.stores.open_store), without loading the weights:
        called before the run says "loading model", so a store that cannot be opened (an endpoint, a
        bucket, credentials, a permission) is refused first. Nothing for a store given open, or none.

        Raises:
            ConfigError: as open_store.
        """
        with self._lock:
            self._open_store()

    def _open_store(self):
        """The open store (given, or opened from its URI once), or None. Called under self._lock."""
        store = self.store
        if isinstance(store, str) and store:
            from ..cache.stores import open_store

            store = self._opened = self._opened or open_store(store)
        return store

    def close(self) -> None:
        """End a run's use of the store (called at the end of every run): its ``close`` writes what is
        pending and releases connections; a closed store connects again on its next call (both
        built-in stores do), so the stage stays usable. A store given open is closed too (the Store
        contract: ``close`` at a run's end), except an in-memory SQLite store, whose close would drop
        its windows (the vectorizer's, kept for the process). Nothing opened: nothing done."""
        with self._lock:
            store = self._cache.store if self._cache is not None else None
        if store is not None and getattr(store, "db_file", True) is not None:
            store.close()

    def with_io(self, config: PipelineConfig, facts: ModelFacts) -> Encode:
        """This stage for a run with ``config``'s write options: the same weights and values, ``facts``,
        and the run's --cache folder or URI (an open store given to this stage is kept); this very stage when
        neither its facts nor its store change (its loaded encoder and open store are kept)."""
        given = self.store is not None and not isinstance(self.store, str)
        store = self.store if given else (config.write.cache or None)
        if facts == self.facts and store == self.store:
            return self
        return type(self)(**{**self.get_params(deep=False), "facts": facts, "store": store})

    def __call__(self, batch: Batch) -> Batch:
        from .window_cache import encode_unique

        self.check(batch)
        encoder = self.encoder
        stats = encoder.stats
        oom, fp32 = stats.oom_splits, stats.fp32_recomputed
        enc, cached = encode_unique(encoder, self._cache, batch.unique, with_tokens=self.with_tokens,
                                    with_layers=late_windows(batch))
        counts = BlockCounts(windows=len(batch.unique) - cached, windows_cached=cached,
                             oom_splits=stats.oom_splits - oom, fp32_recomputed=stats.fp32_recomputed - fp32)
        enc = dataclasses.replace(enc, layout=self.layout)   # what the aggregate stage reads its sizes and slices from
        return batch.replace(encoded=enc, cached=cached, counts=counts)

    @property
    def layout(self):
        """The pipeline.model.encode.Layout of this stage's vectors: the model's hidden size and layers,
        each pooling's [a, b) in a window vector, the late token layers and, with tokens, their D."""
        return self.spec.layout(self.facts.hidden_size, self.facts.num_hidden_layers, self.with_tokens)


def _files_sha256(name: str) -> str | None:
    """The sha256 of a model's files now (pipeline.model.checkpoint.model_sha256; cached by size and mtime)."""
    from .checkpoint import model_sha256
    from .facts import checkpoint_folder, resolve_model_path

    folder = checkpoint_folder(resolve_model_path(name))
    return None if folder is None else model_sha256(folder)


def _changed(name: str, then: str, now: str, pickled: bool = False):
    """The ModelError for a model folder whose files' sha256 is ``now``, not ``then`` (the sha256 the options
    were checked with, or, ``pickled``, the one an unpickled pipeline's weights were loaded from). Running
    the same pipeline again fails the same way: the message says what works (a pipeline built again)."""
    from ..errors import ModelError

    when = "this pipeline was pickled" if pickled else "this pipeline's options were checked"
    return ModelError(f"the model folder {name!r} was saved again after {when}: its files' sha256 was "
                      f"{then[:12]}... then and is {now[:12]}... now, and this pipeline keeps the old one; build the "
                      f"pipeline again from the folder (longbert.Pipeline.from_options(model={name!r}, ...) in "
                      "Python, or a new `longbert extract` run)" + (", and pickle that one" if pickled else ""))


def late_windows(batch: Batch) -> np.ndarray | None:
    """(n_unique,) bool: the unique windows whose per-token vectors a late feature reads; None without one."""
    late = [strategy for strategy in batch.windows if is_late(strategy)]
    if not late:
        return None
    mask = np.zeros(len(batch.unique), dtype=bool)
    for strategy in late:
        mask[batch.into_unique(strategy)] = True
    return mask
