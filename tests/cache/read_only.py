"""Run a command with a folder read-only, as a store on a read-only mount or a backup is: a read-only bind
mount in a user namespace (``unshare -rm``) when the tests run as root (root writes through any file mode),
else the folder and its files made read-only with chmod. A test is skipped where neither can be done."""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

_MOUNT = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_read_only(folder: Path, argv: list[str], **kw) -> subprocess.CompletedProcess:
    """``argv`` run with ``folder`` read-only (text output captured; ``kw`` to subprocess.run)."""
    kw = {"capture_output": True, "text": True, "timeout": 600, **kw}
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in [folder, *folder.iterdir()]}
        for p, mode in modes.items():
            p.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        try:
            return subprocess.run(argv, **kw)
        finally:
            for p, mode in modes.items():
                p.chmod(mode)
    if shutil.which("unshare") is None:
        pytest.skip("as root a read-only folder needs a read-only mount: no unshare here")
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", _MOUNT, "sh", str(folder), "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"as root a read-only folder needs a read-only mount: {probe.stderr.decode().strip()}")
    return subprocess.run(["unshare", "-rm", "sh", "-c", _MOUNT, "sh", str(folder), *argv], **kw)
