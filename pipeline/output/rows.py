"""The ``rows`` stage: a batch's vectors -> the output table in the schema ``extract`` writes, one
class per level (``Rows``, ``TokenRows``, ``WindowRows``) over one builder each.

The stage builds its Arrow fields from its own values (kept columns, --out-dtype) and the batch's
vector names and sizes (pipeline.output.schema.row_fields); the run's metadata is the writer's to add.
``document_table`` writes one row per document (and, with per-token output, its per-token lists);
``window_table`` one row per window. --out-dtype binary packs the signs of x minus the stage's
``binary_center`` (its fitted state: given, or found by pipeline.engine.calibrate on a run's first documents).
--dims projects each feature column first (``projection``, pipeline.projection: fitted state of the same
kind), so --out-dtype stores the projected vectors.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa

from ..batch import Batch
from ..counts import BlockCounts
from ..errors import ConfigError
from ..options.sections import OUT_DTYPES
from ..projection import projections_of
from ..stage import Stage
from ..text.segment import covered_tokens
from .schema import (ERROR, FEATURES, ID, N_TOKENS, N_UNKNOWN, N_WINDOWS, SPANS, TOKEN_COLUMNS, TOKEN_FEATURES,
                     TRUNCATED, WINDOW, row_fields)
from .arrow_arrays import list_array
from .vector_columns import token_vector_columns, vector_columns
from .write import fits_float16

FP16_OVERFLOW = "features overflow float16 (|x| > 65504); use --out-dtype float32"
FP16_TOKEN_OVERFLOW = "per-token features overflow float16 (|x| > 65504); use --out-dtype float32"
INT8_NON_FINITE = "features hold a value that is not finite, which --out-dtype int8 cannot store; use --out-dtype float32"


def document_table(schema: pa.Schema, kept: tuple[str, ...], columns: list[tuple[str, int]], batch: Batch,
                   per_token: bool = False, centers: Mapping[str, np.ndarray | None] | None = None) -> pa.Table:
    """One row per document: id or row, kept columns, n_tokens, n_unknown, n_windows, truncated,
    the feature column(s), error and, at --level token, token_ids, positions, offsets, token_features.

    Args:
        schema: the output schema (its first field names the id column and its type).
        kept: the input columns written after the id (--keep-col, source). columns: [(feature column
            name, D)]. batch: after ``aggregate`` at document or token level. per_token: write the
            per-token lists too. centers: --out-dtype binary's {column: (D,) float32 centre or None}.
    """
    rows, docs = batch.rows, batch.docs
    cols = _leading(schema, kept, rows, None)
    cols[N_TOKENS] = pa.array([d.n_tokens for d in docs], type=pa.int32())
    cols[N_UNKNOWN] = pa.array([d.n_unknown for d in docs], type=pa.int32())
    cols[N_WINDOWS] = pa.array(batch.n_windows, type=pa.int32())
    cols[TRUNCATED] = pa.array(batch.truncated, type=pa.bool_())
    for name, _ in columns:
        cols.update(vector_columns(schema, name, batch.vectors[name], batch.valid, centers))
    cols[ERROR] = pa.array(batch.errors, type=pa.string())
    if per_token:
        per_doc = [t if t is not None else (None,) * len(TOKEN_COLUMNS) for t in batch.tokens]
        for k, name in enumerate(TOKEN_COLUMNS[:3]):  # token_ids, positions, offsets
            cols[name] = list_array([t[k] for t in per_doc], schema.field(name).type)
        cols.update(token_vector_columns(schema, [t[3] for t in per_doc], centers))
    return pa.Table.from_pydict(cols, schema=schema)


def window_table(schema: pa.Schema, kept: tuple[str, ...], columns: list[tuple[str, int]], batch: Batch,
                 centers: Mapping[str, np.ndarray | None] | None = None) -> pa.Table:
    """One row per window (--level window): id or row, kept columns, window, spans, n_tokens (content
    tokens of the window), the feature column(s), error; a document without a window has one row
    whose window, spans and n_tokens are null.

    Args:
        schema: the output schema. kept: as document_table. columns: [(feature column name, D)]. batch: after ``aggregate`` at
            --level window (out_docs and out_windows set). centers: as document_table.
    """
    wins = batch.out_windows
    cols = _leading(schema, kept, batch.rows, pa.array(batch.out_docs, type=pa.int64()))
    cols[WINDOW] = pa.array([None if w is None else w.window_idx for w in wins], type=pa.int32())
    cols[SPANS] = pa.array([None if w is None else [list(s) for s in w.spans] for w in wins],
                             type=schema.field(SPANS).type)
    cols[N_TOKENS] = pa.array([None if w is None else w.n_content for w in wins], type=pa.int32())
    for name, _ in columns:
        cols.update(vector_columns(schema, name, batch.vectors[name], batch.valid, centers))
    cols[ERROR] = pa.array(batch.errors, type=pa.string())
    return pa.Table.from_pydict(cols, schema=schema)


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


class Rows(Stage):
    """``vectors`` -> ``table``: one output row per document, and the block's ``counts``.

    The table's fields come from this stage's values and the batch (pipeline.output.schema.row_fields):
    ``row`` int64 for integer ids, else ``id`` string; the kept columns; each ``batch.vectors`` column
    with its D, stored per ``out_dtype``. The run's metadata is not here: the writer adds it.
    Fields a replacement aggregate left empty are derived (``completed``): ``errors`` from the
    tokenizer's, ``valid`` where there is no error and the vector is finite, ``n_windows`` and
    ``truncated`` from the windows. A row whose values ``out_dtype`` cannot store becomes a row error
    (``unstorable``).

    Args:
        kept: the input columns written after the id, in order (--keep-col, then ``source``).
        out_dtype: float32 | float16 | int8 (q and a float32 scale per vector) | binary (bits packed 8
            to a byte: 1 where x > the column's centre).
        binary_center: --out-dtype binary's centre, the stage's fitted state: a (D,) array for the one
            feature column ``features``, or {column: (D,) array, or None for the signs of x} (a per-token
            run's ``token_features`` too); None: the signs of x (a run finds one on its first documents,
            pipeline.engine.calibrate). Stored as {column: tuple of float32 values}. With a projection,
            the centre is of the projected (N,) vectors.
        projection: --dims' projection, fitted state too, applied to each feature column before
            ``out_dtype`` stores it: a pipeline.projection.Projection, a (mean (D,), components (N, D))
            pair or {"mean": ..., "components": ...} for the one column ``features``, or {column: any of
            those}; each vector x becomes (x - mean) @ components.T, (N,) float32. None: none (a --dims
            run fits one on its first documents, pipeline.engine.calibrate). Not at --level token.

    Raises:
        ConfigError: an unknown ``out_dtype``, a ``binary_center`` without out_dtype "binary", or one that
            is not finite numbers of one dimension; a ``projection`` of another form or per token; when
            called, a column the centre or the projection lacks, or another D.

    Example:
        >>> Rows(out_dtype="binary", binary_center=np.zeros(384, np.float32))   # packs the signs of x
        >>> Rows(out_dtype="int8", projection=(mean, components))               # (384,), (128, 384): 128 int8
    """

    name, requires, fills = "rows", ("vectors",), ("table", "counts")
    per_token = per_window = False

    def __init__(self, kept: Sequence[str] = (), out_dtype: str = "float32",
                 binary_center: np.ndarray | Mapping[str, object] | None = None, projection: object = None):
        if isinstance(kept, str) or not all(isinstance(c, str) for c in kept):
            raise ConfigError(f"Rows: kept={kept!r}; give a tuple of input column names, e.g. ('label',)")
        if out_dtype not in OUT_DTYPES:
            raise ConfigError(f"Rows: out_dtype={out_dtype!r}; choose one of {OUT_DTYPES}")
        self.kept, self.out_dtype = tuple(kept), out_dtype
        self.binary_center = centers_of(binary_center, out_dtype)
        self.centers = None if self.binary_center is None else {
            c: None if v is None else np.asarray(v, np.float32) for c, v in self.binary_center.items()}
        self.projection = projections_of(projection)
        if self.projection is not None and self.per_token:
            raise ConfigError("Rows: projection (--dims) projects document or window vectors, not per-token ones")

    def get_params(self, deep: bool = True) -> dict:
        return {"kept": self.kept, "out_dtype": self.out_dtype, "binary_center": self.binary_center,
                "projection": self.projection}

    def projected(self, batch: Batch) -> Batch:
        """``batch`` with each feature column's (n, D) vectors projected to (n, N) (``projection``). Raises
        ConfigError for a column the projection lacks, or vectors of another D (naming both and the fix)."""
        if self.projection is None or not batch.vectors:
            return batch
        out = {}
        for name, values in batch.vectors.items():
            if (p := self.projection.get(name)) is None:
                raise ConfigError(f"Rows: projection has columns {list(self.projection)}, but the rows hold column "
                                  f"{name!r}; give {{column: projection}} for each of {list(batch.vectors)}")
            if np.shape(values)[1] != p.input_dim:
                raise ConfigError(f"Rows: projection[{name!r}] takes vectors of {p.input_dim} dimensions, but the "
                                  f"column's have {np.shape(values)[1]}; pass the projection of vectors of this "
                                  "model and feature (e.g. an earlier --dims output's, --projection FILE)")
            out[name] = p.apply(values)                                     # (n, D) -> (n, N) float32
        return batch.replace(vectors=out)

    def complete(self, batch: Batch) -> Batch:
        """``batch`` with the fields a replacement aggregate may leave empty derived (``completed``) and
        the rows ``out_dtype`` cannot store made errors (``unstorable``)."""
        return unstorable(completed(batch), self.out_dtype, self.per_token)

    def columns(self, batch: Batch) -> list[tuple[str, int]]:
        """(feature column, D) of the batch's vectors, in order."""
        return [(name, int(np.shape(v)[1])) for name, v in batch.vectors.items()]

    def schema(self, batch: Batch) -> pa.Schema:
        """The table's schema for ``batch`` (no metadata: the writer adds the run's)."""
        token_dim = self.token_dim(batch) if self.per_token else None
        return pa.schema(row_fields(batch.rows.column(ID).type, self.kept, self.columns(batch), self.out_dtype,
                                    self.per_window, token_dim))

    def token_dim(self, batch: Batch) -> int:
        """D of the per-token vectors: a document's, else the encoded batch's layout's.

        Raises:
            ConfigError: neither says it."""
        for t in batch.tokens or ():
            if t is not None:
                return int(t[3].shape[1])
        dim = getattr(getattr(batch.encoded, "layout", None), "token_dim", None)
        if dim is None:
            raise ConfigError("per-token rows need the per-token vectors' size: no document has tokens and the "
                              "encoded batch's layout names none; encode with per-token vectors (longbert.Encode("
                              "..., with_tokens=True))")
        return int(dim)

    def check_centers(self, columns: Mapping[str, int]) -> None:
        """Check ``binary_center`` against the binary columns ({column: D}) this stage writes.

        Raises:
            ConfigError: a column without a centre, or a centre of another D, naming both and the fix."""
        if self.centers is None:
            return
        for name, dim in columns.items():
            if name not in self.centers:
                raise ConfigError(f"Rows: binary_center has centres for {list(self.centers)}, but the rows hold "
                                  f"column {name!r}; give {{column: (D,) array}} for each of {list(columns)}")
            center = self.centers[name]
            if center is not None and center.shape != (dim,):
                raise ConfigError(f"Rows: binary_center[{name!r}] has {center.shape[0]} values, but the column's "
                                  f"vectors have {dim}; pass the centre of vectors of this model and feature "
                                  "(e.g. an earlier binary output's, --binary-center FILE)")

    def build(self, schema: pa.Schema, batch: Batch) -> pa.Table:
        """The output table of a batch whose aggregate fields are all filled."""
        return document_table(schema, self.kept, self.columns(batch), batch, self.per_token, self.centers)

    def __call__(self, batch: Batch) -> Batch:
        self.check(batch)
        batch = self.complete(self.projected(batch))
        schema = self.schema(batch)
        if self.out_dtype == "binary":
            binary = dict(self.columns(batch))
            if self.per_token:
                binary[TOKEN_FEATURES] = self.token_dim(batch)
            self.check_centers(binary)
        return batch.replace(table=self.build(schema, batch), counts=BlockCounts.of(batch))


class TokenRows(Rows):
    """As Rows, with each document's per-token lists (token_ids, positions, offsets, token_features)."""

    per_token = True


class WindowRows(Rows):
    """One output row per window (the window aggregate's ``out_docs`` and ``out_windows``, which a
    replacement must fill as the built-in one does)."""

    per_window = True

    def complete(self, batch: Batch) -> Batch:
        missing = [f for f in ("valid", "errors", "out_docs", "out_windows") if getattr(batch, f) is None]
        if missing:
            raise ConfigError(f"one row per window needs the aggregate stage to fill {missing}; "
                              "fill them as WindowAggregate does")
        return unstorable(batch, self.out_dtype)

    def build(self, schema: pa.Schema, batch: Batch) -> pa.Table:
        return window_table(schema, self.kept, self.columns(batch), batch, self.centers)


def centers_of(value: object, out_dtype: str) -> dict[str, tuple[float, ...] | None] | None:
    """A ``binary_center`` as Rows keeps it: {column: (D,) float32 values as a tuple, or None}.

    Example: np.zeros(3) -> {"features": (0.0, 0.0, 0.0)}; {"f_a": [1, 2], "f_b": None} -> as floats.

    Raises:
        ConfigError: a centre without out_dtype "binary", or one that is not a 1-D array of numbers (naming
            the value and the form to give), or holds NaN or inf (naming the first such dimension).
    """
    if value is None:
        return None
    if out_dtype != "binary":
        raise ConfigError(f"Rows: binary_center is the centre of --out-dtype binary's bits, but out_dtype is "
                          f"{out_dtype!r}; pass out_dtype='binary', or drop binary_center")
    given = dict(value) if isinstance(value, Mapping) else {FEATURES: value}
    out: dict[str, tuple[float, ...] | None] = {}
    for name, center in given.items():
        if center is None:
            out[str(name)] = None
            continue
        try:
            arr = np.asarray(center, dtype=np.float32)
        except (TypeError, ValueError):
            arr = np.zeros((0, 0))
        bad = np.flatnonzero(~np.isfinite(arr)) if arr.ndim == 1 else ()
        if isinstance(name, str) and arr.ndim == 1 and len(bad):
            where = f"binary_center[{name!r}]" if isinstance(value, Mapping) else "binary_center"
            x = float(arr[bad[0]])
            raise ConfigError(f"Rows: {where} holds {'NaN' if np.isnan(x) else x} at dimension {int(bad[0])} (of "
                              f"{arr.size}); give a centre of finite numbers, e.g. X.mean(axis=0) of a corpus's "
                              "float32 vectors")
        if not isinstance(name, str) or arr.ndim != 1 or not arr.size:
            raise ConfigError(f"Rows: binary_center {_shown(value)} is not a centre; give one (D,) array of finite "
                              "numbers (the centre of the one column 'features'), or {column: (D,) array}, e.g. "
                              "X.mean(axis=0) of a corpus's float32 vectors")
        out[name] = tuple(float(x) for x in arr)
    return out


def _shown(value: object) -> str:
    """A centre as a message names it: its type and shape, or its repr when short."""
    shape = getattr(value, "shape", None)
    text = f"{type(value).__name__} of shape {tuple(shape)}" if shape is not None else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def unstorable(batch: Batch, out_dtype: str, per_token: bool = False) -> Batch:
    """``batch`` with each valid row whose values ``out_dtype`` cannot store made a row error: float16
    overflows (|x| > 65504, FP16_OVERFLOW; a document's per-token vectors: FP16_TOKEN_OVERFLOW) and int8
    holds no value that is not finite (INT8_NON_FINITE); such a row's per-token vectors are dropped.
    ``batch`` itself for the other dtypes or when every row fits."""
    if out_dtype not in ("float16", "int8") or not batch.vectors:
        return batch
    half = out_dtype == "float16"

    def fits(v: np.ndarray, axis: int | None = None) -> np.ndarray:
        return fits_float16(v, axis=axis) if half else np.isfinite(v).all(axis=axis)

    ok = np.logical_and.reduce([fits(np.asarray(v), axis=1) for v in batch.vectors.values()])   # (n,)
    errors, valid = list(batch.errors), batch.valid.copy()
    tokens = list(batch.tokens) if per_token and batch.tokens is not None else None
    for i in np.flatnonzero(valid & ~ok):
        errors[i], valid[i] = FP16_OVERFLOW if half else INT8_NON_FINITE, False
        if tokens is not None:
            tokens[i] = None
    for i in np.flatnonzero(valid) if tokens is not None else ():
        if tokens[i] is not None and not fits(tokens[i][3]):
            errors[i], valid[i], tokens[i] = FP16_TOKEN_OVERFLOW if half else INT8_NON_FINITE, False, None
    if valid.sum() == batch.valid.sum():
        return batch
    return batch.replace(errors=errors, valid=valid, **({"tokens": tokens} if tokens is not None else {}))


def completed(batch: Batch) -> Batch:
    """``batch`` with the document-level fields a replacement aggregate may leave empty derived:
    errors (the tokenizer's), valid (no error and every vector finite), out_docs (0..n-1),
    n_windows (distinct windows per document) and truncated (a content token in no window).

    Raises:
        ConfigError: a ``vectors`` entry without one row per document.
    """
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
