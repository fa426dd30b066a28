"""Compact vectors: int8 with one scale per vector, and binary (sign) vectors packed 8 to a byte.

int8 is computed from one vector alone. binary takes the signs of x - centre, where the centre is the
per-dimension mean of the first ``CALIBRATION_DOCS`` documents' vectors (``binary_center``): computed
once before the first row is written and stored in the file's metadata, so a vector's bytes never
depend on rows not yet read and are the same after --resume and across Ray workers. Without the
centre, a pooled feature whose dimensions keep one sign in nearly every document (max pooling, a
concatenated aggregate) keeps almost nothing in its signs. The numbers only, no Arrow and no config:
the writers, ``load_features`` and probe's compact rows all call these.

Method: symmetric absmax scalar quantization per vector (as in LLM.int8, Dettmers et al., 2022, per
row), and sign binarization as in sentence-transformers' ``quantize_embeddings(precision="ubinary")``,
after centring with a calibration mean as its ``calibration_embeddings`` do for int8.
"""
from __future__ import annotations

import numpy as np

INT8_LEVELS = 127  # q in [-127, 127]; -128 is never written, so the form is symmetric
CALIBRATION_DOCS = 64  # binary: the first documents whose mean vector is the centre of the signs


def quantize_int8(x: np.ndarray, rows: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """(n, d) float -> ((n, d) int8, (n,) float32 scale), with x ~= q * scale[:, None].

    scale = max|x| / 127 per vector (0 for an all-zero vector, whose q is all 0); q = round(x / scale).
    Example: [[0.5, -1.0, 0.25]] -> q [[64, -127, 32]], scale [1/127].

    Memory: beside x and q, one float32 buffer of ``rows`` vectors at a time (x / scale is rounded and
    clipped in it), never a float copy of all of x: a piece's per-token vectors are quantized in place
    of the float32 output they replace (pipeline.output.rows).

    Raises:
        ValueError: x is not 2-D or holds a value that is not finite.
    """
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError(f"quantize_int8 takes (n, d) vectors; got shape {x.shape}")
    n, d = x.shape
    q = np.empty((n, d), dtype=np.int8)
    scale = np.zeros(n, dtype=np.float32)
    work = np.empty((min(rows, n), d), dtype=np.float32)
    for lo in range(0, n, rows):
        part, hi = x[lo:lo + rows], min(lo + rows, n)
        if d:
            top, low = part.max(axis=1), part.min(axis=1)                                   # (r,)
            if not (np.isfinite(top).all() and np.isfinite(low).all()):   # a NaN or inf makes the max or min one
                raise ValueError("quantize_int8: a vector holds a value that is not finite")
            scale[lo:hi] = np.maximum(top, -low) / np.float32(INT8_LEVELS)                 # (r,)
        safe = np.where(scale[lo:hi] > 0, scale[lo:hi], 1.0).astype(np.float32)            # (r,)
        tmp = work[:hi - lo]
        np.divide(part, safe[:, None], out=tmp)                                              # (r, d)
        np.rint(tmp, out=tmp)
        np.clip(tmp, -INT8_LEVELS, INT8_LEVELS, out=tmp)
        q[lo:hi] = tmp                                                                       # (r, d) int8
    return q, scale


def dequantize_int8(q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """((n, d) int8, (n,) float scale) -> (n, d) float32 q * scale; the inverse of ``quantize_int8``
    within scale / 2 per value."""
    return np.asarray(q, dtype=np.float32) * np.asarray(scale, dtype=np.float32)[:, None]


def pack_binary(x: np.ndarray, center: np.ndarray | None = None) -> np.ndarray:
    """(n, d) float -> (n, ceil(d / 8)) uint8: bit 1 where x > center (a (d,) float32 centre, or 0
    when None), big-endian within a byte (numpy's ``packbits``; the last byte is zero-padded when d is
    not a multiple of 8). The comparison is in float32.
    Example: [[0.3, -0.1, 0.0, 2.0, -1, -1, -1, 1]] -> [[0b10010001]] = [[145]].

    Raises:
        ValueError: x is not 2-D, or the centre is not (d,).
    """
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"pack_binary takes (n, d) vectors; got shape {x.shape}")
    if center is None:
        return np.packbits(x > 0, axis=1)
    center = np.asarray(center, dtype=np.float32)
    if center.shape != (x.shape[1],):
        raise ValueError(f"pack_binary: the centre has shape {center.shape}; the vectors have {x.shape[1]} dimensions")
    return np.packbits(x.astype(np.float32, copy=False) > center, axis=1)


def binary_center(x: np.ndarray) -> np.ndarray:
    """(n, d) float vectors -> (d,) float32: their per-dimension mean over the rows that are finite,
    the centre whose signs ``pack_binary`` keeps (zeros when no row is finite)."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError(f"binary_center takes (n, d) vectors; got shape {x.shape}")
    finite = x[np.isfinite(x).all(axis=1)]
    if not len(finite):
        return np.zeros(x.shape[1], np.float32)
    return finite.astype(np.float64).mean(axis=0).astype(np.float32)


def unpack_binary(bits: np.ndarray, dim: int) -> np.ndarray:
    """((n, ceil(dim / 8)) uint8, dim) -> (n, dim) float32 of +1 (bit set) and -1 (bit clear)."""
    signs = np.unpackbits(np.asarray(bits, dtype=np.uint8), axis=1, count=dim)  # (n, dim) 0/1
    return signs.astype(np.float32) * 2.0 - 1.0


def bytes_per_vector(dim: int, form: str) -> int:
    """Stored bytes of one vector of ``dim`` values: float32 4 x dim, float16 2 x dim, int8 dim + 4
    (its float32 scale), binary ceil(dim / 8).

    Raises:
        ValueError: ``form`` is not one of float32, float16, int8, binary.
    """
    sizes = {"float32": 4 * dim, "float16": 2 * dim, "int8": dim + 4, "binary": -(-dim // 8)}
    if form not in sizes:
        raise ValueError(f"form={form!r}; choose one of {tuple(sizes)}")
    return sizes[form]
