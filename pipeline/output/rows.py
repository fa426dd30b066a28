"""The ``rows`` stage: a batch's vectors -> the output table in the schema ``extract`` writes, one
class per level (``Rows``, ``TokenRows``, ``WindowRows``) over one builder each.

``document_table`` writes one row per document (and, with per-token output, its per-token lists);
``window_table`` one row per window. Both take the schema (pipeline.output.schema.output_schema), the
kept columns, the feature columns and the batch explicitly.
"""
from __future__ import annotations

import functools
import json

import numpy as np
import pyarrow as pa

from collections.abc import Mapping

from ..batch import Batch
from ..compact import pack_binary, quantize_int8
from ..counts import BlockCounts
from ..stage import Stage
from ..text.segment import covered_tokens
from .schema import (ERROR, ID, N_TOKENS, N_UNKNOWN, N_WINDOWS, SPANS, TOKEN_COLUMNS, TOKEN_FEATURES, TRUNCATED,
                     WINDOW, scale_column)


def document_table(schema: pa.Schema, kept: tuple[str, ...], columns: list[tuple[str, int]], batch: Batch,
                   per_token: bool = False) -> pa.Table:
    """One row per document: id or row, kept columns, n_tokens, n_unknown, n_windows, truncated,
    the feature column(s), error and, at --level token, token_ids, positions, offsets, token_features.

    Args:
        schema: the output schema (its first field names the id column and its type).
        kept: the input columns written after the id (--keep-col, source). columns: [(feature column
            name, D)]. batch: after ``aggregate`` at document or token level. per_token: write the
            per-token lists too.
    """
    rows, docs = batch.rows, batch.docs
    cols = _leading(schema, kept, rows, None)
    cols[N_TOKENS] = pa.array([d.n_tokens for d in docs], type=pa.int32())
    cols[N_UNKNOWN] = pa.array([d.n_unknown for d in docs], type=pa.int32())
    cols[N_WINDOWS] = pa.array(batch.n_windows, type=pa.int32())
    cols[TRUNCATED] = pa.array(batch.truncated, type=pa.bool_())
    for name, _ in columns:
        cols.update(_vector_columns(schema, name, batch.vectors[name], batch.valid))
    cols[ERROR] = pa.array(batch.errors, type=pa.string())
    if per_token:
        per_doc = [t if t is not None else (None,) * len(TOKEN_COLUMNS) for t in batch.tokens]
        for k, name in enumerate(TOKEN_COLUMNS[:3]):  # token_ids, positions, offsets
            cols[name] = _list_array([t[k] for t in per_doc], schema.field(name).type)
        cols.update(_token_vector_columns(schema, [t[3] for t in per_doc]))
    return pa.Table.from_pydict(cols, schema=schema)


def window_table(schema: pa.Schema, kept: tuple[str, ...], columns: list[tuple[str, int]], batch: Batch) -> pa.Table:
    """One row per window (--level window): id or row, kept columns, window, spans, n_tokens (content
    tokens of the window), the feature column(s), error; a document without a window has one row
    whose window, spans and n_tokens are null.

    Args:
        schema: the output schema. kept: as document_table. columns: [(feature column name, D)]. batch: after ``aggregate`` at
            --level window (out_docs and out_windows set).
    """
    wins = batch.out_windows
    cols = _leading(schema, kept, batch.rows, pa.array(batch.out_docs, type=pa.int64()))
    cols[WINDOW] = pa.array([None if w is None else w.window_idx for w in wins], type=pa.int32())
    cols[SPANS] = pa.array([None if w is None else [list(s) for s in w.spans] for w in wins],
                             type=schema.field(SPANS).type)
    cols[N_TOKENS] = pa.array([None if w is None else w.n_content for w in wins], type=pa.int32())
    for name, _ in columns:
        cols.update(_vector_columns(schema, name, batch.vectors[name], batch.valid))
    cols[ERROR] = pa.array(batch.errors, type=pa.string())
    return pa.Table.from_pydict(cols, schema=schema)


def _vector_columns(schema: pa.Schema, name: str, values: np.ndarray, valid: np.ndarray) -> dict[str, pa.Array]:
    """One feature column's stored array(s), in the form its schema field declares.

    (n, D) float32 values and (n,) validity -> {name: fixed_size_list<float>[D]} (float32 / float16);
    with an int8 field {name: fixed_size_list<int8>[D], name_scale: (n,) float32} (quantize_int8, one
    scale per vector); with a uint8 field {name: fixed_size_list<uint8>[ceil(D / 8)]} (pack_binary, the signs of x minus
    the column's centre in the schema's metadata).
    Rows that are not valid are null in every column. Each vector's bytes depend on that vector alone.

    Raises:
        ValueError: a valid int8 row that is not finite (the aggregate stage makes those row errors).
    """
    list_type = schema.field(name).type
    leaf = list_type.value_type
    if pa.types.is_int8(leaf):
        q, scale = quantize_int8(np.where(valid[:, None], values, 0))       # (n, D) int8, (n,) float32
        return {name: _fixed_list(q, valid, list_type),
                scale_column(name): pa.array(scale, type=pa.float32(), mask=~valid)}
    if pa.types.is_uint8(leaf):                                            # (n, ceil(D / 8)) uint8
        return {name: _fixed_list(pack_binary(values, binary_centers(schema).get(name)), valid, list_type)}
    return {name: _fixed_list(values, valid, list_type)}


