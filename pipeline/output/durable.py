"""Files that reach the disk before they are trusted, and write failures named by their real cause.

The method is the usual one for crash-safe renames (as in SQLite's and git's): fsync the new file,
rename it into place, then fsync the folder so that the rename itself survives a power loss.
"""
from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from ..errors import RunError


def fsync_file(path: Path) -> None:
    """Flush ``path``'s bytes to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Flush a folder's entries (renames, new and removed files) to the disk; a no-op where the system
    cannot fsync a folder."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as err:
        if err.errno not in (errno.EINVAL, errno.EBADF, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def replace_durably(tmp: Path, target: Path) -> None:
    """fsync ``tmp``, rename it onto ``target`` (replacing it), fsync the folder."""
    fsync_file(tmp)
    os.replace(tmp, target)
    fsync_dir(target.parent)


def place_durably(tmp: Path, target: Path) -> bool:
    """fsync ``tmp`` and move it to ``target`` only if nothing is there (a hard link is atomic: no other
    writer can slip in between the check and the move); returns False, leaving ``tmp``, when ``target``
    exists. On a file system without hard links: the check, then a rename."""
    fsync_file(tmp)
    try:
        os.link(tmp, target)
    except FileExistsError:
        return False
    except OSError as err:
        if err.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        if target.exists():
            return False
        os.replace(tmp, target)
    else:
        os.unlink(tmp)
    fsync_dir(target.parent)
    return True


def os_cause(err: OSError, part_way: bool = True) -> str:
    """The cause of an OSError in words, with what to do about it.

    ``part_way``: the run was writing (a missing folder was then removed or unmounted meanwhile);
    False for the check before the run, where a folder that takes no new file is not "gone".

    Example: ENOSPC -> 'no space left on the device: free space or pick another --output'.
    """
    code = err.errno
    what = err.strerror or str(err)
    if code in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
        return f"{what}: no space left on the device; free space or pick another --output"
    if code == errno.ENOENT and not part_way:
        return f"{what}: files cannot be created there; pick another --output"
    if code == errno.ENOENT:
        return f"{what}: the folder is gone (removed or unmounted while the run went on); restore it or pick another --output"
    if code in (errno.EACCES, errno.EPERM):
        return f"{what}: no permission to write there; make the folder writable or pick another --output"
    if code == errno.EROFS:
        return f"{what}: the file system is read-only; pick another --output"
    return f"{what}; pick another --output"


def write_failure(err: OSError, output: Path | str, is_directory: bool) -> RunError:
    """The RunError (exit 1) of a write that failed part-way, naming the real cause (os_cause)."""
    kept = "; its finished parts are kept for --resume" if is_directory else ""
    where = f" ({err.filename})" if err.filename else ""
    return RunError(f"writing {output} failed{where}: {os_cause(err)}{kept}")


def remove_stale_partials(path: Path) -> None:
    """Remove ``.NAME.PID.partial`` files or folders beside ``path`` left by a killed run (its PID is
    gone); those of a run still alive are kept."""
    prefix = f".{path.name}."
    for stale in path.parent.glob(f"{prefix}*.partial"):
        pid = stale.name[len(prefix):-len(".partial")]
        if not pid.isdigit() or process_alive(int(pid)):
            continue
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)


def process_alive(pid: int) -> bool:
    """Whether a process of id ``pid`` runs on this machine (one we may not signal counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
