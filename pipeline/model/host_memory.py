"""``reuse_freed_memory``: glibc's malloc told to keep the forward pass's large freed blocks for reuse.

Why: by default glibc serves every allocation above its mmap threshold (128 KiB, adjusted upwards to at
most 32 MiB) with a fresh ``mmap`` and returns it to the kernel on ``free``, and trims the heap's top
above 128 KiB. A BERT forward pass on a CPU allocates and frees activations of tens of MiB per layer
(16 windows of 512 tokens x 1,536 float32 values is 50 MiB), so every batch pays page faults and zeroing
for memory it just gave back. Raising both thresholds keeps those blocks in the process: on 240 man
pages (``extract --strategy head``, 2-core Intel Xeon with AMX) the kernel's share of the run fell from
4.5 to 0.8 CPU s in float32 and 2.4 to 0.7 in bfloat16, and the whole ``extract`` took 14.4 s instead of
16.7 s (float32) and 7.5 s instead of 8.6 s (bfloat16), for about 100 MiB more peak memory
(docs/performance.md). PyTorch's performance tuning guide makes the same point for CPU inference
("Switch Memory allocator"). The vectors are not touched: only where freed memory goes changes.

The setting is process-wide, so the library never makes it on its own: the ``longbert`` commands and the
Ray engine's workers call it; a Python user calls ``longbert.reuse_freed_memory()`` once.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3          # mallopt(3) parameter numbers (glibc malloc.h)
MMAP_THRESHOLD = 256 << 20   # allocations below 256 MiB come from the heap (glibc's default: <= 32 MiB, dynamic)
TRIM_THRESHOLD = 1 << 30     # up to 1 GiB of free memory at the heap's top is kept, not handed back


@functools.lru_cache(maxsize=None)
def reuse_freed_memory() -> bool:
    """Raise glibc malloc's mmap threshold to 256 MiB and its trim threshold to 1 GiB, once per process.

    Effect: freed blocks below 256 MiB stay in the process and serve the next batch's tensors; the
    process's resident memory stays near its peak instead of falling between batches. Call it before
    the first forward pass (the ``longbert`` commands do); later calls do nothing.

    Returns:
        True when both were set; False where the C library is not glibc (macOS, musl, Windows) or
        refused a value: nothing is changed there, and nothing is raised.

    Source: mallopt(3) (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD); PyTorch's CPU performance tuning guide.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        gnu_get_libc_version = libc.gnu_get_libc_version   # glibc only: musl has mallopt that does nothing
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    del gnu_get_libc_version
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    # the mmap threshold first: set alone, the trim threshold makes every large free a heap trim
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
