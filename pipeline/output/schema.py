"""The output schema: ``output_schema`` declares a run's columns from its config before the first row, with
the run's metadata. The column names themselves are pipeline.columns' (imported here for the row builders,
pipeline.output.rows). Nothing here needs the model's weights: ``output_columns`` names a run's columns from
its options alone.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import TYPE_CHECKING

import pyarrow as pa

from .. import chip as chips  # chips.detect at call time (tests fake the chip)
from ..columns import (COMPACT_FORMS, ERROR, FEATURES, ID, N_TOKENS, N_UNKNOWN, N_WINDOWS, OFFSETS, POSITIONS,
                       ROW, SOURCE, SPANS, TOKEN_FEATURES, TOKEN_IDS, TRUNCATED, WINDOW, column_names, scale_column)
from ..columns import TOKEN_COLUMNS  # noqa: F401 - the rows stage takes it from here
from ..model.prompts import prompt_metadata
from ..options.features_config import is_late
from ..model.st_folder import settings_metadata
from ..errors import ConfigError
from ..types import ModelFacts

if TYPE_CHECKING:
    from ..options.config import PipelineConfig, SegmentConfig


def feature_columns(cfg: PipelineConfig, hidden: int) -> list[tuple[str, int]]:
    """(column name, D) of each feature: ``[("features", D)]`` for one feature, else one per --feature.

    D = Feature.dim(hidden) x the --aggregate parts (1 at --level window); Feature.dim is hidden for
    pooler, else hidden x len(layers) with layer_agg concat, else hidden. With several --aggregate parts
    each --feature column's name (Feature.name) gains ``_agg-`` and the parts joined by ``-``, e.g.
    ``f_chunk_mean_agg-first-last-mean-max``; one part adds nothing (``features`` never changes).
    """
    feats, parts = cfg.feature_list(), cfg.pool.parts
    names = column_names(feats, cfg.pool.aggregates if parts > 1 else ())
    return [(name, f.dim(hidden) * parts) for name, f in zip(names, feats)]


def passthrough_columns(cfg: PipelineConfig) -> list[str]:
    """Input columns copied to the output as they are: each --keep-col, then ``source`` (--with-source)."""
    return [*cfg.read.keep_cols, *([SOURCE] if cfg.read.with_source else [])]


def vector_fields(name: str, dim: int, out_dtype: str) -> list[pa.Field]:
    """The stored field(s) of one feature column of D = ``dim`` values per --out-dtype.

    float32 / float16: [name fixed_size_list<float32|float16>[D]]; int8: [name fixed_size_list<int8>[D],
    name_scale float32]; binary: [name fixed_size_list<uint8>[ceil(D / 8)]] (pipeline.compact).
    """
    if out_dtype == "int8":
        return [pa.field(name, pa.list_(pa.int8(), dim)), pa.field(scale_column(name), pa.float32())]
    if out_dtype == "binary":
        return [pa.field(name, pa.list_(pa.uint8(), -(-dim // 8)))]
    return [pa.field(name, pa.list_(pa.float16() if out_dtype == "float16" else pa.float32(), dim))]


def token_vector_fields(token_dim: int, out_dtype: str) -> list[pa.Field]:
    """The per-token feature field(s): token_features list<fixed_size_list<...>[...]> as vector_fields,
    and with int8 ``token_features_scale`` list<float32> (one scale per token, aligned with its list)."""
    stored = vector_fields(TOKEN_FEATURES, token_dim, out_dtype)
    return [pa.field(f.name, pa.list_(f.type)) for f in stored]


def output_fields(cfg: PipelineConfig, id_type: pa.DataType, hidden: int, dim: int, token_dim: int,
                  projection: Mapping[str, object] | None = None) -> list[pa.Field]:
    """The run's columns in order, as ``output_schema`` documents them (no metadata, no checks);
    ``projection``: {column: pipeline.projection.Projection} of a --dims run (its columns store N values)."""
    columns = stored_dims(feature_columns(cfg, hidden) if cfg.multi_feature else [(FEATURES, dim)], projection)
    return row_fields(id_type, passthrough_columns(cfg), columns, cfg.write.out_dtype, cfg.pool.per_window,
                      token_dim if cfg.pool.per_token else None)


def stored_dims(columns: Sequence[tuple[str, int]], projection: Mapping[str, object] | None) -> list[tuple[str, int]]:
    """(column, D) with each projected column's D replaced by its projection's N (--dims)."""
    return [(c, projection[c].dim if projection and c in projection else d) for c, d in columns]


def row_fields(id_type: pa.DataType, kept: Sequence[str], columns: Sequence[tuple[str, int]], out_dtype: str,
               per_window: bool = False, token_dim: int | None = None) -> list[pa.Field]:
    """The output columns in order, from values alone (the rows stage's fields, and ``output_schema``'s).

    Args:
        id_type: the ids' type: an integer gives ``row`` int64, anything else ``id`` string.
        kept: the input columns copied after the id (string). columns: (feature column, D) in order.
        out_dtype: float32 | float16 | int8 | binary (vector_fields). per_window: one row per window
            (window, spans, n_tokens) instead of a document's counts. token_dim: D of the per-token
            vectors at --level token (token_ids, positions, offsets, token_features after error); None: none.

    Example: pa.int64(), (), [("features", 4)], "float32" -> row int64, n_tokens, n_unknown,
    n_windows, truncated, features fixed_size_list<float>[4], error.
    """
    fields = [pa.field(ROW, pa.int64()) if pa.types.is_integer(id_type) else pa.field(ID, pa.string())]
    fields += [pa.field(c, pa.string()) for c in kept]
    if per_window:  # one row per window (pipeline.output.rows.window_table)
        fields += [pa.field(WINDOW, pa.int32()), pa.field(SPANS, pa.list_(pa.list_(pa.int32(), 2))),
                   pa.field(N_TOKENS, pa.int32())]
    else:
        fields += [pa.field(N_TOKENS, pa.int32()), pa.field(N_UNKNOWN, pa.int32()),
                   pa.field(N_WINDOWS, pa.int32()), pa.field(TRUNCATED, pa.bool_())]
    for name, d in columns:
        fields += vector_fields(name, d, out_dtype)
    fields += [pa.field(ERROR, pa.string())]
    if token_dim is not None:
        fields += [pa.field(TOKEN_IDS, pa.list_(pa.int32())), pa.field(POSITIONS, pa.list_(pa.int32())),
                   pa.field(OFFSETS, pa.list_(pa.list_(pa.int32(), 2))),
                   *token_vector_fields(token_dim, out_dtype)]
    return fields


def output_columns(cfg: PipelineConfig, id_type: pa.DataType = pa.string()) -> list[str]:
    """The names of the run's output columns, in order, from its options alone (no model).

    Example: --level window --keep-col label, string ids ->
    ["id", "label", "window", "spans", "n_tokens", "features", "error"].
    """
    return [f.name for f in output_fields(cfg, id_type, hidden=1, dim=1, token_dim=1)]


def output_schema(cfg: PipelineConfig, id_type: pa.DataType, model: ModelFacts, dim: int, token_dim: int,
                  described: PipelineConfig | None = None, segments: Mapping[str, SegmentConfig] | None = None,
                  binary_center: Mapping[str, object] | None = None,
                  projection: Mapping[str, object] | None = None) -> pa.Schema:
    """The fixed output schema, declared from the config and the model's facts before the first row.

    Columns: id (string: the id column's values or text files' paths), or row (int64: the 0-based row
    number, when the inputs have no id column), each --keep-col (string), source (--with-source),
    n_tokens int32, n_unknown int32, n_windows int32, truncated bool,
    features fixed_size_list<float32|float16>[dim] (with several --feature: one such column per
    feature, named as Feature.name, instead), error string; with --level token also token_ids
    list<int32>, positions list<int32>, offsets list<fixed_size_list<int32>[2]>, token_features
    list<fixed_size_list<float>[token_dim]>. --out-dtype int8 stores each feature column as
    fixed_size_list<int8>[dim] with a float32 ``COLUMN_scale`` column right after it (token_features:
    list<fixed_size_list<int8>[token_dim]> and token_features_scale list<float32>, one scale per token);
    --out-dtype binary as fixed_size_list<uint8>[ceil(dim / 8)] (pipeline.compact; the metadata's
    ``compact`` entry says how to decode). With --level window one row per window instead: id or row,
    the --keep-col (and source) columns, window int32 (0-based within the document), spans
    list<fixed_size_list<int32>[2]> ([start, end) content-token positions), n_tokens int32 (content
    tokens of the window), the feature column(s), error. Metadata key ``longbert``: run_metadata as JSON,
    of ``described`` and ``segments`` where given (the config a pipeline's own stages describe and its
    Segment stage's windows per strategy, pipeline.engine.agreement.described_config), else of ``cfg``;
    ``binary_center``: {column: (D,) centre or None} of an --out-dtype binary run (the rows stage's);
    ``projection``: {column: pipeline.projection.Projection} of a --dims run (the rows stage's): each such
    column stores N values, and the metadata's ``projection`` entry keeps it (run_metadata).

    Raises:
        ConfigError: two columns of one name (check_keep_cols refuses the options that would make them).
    """
    fields = output_fields(cfg, id_type, model.hidden_size, dim, token_dim, projection)
    names = [f.name for f in fields]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"the output would have two columns named {', '.join(map(repr, twice))}; rename that "
                          "--keep-col column in the input")
    meta = {"longbert": json.dumps(run_metadata(described or cfg, model, dim, token_dim, segments, binary_center,
                                                projection))}
    return pa.schema(fields, metadata=meta)


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def run_metadata(cfg: PipelineConfig, model: ModelFacts, dim: int, token_dim: int,
                 segments: Mapping[str, SegmentConfig] | None = None,
                 binary_center: Mapping[str, object] | None = None,
                 projection: Mapping[str, object] | None = None) -> dict:
    """The JSON stored under the parquet schema metadata key ``longbert``.

    ``segments``: each strategy's SegmentConfig where a pipeline's Segment stage sets them apart (None:
    every strategy has cfg.segment's numbers). ``binary_center``: as compact_metadata's. ``projection``:
    {column: pipeline.projection.Projection} of a --dims run: ``feature_dim`` (and each feature's) is then
    the stored N, and ``projection`` = {"method": "pca" | "truncate", "dim": N, "columns": [{"column",
    "input_dim" (D), "dim" (N), "fitted_on" (vectors; 0 for a truncation), "mean", "components" (base64
    float32: pipeline.projection.Projection.to_metadata)}]}.

    ``model`` is what the user named (pipeline.model.facts.model_label: never an absolute path of this
    machine), ``model_sha256`` the hash of its config and weight files (pipeline.model.checkpoint.model_sha256),
    so two outputs can be compared across machines.
    """
    seg = cfg.segment
    strategy = strategy_metadata(cfg, seg.strategy, segments)
    meta = {
        "model": model.name,
        "model_sha256": model.sha256,
        "model_family": model.family,
        "hidden_size": model.hidden_size,
        "feature_dim": dim,
        "token_feature_dim": token_dim if cfg.pool.per_token else None,
        "max_length": seg.max_length,
        "strategy": strategy,
        "pooling": cfg.pool.pooling,
        "layers": list(cfg.pool.layers),
        "layer_agg": cfg.pool.layer_agg,
        "aggregate": aggregate_metadata(cfg),
        "level": cfg.pool.level,
        "normalize": cfg.pool.normalize,
        "dtype": cfg.model.dtype,
        "quantize": cfg.model.quantize,
        "device": chips.detect(cfg.model.device).device,  # cpu | cuda | mps, and what it offers (pipeline.chip)
        "compute_dtype": "int8" if cfg.model.quantize == "int8" else cfg.model.dtype,
        "chip": chips.detect(cfg.model.device).describe(),
        "out_dtype": cfg.write.out_dtype,
        "text_col": cfg.read.text_col,
        "id_col": cfg.read.id_col,
        "keep_cols": list(cfg.read.keep_cols),
        "version": _version("longbert"),
        "libraries": {name: _version(name) for name in ("torch", "transformers", "tokenizers", "pyarrow", "pandas")},
    }
    if cfg.pool.parts > 1:  # D = parts x window_dim: part k is feature[k * window_dim:(k + 1) * window_dim]
        meta["window_dim"] = dim // cfg.pool.parts
    meta["features"] = features_metadata(cfg, model.hidden_size, segments)
    if projection:   # --dims: the stored D is the projection's N; how to project new vectors the same way
        first = next(iter(projection.values()))
        meta["feature_dim"] = first.dim
        for entry in meta["features"]:
            if entry["column"] in projection:
                entry["feature_dim"] = projection[entry["column"]].dim
        meta["projection"] = {"method": first.method, "dim": first.dim, "apply": "(x - mean) @ components.T",
                              "columns": [{"column": c, **p.to_metadata()} for c, p in projection.items()]}
    # a sentence-transformers folder's; None: not one
    meta["folder_settings"] = settings_metadata(cfg, model, prompt_metadata(cfg.model, model))
    if cfg.write.out_dtype in COMPACT_FORMS:
        meta["compact"] = compact_metadata(cfg, model.hidden_size, dim, token_dim, binary_center, projection)
    if cfg.multi_feature:  # no one strategy/pooling describes the file: see meta["features"]
        meta.update(strategy=None, pooling=None, layers=None, layer_agg=None, feature_dim=None)
    return meta


def strategy_metadata(cfg: PipelineConfig, name: str, segments: Mapping[str, SegmentConfig] | None = None) -> dict:
    """The metadata's strategy dict for ``name``: max_length, content tokens, and its own numbers (from
    ``segments[name]`` when given, else cfg.segment)."""
    seg = (segments or {}).get(name) or cfg.segment
    strategy = {"name": name, "max_length": seg.max_length, "content_tokens": seg.max_length - 2,
                "max_tokens_per_doc": seg.max_tokens_per_doc}
    if name == "head_tail":
        strategy.update(head_tokens=seg.head_tokens, tail_tokens=seg.tail_tokens)
    if name == "sliding":
        strategy.update(overlap=seg.overlap, step=seg.max_length - 2 - seg.overlap)
    if is_late(name):
        strategy.update(overlap=seg.late_overlap, step=seg.max_length - 2 - seg.late_overlap,
                        chunk_tokens=seg.chunk_tokens)
    return strategy


def features_metadata(cfg: PipelineConfig, hidden: int, segments: Mapping[str, SegmentConfig] | None = None
                      ) -> list[dict]:
    """Every feature column with its full settings: column, spec, strategy dict, pooling, layers,
    layer_agg, aggregate (aggregate_metadata), feature_dim (and window_dim with several aggregate parts)."""
    out = []
    for f, (column, dim) in zip(cfg.feature_list(), feature_columns(cfg, hidden)):
        out.append({"column": column, "spec": f.spec, "strategy": strategy_metadata(cfg, f.strategy, segments),
                    "pooling": f.pooling, "layers": list(f.layers), "layer_agg": f.layer_agg,
                    "aggregate": aggregate_metadata(cfg), "feature_dim": dim})
        if cfg.pool.parts > 1:
            out[-1]["window_dim"] = dim // cfg.pool.parts
    return out


def aggregate_metadata(cfg: PipelineConfig) -> str | list[str] | None:
    """The metadata's ``aggregate``: the one name ("mean"), the list of parts in vector order
    (["first", "last", "mean", "max"]), or None at --level window (window vectors are not aggregated)."""
    if cfg.pool.per_window:
        return None
    return cfg.pool.aggregate if len(cfg.pool.aggregates) == 1 else list(cfg.pool.aggregates)


def compact_metadata(cfg: PipelineConfig, hidden: int, dim: int, token_dim: int,
                     binary_center: Mapping[str, object] | None = None,
                     projection: Mapping[str, object] | None = None) -> dict:
    """The metadata's ``compact`` entry of an --out-dtype int8 or binary run: how to decode each column.

    int8: {"form": "int8", "dequantize": "x = q * scale", "scale_column": "features_scale" (the first
    column's), "columns": [{"column", "scale_column", "dim"}, ...]}; binary: {"form": "binary",
    "dim": D (the first column's), "bitorder": "big", "decode": "x = 2*bit - 1", "columns":
    [{"column", "dim", "bytes", "center"}, ...]}, "center" the (D,) per-dimension mean of the first
    documents' vectors whose signs the bits keep (pipeline.compact.binary_center; absent: the signs of
    x). --level token adds token_features to "columns" (its scale column is list<float32>, one scale
    per token). ``binary_center``: {column: (D,) centre, or None for the signs of x} (the rows stage's
    fitted state, pipeline.output.rows.Rows); None: no centre. ``projection``: a --dims run's (the
    columns' dim is then N).
    """
    form = cfg.write.out_dtype
    columns = stored_dims(feature_columns(cfg, hidden) if cfg.multi_feature else [(FEATURES, dim)], projection)
    if cfg.pool.per_token:
        columns = [*columns, (TOKEN_FEATURES, token_dim)]
    if form == "int8":
        entries = [{"column": c, "scale_column": scale_column(c), "dim": d} for c, d in columns]
        return {"form": "int8", "dequantize": "x = q * scale", "scale_column": entries[0]["scale_column"],
                "levels": 127, "columns": entries}
    centers = dict(binary_center or {})
    entries = [{"column": c, "dim": d, "bytes": -(-d // 8)} for c, d in columns]
    for entry in entries:
        if centers.get(entry["column"]) is not None:
            entry["center"] = [float(x) for x in centers[entry["column"]]]
    centred = any("center" in e for e in entries)
    return {"form": "binary", "dim": entries[0]["dim"], "bitorder": "big", "decode": "x = 2*bit - 1",
            "bit": "1 where x > center" if centred else "1 where x > 0", "columns": entries}
