"""--level window: a block's output as one row per window, in document order (called by pipeline.block).

A document that makes no window (empty text, no tokens) keeps one row with a null window and its
error, so every input row appears in the output.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from .late import chunk_spans
from .pool import normalize
from .types import Window
from .write import fits_float16, passthrough_columns

NO_WINDOW = "no content tokens: the document makes no window"


def row_plan(prep, strategy: str) -> tuple[list[int], np.ndarray]:
    """Which document and window each output row holds.

    Args:
        prep: the block's pipeline.block.Prepared (its windows of ``strategy`` are grouped by document,
            in row order, each document's in window order).
        strategy: the run's one strategy.

    Returns:
        (doc rows (n_out,) list of int, window indices (n_out,) int64 into prep.strategy_windows[strategy],
        -1 for a document's row without a window). Example: docs of 2, 0 and 1 windows ->
        ([0, 0, 1, 2], [0, 1, -1, 2]).
    """
    windows = prep.strategy_windows[strategy]
    first: dict[int, int] = {}
    for i, w in enumerate(windows):
        first.setdefault(w.doc, i)
    docs, wins = [], []
    for doc in prep.docs:
        start = first.get(doc.row)
        count = 1 if start is None else windows[start].n_windows
        docs += [doc.row] * count
        wins += [-1] if start is None else range(start, start + count)
    return docs, np.asarray(wins, dtype=np.int64)


def window_table(ex, prep, enc) -> tuple[pa.Table, list[str | None]]:
    """The block's window rows: ``ex.schema`` (pipeline.write.output_schema at --level window).

    Each window's vector is its pooled vector as encoded (no aggregate), unit-scaled with --normalize;
    for ``late``, a row is a late chunk (chunk_rows).
    A window whose vector is not finite, or overflows float16 with --out-dtype float16, gets null
    features and the error of the document level.

    Args:
        ex: the pipeline.block.Extractor (its cfg, features, slices into the window vector, columns, schema).
        prep: the block after tokenize and segment. enc: pipeline.encode.Encoded of prep.windows.

    Returns:
        (the table, the error of each row).
    """
    from .block import FP16_OVERFLOW, NON_FINITE   # block imports this module

    strategy = ex.features[0].strategy     # one strategy at --level window (PoolConfig refuses more)
    docs, rows, raw, finite = (chunk_rows if strategy == "late" else window_vectors)(ex, prep, enc)
    errors = [prep.docs[d].error or NO_WINDOW if w is None else None if ok else NON_FINITE
              for d, w, ok in zip(docs, rows, finite)]
    vectors = []
    for v in raw:
        if ex.cfg.pool.normalize:
            v = normalize(v)                                                      # (n_out, D), row by row
        vectors.append(np.where(finite[:, None], v, 0).astype(np.float32))
    valid = finite.copy()
    if ex.cfg.write.out_dtype == "float16":
        fits = np.logical_and.reduce([fits_float16(v, axis=1) for v in vectors])                 # (n_out,)
        for i in np.flatnonzero(valid & ~fits):
            errors[i], valid[i] = FP16_OVERFLOW, False
    return _table(ex, prep.block, docs, rows, vectors, valid, errors), errors


def window_vectors(ex, prep, enc) -> tuple[list[int], list, list[np.ndarray], np.ndarray]:
    """(doc row per output row, its Window or None, per feature (n_out, D) vectors as encoded, finite (n_out,))."""
    strategy = ex.features[0].strategy
    windows = prep.strategy_windows[strategy]
    into = np.asarray(prep.plan.index[list(prep.strategy_windows).index(strategy)], dtype=np.int64)
    docs, wins = row_plan(prep, strategy)
    enc_rows = into[np.maximum(wins, 0)] if len(windows) else np.zeros(len(wins), np.int64)
    finite = enc.finite[enc_rows] & (wins >= 0) if len(windows) else np.zeros(len(wins), bool)
    vectors = [enc.vectors[enc_rows, a:b] if len(windows) else np.zeros((len(wins), b - a), np.float32)
               for a, b in ex.slices]                                            # (n_out, D) each
    return docs, [windows[w] if w >= 0 else None for w in wins], vectors, finite


def chunk_rows(ex, prep, enc) -> tuple[list[int], list, list[np.ndarray], np.ndarray]:
    """``late`` at --level window: one row per late chunk, as window_vectors returns them.

    A chunk row's Window has the chunk's number (``window``), its one span of content positions and
    no input ids; the chunks of a document tile its kept tokens in order (pipeline.late.chunk_spans).
    """
    windows = prep.strategy_windows["late"]
    into = np.asarray(prep.plan.index[list(prep.strategy_windows).index("late")], dtype=np.int64)
    dims = [b - a for a, b in ex.slices]
    docs, rows, finite, vectors = [], [], [], [[] for _ in dims]
    start = 0
    for doc in prep.docs:
        n = windows[start].n_windows if start < len(windows) and windows[start].doc == doc.row else 0
        mine, enc_rows = windows[start:start + n], into[start:start + n]
        start += n
        spans = chunk_spans(np.unique(np.concatenate([w.positions for w in mine])), ex.cfg.segment.chunk_tokens) \
            if n else []
        ok = bool(n) and bool(enc.finite[enc_rows].all())
        chunks = ex.late_chunks(mine, enc_rows, enc) if ok else {}
        docs += [doc.row] * max(len(spans), 1)
        rows += [Window(doc.row, k, len(spans), (span,), np.zeros(0, np.int64)) for k, span in enumerate(spans)] or [None]
        finite += [ok] * max(len(spans), 1)
        for v, f, d in zip(vectors, ex.features, dims):
            v.append(chunks[f][0] if ok else np.zeros((max(len(spans), 1), d), np.float32))
    return docs, rows, [np.concatenate(v) if v else np.zeros((0, d), np.float32) for v, d in zip(vectors, dims)], \
        np.array(finite, dtype=bool)


def _table(ex, block: pa.Table, docs: list[int], wins: list, vectors: list[np.ndarray], valid: np.ndarray,
           errors: list[str | None]) -> pa.Table:
    """Assemble the columns of ``ex.schema`` (rows: docs[i]'s window wins[i], or None)."""
    schema = ex.schema
    take = pa.array(docs, type=pa.int64())
    id_field = schema.field(0)
    cols: dict[str, pa.Array] = {id_field.name: block.column("id").combine_chunks().take(take).cast(id_field.type)}
    for name in passthrough_columns(ex.cfg):
        cols[name] = block.column(name).combine_chunks().take(take)
    cols["window"] = pa.array([None if w is None else w.window_idx for w in wins], type=pa.int32())
    cols["spans"] = pa.array([None if w is None else [list(s) for s in w.spans] for w in wins],
                             type=schema.field("spans").type)
    cols["n_tokens"] = pa.array([None if w is None else w.n_content for w in wins], type=pa.int32())
    for (name, _), values in zip(ex.columns, vectors):
        list_type = schema.field(name).type
        flat = pa.array(values.astype(list_type.value_type.to_pandas_dtype()).reshape(-1), type=list_type.value_type)
        cols[name] = pa.FixedSizeListArray.from_arrays(flat, list_size=list_type.list_size,
                                                       mask=None if valid.all() else pa.array(~valid))
    cols["error"] = pa.array(errors, type=pa.string())
    return pa.Table.from_pydict(cols, schema=schema)