def binary_centers(schema: pa.Schema) -> dict[str, np.ndarray]:
    """{column: (D,) float32 centre} of a binary schema, from its metadata's ``compact`` columns (what
    pipeline.output.schema.compact_metadata wrote); {} when there is none (the signs of x itself)."""
    raw = (schema.metadata or {}).get(b"longbert")
    return _centers(raw) if raw is not None else {}


@functools.lru_cache(maxsize=8)
def _centers(raw: bytes) -> dict[str, np.ndarray]:
    compact = json.loads(raw).get("compact") or {}
    if compact.get("form") != "binary":
        return {}
    return {c["column"]: np.asarray(c["center"], dtype=np.float32) for c in compact["columns"] if "center" in c}


def _token_vector_columns(schema: pa.Schema, items: list[np.ndarray | None]) -> dict[str, pa.Array]:
    """--level token: per document an (m, D) float32 array or None -> token_features in its schema form
    (and token_features_scale list<float32>, one scale per token, with int8)."""
    list_type = schema.field(TOKEN_FEATURES).type
    leaf = list_type.value_type.value_type
    if pa.types.is_int8(leaf):
        pairs = [quantize_int8(x) if x is not None else (None, None) for x in items]
        return {TOKEN_FEATURES: _list_array([q for q, _ in pairs], list_type),
                scale_column(TOKEN_FEATURES): _list_array([s for _, s in pairs],
                                                          schema.field(scale_column(TOKEN_FEATURES)).type)}
    if pa.types.is_uint8(leaf):
        center = binary_centers(schema).get(TOKEN_FEATURES)
        return {TOKEN_FEATURES: _list_array([pack_binary(x, center) if x is not None else None for x in items],
                                            list_type)}
    return {TOKEN_FEATURES: _list_array(items, list_type)}


def _leading(schema: pa.Schema, kept: tuple[str, ...], rows: pa.Table, take: pa.Array | None) -> dict[str, pa.Array]:
    """The id column (cast to the schema's id type) and the kept columns, each row of ``take`` (None: all rows)."""
    def column(name: str) -> pa.Array:
        col = rows.column(name).combine_chunks()
        return col if take is None else col.take(take)

    id_field = schema.field(0)  # ID, or ROW for row numbers (the batch's own id column is always ID)
    cols = {id_field.name: column(ID).cast(id_field.type)}
    for name in kept:
        cols[name] = column(name)
    return cols


def _fixed_list(values: np.ndarray, valid: np.ndarray, list_type: pa.FixedSizeListType) -> pa.Array:
    """(n, D) values and (n,) validity -> fixed_size_list<x>[D] (x: the type's value type) with nulls
    where not valid."""
    flat = pa.array(values.astype(list_type.value_type.to_pandas_dtype()).reshape(-1), type=list_type.value_type)
    mask = pa.array(~valid) if not valid.all() else None
    return pa.FixedSizeListArray.from_arrays(flat, list_size=list_type.list_size, mask=mask)


def tiled_buffer(items: list[np.ndarray | None], dtype: np.dtype) -> np.ndarray | None:
    """The one array of ``dtype`` that the items that are not None tile back to back, in order, as
    C-contiguous views (what the token aggregate's token_rows makes), flattened (a view, no copy);
    None when they do not, e.g. after a document's rows were left unused by a row error."""
    present = [x for x in items if x is not None]
    base = present[0].base if present else None
    if not isinstance(base, np.ndarray) or base.dtype != dtype or not base.flags.c_contiguous:
        return None
    at = base.__array_interface__["data"][0]
    for x in present:
        if x.base is not base or not x.flags.c_contiguous or x.__array_interface__["data"][0] != at:
            return None
        at += x.nbytes
    return base.reshape(-1) if at == base.__array_interface__["data"][0] + base.nbytes else None


def _list_array(items: list[np.ndarray | None], list_type: pa.ListType) -> pa.Array:
    """Per row an (m,) or (m, k) array, or None -> list<x> or list<fixed_size_list<x>[k]> with nulls."""
    inner = list_type.value_type
    fixed = pa.types.is_fixed_size_list(inner)
    leaf = inner.value_type if fixed else inner
    dtype = leaf.to_pandas_dtype()
    offsets = np.zeros(len(items) + 1, dtype=np.int32)
    for i, item in enumerate(items):
        offsets[i + 1] = offsets[i] + (item.shape[0] if item is not None else 0)
    width = inner.list_size if fixed else 1
    flat_values = tiled_buffer(items, dtype)
    if flat_values is None:
        flat_values = np.empty(int(offsets[-1]) * width, dtype=dtype)   # one copy of the values, filled in place
        for i, item in enumerate(items):
            if item is not None:
                flat_values[offsets[i] * width:offsets[i + 1] * width] = item.reshape(-1)
    flat = pa.array(flat_values, type=leaf)
    values = pa.FixedSizeListArray.from_arrays(flat, list_size=inner.list_size) if fixed else flat
    mask = pa.array([item is None for item in items], type=pa.bool_())
    return pa.ListArray.from_arrays(pa.array(offsets), values, type=list_type, mask=mask)


