"""Late chunking: chunk vectors pooled from the token vectors of the whole document's windows.

Chunk-and-average encodes each chunk alone, so a chunk's tokens never see the text around it. Late
chunking (Günther et al. 2024, "Late Chunking: Contextual Chunk Embeddings Using Long-Context
Embedding Models", arXiv 2409.04701) runs the encoder over as much of the document as fits first,
then pools the token vectors of each chunk's span. For an encoder of 512 positions the document is
covered by overlapping sliding windows, and each content token takes its vector from the window
where it has the most context on both sides, min(tokens left, tokens right) (the "max context" rule
of BERT's SQuAD code, Devlin et al. 2019; ties go to the earlier window) -- the rule ``--level
token`` uses -- instead of the paper's left-only rule for long texts.

numpy in, numpy out, no model: the aggregate stage (pipeline.output.aggregate) calls ``doc_chunks`` once per
document (every late feature) and ``chunk_spans`` (``--level window``); its options are checked by
pipeline.options.features_config ``check_late``; pipeline.output.aggregate's ``token_features`` (``--level token``) shares ``max_context``.
"""
from __future__ import annotations

import numpy as np


def max_context(positions: list[np.ndarray], vectors: list[np.ndarray],
                out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One vector per document position from overlapping windows, by the max-context rule.

    A position in several windows takes its vector from the window where it has the most context,
    min(k, n - 1 - k) for the window's k-th of n content tokens; on a tie the earlier window wins.

    Args:
        positions: per window, int (n_w,) ascending content-token positions in the document.
        vectors: per window, float32 (n_w, D) content-token vectors ([CLS]/[SEP] dropped), same order.
        out: float32 (m, D) to fill (e.g. a document's rows of a block's one token array); None: a new one.

    Returns:
        (positions int64 (m,) every position of some window, ascending; vectors float32 (m, D): ``out``
        when given).

    Raises:
        ValueError: ``out`` is not (m, D).
        Example: windows over positions 0..4 and 2..6 -> positions 0..6; 0-3 from the first window
        (position 3 has context 1 in both: the earlier wins), 4-6 from the second.
    """
    scores = [context(pos.shape[0]) for pos in positions]
    return merged(positions, vectors, scores, out)


def context(n: int) -> np.ndarray:
    """int64 (n,): each of a window's n content tokens' context, min(k, n - 1 - k) (the max-context rule)."""
    k = np.arange(n)
    return np.minimum(k, n - 1 - k)


def merged(positions: list[np.ndarray], vectors: list[np.ndarray], scores: list[np.ndarray],
           out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """max_context with each window token's context score given (``scores``: per window, int (n_w,))."""
    every = np.unique(np.concatenate(positions)) if positions else np.zeros(0, np.int64)   # (m,)
    dim = vectors[0].shape[1] if vectors else (out.shape[1] if out is not None else 0)
    best = np.full(every.shape[0], -1, dtype=np.int64)
    if out is None:
        out = np.zeros((every.shape[0], dim), dtype=np.float32)                               # (m, D)
    elif out.shape != (every.shape[0], dim):
        raise ValueError(f"out has shape {out.shape}; the windows cover {every.shape[0]} positions of {dim} values")
    for pos, vecs, score in zip(positions, vectors, scores):
        where = np.searchsorted(every, pos)
        better = score > best[where]
        best[where[better]] = score[better]
        out[where[better]] = vecs[better]
    return every.astype(np.int64), out


def chunk_bounds(n_tokens: int, chunk_tokens: int) -> list[tuple[int, int]]:
    """[start, end) of consecutive chunks of ``chunk_tokens`` over n_tokens items; the last may be shorter.

    Example: 300 tokens, K = 128 -> [(0, 128), (128, 256), (256, 300)]; 0 tokens -> [].
    """
    return [(s, min(s + chunk_tokens, n_tokens)) for s in range(0, n_tokens, chunk_tokens)]


def layer_columns(layers: tuple[int, ...], token_layers: tuple[int, ...], n_layers: int,
                  hidden: int) -> list[tuple[int, int]]:
    """Where each of a feature's layers lies in the per-token vector of ``token_layers`` (concatenated).

    Args:
        layers: the feature's hidden-state indices (negative counts from the end, -1 = layer n_layers).
        token_layers: the positive indices the encoder concatenated per token, each ``hidden`` wide.

    Returns:
        [start, end) per layer of ``layers``, in its order. Example: (-1,), (5, 6), 6 layers, 384 ->
        [(384, 768)].
    """
    positive = [x if x >= 0 else n_layers + 1 + x for x in layers]
    return [(token_layers.index(x) * hidden, (token_layers.index(x) + 1) * hidden) for x in positive]


def chunk_vectors(tokens: np.ndarray, bounds: list[tuple[int, int]], pooling: str,
                  columns: list[tuple[int, int]], layer_agg: str) -> np.ndarray:
    """Pool each chunk's token vectors, layer by layer, then combine the layers as --layer-agg says.

    Args:
        tokens: float32 (m, W) the document's token vectors, each the concatenation of the layers
            the encoder kept (``columns`` say where the feature's layers are).
        bounds: [start, end) rows of each chunk (chunk_bounds), non-empty.
        pooling: "mean" (of the chunk's tokens, in float64) or "max" (element-wise).
        columns: [start, end) of each layer of the feature within W (layer_columns).
        layer_agg: "mean" or "sum" of the layers' chunk vectors, or "concat" (in the order of the layers).

    Returns:
        float32 (n_chunks, D): D = hidden, or hidden x layers with concat.
        Example: tokens [[1], [3], [5]], bounds [(0, 2), (2, 3)], mean, [(0, 1)] -> [[2], [5]].
    """
    per_layer = []
    for a, b in columns:
        rows = [tokens[s:e, a:b].astype(np.float64) for s, e in bounds]
        pooled = [r.mean(axis=0) if pooling == "mean" else r.max(axis=0) for r in rows]
        per_layer.append(np.stack(pooled).astype(np.float32))                            # (n_chunks, h)
    if len(per_layer) == 1:
        return per_layer[0]
    if layer_agg == "concat":
        return np.concatenate(per_layer, axis=1)                                            # (n_chunks, k*h)
    stacked = np.stack(per_layer)                                                           # (k, n_chunks, h)
    return stacked.mean(axis=0) if layer_agg == "mean" else stacked.sum(axis=0)


def late_vectors(tokens: np.ndarray, chunk_tokens: int, pooling: str, columns: list[tuple[int, int]],
                 layer_agg: str) -> tuple[np.ndarray, np.ndarray]:
    """One document's late chunk vectors for one feature, and the tokens of each chunk.

    Args:
        tokens: float32 (m, W) the document's content-token vectors (max_context), in position order.
        chunk_tokens: K, content tokens per chunk. pooling, columns, layer_agg: as chunk_vectors.

    Returns:
        (float32 (n_chunks, D) chunk vectors, float64 (n_chunks,) tokens per chunk: the weights of
        ``--aggregate weighted``).
    """
    bounds = chunk_bounds(tokens.shape[0], chunk_tokens)
    weights = np.array([e - s for s, e in bounds], dtype=np.float64)
    return chunk_vectors(tokens, bounds, pooling, columns, layer_agg), weights


def chunk_spans(positions: np.ndarray, chunk_tokens: int) -> list[tuple[int, int]]:
    """[start, end) content-token positions of each chunk of a document whose windows cover ``positions``.

    Late windows cover every kept token, so positions are 0..m-1 and a chunk's span is its bounds.
    Example: positions 0..299, K = 128 -> [(0, 128), (128, 256), (256, 300)].
    """
    return [(int(positions[s]), int(positions[e - 1]) + 1) for s, e in chunk_bounds(positions.shape[0], chunk_tokens)]


def between(positions: list[np.ndarray], vectors: list[np.ndarray], lo: int, hi: int) -> tuple[list, list, list]:
    """The windows' content tokens at positions [lo, hi): (positions, vectors (views), context scores in
    the whole window), of the windows that hold any; what ``merged`` takes."""
    cut: tuple[list, list, list] = ([], [], [])
    for pos, vecs in zip(positions, vectors):
        a, b = np.searchsorted(pos, [lo, hi])
        if b > a:
            cut[0].append(pos[a:b])
            cut[1].append(vecs[a:b])
            cut[2].append(context(pos.shape[0])[a:b])
    return cut


CHUNKS_AT_ONCE = 64   # late chunks whose token vectors doc_chunks merges at once (64 x 128 tokens: 8,192)


def doc_chunks(positions: list[np.ndarray], layers: list[np.ndarray], features, chunk_tokens: int,
               token_layers: tuple[int, ...], n_layers: int, hidden: int) -> dict:
    """Every late feature's chunk vectors for one document, from its late windows' token vectors.

    Args:
        positions: per late window of the document, its content positions (Window.positions).
        layers: per late window, float32 (n_w, len(token_layers) x hidden) token vectors (Encoded.layers).
        features: the run's late features (pipeline.options.features_config.Feature: pooling, layers, layer_agg).
        chunk_tokens: K. token_layers, n_layers, hidden: as layer_columns.

    Returns:
        {feature: (float32 (n_chunks, D) chunk vectors, float64 (n_chunks,) tokens per chunk)}: chunk i
        pools the tokens i*K..(i+1)*K-1 of the document's positions, each token's vector from the window
        where it has the most context (max_context), merged CHUNKS_AT_ONCE chunks at a time.
    """
    every = np.unique(np.concatenate(positions)) if positions else np.zeros(0, np.int64)   # (m,)
    step = CHUNKS_AT_ONCE * chunk_tokens
    parts: dict = {f: [] for f in features}
    for start in range(0, every.shape[0], step):
        # the token vectors of CHUNKS_AT_ONCE chunks at a time, each from the window where it has the most
        # context in the whole document: a long document's (m, W) array is never made
        span = every[start:start + step]
        _, tokens = merged(*between(positions, layers, int(span[0]), int(span[-1]) + 1))   # (<= step, W)
        for f in features:
            parts[f].append(late_vectors(tokens, chunk_tokens, f.pooling,
                                         layer_columns(f.layers, token_layers, n_layers, hidden), f.layer_agg))
    return {f: (np.concatenate([v for v, _ in got]), np.concatenate([w for _, w in got])) for f, got in parts.items()}
