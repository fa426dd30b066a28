"""Parquet inputs: the text column must be a string column; id and keep columns of any scalar type are
read as their text form. Blocks follow row groups (small ones merged up to the block size, large
ones sliced), so a block reads only its own row groups.

The format interface (see ``pipeline.read``): ``columns``, ``check``, ``scan``, ``read``, ``locate``.
"""
from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import InputError
from .sources import Source
from .specs import (BlockSpec, Columns, FileScan, check_named_once, count_id, finish_table, missing_message,
                    needed_flags, row_ids)
from .magic import magic_check
from .recheck import block_paths, stamp_of
from .remote import S3Path
from .streams import file_sha256


def _source(path):
    """What pyarrow opens: a local path as it is; an S3 object as a file of ranged GETs (or the scan's copy)."""
    return path.arrow_source() if isinstance(path, S3Path) else path


def columns(src: Source, cols: Columns) -> list[str]:
    """The column names of the file's schema."""
    magic_check(src, src.path)
    try:
        return pq.read_schema(_source(src.path)).names
    except (OSError, pa.ArrowException) as err:
        raise InputError(f"{src.path}: cannot be read as parquet ({err}); check the file") from None


def check(src: Source, names: list[str], cols: Columns, id_flag: str) -> None:
    """Needed columns present and named once; otherwise InputError with the columns and the fix."""
    check_named_once(src.path, names, cols, id_flag)
    for col, flag in needed_flags(cols, id_flag):
        if col not in names:
            raise InputError(missing_message(src.path, names, col, flag))


def _is_text(kind: pa.DataType) -> bool:
    """Every Arrow string type is text: string, large_string, string_view, and dictionaries of them."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)


def _check_types(src: Source, schema: pa.Schema, cols: Columns) -> None:
    """The text column is a string column; id and keep columns have a text form (not nested)."""
    text_type = schema.field(cols.text_col).type
    if not _is_text(text_type):
        raise InputError(f"{src.path}: column {cols.text_col!r} has type {text_type}, not a string; pass "
                         "--text-col with a text column, or convert the column to strings")
    for col in (cols.id_col, *cols.keep_cols):
        if col is not None and pa.types.is_nested(schema.field(col).type):
            raise InputError(f"{src.path}: column {col!r} has type {schema.field(col).type}, which "
                             "has no text form; pass a column of strings or numbers")


def _verify(pf: pq.ParquetFile, src: Source, cols: Columns, seen: set[str] | None) -> int:
    """Decode the needed columns of every row group once (a damaged page fails here, before the run),
    check each group's row count against the footer; returns the duplicate ids counted in ``seen``."""
    dups = 0
    for g in range(pf.num_row_groups):
        data = pf.read_row_group(g, columns=cols.needed)
        data.validate(full=True)  # string values are valid UTF-8, offsets in bounds
        if data.num_rows != pf.metadata.row_group(g).num_rows:
            raise ValueError(f"row group {g} holds {data.num_rows} rows, its footer says "
                             f"{pf.metadata.row_group(g).num_rows}")
        _check_binary(src, data, cols, sum(pf.metadata.row_group(i).num_rows for i in range(g)))
        if cols.id_col is not None and seen is not None:
            for value in as_strings(data.column(cols.id_col)).to_pylist():
                dups += count_id(seen, value if value is not None else "")
    return dups


def _is_binary(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return (pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind)
            or pa.types.is_binary_view(kind))


def _check_binary(src: Source, data: pa.Table, cols: Columns, first_row: int) -> None:
    """An id or keep column of bytes (binary) whose values are not all UTF-8 text: InputError naming
    the column and the first such row (1-based in the file). The file is intact; the column is not text."""
    for col in (cols.id_col, *cols.keep_cols):
        if col is None or not _is_binary(data.schema.field(col).type):
            continue
        try:
            as_strings(data.column(col))
            continue  # every value is UTF-8
        except pa.ArrowInvalid:
            pass
        for i, value in enumerate(data.column(col).to_pylist()):
            try:
                if value is not None:
                    value.decode("utf-8")
            except UnicodeDecodeError as err:
                raise InputError(f"{src.path}: column {col!r} holds bytes (type {data.schema.field(col).type}), "
                                 f"and row {first_row + i + 1} is not UTF-8 text (bytes "
                                 f"{value[err.start:err.start + 4].hex(' ')}); the file is intact, but an id or kept "
                                 "column must be text: pass another column, or write this one as strings "
                                 "(e.g. hex or base64)") from None


