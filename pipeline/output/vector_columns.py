"""Vectors as the Arrow columns the output stores, in the form --out-dtype gives their schema fields: float32
or float16 lists, int8 with a scale per vector (or per token), or packed sign bits around a centre. Called by
the rows stage (pipeline.output.rows) for each feature column and the per-token vectors.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa

from ..compact import pack_binary, quantize_int8
from .arrow_arrays import fixed_list_array, list_array, tiled_buffer
from .schema import TOKEN_FEATURES, scale_column


def vector_columns(schema: pa.Schema, name: str, values: np.ndarray, valid: np.ndarray,
                    centers: Mapping[str, np.ndarray | None] | None = None) -> dict[str, pa.Array]:
    """One feature column's stored array(s), in the form its schema field declares.

    (n, D) float32 values and (n,) validity -> {name: fixed_size_list<float>[D]} (float32 / float16);
    with an int8 field {name: fixed_size_list<int8>[D], name_scale: (n,) float32} (quantize_int8, one
    scale per vector); with a uint8 field {name: fixed_size_list<uint8>[ceil(D / 8)]} (pack_binary, the signs of x minus
    the column's centre in ``centers``; none there: the signs of x).
    Rows that are not valid are null in every column. Each vector's bytes depend on that vector alone.

    Raises:
        ValueError: a valid int8 row that is not finite (the rows stage makes those row errors first).
    """
    list_type = schema.field(name).type
    leaf = list_type.value_type
    if pa.types.is_int8(leaf):
        q, scale = quantize_int8(np.where(valid[:, None], values, 0))       # (n, D) int8, (n,) float32
        return {name: fixed_list_array(q, valid, list_type),
                scale_column(name): pa.array(scale, type=pa.float32(), mask=~valid)}
    if pa.types.is_uint8(leaf):                                            # (n, ceil(D / 8)) uint8
        return {name: fixed_list_array(pack_binary(values, (centers or {}).get(name)), valid, list_type)}
    return {name: fixed_list_array(values if valid.all() else np.where(valid[:, None], values, 0), valid, list_type)}


def token_vector_columns(schema: pa.Schema, items: list[np.ndarray | None],
                          centers: Mapping[str, np.ndarray | None] | None = None) -> dict[str, pa.Array]:
    """--level token: per document an (m, D) float32 array or None -> token_features in its schema form
    (and token_features_scale list<float32>, one scale per token, with int8)."""
    list_type = schema.field(TOKEN_FEATURES).type
    leaf = list_type.value_type.value_type
    if pa.types.is_int8(leaf):
        qs, scales = token_int8(items)
        return {TOKEN_FEATURES: list_array(qs, list_type),
                scale_column(TOKEN_FEATURES): list_array(scales, schema.field(scale_column(TOKEN_FEATURES)).type)}
    if pa.types.is_uint8(leaf):
        center = (centers or {}).get(TOKEN_FEATURES)
        return {TOKEN_FEATURES: list_array([pack_binary(x, center) if x is not None else None for x in items],
                                            list_type)}
    return {TOKEN_FEATURES: list_array(items, list_type)}


def token_int8(items: list[np.ndarray | None]) -> tuple[list, list]:
    """Per document its (m, D) int8 token vectors and (m,) float32 scales (quantize_int8), or None twice.
    Where the documents' float32 vectors tile one array (the token aggregate's, tiled_buffer), it is
    quantized at once into one int8 array, and each document gets views of it and of the scales: the
    Arrow columns then take those arrays without a copy (list_array), so the int8 form adds a quarter of
    the float32 vectors' bytes, not one per-document copy and a flat copy besides."""
    base = tiled_buffer(items, np.dtype(np.float32))
    present = [x for x in items if x is not None]
    if base is None or not present or present[0].ndim != 2:
        pairs = [quantize_int8(x) if x is not None else (None, None) for x in items]
        return [q for q, _ in pairs], [s for _, s in pairs]
    q, scale = quantize_int8(base.reshape(-1, present[0].shape[1]))                 # (tokens, D) int8, (tokens,)
    qs, scales, at = [], [], 0
    for x in items:
        if x is None:
            qs.append(None)
            scales.append(None)
            continue
        qs.append(q[at:at + len(x)])
        scales.append(scale[at:at + len(x)])
        at += len(x)
    return qs, scales
