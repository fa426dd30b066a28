"""One writer per output: the output location check and the lock a run holds on its output path from
its start to its end (both engines: ``holds_output`` wraps pipeline.engine.local.run and pipeline.engine.ray_engine.run).

The lock is ``fcntl.flock`` on a hidden file beside the output (``.NAME.longbert-lock``), which holds
the holder's process id, host and start time as JSON. The kernel drops a flock when its process dies,
so a lock left by a killed run is free: the next run takes it over and says whose it was. (filelock's
UnixFileLock truncates the file when it opens it, which would erase the holder's identity before the
lock is tried, so the few lines of flock are written here.)
"""
from __future__ import annotations

import errno
import fcntl
import functools
import json
import os
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..options.config import PipelineConfig
from ..errors import ConfigError
from .durable import os_cause
from .spare_inputs import check_run_spares_inputs, lock_path
from .write import check_output


def describe(holder: dict) -> str:
    """'process 4242 on host gpu1, started 2026-12-01 10:40:00 UTC' (what a lock file says)."""
    if not holder:
        return "a process that has not yet written its name"
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(holder.get("started", 0)))
    return f"process {holder.get('pid', '?')} on host {holder.get('host', '?')}, started {started}"


def _read_holder(fd: int) -> dict:
    try:
        data = os.pread(fd, 4096, 0)
        return json.loads(data) if data.strip() else {}
    except (OSError, ValueError):
        return {}


@dataclass
class OutputLock:
    """A held lock; ``taken_over`` describes the dead run whose lock was taken over (None if none)."""

    path: Path
    fd: int
    taken_over: str | None = None

    def release(self) -> None:
        """Remove the lock file (only if it is still ours) and drop the lock."""
        try:
            if os.stat(self.path).st_ino == os.fstat(self.fd).st_ino:
                os.unlink(self.path)
        except OSError:
            pass
        os.close(self.fd)


def acquire(output: Path) -> OutputLock:
    """Take the lock of ``output`` without waiting.

    Raises:
        ConfigError (exit 2): another run holds it (names its process id, host and start time), or the
            lock file cannot be created (names the cause).
    """
    path = lock_path(output)
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise ConfigError(f"--output {str(output)!r}: cannot create {path.name} in {path.parent} "
                              f"({os_cause(err)})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise ConfigError(f"--output {str(output)!r} is being written by another run ({describe(holder)}); "
                              "wait for it to end, or pick another --output") from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed the file between our open and our lock: try the new one
    old = _read_holder(fd)
    me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(me).encode(), 0)
    note = None
    if old:
        note = f"took over the lock of a run that ended without releasing it ({describe(old)})"
    return OutputLock(path, fd, note)


def check_location(output: Path, is_directory: bool) -> None:
    """The output's folder exists (missing parents are created) and takes a new file: one is created and
    removed there (in DIR itself for an existing DIR/ output).

    Raises:
        ConfigError (exit 2): the folder cannot be created or written, naming it and the cause.
    """
    folder = output if is_directory and output.is_dir() else output.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"--output {str(output)!r}: cannot create the folder {folder}: "
                          f"{os_cause(err, part_way=False)}") from None
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".probe", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        if err.errno == errno.ENOTDIR:
            raise ConfigError(f"--output {str(output)!r}: {folder} is not a folder; pick another --output") from None
        raise ConfigError(f"--output {str(output)!r}: cannot write in {folder}: {os_cause(err, part_way=False)}"
                          ) from None


def claim_output(cfg: PipelineConfig) -> OutputLock:
    """Before anything is read: no path the run writes is an input, then check the output location,
    take its lock, then the overwrite/resume rules.

    Raises:
        ConfigError (exit 2): as pipeline.output.spare_inputs.check_run_spares_inputs, check_location,
            acquire and pipeline.output.write.check_output.
    """
    check_run_spares_inputs(cfg)
    out = Path(cfg.write.output)
    check_location(out, cfg.write.is_directory)
    lock = acquire(out)
    try:
        check_output(cfg)
    except BaseException:
        lock.release()
        raise
    return lock


def holds_output(run):
    """Decorate an engine's ``run(cfg, echo, **engine_args)``: the output is claimed (claim_output) before the run reads
    any input or model file, and released when it ends, however it ends, after the window store is left as
    one file (pipeline.cache.store.close_stores); a taken-over lock is echoed and added to the summary's notes."""
    @functools.wraps(run)
    def wrapper(cfg: PipelineConfig, echo=None, **engine_args):
        from ..cache.store import close_stores

        lock = claim_output(cfg)
        try:
            if lock.taken_over and echo:
                echo(f"note: {lock.taken_over}")
            summary = run(cfg, echo, **engine_args)
        finally:
            try:
                close_stores(cfg.write.cache)
            finally:
                lock.release()
        if lock.taken_over:
            summary.notes.append(lock.taken_over)
        return summary
    return wrapper