def scan(src: Source, cols: Columns, block_rows: int, first_row: int, first_index: int,
         seen: set[str] | None) -> tuple[FileScan, list[BlockSpec], int]:
    """Check the column types and cut the file into blocks of at most ``block_rows`` rows along its row
    groups. Returns (the FileScan, its block specs numbered from ``first_index``, duplicate ids).

    Raises:
        InputError: a text column that is not a string, an id or keep column with no text form.
    """
    stamp = stamp_of([src.path])  # before the bytes are read: a change while they are is seen later
    sha, n_bytes = file_sha256(src.path)
    try:
        pf = pq.ParquetFile(_source(src.path))
        _check_types(src, pf.schema_arrow, cols)
        dups = _verify(pf, src, cols, seen)
    except InputError:
        raise
    except (OSError, pa.ArrowException, ValueError, IndexError) as err:
        raise InputError(f"{src.path}: cannot be read as parquet ({type(err).__name__}: {err}); the file is "
                         "damaged or cut short: write or copy it again") from None
    specs: list[BlockSpec] = []
    path = str(src.path.resolve())
    row = first_row
    groups: list[int] = []      # small row groups are merged into one block up to block_rows
    skip = n = 0
    for g in range(pf.num_row_groups):
        g_rows = pf.metadata.row_group(g).num_rows
        at = 0
        while at < g_rows:
            if n == 0:
                groups, skip = [], at
            take = min(block_rows - n, g_rows - at)
            groups.append(g)
            n += take
            at += take
            if n == block_rows:
                specs.append(BlockSpec(first_index + len(specs), path, "parquet", row, n, cols,
                                       row_groups=tuple(groups), skip=skip, stamp=stamp))
                row += n
                n = 0
    if n:
        specs.append(BlockSpec(first_index + len(specs), path, "parquet", row, n, cols,
                               row_groups=tuple(groups), skip=skip, stamp=stamp))
        row += n
    return FileScan(src.path, "parquet", sha, n_bytes, row - first_row), specs, dups


def as_strings(column) -> pa.ChunkedArray | pa.Array:
    """Any scalar column as strings (ints '7', floats '3.5', dictionary-encoded text decoded)."""
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    if pa.types.is_string(column.type):
        return column
    return pc.cast(column, pa.string())


_ROW_GROUP_CACHE: dict[tuple, pa.Table] = {}


def read(spec: BlockSpec) -> pa.Table:
    """Rows [skip, skip + n_rows) of the spec's row groups. The last row groups read are kept (one
    entry), so consecutive blocks of one large row group decode it once."""
    cols = spec.columns
    names = cols.needed
    path = block_paths(spec)[0]
    version = spec.etags if isinstance(path, S3Path) else os.stat(spec.path).st_mtime_ns
    key = (spec.path, version, spec.row_groups, tuple(names))
    data = _ROW_GROUP_CACHE.get(key)
    if data is None:
        try:
            data = pq.ParquetFile(_source(path)).read_row_groups(list(spec.row_groups), columns=names)
        except (OSError, pa.ArrowException) as err:
            raise InputError(f"{spec.path}: cannot be read as parquet ({err}); the file changed during the "
                             "run: run again") from None
        _ROW_GROUP_CACHE.clear()
        _ROW_GROUP_CACHE[key] = data
    part = data.slice(spec.skip, spec.n_rows)
    if part.num_rows != spec.n_rows:
        raise InputError(f"{spec.path}: the row groups {list(spec.row_groups)} hold fewer rows than the scan "
                         "found; the file changed during the run: run again")
    text = as_strings(part.column(cols.text_col)).combine_chunks()
    table = {"id": row_ids(spec, None) if cols.id_col is None else
             as_strings(part.column(cols.id_col)).combine_chunks(),
             "text": pc.fill_null(text, "")}  # a null text is an empty one: kept, with error "empty text"
    for col in cols.keep_cols:
        table[col] = as_strings(part.column(col)).combine_chunks()
    return finish_table(table, spec)


def locate(spec: BlockSpec, i: int) -> str:
    """'PATH row N': the 1-based row of the file (from the spec's own row groups)."""
    meta = pq.ParquetFile(_source(block_paths(spec)[0])).metadata
    first_of_file = spec.first_row - spec.skip - sum(meta.row_group(g).num_rows for g in range(spec.row_groups[0]))
    return f"{spec.path} row {spec.first_row - first_of_file + i + 1}"
