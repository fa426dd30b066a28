"""The ``rows`` stage's builders: a batch's vectors -> the output table, one builder per level.

``document_table`` writes one row per document (and, at --level token, its per-token lists);
``window_table`` one row per window. Both take the schema (pipeline.output.write.output_schema), the
config, the feature columns and the batch explicitly; called by pipeline.engine.stages.Rows.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..engine.batch import Batch
from ..options.config import PipelineConfig
from .schema import (ERROR, ID, N_TOKENS, N_UNKNOWN, N_WINDOWS, SPANS, TOKEN_COLUMNS, TRUNCATED, WINDOW,
                     passthrough_columns)


def document_table(schema: pa.Schema, cfg: PipelineConfig, columns: list[tuple[str, int]], batch: Batch) -> pa.Table:
    """One row per document: id or row, kept columns, n_tokens, n_unknown, n_windows, truncated,
    the feature column(s), error and, at --level token, token_ids, positions, offsets, token_features.

    Args:
        schema: the output schema (its first field names the id column and its type).
        columns: [(feature column name, D)]. batch: after ``aggregate`` at document or token level.
    """
    rows, docs = batch.rows, batch.docs
    cols = _leading(schema, cfg, rows, None)
    cols[N_TOKENS] = pa.array([d.n_tokens for d in docs], type=pa.int32())
    cols[N_UNKNOWN] = pa.array([d.n_unknown for d in docs], type=pa.int32())
    cols[N_WINDOWS] = pa.array(batch.n_windows, type=pa.int32())
    cols[TRUNCATED] = pa.array(batch.truncated, type=pa.bool_())
    for name, _ in columns:
        cols[name] = _fixed_list(batch.vectors[name], batch.valid, schema.field(name).type)
    cols[ERROR] = pa.array(batch.errors, type=pa.string())
    if cfg.pool.level == "token":
        per_doc = [t if t is not None else (None,) * len(TOKEN_COLUMNS) for t in batch.tokens]
        for k, name in enumerate(TOKEN_COLUMNS):
            cols[name] = _list_array([t[k] for t in per_doc], schema.field(name).type)
    return pa.Table.from_pydict(cols, schema=schema)


def window_table(schema: pa.Schema, cfg: PipelineConfig, columns: list[tuple[str, int]], batch: Batch) -> pa.Table:
    """One row per window (--level window): id or row, kept columns, window, spans, n_tokens (content
    tokens of the window), the feature column(s), error; a document without a window has one row
    whose window, spans and n_tokens are null.

    Args:
        schema: the output schema. columns: [(feature column name, D)]. batch: after ``aggregate`` at
            --level window (out_docs and out_windows set).
    """
    wins = batch.out_windows
    cols = _leading(schema, cfg, batch.rows, pa.array(batch.out_docs, type=pa.int64()))
    cols[WINDOW] = pa.array([None if w is None else w.window_idx for w in wins], type=pa.int32())
    cols[SPANS] = pa.array([None if w is None else [list(s) for s in w.spans] for w in wins],
                             type=schema.field(SPANS).type)
    cols[N_TOKENS] = pa.array([None if w is None else w.n_content for w in wins], type=pa.int32())
    for name, _ in columns:
        cols[name] = _fixed_list(batch.vectors[name], batch.valid, schema.field(name).type)
    cols[ERROR] = pa.array(batch.errors, type=pa.string())
    return pa.Table.from_pydict(cols, schema=schema)


def _leading(schema: pa.Schema, cfg: PipelineConfig, rows: pa.Table, take: pa.Array | None) -> dict[str, pa.Array]:
    """The id column (cast to the schema's id type) and the kept columns, each row of ``take`` (None: all rows)."""
    def column(name: str) -> pa.Array:
        col = rows.column(name).combine_chunks()
        return col if take is None else col.take(take)

    id_field = schema.field(0)  # ID, or ROW for row numbers (the batch's own id column is always ID)
    cols = {id_field.name: column(ID).cast(id_field.type)}
    for name in passthrough_columns(cfg):
        cols[name] = column(name)
    return cols


def _fixed_list(values: np.ndarray, valid: np.ndarray, list_type: pa.FixedSizeListType) -> pa.Array:
    """(n, D) float32 and (n,) validity -> fixed_size_list<float>[D] with nulls where not valid."""
    flat = pa.array(values.astype(list_type.value_type.to_pandas_dtype()).reshape(-1), type=list_type.value_type)
    mask = pa.array(~valid) if not valid.all() else None
    return pa.FixedSizeListArray.from_arrays(flat, list_size=list_type.list_size, mask=mask)


def _list_array(items: list[np.ndarray | None], list_type: pa.ListType) -> pa.Array:
    """Per row an (m,) or (m, k) array, or None -> list<x> or list<fixed_size_list<x>[k]> with nulls."""
    inner = list_type.value_type
    fixed = pa.types.is_fixed_size_list(inner)
    leaf = inner.value_type if fixed else inner
    dtype = leaf.to_pandas_dtype()
    offsets = np.zeros(len(items) + 1, dtype=np.int32)
    chunks = []
    for i, item in enumerate(items):
        offsets[i + 1] = offsets[i] + (item.shape[0] if item is not None else 0)
        if item is not None:
            chunks.append(item.astype(dtype).reshape(-1))
    flat = pa.array(np.concatenate(chunks) if chunks else np.zeros(0, dtype), type=leaf)
    values = pa.FixedSizeListArray.from_arrays(flat, list_size=inner.list_size) if fixed else flat
    mask = pa.array([item is None for item in items], type=pa.bool_())
    return pa.ListArray.from_arrays(pa.array(offsets), values, type=list_type, mask=mask)
