"""The ``aggregate`` stage: window vectors -> one vector per output row, one class per output level.

At document and token level each feature's window vectors are combined per document with
--aggregate (pipeline.model.pool.aggregate_parts); at --level window each window keeps its own vector.
Also ``aggregate_rows``, the same combination on a user's own numpy arrays (``longbert.aggregate``).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from ..batch import Batch
from ..stage import Stage
from ..errors import ConfigError
from ..options.features_config import AGGREGATES, parse_feature
from ..model.late import chunk_spans, doc_chunks, max_context
from ..model.pool import aggregate_parts, normalize
from ..text.segment import covered_tokens
from ..types import TokenizedDoc, Window
from .write import fits_float16

NON_FINITE = "non-finite features (overflow in half precision, also in the float32 recompute)"
FP16_OVERFLOW = "features overflow float16 (|x| > 65504); use --out-dtype float32"
FP16_TOKEN_OVERFLOW = "per-token features overflow float16 (|x| > 65504); use --out-dtype float32"
INT8_NON_FINITE = "features hold a value that is not finite, which --out-dtype int8 cannot store; use --out-dtype float32"
NO_WINDOW = "no content tokens: the document makes no window"


def aggregate_documents(agg: Aggregate, batch: Batch) -> Batch:
    """Document (and token) level: per document and feature, its windows' vectors aggregated.

    Args:
        agg: the stage (features, ``slices`` of each feature in a window vector, columns, aggregates...).
        batch: after ``encode``.

    Returns:
        The batch with vectors {column: (n_docs, D) float32}, valid, errors, out_docs = 0..n-1,
        n_windows, truncated and, at --level token, tokens.
    """
    docs, enc = batch.docs, batch.encoded
    n = len(docs)
    strategies = list(batch.windows)
    index = dict(zip(strategies, batch.plan.index))                   # strategy -> (n_req,) into unique
    spans = {s: doc_slices(batch.windows[s], n) for s in strategies}
    features = [np.zeros((n, dim), dtype=np.float32) for _, dim in agg.columns]
    valid = np.zeros(n, dtype=bool)
    errors: list[str | None] = [d.error for d in docs]
    n_windows = np.zeros(n, dtype=np.int32)
    truncated = np.zeros(n, dtype=bool)
    tokens: list[tuple | None] = [None] * n
    rows_of = token_rows(batch, spans[strategies[0]]) if agg.per_token else None    # each document's rows of one array
    half, int8 = agg.out_dtype == "float16", agg.out_dtype == "int8"
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
        vecs = []
        late = late_chunks(agg, wins["late"], rows["late"], enc) if "late" in wins else {}
        for f, (a, b) in zip(agg.features, agg.slices):
            parts, weights = late[f] if f.strategy == "late" else (
                enc.vectors[rows[f.strategy], a:b], np.array([w.n_content for w in wins[f.strategy]], dtype=np.float64))
            vec = aggregate_parts(parts, weights, agg.aggregates)
            vecs.append(normalize(vec) if agg.normalize else vec)
        if half and not all(fits_float16(v) for v in vecs):
            errors[doc.row] = FP16_OVERFLOW
            continue
        if int8 and not all(np.isfinite(v).all() for v in vecs):
            errors[doc.row] = INT8_NON_FINITE
            continue
        for col, vec in zip(features, vecs):
            col[doc.row] = vec
        valid[doc.row] = True
        if agg.per_token:
            s = strategies[0]
            tokens[doc.row] = token_features(doc, wins[s], [enc.tokens[i] for i in rows[s]], rows_of[doc.row])
            if half and not fits_float16(tokens[doc.row][3]):
                errors[doc.row], valid[doc.row], tokens[doc.row] = FP16_TOKEN_OVERFLOW, False, None
            elif int8 and not np.isfinite(tokens[doc.row][3]).all():
                errors[doc.row], valid[doc.row], tokens[doc.row] = INT8_NON_FINITE, False, None
    # at --level token the windows' token vectors are dropped once each document's are made: held once
    return batch.replace(vectors={name: v for (name, _), v in zip(agg.columns, features)}, valid=valid,
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


def aggregate_windows(agg: Aggregate, batch: Batch) -> Batch:
    """--level window: one output row per window of the run's one strategy, its vector as encoded
    (unit-scaled with --normalize). A document without a window keeps one row with its error; a
    window whose vector is not finite, or overflows float16 with --out-dtype float16, gets an error.

    Returns:
        The batch with vectors {column: (n_out, D) float32}, valid, errors, out_docs and out_windows.
    """
    strategy = agg.features[0].strategy     # one strategy at --level window (PoolConfig refuses more)
    docs, rows, raw, finite = (chunk_rows if strategy == "late" else window_rows)(agg, batch)
    errors = [batch.docs[d].error or NO_WINDOW if w is None else None if ok else NON_FINITE
              for d, w, ok in zip(docs, rows, finite)]
    vectors = {}
    for (name, _), v in zip(agg.columns, raw):
        if agg.normalize:
            v = normalize(v)                                                      # (n_out, D), row by row
        vectors[name] = np.where(finite[:, None], v, 0).astype(np.float32)
    valid = finite.copy()
    if agg.out_dtype == "float16":
        fits = np.logical_and.reduce([fits_float16(v, axis=1) for v in vectors.values()])      # (n_out,)
        for i in np.flatnonzero(valid & ~fits):
            errors[i], valid[i] = FP16_OVERFLOW, False
    return batch.replace(vectors=vectors, valid=valid, errors=errors, out_docs=np.asarray(docs, dtype=np.int64),
                         out_windows=rows)


def window_rows(agg: Aggregate, batch: Batch) -> tuple[list[int], list, list[np.ndarray], np.ndarray]:
    """(doc row per output row, its Window or None, per feature (n_out, D) vectors as encoded, finite (n_out,))."""
    strategy = agg.features[0].strategy
    windows = batch.windows[strategy]
    into = batch.into_unique(strategy)
    docs, wins = row_plan(batch.docs, windows)
    enc = batch.encoded
    enc_rows = into[np.maximum(wins, 0)] if len(windows) else np.zeros(len(wins), np.int64)
    finite = enc.finite[enc_rows] & (wins >= 0) if len(windows) else np.zeros(len(wins), bool)
    vectors = [enc.vectors[enc_rows, a:b] if len(windows) else np.zeros((len(wins), b - a), np.float32)
               for a, b in agg.slices]                                            # (n_out, D) each
    return docs, [windows[w] if w >= 0 else None for w in wins], vectors, finite


def chunk_rows(agg: Aggregate, batch: Batch) -> tuple[list[int], list, list[np.ndarray], np.ndarray]:
    """``late`` at --level window: one row per late chunk, as window_rows returns them.

    A chunk row's Window has the chunk's number (``window``), its one span of content positions and
    no input ids; the chunks of a document tile its kept tokens in order (pipeline.model.late.chunk_spans).
    """
    windows, enc = batch.windows["late"], batch.encoded
    into = batch.into_unique("late")
    dims = [b - a for a, b in agg.slices]
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
    theirs in ``enc``), by pipeline.model.late.doc_chunks."""
    return doc_chunks([w.positions for w in windows], [enc.layers[i] for i in rows],
                      [f for f in agg.features if f.strategy == "late"], agg.chunk_tokens,
                      agg.token_layers, agg.n_layers, agg.hidden)


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

    Args:
        features: the run's features in column order: pipeline.options.features_config.Feature
            objects or specs as ``--feature`` takes them (``"chunk:mean"``, ``"head:cls:-4..-1:concat"``,
            or a mapping of strategy/pooling/layers/layer_agg).
        columns: per feature (output column name, D); slices: per feature its [a, b) in a window vector.
        aggregates: first | last | mean | max | weighted, several side by side (e.g. ("mean", "max")).
        normalize: scale each vector to unit L2 norm. out_dtype: "float16" turns a vector that
            overflows half precision into a row error, "int8" one that is not finite (the rows stage
            quantizes; "binary" packs the signs there).
        chunk_tokens: late chunking's content tokens per chunk.
        n_layers, hidden: the model's number of layers and hidden size (its config's
            num_hidden_layers and hidden_size; the default model's are 6 and 384). Read by late
            features only, which need both; None where there are none.

    Raises:
        ConfigError: ``features`` is not a sequence of features or specs, a spec is wrong (as
            ``--feature``'s message), or a late feature without ``n_layers`` and ``hidden``.

    Fills ``vectors`` {column: (n_docs, D) float32}, ``valid``, ``errors``, ``out_docs``, ``n_windows``,
    ``truncated`` (and ``tokens`` in TokenAggregate). A replacement aggregate needs to fill only
    ``vectors`` (and ``errors`` where it refuses a row): the rows stage derives the rest.
    """

    name, requires, fills = "aggregate", ("encoded",), ("vectors",)
    per_token = False

    def __init__(self, features: tuple, columns: tuple[tuple[str, int], ...], slices: tuple[tuple[int, int], ...],
                 aggregates: tuple[str, ...] = ("mean",), normalize: bool = False, out_dtype: str = "float32",
                 chunk_tokens: int = 128, n_layers: int | None = None, hidden: int | None = None):
        self.features = _features_of(features)
        self.columns, self.slices = tuple(map(tuple, columns)), tuple(map(tuple, slices))
        self.aggregates, self.normalize, self.out_dtype = tuple(aggregates), bool(normalize), out_dtype
        self.chunk_tokens = int(chunk_tokens)
        self.n_layers = None if n_layers is None else int(n_layers)
        self.hidden = None if hidden is None else int(hidden)
        if (n_layers is None or hidden is None) and any(f.strategy == "late" for f in self.features):
            raise ConfigError("Aggregate: late features need n_layers and hidden, the model's num_hidden_layers "
                              f"and hidden_size (got n_layers={n_layers!r}, hidden={hidden!r})")
        # the hidden states late features read, as positive indices (pipeline.model.encode.Encoder.token_layers)
        self.token_layers = tuple(sorted({x if x >= 0 else n_layers + 1 + x for f in self.features
                                          if f.strategy == "late" for x in f.layers}))

    def get_params(self, deep: bool = True) -> dict:
        return {"features": self.features, "columns": self.columns, "slices": self.slices,
                "aggregates": self.aggregates, "normalize": self.normalize, "out_dtype": self.out_dtype,
                "chunk_tokens": self.chunk_tokens, "n_layers": self.n_layers, "hidden": self.hidden}

    def with_io(self, out_dtype: str) -> Aggregate:
        """This stage with a run's --out-dtype."""
        return self if out_dtype == self.out_dtype else type(self)(**{**self.get_params(), "out_dtype": out_dtype})

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

    def __call__(self, batch: Batch) -> Batch:
        self.check(batch)
        return aggregate_windows(self, batch)
