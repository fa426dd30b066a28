"""The heap given back to the OS once per block (glibc's malloc_trim), which every engine's block loop calls."""
from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _malloc_trim():
    """glibc's malloc_trim, or None (another C library: musl, macOS, Windows)."""
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


def release_free_heap() -> None:
    """Give freed heap pages back to the OS once per block: glibc ``malloc_trim(0)`` (malloc_trim(3)).

    Why: after torch frees its large activation buffers, glibc raises its dynamic mmap threshold and
    serves later ones from the heap, which then fragments; peak RSS crept up with the number of blocks
    (1,440 MB after 3,000 documents against 1,248 MB with this call, default model, 256-row blocks).
    A no-op where the C library is not glibc.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
