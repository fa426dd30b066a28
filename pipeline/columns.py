"""Every output column name longbert writes itself, and the --keep-col check: the one place they are spelled.

On the ground (no phase below it): the options check a --keep-col against these names when the config is
built (``check_keep_cols``, from values: no config, no pyarrow); the output schema (pipeline.output.schema),
the rows stages, probe and ``load_features`` take the names from here.
"""
from __future__ import annotations

from collections.abc import Sequence

from .errors import ConfigError

ID = "id"                    # string: the id column's values, or text files' paths
ROW = "row"                  # int64: the 0-based row number across all inputs, when they have no id column
SOURCE = "source"            # --with-source: each row's file
N_TOKENS = "n_tokens"        # content tokens of the document (--level window: of the window)
N_UNKNOWN = "n_unknown"
N_WINDOWS = "n_windows"
TRUNCATED = "truncated"
WINDOW = "window"            # --level window: the window's 0-based number within its document
SPANS = "spans"              # --level window: [start, end) content-token positions
FEATURES = "features"        # the one feature's vector (several --feature: one column per Feature.name)
ERROR = "error"
TOKEN_IDS = "token_ids"      # --level token, the four columns below
POSITIONS = "positions"
OFFSETS = "offsets"
TOKEN_FEATURES = "token_features"
SCALE_SUFFIX = "_scale"      # --out-dtype int8: FEATURE_scale, each vector's float32 scale (x = q * scale)
COMPACT_FORMS = ("int8", "binary")  # --out-dtype values stored as pipeline.compact's forms

DOCUMENT_COUNTS = (N_TOKENS, N_UNKNOWN, N_WINDOWS, TRUNCATED)   # a row per document: --level document, token
WINDOW_COUNTS = (WINDOW, SPANS, N_TOKENS)                       # a row per window: --level window
TOKEN_COLUMNS = (TOKEN_IDS, POSITIONS, OFFSETS, TOKEN_FEATURES)  # --level token, after error
# Columns longbert computes (never a label, never a kept input column).
COMPUTED = tuple(dict.fromkeys((*DOCUMENT_COUNTS, *WINDOW_COUNTS, FEATURES, ERROR, *TOKEN_COLUMNS)))
# Names a --keep-col may never take, whatever the run's options (the fixed columns of --level document and
# token); a run's other output columns (window, spans; several --feature's names) are refused in that run.
RESERVED_COLUMNS = (ID, ROW, SOURCE, *DOCUMENT_COUNTS, FEATURES, ERROR, *TOKEN_COLUMNS)
# --level -> the columns of its own that a row carries besides the id, the features and error
LEVEL_COLUMNS = {"document": DOCUMENT_COUNTS, "window": WINDOW_COUNTS, "token": (*DOCUMENT_COUNTS, *TOKEN_COLUMNS)}


def column_names(features: Sequence, aggregates: Sequence[str] = ()) -> list[str]:
    """The feature columns' names, from values alone: ``["features"]`` for one feature, else each
    feature's Feature.name, with ``_agg-`` and the aggregate parts joined by ``-`` when there are
    several (pass () at --level window, where window vectors are not aggregated).

    Example: (chunk:mean, head:cls), ("mean", "max") -> ["f_chunk_mean_agg-mean-max", "f_head_cls_agg-mean-max"].
    """
    if len(features) == 1:
        return [FEATURES]
    suffix = "" if len(aggregates) <= 1 else "_agg-" + "-".join(aggregates)
    return [f.name + suffix for f in features]


def scale_column(column: str) -> str:
    """The int8 scale column of a feature column: ``features`` -> ``features_scale``."""
    return column + SCALE_SUFFIX


def check_keep_cols(keep_cols: Sequence[str], level: str, feature_columns: Sequence[str],
                    out_dtype: str = "float32") -> None:
    """No --keep-col takes the name of a column the run writes itself: a reserved name
    (RESERVED_COLUMNS), or one of this run's columns (``window``/``spans`` at --level window, a
    --feature's column, an int8 scale column). Runs when the config is built, before any input or model
    file is read.

    Args:
        keep_cols: the --keep-col names. level: --level (document | window | token).
        feature_columns: the run's feature column names (column_names).
        out_dtype: --out-dtype; int8 writes a ``COLUMN_scale`` beside each vector column.

    Raises:
        ConfigError (exit 2): naming the column and the fix.
    """
    written = {ID, ROW, *LEVEL_COLUMNS[level], *feature_columns, ERROR}
    if out_dtype == "int8":   # each vector column's scale, token_features' too at --level token
        vectors = [*feature_columns, *([TOKEN_FEATURES] if TOKEN_FEATURES in LEVEL_COLUMNS[level] else [])]
        written.update(scale_column(c) for c in vectors)
    for col in keep_cols:
        if col in RESERVED_COLUMNS:
            raise ConfigError(f"--keep-col {col!r} clashes with an output column of that name; reserved names are "
                              f"{', '.join(RESERVED_COLUMNS)}; rename the column in the input, or drop --keep-col {col}")
        if col in feature_columns:
            raise ConfigError(f"--keep-col {col!r} clashes with the feature column of that name; rename the column "
                              "in the CSV or drop that --feature")
        if col in written:
            raise ConfigError(f"--keep-col {col!r} clashes with an output column of that name (--level "
                              f"{level} writes {col!r}); rename the column in the input, or drop --keep-col "
                              f"{col} (or run another --level)")
