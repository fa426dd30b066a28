"""Encode stage: batch windows by length and run the forward pass.

The only module that runs torch on a device; ``Encoder.encode`` runs one block's unique windows;
the model is loaded by pipeline.model.load and checked beforehand by pipeline.model.facts.
"""
from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass

import numpy as np
import torch

from ..options.config import EncodeConfig, Feature, ModelConfig, PipelineConfig, PoolConfig
from ..options.features_config import late_token_layers
from ..errors import ConfigError, RunError
from .load import load_model, resolve_device, stop_early
from .pool import feature_pools, pool_all, pool_offsets, token_states
from ..types import Window

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


@dataclass(frozen=True)
class EncodeSpec:
    """What the forward pass and the window store's keys are built from: the model options, the features
    whose pooled vectors are computed, and the batch limits. No reading or writing option.

    Example: EncodeSpec(ModelConfig(model="~/bert"), (Feature("chunk", "mean"), Feature("head", "cls"))):
    each window's vector is its mean then its [CLS] vector, 2 x hidden float32 values.
    """

    model: ModelConfig                 # name or folder, device, dtype, quantize, threads, prompt_name...
    features: tuple[Feature, ...]      # the run's features; their distinct poolings are computed (``pools``)
    encode: EncodeConfig = EncodeConfig()   # batch_size (windows), token_budget_on(device) (padded tokens a pass)

    @classmethod
    def from_config(cls, cfg: PipelineConfig) -> EncodeSpec:
        """The values of ``cfg`` the encode stage reads (model, features, batch limits)."""
        return cls(cfg.model, tuple(cfg.feature_list()), cfg.encode)

    @property
    def pools(self) -> tuple[PoolConfig, ...]:
        """The distinct poolings of the features, in first-asked order (pipeline.model.pool.feature_pools)."""
        return feature_pools(self.features)

    def token_layers(self, n_layers: int) -> tuple[int, ...]:
        """The positive hidden-state indices (0..n_layers) the late features read, ascending."""
        return late_token_layers(self.features, n_layers)

    def layout(self, hidden: int, n_layers: int, with_tokens: bool = False) -> Layout:
        """Where this spec's encoder puts each pooled vector and per-token layer (``Encoded.layout``).

        Example: features chunk:mean and head:cls of a 384-wide, 6-layer model -> pools
        (("mean", (-1,), "mean"), (0, 384)), (("cls", (-1,), "mean"), (384, 768)); no token layers.
        """
        pools = self.pools
        offsets = pool_offsets(pools, hidden)
        return Layout(hidden, n_layers, tuple((p.pool_key, tuple(o)) for p, o in zip(pools, offsets)),
                      self.token_layers(n_layers), pools[0].dim(hidden) if with_tokens else None)


@dataclass(frozen=True)
class Layout:
    """What an encoded batch holds where: the stages after ``encode`` read the model's sizes and each
    pooling's place here, as sentence-transformers' ``Pooling`` asks the module before it.

    Raises (``slice_of``): ConfigError naming a pooling the encoder did not compute.
    """

    hidden: int                                      # the model's hidden size (config hidden_size)
    n_layers: int                                    # its transformer layers (config num_hidden_layers)
    pools: tuple[tuple[tuple, tuple[int, int]], ...]  # (pool_key, [a, b) in a window vector) per pooling
    token_layers: tuple[int, ...] = ()               # positive hidden-state indices in ``Encoded.layers``, side by side
    token_dim: int | None = None                     # D of ``Encoded.tokens`` (None: no per-token vectors)

    def slice_of(self, feature: Feature) -> tuple[int, int]:
        """[a, b) of ``feature``'s pooled vector in a window vector (its pool_key's place).

        Raises:
            ConfigError: the encoder did not compute that pooling, naming it and those it did.
        """
        for key, where in self.pools:
            if key == feature.pool_key:
                return where
        raise ConfigError(f"feature {feature.spec!r} reads pooling {feature.pool_key}, which the encoded batch "
                          f"does not hold (it pools {[k for k, _ in self.pools]}); give the Encode stage that feature")


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
    layers: list[np.ndarray | None] | None = None    # per window asked (n_content, k*h) float32: the hidden
                                                     # states of Encoder.token_layers side by side (late)
    layout: Layout | None = None                     # where each pooling lies, the model's sizes (the encode stage's)


