"""reuse_freed_memory: a freed 64 MiB block stays in the process (glibc), where by default it goes back to
the kernel; the command line sets it before any forward pass."""
from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from pipeline.model.host_memory import reuse_freed_memory

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]

# Resident pages of this process before and after freeing a 64 MiB array whose pages were all touched:
# by default glibc mmaps a block that size and unmaps it on free (the resident size falls by ~64 MiB).
PROBE = """
import os, sys
sys.path.insert(0, {root!r})
if sys.argv[1] == "reuse":
    from pipeline.model.host_memory import reuse_freed_memory
    assert reuse_freed_memory()
import numpy as np
page = os.sysconf("SC_PAGE_SIZE")
rss = lambda: int(open("/proc/self/statm").read().split()[1]) * page
a = np.ones(64 << 17)          # 64 MiB of float64, every page written
held = rss()
del a
print(held - rss())
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc malloc only")
@pytest.mark.parametrize("mode", ["default", "reuse"])
def test_a_freed_block_stays_in_the_process_only_after_the_call(mode):
    out = subprocess.run([sys.executable, "-c", PROBE.format(root=str(ROOT)), mode], capture_output=True, text=True,
                         check=True, timeout=120)
    released = int(out.stdout)
    if mode == "default":
        assert released >= 60 << 20, released          # handed back to the kernel at once
    else:
        assert released < 4 << 20, released            # kept for the next allocation


def test_later_calls_do_nothing_and_say_the_same():
    first = reuse_freed_memory()
    assert reuse_freed_memory() is first
    assert first is (platform.system() == "Linux" and platform.libc_ver()[0] == "glibc")