class Rows(Stage):
    """``vectors`` -> ``table``: one output row per document in the schema extract writes, and the
    block's ``counts``.

    Fields a replacement aggregate left empty are derived here: ``errors`` from the tokenizer's,
    ``valid`` where there is no error and the vector is finite, ``n_windows`` and ``truncated`` from
    the windows.

    Args:
        schemas: {"row": the schema for int64 row numbers, "id": the schema for string ids}
            (pipeline.output.schema.output_schema with each id type).
        kept: the input columns written after the id, in order. columns: per feature (column name, D).
    """

    name, requires, fills = "rows", ("vectors",), ("table", "counts")

    def __init__(self, schemas: Mapping[str, pa.Schema], kept: tuple[str, ...], columns: tuple[tuple[str, int], ...]):
        self.schemas, self.kept, self.columns = dict(schemas), tuple(kept), tuple(map(tuple, columns))

    def get_params(self, deep: bool = True) -> dict:
        return {"schemas": dict(self.schemas), "kept": self.kept, "columns": self.columns}

    def schema(self, id_type: pa.DataType) -> pa.Schema:
        """The output schema for ids of ``id_type`` (an integer: a ``row`` column; a string: ``id``)."""
        return self.schemas["row" if pa.types.is_integer(id_type) else "id"]

    def complete(self, batch: Batch) -> Batch:
        """``batch`` with the fields a replacement aggregate may leave empty derived (``completed``)."""
        return completed(batch)

    def build(self, schema: pa.Schema, batch: Batch) -> pa.Table:
        """The output table of a batch whose aggregate fields are all filled."""
        return document_table(schema, self.kept, list(self.columns), batch)

    def __call__(self, batch: Batch) -> Batch:
        self.check(batch)
        batch = self.complete(batch)
        table = self.build(self.schema(batch.rows.column("id").type), batch)
        return batch.replace(table=table, counts=BlockCounts.of(batch))


class TokenRows(Rows):
    """As Rows, with each document's per-token lists (token_ids, positions, offsets, token_features)."""

    def build(self, schema: pa.Schema, batch: Batch) -> pa.Table:
        return document_table(schema, self.kept, list(self.columns), batch, per_token=True)


class WindowRows(Rows):
    """One output row per window (the window aggregate's ``out_docs`` and ``out_windows``, which a
    replacement must fill as the built-in one does)."""

    def complete(self, batch: Batch) -> Batch:
        from ..errors import ConfigError

        missing = [f for f in ("valid", "errors", "out_docs", "out_windows") if getattr(batch, f) is None]
        if missing:
            raise ConfigError(f"one row per window needs the aggregate stage to fill {missing}; "
                              "fill them as WindowAggregate does")
        return batch

    def build(self, schema: pa.Schema, batch: Batch) -> pa.Table:
        return window_table(schema, self.kept, list(self.columns), batch)


def completed(batch: Batch) -> Batch:
    """``batch`` with the document-level fields a replacement aggregate may leave empty derived:
    errors (the tokenizer's), valid (no error and every vector finite), out_docs (0..n-1),
    n_windows (distinct windows per document) and truncated (a content token in no window).

    Raises:
        ConfigError: a ``vectors`` entry without one row per document.
    """
    from ..errors import ConfigError

    n = len(batch)
    for name, v in batch.vectors.items():
        if np.ndim(v) != 2 or len(v) != n:
            raise ConfigError(f"vectors[{name!r}] has shape {np.shape(v)}; the aggregate stage fills one "
                              f"(n_docs, D) array per feature column, here ({n}, D)")
    fields: dict = {}
    errors = batch.errors if batch.errors is not None else [d.error for d in batch.docs]
    if batch.errors is None:
        fields["errors"] = errors
    if batch.valid is None:
        finite = np.logical_and.reduce([np.isfinite(v).all(axis=1) for v in batch.vectors.values()])
        fields["valid"] = finite & np.array([e is None for e in errors], dtype=bool)
    if batch.out_docs is None:
        fields["out_docs"] = np.arange(n, dtype=np.int64)
    if batch.n_windows is None or batch.truncated is None:
        every = [w for ws in (batch.windows or {}).values() for w in ws]
        per_doc: list[list] = [[] for _ in range(n)]
        for w in every:
            per_doc[w.doc].append(w)
        if batch.n_windows is None:
            fields["n_windows"] = np.array([len({w.spans for w in ws}) for ws in per_doc], dtype=np.int32)
        if batch.truncated is None:
            fields["truncated"] = np.array([covered_tokens(ws) < d.n_tokens for ws, d in zip(per_doc, batch.docs)],
                                           dtype=bool)
    return batch.replace(**fields) if fields else batch
