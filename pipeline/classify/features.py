"""Read extract's output back as numpy: ``load_features`` (a .parquet file or a DIR/ of parts).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..compact import dequantize_int8, unpack_binary
from ..errors import InputError
from ..columns import DOCUMENT_COUNTS, ERROR, FEATURES, SPANS, TOKEN_COLUMNS, TOKEN_FEATURES, WINDOW, scale_column
from ..output.places import is_uri, place_of
from ..output.write import DONE_MANIFEST, MANIFEST, read_manifest


def features_matrix(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A ``features`` column without nulls -> (n, D) float32, no Python loop over rows.

    float16 storage (--out-dtype float16) is upcast to float32 (exact: every float16 is a float32).

    Example: fixed_size_list<float32>[2] [[1, 2], [3, 4]] -> array([[1., 2.], [3., 4.]], dtype=float32).
    """
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    assert pa.types.is_fixed_size_list(arr.type), arr.type
    assert arr.null_count == 0, "filter out null features first"
    return stored_matrix(arr).astype(np.float32, copy=False)  # (n, D)


def stored_matrix(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A fixed_size_list column without nulls -> (n, k) numpy array of its stored dtype (float32,
    float16, int8 or uint8), no Python loop over rows."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    assert pa.types.is_fixed_size_list(arr.type), arr.type
    assert arr.null_count == 0, "filter out null features first"
    flat = arr.flatten()  # (n * k,); flatten, not .values: it honours a slice's offset
    return flat.to_numpy(zero_copy_only=False).reshape(len(arr), arr.type.list_size)  # (n, k)


def decoded_matrix(table: pa.Table, column: str, meta: dict[str, Any], raw: bool = False) -> np.ndarray:
    """A feature column of rows without nulls -> (n, D) float32, decoded per meta["out_dtype"].

    float32 / float16: as stored (float16 upcast). int8: q * scale (``COLUMN_scale``), within scale / 2
    of the float32 run. binary: +1 where the bit is set, -1 elsewhere, D = the column's dim in
    meta["compact"]. ``raw``: the stored array instead ((n, D) int8, (n, ceil(D / 8)) uint8, or floats);
    with int8 it sets ``meta["scale"]``, the (n,) float32 scales.
    """
    stored = stored_matrix(table.column(column))
    form = meta.get("out_dtype")
    scale = (table.column(scale_column(column)).to_numpy(zero_copy_only=False).astype(np.float32)  # (n,)
             if form == "int8" else None)
    if raw:
        if scale is not None:
            meta["scale"] = scale
        return stored
    if form == "int8":
        return dequantize_int8(stored, scale)
    if form != "binary":
        return stored.astype(np.float32, copy=False)
    dims = {c["column"]: c["dim"] for c in meta["compact"]["columns"]}
    return unpack_binary(stored, dims[column])


def _read_file(path: Path, source=None) -> pa.Table:
    """``source``: what pyarrow reads (a buffer of an object's bytes); None: ``path``, which names it."""
    source = path if source is None else source
    try:
        schema = pq.read_schema(source)
    except (OSError, pa.ArrowInvalid) as err:
        raise InputError(f"{path}: cannot be read as parquet ({err}); pass a file or DIR/ written by "
                         "`longbert extract`") from None
    columns = _feature_columns(json.loads(schema.metadata[b"longbert"])) if schema.metadata and \
        b"longbert" in schema.metadata else []
    if not columns or not all(c in schema.names for c in columns):
        raise InputError(f"{path}: not a longbert features file (no 'longbert' schema metadata or no "
                         f"'features' column; columns are {schema.names}); pass the output of `longbert extract`")
    # the token-level columns (--level token) are never loaded
    skip = {*TOKEN_COLUMNS, scale_column(TOKEN_FEATURES)}
    return pq.read_table(source, columns=[c for c in schema.names if c not in skip])


def _read_directory(path: Path | str) -> pa.Table:
    """The parts a DIR/ (a folder or an s3:// prefix) lists in its manifest, in its order, as one table."""
    place = place_of(path, "path")
    try:
        manifest = read_manifest(place)
    except (OSError, ValueError, KeyError) as err:
        raise InputError(f"{path}: its manifest cannot be read ({err}); re-run extract with --overwrite") from None
    if manifest is None:
        raise InputError(f"{path}: no {DONE_MANIFEST} or {MANIFEST}, so not a directory output of `longbert "
                         "extract`; pass a .parquet file or the DIR/ that extract -o DIR/ wrote")
    if not manifest.get("complete", False):
        done = sum(p.get("rows", 0) for p in manifest.get("parts", []))
        raise InputError(f"{path}: the run is incomplete ({MANIFEST} says complete: false; {done} of "
                         f"{manifest.get('fingerprint', {}).get('rows', '?')} rows written); finish it with "
                         "`longbert extract ... -o DIR/ --resume` (same inputs and options) before loading")
    tables, names = [], place.names()
    for part in manifest.get("parts", []):
        file = place.where(part["file"])
        if part["file"] not in names:
            raise InputError(f"{path}: part {part['file']} listed in {MANIFEST} is missing; re-run extract "
                             "with --overwrite")
        table = _read_file(file, pa.BufferReader(place.get(part["file"]))) if place.remote else \
            _read_file(place.path / part["file"])
        if table.num_rows != part["rows"]:
            raise InputError(f"{file}: {table.num_rows} rows, but {MANIFEST} says {part['rows']}; the "
                             "directory was changed after the run; re-run extract with --overwrite")
        tables.append(table)
    if not tables:
        raise InputError(f"{path}: {MANIFEST} lists no parts; re-run extract with --overwrite")
    return pa.concat_tables(tables)


def _feature_columns(meta: dict[str, Any]) -> list[str]:
    """The feature columns a file's metadata lists (files written before several features: ``features``)."""
    return [f["column"] for f in meta.get("features") or [{"column": FEATURES}]]


def _checked(path: str | Path) -> Path | str:
    """A local path as a Path; an ``s3://BUCKET/PREFIX/`` output as its URI, once its endpoint, bucket and
    credentials answer (ConfigError naming what is wrong, pipeline.storage.open_error)."""
    if not is_uri(path):
        return Path(path)
    place = place_of(str(path), "path")
    place.check()
    return place.location + "/"


def _read_output(path: str | Path) -> tuple[Path | str, pa.Table]:
    """(path as _checked gives it, the table of a .parquet file or a DIR/'s parts). Raises InputError: no such path."""
    path = _checked(path)
    if not isinstance(path, str) and not path.exists():
        raise InputError(f"{path}: no such file or directory; pass the -o path of `longbert extract`")
    return path, _read_directory(path) if isinstance(path, str) or path.is_dir() else _read_file(path)


def feature_names(path: str | Path) -> list[str]:
    """The feature columns of a .parquet file or DIR/ output: ``["features"]``, or one name per --feature.

    Raises:
        InputError: as load_features.
    """
    path = _checked(path)
    if isinstance(path, str) or path.is_dir():
        try:
            manifest = read_manifest(place_of(path, "path"))
        except (OSError, ValueError, KeyError):
            manifest = None
        if manifest is None or "longbert" not in manifest:
            return _read_directory(path).column_names  # raises the missing/unreadable-manifest error
        return _feature_columns(manifest["longbert"])
    if not path.exists():
        raise InputError(f"{path}: no such file or directory; pass the -o path of `longbert extract`")
    _read_file(path)
    return _feature_columns(json.loads(pq.read_schema(path).metadata[b"longbert"]))


def load_features(path: str | Path, feature: str | None = None,
                  raw: bool = False) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Load extract's output as a feature matrix for a classifier.

    Rows whose ``features`` are null (the row's ``error`` says why, e.g. "empty text") are left out
    of ``ids`` and ``X`` and listed in ``meta["left_out"]``; every other array is aligned with ``X``.

    Args:
        path: a .parquet file, or a directory written by ``extract -o DIR/`` (its parts are read in
            the order of manifest.json, i.e. input order), local or ``s3://BUCKET/PREFIX/`` (the AWS
            variables give the endpoint and credentials, as for ``extract``).
        feature: the feature column to load, e.g. ``"f_chunk_mean"``; needed when the run wrote
            several (``--feature`` given more than once), optional otherwise. Its settings (strategy
            dict, pooling, layers, layer_agg, feature_dim) replace the top-level ones in ``meta``, and
            ``meta["column"]`` names it.
        raw: the stored vectors instead of float32: --out-dtype int8 gives X (N, D) int8 and
            ``meta["scale"]`` (N,) float32 (x = X * scale[:, None]); binary X (N, ceil(D / 8)) uint8, the
            packed signs (``np.unpackbits(X, axis=1, count=D)``); float16 stays float16. Without raw,
            int8 is dequantized (within scale / 2 of float32) and binary decoded to +1 / -1.

    Returns:
        (ids, X, meta):
          - ids: (N,) the ``id`` column of the rows with features (object, str), or the ``row``
            column (int64 row numbers) of a run whose inputs had no id column.
          - X: (N, D) float32 (float16 storage is upcast; int8 dequantized; binary +1 / -1),
            D = meta["feature_dim"] (with ``raw``: the stored array, see raw).
          - meta: the parsed ``longbert`` schema metadata (model, strategy dict with name, pooling,
            layers, keep_cols, ...), plus
              ``meta["kept"]``: {column: (N,) object array of str} for each --keep-col, aligned with X;
              ``meta["rows"]``: {"n_tokens": int32 (N,), "n_unknown": int32 (N,), "n_windows": int32 (N,),
              "truncated": bool (N,)} (n_unknown only in files written since it exists);
              ``meta["left_out"]``: [{"id": ..., "error": str}, ...] for rows with null features;
              ``meta["n_rows"]``: rows in the file(s), with or without features.
          A ``--level window`` output (meta["level"] == "window") has one row per window: ``ids`` repeats
          a document's id for each of its windows (document order, input order), X is (N windows, D),
          ``meta["window"]`` is (N,) int32, each row's window number within its document, and
          ``meta["spans"]`` a list of N lists of [start, end) content-token positions;
          ``meta["rows"]`` holds ``n_tokens`` (the window's content tokens); left_out entries carry
          ``window`` (None for a document that made no window). Group by ids to get back to documents.

    Raises:
        InputError: the path is missing, not parquet, not a longbert output, or a directory whose run
            is incomplete (manifest.json "complete": false; the message names ``--resume``) or damaged;
            ``feature`` missing for a several-feature file, or not one of its columns (lists them).
        ConfigError: an s3:// path whose endpoint does not answer, bucket is missing or credentials are
            missing or refused (names which). RunError: an S3 failure while reading.
    """
    path, table = _read_output(path)
    meta: dict[str, Any] = json.loads(table.schema.metadata[b"longbert"])
    columns = _feature_columns(meta)
    if feature is None and len(columns) > 1:
        raise InputError(f"{path} holds {len(columns)} feature columns ({', '.join(columns)}); pick one with "
                         f"load_features(path, feature=NAME), e.g. feature={columns[0]!r}")
    column = feature if feature is not None else columns[0]
    if column not in columns:
        raise InputError(f"{path}: no feature column {column!r}; its feature columns are {', '.join(columns)}")
    for entry in meta.get("features") or []:
        if entry["column"] == column:
            meta.update({k: entry[k] for k in ("strategy", "pooling", "layers", "layer_agg", "feature_dim")})
    meta["column"] = column
    features = table.column(column)
    has = features.is_valid()                                   # (n_rows,) bool
    kept_table = table.filter(has)
    left = table.filter(pc.invert(has))
    id_col = table.column_names[0]                              # "id", or "row" (row numbers)
    meta["left_out"] = [{"id": i, "error": e} for i, e in
                        zip(left.column(id_col).to_pylist(), left.column(ERROR).to_pylist())]
    if meta.get("level") == "window":  # one row per window: its number and spans, aligned with X
        for entry, w in zip(meta["left_out"], left.column(WINDOW).to_pylist()):
            entry["window"] = w
        meta["window"] = kept_table.column(WINDOW).to_numpy().astype(np.int32)
        meta["spans"] = kept_table.column(SPANS).to_pylist()
    meta["n_rows"] = table.num_rows
    meta["kept"] = {c: kept_table.column(c).to_numpy(zero_copy_only=False)
                    for c in meta.get("keep_cols", []) if c in kept_table.column_names}
    meta["rows"] = {c: kept_table.column(c).to_numpy() for c in DOCUMENT_COUNTS if c in kept_table.column_names}
    ids = kept_table.column(id_col).to_numpy(zero_copy_only=False)
    X = decoded_matrix(kept_table, column, meta, raw=raw)    # (N, D) float32; raw: as stored (int8: meta["scale"])
    assert X.shape[0] == ids.shape[0]
    return ids, X, meta

