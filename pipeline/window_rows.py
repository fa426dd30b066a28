"""--level window: a block's output as one row per window, in document order (called by pipeline.block).

A document that makes no window (empty text, no tokens) keeps one row with a null window and its
error, so every input row appears in the output.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from .pool import normalize
from .schema import ERROR, N_TOKENS, SPANS, WINDOW, passthrough_columns
from .write import fits_float16

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
    """The block's window rows: ``ex.schema`` (pipeline.schema.output_schema at --level window).

    Each window's vector is its pooled vector as encoded (no aggregate), unit-scaled with --normalize.
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
    windows = prep.strategy_windows[strategy]
    into = np.asarray(prep.plan.index[list(prep.strategy_windows).index(strategy)], dtype=np.int64)
    docs, wins = row_plan(prep, strategy)
    has = wins >= 0                                                              # (n_out,)
    enc_rows = into[np.maximum(wins, 0)] if len(windows) else np.zeros(len(wins), np.int64)
    finite = enc.finite[enc_rows] & has if len(windows) else np.zeros(len(wins), bool)
    errors = [prep.docs[d].error or NO_WINDOW if w < 0 else None if ok else NON_FINITE
              for d, w, ok in zip(docs, wins, finite)]
    vectors = []
    for a, b in ex.slices:
        v = enc.vectors[enc_rows, a:b] if len(windows) else np.zeros((len(wins), b - a), np.float32)  # (n_out, D)
        if ex.cfg.pool.normalize:
            v = normalize(v)                                                      # (n_out, D), row by row
        vectors.append(np.where(finite[:, None], v, 0).astype(np.float32))
    valid = finite.copy()
    if ex.cfg.write.out_dtype == "float16":
        fits = np.logical_and.reduce([fits_float16(v, axis=1) for v in vectors])                 # (n_out,)
        for i in np.flatnonzero(valid & ~fits):
            errors[i], valid[i] = FP16_OVERFLOW, False
    return _table(ex, prep.block, docs, [windows[w] if w >= 0 else None for w in wins], vectors, valid,
                  errors), errors


def _table(ex, block: pa.Table, docs: list[int], wins: list, vectors: list[np.ndarray], valid: np.ndarray,
           errors: list[str | None]) -> pa.Table:
    """Assemble the columns of ``ex.schema`` (rows: docs[i]'s window wins[i], or None)."""
    schema = ex.schema
    take = pa.array(docs, type=pa.int64())
    id_field = schema.field(0)
    cols: dict[str, pa.Array] = {id_field.name: block.column("id").combine_chunks().take(take).cast(id_field.type)}
    for name in passthrough_columns(ex.cfg):
        cols[name] = block.column(name).combine_chunks().take(take)
    cols[WINDOW] = pa.array([None if w is None else w.window_idx for w in wins], type=pa.int32())
    cols[SPANS] = pa.array([None if w is None else [list(s) for s in w.spans] for w in wins],
                           type=schema.field(SPANS).type)
    cols[N_TOKENS] = pa.array([None if w is None else w.n_content for w in wins], type=pa.int32())
    for (name, _), values in zip(ex.columns, vectors):
        list_type = schema.field(name).type
        flat = pa.array(values.astype(list_type.value_type.to_pandas_dtype()).reshape(-1), type=list_type.value_type)
        cols[name] = pa.FixedSizeListArray.from_arrays(flat, list_size=list_type.list_size,
                                                       mask=None if valid.all() else pa.array(~valid))
    cols[ERROR] = pa.array(errors, type=pa.string())
    return pa.Table.from_pydict(cols, schema=schema)
