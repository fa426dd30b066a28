"""Pool stage: hidden states -> one vector per window, and window vectors -> one vector per document.

Tensor functions for each batch (on whatever device the batch is on), and ``aggregate`` per document
on CPU numpy arrays. Nothing here writes into
model outputs.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from ..options.config import Feature, PipelineConfig, PoolConfig


def cls_pool(hidden: Tensor, mask: Tensor) -> Tensor:
    """(n, seq, h) float and (n, seq) 0/1 mask -> (n, h): the hidden state at each row's first position
    whose mask is 1, the [CLS] of a right- or left-padded batch (position 0 for the product's own
    right-padded windows; a row with no 1 gives position 0).

    Example: mask rows [1, 1, 0] and [0, 1, 1] -> positions 0 and 1.
    """
    first = mask.ne(0).to(torch.int64).argmax(dim=1)                # (n,): argmax gives the first maximum
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), first.to(hidden.device)]  # (n, h)


def mean_pool(hidden: Tensor, mask: Tensor) -> Tensor:
    """(n, seq, h) float and (n, seq) 0/1 mask -> (n, h): mean over non-padding positions.

    [CLS] and [SEP] are included, padding is not; as sentence-transformers' ``Pooling(mode="mean")``.
    The masked sum is one batched matrix product (mask row times hidden states), which never builds
    the (n, seq, h) masked copy: half the CPU time of multiply-then-sum on 32 x 512 x 384 float32.
    """
    m = mask.to(hidden.dtype)                                        # (n, seq)
    total = torch.bmm(m.unsqueeze(1), hidden).squeeze(1)             # (n, 1, seq) @ (n, seq, h) -> (n, h)
    return total / m.sum(dim=1, keepdim=True).clamp(min=1e-9)        # (n, h)


def max_pool(hidden: Tensor, mask: Tensor) -> Tensor:
    """(n, seq, h) float and (n, seq) 0/1 mask -> (n, h): element-wise max over non-padding positions."""
    pad = ~mask.bool().unsqueeze(-1)                                 # (n, seq, 1)
    return hidden.masked_fill(pad, float("-inf")).max(dim=1).values  # (n, h)


def select_layers(outputs, layers: tuple[int, ...]) -> list[Tensor]:
    """The hidden states named by ``layers``, each (n, seq, h) float32.

    Index i follows ``outputs.hidden_states`` (0 = embedding output, L = last layer, -1 = last);
    with layers == (-1,) the model need not return all hidden states.
    """
    if layers == (-1,):
        return [outputs.last_hidden_state.float()]
    return [outputs.hidden_states[i].float() for i in layers]


def combine_layers(states: list[Tensor], layer_agg: str) -> Tensor:
    """k tensors (..., h) -> (..., h) for mean/sum, (..., k*h) for concat (in the order given).

    The feature-based approach of Devlin et al. 2019 (BERT, section 5.3) concatenates or sums layers.
    """
    if len(states) == 1:
        return states[0]
    if layer_agg == "concat":
        return torch.cat(states, dim=-1)                 # (..., k*h)
    stacked = torch.stack(states, dim=0)                 # (k, ..., h)
    return stacked.mean(dim=0) if layer_agg == "mean" else stacked.sum(dim=0)


def pool_windows(outputs, mask: Tensor, cfg: PoolConfig) -> Tensor:
    """One float32 vector per window of a batch: (n, D).

    Args:
        outputs: the model's output for the batch (last_hidden_state (n, seq, h); hidden_states when
            more than the last layer is asked for; pooler_output (n, h) for pooling="pooler").
        mask: (n, seq) attention mask, 1 for [CLS], content and [SEP], 0 for padding.
        cfg: pooling, layers and layer_agg.

    Returns:
        (n, D) float32, D = h, or h * len(layers) with layer_agg="concat".
        ``pooler`` is tanh(W h_cls + b), the model's own pooler (BERT's next-sentence head input).
    """
    if cfg.pooling == "pooler":
        return outputs.pooler_output.float()
    pooled = []
    for hidden in select_layers(outputs, cfg.layers):
        if cfg.pooling == "cls":
            pooled.append(cls_pool(hidden, mask))
        elif cfg.pooling == "mean":
            pooled.append(mean_pool(hidden, mask))
        else:
            pooled.append(max_pool(hidden, mask))
    return combine_layers(pooled, cfg.layer_agg)


def pool_all(outputs, mask: Tensor, pools: tuple[PoolConfig, ...]) -> Tensor:
    """Every pool's window vectors side by side: (n, D_1 + D_2 + ...) float32, in the pools' order.

    One pool gives exactly pool_windows; pool_offsets says where each one lies.
    """
    if len(pools) == 1:
        return pool_windows(outputs, mask, pools[0])
    return torch.cat([pool_windows(outputs, mask, p) for p in pools], dim=1)  # (n, sum D)


def token_states(outputs, cfg: PoolConfig) -> Tensor:
    """(n, seq, D) float32 per-position vectors of the chosen layers (for --level token)."""
    return combine_layers(select_layers(outputs, cfg.layers), cfg.layer_agg)


def aggregate(vectors: np.ndarray, weights: np.ndarray, how: str) -> np.ndarray:
    """Windows of one document -> one vector.

    Args:
        vectors: (n_windows, D) float32, in window order.
        weights: (n_windows,) content tokens per window, used by how="weighted".
        how: "mean" (chunk and average), "max" (element-wise), "weighted" (mean weighted by each
            window's content tokens), "first" or "last" (the first or last window's vector).

    Returns:
        (D,) float32. Example: vectors [[0, 2], [2, 4]], weights [1, 3], weighted -> [1.5, 3.5].
    """
    if vectors.shape[0] == 1 or how == "first":
        return vectors[0]
    if how == "last":
        return vectors[-1]
    if how == "max":
        return vectors.max(axis=0)
    if how == "weighted":
        w = weights.astype(np.float64) / weights.sum()
        return (vectors.astype(np.float64) * w[:, None]).sum(axis=0).astype(np.float32)
    return vectors.astype(np.float64).mean(axis=0).astype(np.float32)


def aggregate_parts(vectors: np.ndarray, weights: np.ndarray, hows: tuple[str, ...]) -> np.ndarray:
    """Windows of one document -> the ``aggregate`` of each of ``hows``, concatenated in that order.

    The concatenation of several summaries of the chunk vectors follows the hierarchical read-outs of
    Sun et al. 2019 and Pappagari et al. 2019 (first, last, mean and max of the segment vectors).

    Args:
        vectors: (n_windows, D) float32; weights: (n_windows,) content tokens per window.
        hows: e.g. ("first", "last", "mean", "max").

    Returns:
        (len(hows) * D,) float32. Example: [[0, 2], [2, 4]], ("first", "max") -> [0, 2, 2, 4].
    """
    if len(hows) == 1:
        return aggregate(vectors, weights, hows[0])
    return np.concatenate([aggregate(vectors, weights, how) for how in hows])  # (k * D,)


def normalize(vector: np.ndarray) -> np.ndarray:
    """(..., D) float32 -> (..., D) float32, each vector along the last axis of unit L2 norm
    (``--normalize``); a zero vector stays zero.

    As sentence-transformers' ``normalize_embeddings`` (torch.nn.functional.normalize, eps 1e-12),
    applied to the document vector, after ``aggregate`` (with several --aggregate parts, to the whole
    concatenated vector), or to each window's vector at --level window (one (n, D) call).
    Example: [3, 4] -> [0.6, 0.8].
    """
    v64 = vector.astype(np.float64)
    return (v64 / np.maximum(np.linalg.norm(v64, axis=-1, keepdims=True), 1e-12)).astype(np.float32)


def window_pools(cfg: PipelineConfig) -> tuple[PoolConfig, ...]:
    """The run's pools: ``feature_pools(cfg.feature_list())``."""
    return feature_pools(cfg.feature_list())


def feature_pools(features: Sequence[Feature]) -> tuple[PoolConfig, ...]:
    """The distinct (pooling, layers, layer_agg) of ``features``, in first-asked order, each as a PoolConfig
    of that one pooled window vector (its other fields the defaults).

    Features of different strategies with the same pooling read the same pooled vector of a shared
    window: 5 strategies with mean pooling need one pool. Example: features head:cls, chunk:cls,
    chunk:mean:-2 -> (cls (-1,), mean (-2,)).
    """
    pools: list[PoolConfig] = []
    for f in features:
        p = PoolConfig(pooling=f.pooling, layers=f.layers, layer_agg=f.layer_agg, features=())
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
