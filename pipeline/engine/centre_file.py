"""--binary-center FILE: the centre an earlier --out-dtype binary output recorded, taken only when that output's
vectors are this run's features (the same model and feature settings), and only when it is finite numbers.

Called by pipeline.engine.calibrate.binary_centre (a run's centre), by pipeline.engine.stream before the
model loads (so a wrong file is refused first) and by Pipeline.from_options (``binary_center=PATH``).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..cache.store_keys import positive_layers
from ..errors import ConfigError
from ..output.schema import TOKEN_FEATURES

# Per feature column: the fields of the metadata's ``features`` entry that decide its vectors (the column
# name and the spec's spelling aside); and the run's fields that apply to every column.
FEATURE_FIELDS = ("strategy", "pooling", "layers", "layer_agg", "aggregate", "feature_dim", "window_dim")
RUN_FIELDS = ("level", "normalize")
TOKEN_FIELDS = ("layers", "layer_agg")   # token_features: the hidden states each token's vector is made of
FIX = ("pass the binary output of a run with the same model and features (--model, --feature or --strategy, "
       "--pooling, --layers, --aggregate, --level), or drop --binary-center to take this run's own "
       "centre")


def read_metadata(path: str, flag: str = "--binary-center") -> dict:
    """The ``longbert`` metadata of an output (``path``: a .parquet file, or a finished DIR/ of parts, local
    or ``s3://BUCKET/PREFIX/``: its endpoint, bucket and credentials checked first).

    Raises:
        ConfigError: the output cannot be read as a longbert output (naming ``flag`` and the path), or as
            pipeline.storage for an s3:// output that cannot be reached.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..output.places import is_uri, place_of
    from ..output.write import DONE_MANIFEST

    try:
        if is_uri(path):
            place = place_of(path, flag)
            place.check()
            target = pa.BufferReader(place.get(DONE_MANIFEST))
        else:
            target = Path(path) / DONE_MANIFEST if Path(path).is_dir() else Path(path)
        raw = (pq.read_schema(target).metadata or {}).get(b"longbert")
        return json.loads(raw) if raw else {}
    except (OSError, ValueError, pa.ArrowException) as err:
        raise ConfigError(f"{flag} {path!r} cannot be read as a longbert output ({err}); pass a .parquet "
                          "file or a finished DIR/ that `longbert extract` wrote") from None


def _layers(value: Any, n_layers: int) -> Any:
    """A metadata ``layers`` list made positive (-1 and n_layers name one hidden state); other values as they are."""
    return positive_layers(value, n_layers) if isinstance(value, list) else value


def _feature(entry: dict, n_layers: int) -> dict:
    """The fields of a ``features`` entry that decide its vectors, layers made positive."""
    out = {k: entry.get(k) for k in FEATURE_FIELDS if k in entry}
    if "layers" in out:
        out["layers"] = _layers(out["layers"], n_layers)
        if len(out["layers"] or ()) <= 1:
            out.pop("layer_agg", None)   # one layer: layer_agg changes nothing
    return out


def _shown(meta: dict) -> str:
    sha = meta.get("model_sha256")
    return f"{meta.get('model')!r}" + (f" (sha256 {sha[:12]})" if sha else "")


def feature_differences(theirs: dict, ours: dict, columns: dict[str, int], n_layers: int) -> list[str]:
    """What makes an output's vectors other features than a run's, from the two metadata dicts (run_metadata).

    The model is compared by its sha256 (by its name where either lacks one); then the run's level,
    --normalize and stage list; then, per binary column of the run, the file's ``features`` entry (strategy
    with its numbers, pooling, layers made positive, layer_agg, aggregate, D); ``token_features`` by the
    run's layers; the stage list always (absent: the built-in stages). Another field the file does not record is not compared. dtype and quantization are not: they
    round the same features.

    Args:
        theirs: the file's metadata. ours: this run's. columns: {column: D} the run packs to bits.
        n_layers: the model's hidden layers (to compare -1 with its positive index).

    Returns:
        One phrase per difference, "level 'document' (this run: 'window')"; [] when the features are the same.
        Example: a cls file for a mean run -> ["features: pooling 'cls' (this run: 'mean')"].
    """
    a_sha, b_sha = theirs.get("model_sha256"), ours.get("model_sha256")
    same_model = a_sha == b_sha if a_sha and b_sha else theirs.get("model") == ours.get("model")
    out = [] if same_model else [f"model {_shown(theirs)} (this run: {_shown(ours)})"]
    out += [f"{k} {theirs[k]!r} (this run: {ours.get(k)!r})" for k in RUN_FIELDS
            if k in theirs and theirs[k] != ours.get(k)]
    if theirs.get("stages") != ours.get("stages"):   # absent: the built-in stages
        out.append(f"stages {theirs.get('stages')!r} (this run: {ours.get('stages')!r})")
    file_features = {e.get("column"): e for e in theirs.get("features") or ()}
    run_features = {e.get("column"): e for e in ours.get("features") or ()}
    for column in columns:
        if column == TOKEN_FEATURES:
            a = {k: theirs[k] for k in TOKEN_FIELDS if k in theirs}
            b = {k: ours.get(k) for k in TOKEN_FIELDS}
            a["layers"], b["layers"] = _layers(a.get("layers"), n_layers), _layers(b["layers"], n_layers)
        elif column in file_features and column in run_features:
            a, b = _feature(file_features[column], n_layers), _feature(run_features[column], n_layers)
        else:
            continue
        out += [f"{column}: {k} {a[k]!r} (this run: {b.get(k)!r})" for k in a if a[k] != b.get(k)]
    return out


def non_finite(x: float) -> str:
    """How a message names a value that is not a finite number: nan -> 'NaN', -inf -> '-inf'."""
    return "NaN" if np.isnan(x) else ("-inf" if x < 0 else "inf")


def file_centers(path: str, resolved: Any) -> tuple:
    """The centres of an earlier --out-dtype binary output (``path``: a .parquet file or a DIR/ of parts),
    from its metadata's ``compact`` entry, for the binary columns of the run ``resolved`` describes.

    Args:
        path: the output named by --binary-center (``binary_center=`` in Python).
        resolved: the run's pipeline.engine.resolved.Resolved (its columns, model facts and metadata).

    Returns:
        ((column, (D,) centre as floats, or None: that file kept the signs of x), ...) in the run's column order.

    Raises:
        ConfigError: the file cannot be read, holds no binary output, lacks one of the columns or gives it
            another D, holds the vectors of another model or other features (naming each difference: model
            sha256, strategy, pooling, layers, level...), or a centre that is not finite numbers (naming the
            column and the dimension).
    """
    import pyarrow as pa

    columns = resolved.binary_columns()
    meta = read_metadata(path)
    compact = meta.get("compact") or {}
    if compact.get("form") != "binary":
        raise ConfigError(f"--binary-center {path!r} holds no --out-dtype binary output (no centre in its metadata); "
                          "pass a file that `longbert extract --out-dtype binary` wrote")
    theirs = {c["column"]: c for c in compact.get("columns", [])}
    for name, dim in columns.items():
        if name not in theirs or theirs[name].get("dim") != dim:
            have = {c: e.get("dim") for c, e in theirs.items()}
            raise ConfigError(f"--binary-center {path!r} has the columns {have}, this run writes {columns}; pass an "
                              "output of the same features and model")
    ours = json.loads(resolved.schema(pa.string()).metadata[b"longbert"])
    differ = feature_differences(meta, ours, columns, resolved.facts.num_hidden_layers)
    if differ:
        raise ConfigError(f"--binary-center {path!r} holds the centre of other vectors than this run's: "
                          f"{'; '.join(differ)}; its bits would not compare with this run's; {FIX}")
    out = []
    for name in columns:
        center = theirs[name].get("center")
        if center is not None:
            try:
                values = np.asarray(center, dtype=np.float64)
            except (TypeError, ValueError):
                values = np.zeros((0, 0))
            bad = np.flatnonzero(~np.isfinite(values)) if values.ndim == 1 else np.arange(1)
            if values.ndim != 1 or bad.size:
                what = "is not a list of numbers" if values.ndim != 1 else \
                    f"holds {non_finite(values[bad[0]])} at dimension {bad[0]} (of {values.size})"
                raise ConfigError(f"--binary-center {path!r}: the centre of column {name!r} in its metadata {what}; "
                                  "the file was damaged or edited after longbert wrote it: pass a binary output as "
                                  "`longbert extract` wrote it, or drop --binary-center to take this run's own centre")
            center = tuple(map(float, values))
        out.append((name, center))
    return tuple(out)