class Encoder:
    """Holds a loaded model and runs windows through it in length-sorted batches.

    Args:
        model: a transformers encoder (BertModel, RobertaModel...) in eval mode, on ``device``.
        pad_id: the tokenizer's pad_token_id.
        pool_cfg: pooling options; batch_size and token_budget: batching limits (windows, tokens).
        token_layers: positive hidden-state indices whose per-token vectors ``encode(with_layers=...)``
            returns, concatenated (the layers of the run's late features; pipeline.model.late).
    """

    def __init__(self, model, pad_id: int, pool_cfg: PoolConfig, batch_size: int, token_budget: int,
                 device: torch.device, pools: tuple[PoolConfig, ...] | None = None, token_layers: tuple[int, ...] = ()):
        self.model = model
        self.pad_id = pad_id
        self.pool_cfg = pool_cfg
        # every pooling the run asks for; a window's vector is their concatenation (pool_all)
        self.pools = pools or (pool_cfg,)
        self.batch_size = batch_size
        self.token_budget = token_budget
        self.device = device
        self.token_layers = token_layers
        self.need_hidden = any(p.layers != (-1,) for p in self.pools) or bool(token_layers)
        # token_type_ids go only to models whose forward takes them (not DistilBERT, MPNet, ModernBERT)
        self.token_type_ids = "token_type_ids" in inspect.signature(model.forward).parameters
        self.stats = EncodeStats()
        self.on_batch = None   # optional callable(windows, tokens) after each forward batch (progress bars)
        self._fp32 = None
        self.full_model = model   # the model before stop_early's view (from_config sets it)
        # a window's prompt (Window.prompt_tokens) is pooled, unless its folder's Pooling says include_prompt false
        self.pool_prompt = True

    @classmethod
    def from_config(cls, spec: EncodeSpec, tokenizer, model=None) -> Encoder:
        """Load the model of ``spec.model`` and wrap it for ``spec``'s pools and batch limits.

        Args:
            spec: the model options, features and batch limits. tokenizer: the model's (its pad id).
            model: an already loaded model for the same ``spec.model`` (pipeline.classify.vectorizer's
                cache); not loaded again.

        Raises:
            ModelError: as pipeline.model.load.load_model.
        """
        device = resolve_device(spec.model.device)
        if model is None:
            model = load_model(spec.model, need_pooler=any(f.pooling == "pooler" for f in spec.features),
                               device=device)
        n_layers = int(getattr(model.config, "num_hidden_layers", 0) or 0)   # of the whole model
        view, pools = stop_early(model, spec.pools)
        encoder = cls(view, tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0, pools[0],
                      spec.encode.batch_size, spec.encode.token_budget_on(device.type), device, pools=pools,
                      token_layers=spec.token_layers(n_layers))
        encoder.full_model = model   # every layer: what another run's options may wrap again
        return encoder

    def encode(self, windows: list[Window], with_tokens: bool = False, with_layers: np.ndarray | None = None) -> Encoded:
        """Run every window through the model and pool it.

        Windows from many documents share batches, sorted by length (longest first) so padding per
        batch is minimal; results come back in the order of ``windows``. Padding never changes a
        vector: the attention mask hides it and pooling ignores it.

        Returns:
            Encoded with vectors (len(windows), D) float32 and, with ``with_tokens``, each window's
            content-token vectors ([CLS]/[SEP] dropped); with ``with_layers`` ((n,) bool), ``layers``
            holds the token_layers' content-token vectors of each window marked True (None elsewhere).

        Raises:
            RunError: a single window does not fit in GPU memory.
        """
        n = len(windows)
        lengths = [int(w.input_ids.shape[0]) for w in windows]
        vectors: np.ndarray | None = None
        tokens: list[np.ndarray | None] = [None] * n
        layers: list[np.ndarray | None] = [None] * n
        for batch in plan_batches(lengths, self.batch_size, self.token_budget):
            want = with_layers is not None and bool(with_layers[batch].any())
            for idx, vec, tok, lay in self._run(windows, batch, with_tokens, want):
                if vectors is None:
                    vectors = np.zeros((n, vec.shape[1]), dtype=np.float32)
                vectors[idx] = vec
                for j, i in enumerate(idx):
                    if with_tokens:
                        tokens[i] = tok[j]
                    if want and with_layers[i]:
                        layers[i] = lay[j]
            if self.on_batch is not None:
                self.on_batch(len(batch), sum(lengths[i] for i in batch))
        if vectors is None:
            vectors = np.zeros((0, 0), dtype=np.float32)
        finite = np.isfinite(vectors).all(axis=1) if n else np.ones(0, dtype=bool)
        return Encoded(vectors=vectors, finite=finite, tokens=tokens if with_tokens else None,
                       layers=layers if with_layers is not None else None)

    def _run(self, windows: list[Window], batch: list[int], with_tokens: bool, with_layers: bool = False):
        """Yield (indices, (n, D) vectors, per-window token arrays, per-window layer arrays) for one
        batch; split it on OOM."""
        try:
            yield self._forward(self.model, windows, batch, with_tokens, with_layers)
        except torch.OutOfMemoryError:
            if len(batch) == 1:
                raise RunError(f"one window of {windows[batch[0]].input_ids.shape[0]} tokens does not fit in "
                               f"memory on {self.device}; lower --max-length or use --device cpu") from None
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            self.stats.oom_splits += 1
            half = len(batch) // 2
            yield from self._run(windows, batch[:half], with_tokens, with_layers)
            yield from self._run(windows, batch[half:], with_tokens, with_layers)

    def _forward(self, model, windows: list[Window], batch: list[int], with_tokens: bool, with_layers: bool = False):
        seq = max(int(windows[i].input_ids.shape[0]) for i in batch)
        ids = np.full((len(batch), seq), self.pad_id, dtype=np.int64)      # (b, seq)
        mask = np.zeros((len(batch), seq), dtype=np.int64)                 # (b, seq)
        for j, i in enumerate(batch):
            length = windows[i].input_ids.shape[0]
            ids[j, :length] = windows[i].input_ids
            mask[j, :length] = 1
        ids_t, mask_t = self._to_device(ids), self._to_device(mask)
        with torch.inference_mode():
            extra = {"token_type_ids": torch.zeros_like(ids_t)} if self.token_type_ids else {}
            out = model(input_ids=ids_t, attention_mask=mask_t, output_hidden_states=self.need_hidden, **extra)
            vec = pool_all(out, self._pool_mask(mask_t, [windows[i] for i in batch]), self.pools)  # (b, sum D)
            tok = token_states(out, self.pool_cfg) if with_tokens else None  # (b, seq, D_tok)
            lay = torch.cat([out.hidden_states[i] for i in self.token_layers], dim=-1).float() \
                if with_layers else None                                    # (b, seq, k*h)
            bad = ~torch.isfinite(vec).all(dim=1)
            for t in (tok, lay):
                if t is not None:
                    bad |= ~torch.isfinite(t * mask_t.unsqueeze(-1)).all(dim=2).all(dim=1)
        self.stats.batches += 1
        self.stats.padded_tokens += len(batch) * seq
        vec_np = vec.float().cpu().numpy()
        tok_np = lay_np = None
        starts = [1 + windows[i].prompt_tokens for i in batch]   # each window's first content token
        if tok is not None:
            tok_all = tok.float().cpu().numpy()
            tok_np = [tok_all[j, starts[j]:windows[i].input_ids.shape[0] - 1] for j, i in enumerate(batch)]
        if lay is not None:
            lay_all = lay.cpu().numpy()                                     # (b, seq, k*h)
            lay_np = [lay_all[j, starts[j]:windows[i].input_ids.shape[0] - 1] for j, i in enumerate(batch)]
        if bool(bad.any()) and next(model.parameters()).dtype != torch.float32:
            # a half-precision overflow: recompute only the bad windows with a float32 copy of the model
            redo = [i for j, i in enumerate(batch) if bool(bad[j])]
            r_idx, r_vec, r_tok, r_lay = self._forward(self._float32_model(), windows, redo, with_tokens, with_layers)
            self.stats.fp32_recomputed += len(redo)
            pos = {i: j for j, i in enumerate(batch)}
            for k, i in enumerate(r_idx):
                vec_np[pos[i]] = r_vec[k]
                if tok_np is not None:
                    tok_np[pos[i]] = r_tok[k]
                if lay_np is not None:
                    lay_np[pos[i]] = r_lay[k]
        return batch, vec_np, tok_np, lay_np

    def _pool_mask(self, mask: torch.Tensor, windows: list[Window]) -> torch.Tensor:
        """(b, seq) attention mask -> the mask pooling reads: with include_prompt false (``pool_prompt``)
        each window's first 1 + prompt_tokens positions ([CLS] and the prompt) are 0, as
        sentence-transformers' Pooling (``_exclude_prompt_from_mask``) does, so cls pools the first token
        after the prompt there; otherwise ``mask`` itself."""
        if self.pool_prompt or not any(w.prompt_tokens for w in windows):
            return mask
        masked = mask.clone()                                               # (b, seq)
        for j, w in enumerate(windows):
            masked[j, :1 + w.prompt_tokens] = 0
        return masked

    def _to_device(self, array: np.ndarray) -> torch.Tensor:
        """(b, seq) int64 host array -> the same on the model's device. On CUDA the host copy is pinned
        and the copy is non-blocking, so it overlaps the previous batch's work on the stream (PyTorch's
        "pinned memory" note); on CPU the array is shared, not copied."""
        tensor = torch.from_numpy(array)
        if self.device.type == "cuda":
            return tensor.pin_memory().to(self.device, non_blocking=True)
        return tensor.to(self.device)

    def _float32_model(self):
        if self._fp32 is None:  # loaded again in float32 (pipeline.model.load), not upcast from rounded weights
            load = getattr(self.model, "load_float32", None)
            self._fp32 = load() if load is not None else copy.deepcopy(self.model).float()
        return self._fp32
