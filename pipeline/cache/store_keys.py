"""The window store's keys, built here and nowhere else: which weights, computed how, pooled how
(``vector_key``, ``token_layer_key``), and the window's exact token ids (``window_key``); and the checksum
that ties a stored vector to its key. Pure functions, no database; called by pipeline.model.window_cache
and the stores (pipeline.cache.store, token_store).
"""
from __future__ import annotations

import hashlib
import json
import zlib

from collections.abc import Sequence

import numpy as np

KEY_FORMAT = "longbert-window-v1"


def pool_key(model_sha256: str, dtype: str, quantize: str, pooling_key: str) -> str:
    """The key of one kind of window vector: which weights, computed how, pooled how.

    Args:
        model_sha256: the sha256 of the weight files (ModelFacts.sha256, as the metadata records).
        dtype: the compute dtype ("float32", "float16", "bfloat16"); quantize: "none", or "int8-w127" / "int8-w63"
            (pipeline.model.int8.quantize_label: the weight levels change the vectors).
        pooling_key: an opaque string the CALLER builds from everything else that changes a window's
            vector: the pooling, its layers and layer_agg (of each pool when vectors are concatenated).
            Two different poolings must give two different strings; the store never parses it.

    Returns:
        64 hex characters (sha256 of the four values as JSON).

    Raises:
        ValueError: model_sha256 is empty (a model without hashable weight files cannot be cached).
    """
    if not model_sha256:
        raise ValueError("pool_key needs the model's sha256; a model whose weights were not hashed cannot be cached")
    payload = json.dumps([KEY_FORMAT, model_sha256, dtype, quantize, pooling_key])
    return hashlib.sha256(payload.encode()).hexdigest()


def positive_layers(layers: Sequence[int], n_layers: int) -> list[int]:
    """Hidden-state indices made positive: -1 of a 6-layer model is 6 (0 is the embeddings).
    Example: (-2, 0), 6 -> [5, 0]."""
    return [x if x >= 0 else n_layers + 1 + x for x in layers]


def pooling_key(pooling: str, layers: Sequence[int], layer_agg: str, n_layers: int,
                prompt: dict | None = None) -> str:
    """The part of a pool key that says how a window becomes its vector: pooling, layers, layer_agg, and
    the prompt the windows begin with.

    Layers are made positive, so the same hidden state gets one key whichever way it was named; with
    one layer, layer_agg changes nothing and is left out. ``prompt``: pipeline.model.prompts.prompt_metadata
    (its text and include_prompt are added: with include_prompt false the same ids pool other positions);
    None adds nothing, so keys without a prompt are those of earlier versions.
    Example: "mean", (-2,), "mean", 6 layers -> '["mean", [5], null]'.
    """
    chosen = positive_layers(layers, n_layers)
    key: list = [pooling, chosen, layer_agg if len(chosen) > 1 else None]
    if prompt is not None:
        key.append({"prompt": prompt["text"], "include_prompt": prompt["include_prompt"]})
    return json.dumps(key)


def vector_key(model_sha256: str, dtype: str, quantize: str, pooling: str, layers: Sequence[int],
               layer_agg: str, n_layers: int, prompt: dict | None = None) -> str:
    """The pool key of one pooled window vector of a run (``pool_key`` of its ``pooling_key``).

    Args:
        model_sha256, dtype, quantize: as ``pool_key`` (quantize already the label, e.g. "int8-w63").
        pooling, layers, layer_agg: the vector's pooling (PoolConfig's fields). n_layers: the model's layers.
        prompt: the prompt applied (pipeline.model.prompts.prompt_metadata), or None.

    Returns:
        64 hex characters. Raises ValueError: as ``pool_key`` (no sha256).
    """
    return pool_key(model_sha256, dtype, quantize, pooling_key(pooling, layers, layer_agg, n_layers, prompt))


def token_layer_key(model_sha256: str, dtype: str, quantize: str, layer: int) -> str:
    """The pool key of one hidden layer's per-token vectors (what a late feature reads), ``layer`` >= 0.

    Returns:
        64 hex characters: ``pool_key`` of '["tokens", layer]'. Raises ValueError: as ``pool_key``.
    """
    return pool_key(model_sha256, dtype, quantize, json.dumps(["tokens", int(layer)]))


def _ids_bytes(ids) -> bytes | memoryview:
    arr = np.asarray(ids)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise TypeError(f"window ids must be a 1-D integer array, got {arr.dtype} of shape {arr.shape}")
    return memoryview(np.ascontiguousarray(arr, dtype="<i8")).cast("B")  # int64 LE: Window.input_ids as is


def window_key(pool: str, ids) -> bytes:
    """The 32-byte row key of one window: sha256(pool key + its token ids as little-endian int64).

    ``ids`` is the window's exact model input (Window.input_ids, [CLS] ... [SEP]), any integer dtype.
    The pool key has a fixed length (64), so no two (pool, ids) pairs give the same bytes to hash.
    """
    h = hashlib.sha256(pool.encode())
    h.update(_ids_bytes(ids))
    return h.digest()


def window_keys(pool: str, ids_list: list) -> list[bytes]:
    """``window_key`` of each window, in order."""
    return [window_key(pool, ids) for ids in ids_list]


def checksum(key: bytes, vector: bytes) -> int:
    """CRC-32 of the row key then the vector bytes: catches a damaged vector and a vector moved to another key."""
    return zlib.crc32(vector, zlib.crc32(key))


def verifies(key: bytes, row: tuple, dim: int) -> bool:
    """A stored (dim, checksum, vector bytes) row is usable: ``dim`` float32 values and an intact CRC-32.
    Example: a row whose vector was cut, or moved to another key, does not verify."""
    got_dim, crc, vector = row
    return (got_dim == dim and isinstance(vector, bytes) and len(vector) == 4 * dim
            and crc == checksum(key, vector))
