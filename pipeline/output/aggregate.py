"""The ``aggregate`` stage: window vectors -> one vector per output row, one class per output level.

At document and token level each feature's window vectors are combined per document with
--aggregate (pipeline.model.pool.aggregate_parts); at --level window each window keeps its own vector.
Also ``aggregate_rows``, the same combination on a user's own numpy arrays (``longbert.aggregate``).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..batch import Batch
from ..stage import Stage
from ..errors import ConfigError
from ..options.features_config import AGGREGATES, parse_feature
from ..model.late import chunk_spans, doc_chunks, max_context
from ..model.pool import aggregate_parts, normalize
from ..text.segment import covered_tokens
from ..types import TokenizedDoc, Window
from .schema import column_names

if TYPE_CHECKING:
    from ..model.encode import Layout

NON_FINITE = "non-finite features (overflow in half precision, also in the float32 recompute)"
NO_WINDOW = "no content tokens: the document makes no window"


def aggregate_documents(agg: Aggregate, batch: Batch) -> Batch:
    """Document (and token) level: per document and feature, its windows' vectors aggregated.

    Args:
        agg: the stage (features, aggregates, normalize, chunk_tokens).
        batch: after ``encode``; its ``encoded.layout`` says where each feature's pooling lies in a window
            vector (pipeline.model.encode.Layout).

    Returns:
        The batch with vectors {column: (n_docs, D) float32}, valid, errors, out_docs = 0..n-1,
        n_windows, truncated and, at --level token, tokens.

    Raises:
        ConfigError: the encoded batch has no layout, or lacks a feature's pooling.
    """
    docs, enc = batch.docs, batch.encoded
    n = len(docs)
    layout = layout_of(enc)
    slices = [layout.slice_of(f) for f in agg.features]
    strategies = list(batch.windows)
    index = dict(zip(strategies, batch.plan.index))                   # strategy -> (n_req,) into unique
    spans = {s: doc_slices(batch.windows[s], n) for s in strategies}
    features = [np.zeros((n, (b - a) * len(agg.aggregates)), dtype=np.float32) for a, b in slices]
    valid = np.zeros(n, dtype=bool)
    errors: list[str | None] = [d.error for d in docs]
    n_windows = np.zeros(n, dtype=np.int32)
    truncated = np.zeros(n, dtype=bool)
    tokens: list[tuple | None] = [None] * n
    rows_of = token_rows(batch, spans[strategies[0]]) if agg.per_token else None    # each document's rows of one array
    for doc in docs:
        wins = {s: batch.windows[s][spans[s][doc.row]] for s in strategies}
        rows = {s: index[s][spans[s][doc.row]] for s in strategies}     # (windows of doc,) into enc
        every = [w for s in strategies for w in wins[s]]
        n_windows[doc.row] = len({w.spans for w in every})
        truncated[doc.row] = covered_tokens(every) < doc.n_tokens
        if doc.error is not None:
            continue
        if not all(enc.finite[rows[s]].all() for s in strategies):
            errors[doc.row] = NON_FINITE
            continue
        late = late_chunks(agg, wins["late"], rows["late"], enc) if "late" in wins else {}
        for col, f, (a, b) in zip(features, agg.features, slices):
            parts, weights = late[f] if f.strategy == "late" else (
                enc.vectors[rows[f.strategy], a:b], np.array([w.n_content for w in wins[f.strategy]], dtype=np.float64))
            vec = aggregate_parts(parts, weights, agg.aggregates)
            col[doc.row] = normalize(vec) if agg.normalize else vec
        valid[doc.row] = True
        if agg.per_token:
            s = strategies[0]
            tokens[doc.row] = token_features(doc, wins[s], [enc.tokens[i] for i in rows[s]], rows_of[doc.row])
    # at --level token the windows' token vectors are dropped once each document's are made: held once
    return batch.replace(vectors=dict(zip(agg.column_names(), features)), valid=valid,
                         errors=errors, out_docs=np.arange(n, dtype=np.int64), n_windows=n_windows,
                         truncated=truncated, tokens=tokens if agg.per_token else None,
                         encoded=dataclasses.replace(enc, tokens=None) if agg.per_token else enc)


def token_rows(batch: Batch, spans: list[slice]) -> list[np.ndarray | None]:
    """Per document, its rows of one new float32 (m_total, D) array for its per-token vectors (m_total:
    every document's covered positions, documents with an error excluded), so that a block's token
    vectors are one buffer, which the rows stage hands to Arrow without a copy; None for a document
    with an error. ``spans``: each document's slice of the first strategy's windows (doc_slices)."""
    windows, enc = batch.windows[next(iter(batch.windows))], batch.encoded
    dim = enc.tokens[0].shape[1] if enc.tokens else 0
    counts = [0 if d.error is not None or s.start == s.stop else
              len(np.unique(np.concatenate([w.positions for w in windows[s]]))) for d, s in zip(batch.docs, spans)]
    ends = np.cumsum(counts)
    flat = np.empty((int(ends[-1]) if len(ends) else 0, dim), dtype=np.float32)
    return [None if d.error is not None else flat[e - c:e] for d, c, e in zip(batch.docs, counts, ends)]


def layout_of(enc) -> Layout:
    """The Layout an encoded batch carries (pipeline.model.encode.Encoded.layout).

    Raises:
        ConfigError: none there (an encode stage of one's own that did not record it).
    """
    layout = getattr(enc, "layout", None)
    if layout is None:
        raise ConfigError("the encoded batch does not say where each pooling lies (batch.encoded.layout is None); "
                          "an encode stage of one's own sets it as longbert.Encode does (its `layout` property)")
    return layout


def aggregate_windows(agg: Aggregate, batch: Batch) -> Batch:
    """--level window: one output row per window of the run's one strategy, its vector as encoded
    (unit-scaled with --normalize). A document without a window keeps one row with its error; a
    window whose vector is not finite gets an error.

    Returns:
        The batch with vectors {column: (n_out, D) float32}, valid, errors, out_docs and out_windows.

    Raises:
        ConfigError: as aggregate_documents.
    """
    strategy = agg.features[0].strategy     # one strategy at --level window (PoolConfig refuses more)
    docs, rows, raw, finite = (chunk_rows if strategy == "late" else window_rows)(agg, batch)
    errors = [batch.docs[d].error or NO_WINDOW if w is None else None if ok else NON_FINITE
              for d, w, ok in zip(docs, rows, finite)]
    vectors = {}
    for name, v in zip(agg.column_names(), raw):
        if agg.normalize:
            v = normalize(v)                                                      # (n_out, D), row by row
        vectors[name] = np.where(finite[:, None], v, 0).astype(np.float32)
    return batch.replace(vectors=vectors, valid=finite.copy(), errors=errors,
                         out_docs=np.asarray(docs, dtype=np.int64), out_windows=rows)


def window_rows(agg: Aggregate, batch: Batch) -> tuple[list[int], list, list[np.ndarray], np.ndarray]:
    """(doc row per output row, its Window or None, per feature (n_out, D) vectors as encoded, finite (n_out,))."""
    strategy = agg.features[0].strategy
    windows = batch.windows[strategy]
    into = batch.into_unique(strategy)
    docs, wins = row_plan(batch.docs, windows)
    enc = batch.encoded
    slices = [layout_of(enc).slice_of(f) for f in agg.features]
    enc_rows = into[np.maximum(wins, 0)] if len(windows) else np.zeros(len(wins), np.int64)
    finite = enc.finite[enc_rows] & (wins >= 0) if len(windows) else np.zeros(len(wins), bool)
    vectors = [enc.vectors[enc_rows, a:b] if len(windows) else np.zeros((len(wins), b - a), np.float32)
               for a, b in slices]                                                # (n_out, D) each
    return docs, [windows[w] if w >= 0 else None for w in wins], vectors, finite


def chunk_rows(agg: Aggregate, batch: Batch) -> tuple[list[int], list, list[np.ndarray], np.ndarray]:
    """``late`` at --level window: one row per late chunk, as window_rows returns them.

    A chunk row's Window has the chunk's number (``window``), its one span of content positions and
    no input ids; the chunks of a document tile its kept tokens in order (pipeline.model.late.chunk_spans).
    """
    windows, enc = batch.windows["late"], batch.encoded
    into = batch.into_unique("late")
    dims = [b - a for a, b in (layout_of(enc).slice_of(f) for f in agg.features)]
    docs, rows, finite, vectors = [], [], [], [[] for _ in dims]
    start = 0
    for doc in batch.docs:
        n = windows[start].n_windows if start < len(windows) and windows[start].doc == doc.row else 0
        mine, enc_rows = windows[start:start + n], into[start:start + n]
        start += n
        spans = chunk_spans(np.unique(np.concatenate([w.positions for w in mine])), agg.chunk_tokens) \
            if n else []
        ok = bool(n) and bool(enc.finite[enc_rows].all())
        chunks = late_chunks(agg, mine, enc_rows, enc) if ok else {}
        docs += [doc.row] * max(len(spans), 1)
        rows += [Window(doc.row, k, len(spans), (span,), np.zeros(0, np.int64)) for k, span in enumerate(spans)] or [None]
        finite += [ok] * max(len(spans), 1)
        for v, f, d in zip(vectors, agg.features, dims):
            v.append(chunks[f][0] if ok else np.zeros((max(len(spans), 1), d), np.float32))
    return docs, rows, [np.concatenate(v) if v else np.zeros((0, d), np.float32) for v, d in zip(vectors, dims)], \
        np.array(finite, dtype=bool)


def late_chunks(agg: Aggregate, windows: list[Window], rows: np.ndarray, enc) -> dict:
    """{late feature: (chunk vectors, tokens per chunk)} of one document's late ``windows`` (``rows``:
    theirs in ``enc``), by pipeline.model.late.doc_chunks, with the token layers, layer count and
    hidden size the encoded batch's layout gives."""
    layout = layout_of(enc)
    return doc_chunks([w.positions for w in windows], [enc.layers[i] for i in rows],
                      [f for f in agg.features if f.strategy == "late"], agg.chunk_tokens,
                      layout.token_layers, layout.n_layers, layout.hidden)


def row_plan(docs: list[TokenizedDoc], windows: list[Window]) -> tuple[list[int], np.ndarray]:
    """Which document and window each --level window output row holds.

    Args:
        docs: the block's documents; windows: one strategy's windows, grouped by document in row order.

    Returns:
        (doc rows (n_out,) list of int, window indices (n_out,) int64 into ``windows``, -1 for a
        document's row without a window). Example: docs of 2, 0 and 1 windows -> ([0, 0, 1, 2], [0, 1, -1, 2]).
    """
    first: dict[int, int] = {}
    for i, w in enumerate(windows):
        first.setdefault(w.doc, i)
    rows, wins = [], []
    for doc in docs:
        start = first.get(doc.row)
        count = 1 if start is None else windows[start].n_windows
        rows += [doc.row] * count
        wins += [-1] if start is None else range(start, start + count)
    return rows, np.asarray(wins, dtype=np.int64)


def doc_slices(windows: list[Window], n_docs: int) -> list[slice]:
    """Per document row, the slice of ``windows`` (grouped by document, in row order) that is its own."""
    out = [slice(0, 0)] * n_docs
    start = 0
    while start < len(windows):
        row = windows[start].doc
        end = start
        while end < len(windows) and windows[end].doc == row:
            end += 1
        out[row] = slice(start, end)
        start = end
    return out


def token_features(doc: TokenizedDoc, windows: list[Window], window_tokens: list[np.ndarray],
                   out: np.ndarray | None = None):
    """Per-token output of one document: (token_ids, positions, offsets, token_features).

    Every position that is in some window appears once, ascending. A token in two overlapping
    windows takes its vector from the window where it has the most context, min(tokens left,
    tokens right) within the window (the "max context" rule of BERT's SQuAD code, Devlin et al.
    2019); on a tie the earlier window wins.

    Args:
        out: float32 (m, D) the token features are written into (token_rows); None: a new array.

    Returns:
        token_ids int32 (m,), positions int32 (m,), offsets int32 (m, 2), token_features (m, D) float32.
    """
    positions, feats = max_context([w.positions for w in windows], window_tokens, out)    # (m,), (m, D)
    return (doc.ids[positions].astype(np.int32), positions.astype(np.int32),
            doc.offsets[positions].astype(np.int32), feats)


def aggregate_rows(window_vectors, doc_index: Sequence[int] | np.ndarray, weights=None,
                   how: str | Sequence[str] = "mean") -> np.ndarray:
    """Window vectors -> one vector per document, as the ``aggregate`` stage combines them.

    Args:
        window_vectors: (n_windows, D) numpy array (or torch tensor), any float dtype.
        doc_index: (n_windows,) int, the document of each window: 0..n_docs-1, each document's windows
            contiguous and in window order.
        weights: (n_windows,) tokens per window, for how="weighted" (None: all 1).
        how: first | last | mean | max | weighted, or a list of them (their vectors concatenated in
            that order: Sun et al. 2019, Pappagari et al. 2019).

    Returns:
        (n_docs, D x len(how)) float32.

    Raises:
        ConfigError: an unknown ``how``, lengths that differ, or documents that are not contiguous.
    """
    hows = (how,) if isinstance(how, str) else tuple(how)
    bad = [h for h in hows if h not in AGGREGATES]
    if bad or not hows:
        raise ConfigError(f"how={how!r}; choose from {AGGREGATES} or a list of them")
    vectors = as_numpy(window_vectors).astype(np.float32)
    if vectors.ndim != 2:
        raise ConfigError(f"window_vectors has shape {vectors.shape}; expected (n_windows, D)")
    index = np.asarray(doc_index, dtype=np.int64)
    w = np.ones(len(index)) if weights is None else np.asarray(as_numpy(weights), dtype=np.float64)
    if not len(index) == len(w) == vectors.shape[0]:
        raise ConfigError(f"{vectors.shape[0]} window vectors, {len(index)} document indices and {len(w)} "
                          "weights; give one of each per window")
    n_docs = int(index.max()) + 1 if len(index) else 0
    starts = np.searchsorted(index, np.arange(n_docs + 1))
    if len(index) and (np.any(np.diff(index) < 0) or np.any(np.diff(starts) == 0)):
        raise ConfigError("doc_index must be 0..n_docs-1, ascending, every document with at least one window")
    out = [aggregate_parts(vectors[a:b], w[a:b], hows) for a, b in zip(starts[:-1], starts[1:])]
    return np.stack(out).astype(np.float32) if out else np.zeros((0, vectors.shape[1] * len(hows)), np.float32)


def as_numpy(x) -> np.ndarray:
    """``x`` as a numpy array: a torch tensor detached and moved to the CPU (a float16/bfloat16 one as
    float32, whose values it holds exactly), anything else through ``np.asarray``; shape and, otherwise,
    dtype kept. Used by ``longbert.aggregate`` and ``longbert.save_features``.
    Example: torch.ones(2, 3, dtype=torch.float16) -> float32 array of shape (2, 3)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu()
        return (x.float() if x.is_floating_point() else x).numpy()
    return np.asarray(x)


def _features_of(features: object) -> tuple:
    """Aggregate's ``features`` as Feature objects: each a Feature or a ``--feature`` spec
    (pipeline.options.features_config.parse_feature). Raises ConfigError naming ``features``."""
    if isinstance(features, (str, dict)) or not isinstance(features, (list, tuple)):
        raise ConfigError(f"Aggregate: features must be a list or tuple of Feature objects or specs such as "
                          f"'chunk:mean'; got {type(features).__name__} {features!r}")
    for f in features:
        if not isinstance(f, (str, dict)) and not hasattr(f, "strategy"):
            raise ConfigError(f"Aggregate: features holds {type(f).__name__} {f!r}; give Feature objects or "
                              "specs such as 'chunk:mean'")
    return tuple(f if hasattr(f, "strategy") else parse_feature(f) for f in features)


class Aggregate(Stage):
    """``encoded`` -> one vector per document and feature: its windows' vectors combined with
    ``aggregates`` (``aggregate_documents``), unit-scaled with ``normalize``.

    Each feature's place in a window vector, the hidden size and the layer count are read from the
    encoded batch (``batch.encoded.layout``, which the encode stage records); the column names come
    from the values alone (``column_names``).

    Args:
        features: the run's features in column order: pipeline.options.features_config.Feature
            objects or specs as ``--feature`` takes them (``"chunk:mean"``, ``"head:cls:-4..-1:concat"``,
            or a mapping of strategy/pooling/layers/layer_agg).
        aggregates: first | last | mean | max | weighted, several side by side (e.g. ("mean", "max")).
        normalize: scale each vector to unit L2 norm.
        chunk_tokens: late chunking's content tokens per chunk.

    Raises:
        ConfigError: ``features`` is not a sequence of features or specs, a spec is wrong (as
            ``--feature``'s message), or an aggregate that is not one of AGGREGATES.

    Fills ``vectors`` {column: (n_docs, D) float32}, ``valid``, ``errors``, ``out_docs``, ``n_windows``,
    ``truncated`` (and ``tokens`` in TokenAggregate). A replacement aggregate needs to fill only
    ``vectors`` (and ``errors`` where it refuses a row): the rows stage derives the rest.

    Example:
        >>> Aggregate(["chunk:mean"], aggregates=("mean", "max")).column_names()
        ['features']
    """

    name, requires, fills = "aggregate", ("encoded",), ("vectors",)
    per_token = False

    def __init__(self, features: Sequence, aggregates: Sequence[str] = ("mean",), normalize: bool = False,
                 chunk_tokens: int = 128):
        self.features = _features_of(features)
        self.aggregates = (aggregates,) if isinstance(aggregates, str) else tuple(aggregates)
        bad = [a for a in self.aggregates if a not in AGGREGATES]
        if bad or not self.aggregates:
            raise ConfigError(f"Aggregate: aggregates={aggregates!r}; choose from {AGGREGATES} or a tuple of them")
        self.normalize, self.chunk_tokens = bool(normalize), int(chunk_tokens)

    def get_params(self, deep: bool = True) -> dict:
        return {"features": self.features, "aggregates": self.aggregates, "normalize": self.normalize,
                "chunk_tokens": self.chunk_tokens}

    def column_names(self) -> list[str]:
        """The output columns this stage fills, in feature order (pipeline.output.schema.column_names)."""
        return column_names(self.features, self.aggregates)

    def __call__(self, batch: Batch) -> Batch:
        self.check(batch)
        return aggregate_documents(self, batch)


class TokenAggregate(Aggregate):
    """As Aggregate, and per document its tokens' vectors (``tokens``: token_ids, positions, offsets,
    (m, D) float32), each token from the window where it has the most context."""

    per_token = True


class WindowAggregate(Aggregate):
    """One output row per window of the run's one strategy, its vector as encoded (``aggregate_windows``);
    fills ``out_docs`` and ``out_windows`` too (``aggregates`` is not used)."""

    def column_names(self) -> list[str]:
        """As Aggregate's, without aggregate parts (window vectors are not aggregated)."""
        return column_names(self.features)

    def __call__(self, batch: Batch) -> Batch:
        self.check(batch)
        return aggregate_windows(self, batch)
