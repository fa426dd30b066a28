"""The stages a user calls alone, numpy in and out: ``read``, ``pool``, ``save_features``
(``longbert.read`` / ``longbert.pool`` / ``longbert.save_features``; ``longbert.aggregate`` is
pipeline.output.aggregate.aggregate_rows). Each is the same code the pipeline runs, reached without a model.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa

from .batch import Batch
from .options.config import PipelineConfig, PoolConfig, ReadConfig, option_sections
from .options.features_config import POOLINGS
from .options.config_file import coerce
from .options.python_api import python_names
from .output.durable import place_durably, replace_durably
from .errors import ConfigError, InputError, RunError
from .columns import ERROR, FEATURES, ID


def read(inputs: str | Path | Iterable[str | Path], **read_options: Any) -> Iterator[Batch]:
    """The inputs scanned and checked once, as ``extract`` does, then read as Batches in input order.

    Args:
        inputs: a file (CSV, TSV, JSON Lines, parquet, text; compressed too), a folder or a glob, or several.
        **read_options: extract's reading options by their Python names: ``text_col``, ``id_col``,
            ``keep_cols``, ``format``, ``encoding``, ``delimiter``, ``on_bad_lines``, ``block_rows``...

    Yields:
        Batch: ``rows`` holds id (int64 row numbers, or string ids: the id column is settled once,
        for every batch), text and the kept columns; at most ``block_rows`` rows each.

    Raises:
        ConfigError: an option that is not a reading option, or a bad value. InputError: as ``extract``
            (a file that cannot be read, a missing column, a bad record...), before the first batch.
    """
    from .read import read_block
    from .engine.run import scan_inputs

    unknown = [k for k in read_options if option_sections().get(k.replace("-", "_")) != "read"]
    if unknown:
        raise ConfigError(f"{unknown[0]!r} is not a reading option; reading options are "
                          f"{', '.join(sorted(k for k, s in option_sections().items() if s == 'read'))}")
    paths = (inputs,) if isinstance(inputs, (str, Path)) else tuple(inputs)
    with python_names():   # messages name this call's arguments (text_col=...), not extract's flags
        options = {k.replace("-", "_"): coerce(k.replace("-", "_"), v) for k, v in read_options.items()}  # as the CLI's
        try:
            read_cfg = ReadConfig(inputs=tuple(str(p) for p in paths), **options)
        except TypeError as err:
            raise ConfigError(f"bad option value: {err}") from None
        _, plan = scan_inputs(dataclasses.replace(PipelineConfig(), read=read_cfg))
    for spec in plan.blocks:
        with python_names():
            batch = Batch(rows=read_block(spec))
        yield batch


def pool(hidden_states: Any, attention_mask: Any, pooling: str = "mean", layers: Sequence[int] = (-1,),
         layer_agg: str = "mean", pooler_output: Any = None) -> np.ndarray:
    """Window vectors from hidden states you computed yourself, as the ``encode`` stage pools them.

    Args:
        hidden_states: (n, seq, h) float, the last layer; or a tuple/list of per-layer (n, seq, h) arrays
            indexed as a transformers model's ``output_hidden_states`` (0 = embeddings, -1 = last).
            numpy arrays or torch tensors.
        attention_mask: (n, seq) 0/1: 1 for [CLS], content and [SEP], 0 for padding.
        pooling: cls (each row's first position whose mask is 1: its [CLS], with right or left padding)
            | mean | max over non-padding positions | pooler (needs pooler_output).
        layers: which hidden states (one array: only (-1,)).
        layer_agg: mean | sum | concat of the layers' pooled vectors.
        pooler_output: (n, h), the model's pooler output, for pooling="pooler".

    Returns:
        (n, D) float32, D = h, or h * len(layers) with layer_agg="concat".

    Raises:
        ConfigError: an unknown pooling or layer_agg, a layer the states lack, shapes that disagree.
    """
    import torch

    from .model.pool import pool_windows

    layers = tuple(int(i) for i in layers)
    try:
        with python_names():   # PoolConfig's messages name extract's flags; this call's caller passed arguments
            cfg = PoolConfig(pooling=pooling, layers=layers, layer_agg=layer_agg)
    except TypeError as err:
        raise ConfigError(f"bad option value: {err}") from None
    if pooling not in POOLINGS:
        raise ConfigError(f"pooling={pooling!r}; choose one of {POOLINGS}")
    per_layer = isinstance(hidden_states, (tuple, list))
    states = [_tensor(h) for h in hidden_states] if per_layer else [_tensor(hidden_states)]
    if not per_layer and layers != (-1,):
        raise ConfigError(f"layers={layers} needs every layer's hidden states: pass a tuple of them "
                          "(output_hidden_states=True), or layers=(-1,)")
    for i in layers:
        if not -len(states) <= i < len(states):
            raise ConfigError(f"layer {i} is not among the {len(states)} hidden states given")
    mask = _tensor(attention_mask)
    if any(s.ndim != 3 or tuple(s.shape[:2]) != tuple(mask.shape) for s in states):
        raise ConfigError(f"hidden states of shape {tuple(states[0].shape)} and a mask of shape {tuple(mask.shape)}; "
                          "expected (n, seq, h) and (n, seq)")
    if pooling == "pooler" and pooler_output is None:
        raise ConfigError("pooling='pooler' needs pooler_output=(n, h), the model's own pooler output")
    outputs = SimpleNamespace(last_hidden_state=states[-1], hidden_states=states,
                              pooler_output=None if pooler_output is None else _tensor(pooler_output))
    with torch.inference_mode():
        return pool_windows(outputs, mask, cfg).float().numpy()


def _tensor(x: Any):
    import torch

    return x.detach().cpu() if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x))


def save_features(path: str | Path, ids: Sequence[Any], X: Any, *, overwrite: bool = False,
                  **columns: Sequence[Any]) -> Path:
    """Write vectors made elsewhere as a features file that ``load_features`` and ``probe`` read.

    Args:
        path: a .parquet file (written whole, then moved into place durably).
        ids: n ids (str or int; written as strings in the ``id`` column).
        X: (n, D) float array (numpy or torch); written as float32, NaN rows as null features.
        overwrite: replace an existing file (as extract's --overwrite); a folder is never replaced.
        **columns: extra columns, n values each (e.g. label=y), written as strings (None stays null).

    Returns:
        The path written. Its metadata (key ``longbert``) says ``source: "external"`` and names no model.

    Raises:
        ConfigError: ``path`` is not a .parquet name, is a folder, or exists without ``overwrite=True``
            (pipeline.output.api_outputs.check_features_path).
        InputError: lengths that differ, X not 2-D, or a column named like an output column.
        RunError: the file cannot be written (the cause named), or another program created it meanwhile.
    """
    import pyarrow.parquet as pq

    from .output.aggregate import as_numpy
    from .output.api_outputs import check_features_path

    path = check_features_path(path, overwrite)

    X = as_numpy(X).astype(np.float32)
    ids = list(ids)
    if X.ndim != 2 or X.shape[0] != len(ids):
        raise InputError(f"X has shape {X.shape} for {len(ids)} ids; give an (n, D) array, one row per id")
    reserved = {ID, FEATURES, ERROR} & set(columns)
    if reserved:
        raise InputError(f"column {sorted(reserved)[0]!r} is written by save_features itself; rename it")
    cols: dict[str, pa.Array] = {ID: pa.array([str(i) for i in ids], type=pa.string())}
    for name, values in columns.items():
        values = list(values)
        if len(values) != len(ids):
            raise InputError(f"column {name!r} has {len(values)} values for {len(ids)} ids; give one per id")
        cols[name] = pa.array([None if v is None else str(v) for v in values], type=pa.string())
    valid = np.isfinite(X).all(axis=1)
    flat = pa.array(np.where(valid[:, None], X, 0).reshape(-1), type=pa.float32())
    cols[FEATURES] = pa.FixedSizeListArray.from_arrays(flat, list_size=X.shape[1],
                                                         mask=None if valid.all() else pa.array(~valid))
    cols[ERROR] = pa.array([None if ok else "non-finite vector" for ok in valid], type=pa.string())
    meta = {"source": "external", "model": None, "feature_dim": int(X.shape[1]), "level": "document",
            "keep_cols": list(columns)}
    table = pa.table(cols).replace_schema_metadata({"longbert": json.dumps(meta)})
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        pq.write_table(table, tmp)
        if overwrite:
            replace_durably(tmp, path)   # as extract's outputs: fsync, rename, fsync the folder
        elif not place_durably(tmp, path):
            tmp.unlink()
            raise RunError(f"{path} was created by another program while save_features wrote; it is kept (pass "
                           "overwrite=True to replace it, or choose another path)")
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise RunError(f"cannot write {path}: {err.strerror or err}; check the folder exists and is writable") from None
    return path
