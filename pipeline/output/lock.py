"""One writer per output: the output location check and the lock a run holds on its output path from
its start to its end (both engines: ``holds_output`` wraps pipeline.engine.local.run and pipeline.engine.ray_engine.run).

The lock of a local output is ``fcntl.flock`` on a hidden file beside the output (``.NAME.longbert-lock``),
which holds the holder's process id, host and start time as JSON. The kernel drops a flock when its process dies,
so a lock left by a killed run is free: the next run takes it over and says whose it was. (filelock's
UnixFileLock truncates the file when it opens it, which would erase the holder's identity before the
lock is tried, so the few lines of flock are written here.)

The lock of an object-storage output (``s3://BUCKET/PREFIX/``) is the object ``PREFIX/.longbert-lock``,
created by a conditional put (If-None-Match: *: of two runs that race, one gets it). Nothing drops it
when its holder dies, so the holder renews it every LOCK_RENEW seconds, and a lock is free to take over
when its holder's process is gone (same host) or it was last renewed more than LOCK_STALE seconds ago.
A renewal replaces the lock only if it is still the version the holder read (If-Match), so a holder
that was taken over never writes over the new holder's lock.
"""
from __future__ import annotations

import errno
import fcntl
import functools
import json
import os
import socket
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ..options.config import PipelineConfig
from ..errors import ConfigError
from .durable import os_cause, process_alive
from .manifest import LOCK
from .places import Prefix, is_uri, place_of
from .spare_inputs import check_run_spares_inputs, lock_path
from .write import check_output

LOCK_RENEW = 60      # seconds between the renewals of an object-storage lock
LOCK_STALE = 600     # a lock not renewed for this long is a dead run's (its host unreachable from here)


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


@dataclass
class ObjectLock:
    """A held object-storage lock (``.longbert-lock`` under the prefix), renewed by a thread until
    ``release``; ``taken_over`` describes the dead run whose lock was taken over (None if none)."""

    place: Prefix
    holder: dict
    taken_over: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        """Renew the lock every LOCK_RENEW seconds until ``release`` (or until another run took it over)."""
        def renew():
            while not self._stop.wait(LOCK_RENEW):
                try:
                    data, e_tag = self.place.get_tagged(LOCK)
                    if json.loads(data).get("token") != self.holder["token"] or not self.place.put_if(
                            LOCK, json.dumps({**self.holder, "renewed": time.time()}).encode(), e_tag):
                        return   # taken over (this run looked dead): never write over the new holder's lock
                except Exception:  # noqa: BLE001 - a missed renewal: the next one tries again
                    pass
        self._thread = threading.Thread(target=renew, name="longbert-output-lock", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop renewing; delete the lock object if it is still ours."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)   # a renewal in flight finishes before the delete
        try:
            if json.loads(self.place.get(LOCK)).get("token") == self.holder["token"]:
                self.place.delete([LOCK])
        except Exception:  # noqa: BLE001 - gone or unreadable: nothing of ours to remove
            pass


def is_stale(holder: dict, now: float | None = None) -> bool:
    """An object-storage lock its holder no longer holds: its process is gone (holder on this host), or it
    was last renewed more than LOCK_STALE seconds ago. Example: {"host": this host, "pid": a dead pid} -> True."""
    now = time.time() if now is None else now
    if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
        return not process_alive(holder["pid"])
    return now - float(holder.get("renewed", holder.get("started", 0))) > LOCK_STALE


def acquire_object(place: Prefix) -> ObjectLock:
    """Take the lock of an object-storage output: a conditional put of ``.longbert-lock`` under its prefix;
    a stale lock (is_stale) is deleted and the put tried once more.

    Raises:
        ConfigError (exit 2): another run holds it (names its process id, host and start time), or the
            credentials may not write there (pipeline.storage.open_error).
    """
    me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(), "token": uuid.uuid4().hex}
    old = None
    for _ in range(3):
        if place.put_new(LOCK, json.dumps({**me, "renewed": me["started"]}).encode()):
            lock = ObjectLock(place, me, f"took over the lock of a run that ended without releasing it ({describe(old)})"
                              if old else None)
            lock.start()
            return lock
        try:
            holder = json.loads(place.get(LOCK))
        except FileNotFoundError:
            continue   # released between our put and our read: try again
        except ValueError:
            holder = {}
        if holder and not is_stale(holder):
            raise ConfigError(f"--output {place.location}/ is being written by another run ({describe(holder)}); "
                              f"wait for it to end, or pick another --output (a lock of a run that is gone is "
                              f"taken over {LOCK_STALE // 60} minutes after its last renewal)")
        old = holder or {"pid": "?", "host": "?"}
        try:   # S3 has no conditional delete: read it again, so that a lock another run just took is left alone
            if json.loads(place.get(LOCK)) != holder:
                continue
        except (FileNotFoundError, ValueError):
            pass
        place.delete([LOCK])
    raise ConfigError(f"--output {place.location}/: other runs keep taking its lock; pick another --output")


def claim_output(cfg: PipelineConfig) -> OutputLock | ObjectLock:
    """Before anything is read: no path the run writes is an input, then check the output location,
    take its lock, then the overwrite/resume rules.

    Raises:
        ConfigError (exit 2): as pipeline.output.spare_inputs.check_run_spares_inputs, check_location (an
            S3 output: Prefix.check, naming a missing bucket, refused or missing credentials, or an endpoint
            that does not answer), acquire (acquire_object) and pipeline.output.write.check_output.
    """
    check_run_spares_inputs(cfg)
    if is_uri(cfg.write.output):   # s3://BUCKET/PREFIX/: the endpoint, bucket and credentials checked, no local folder made
        place = place_of(cfg.write.output)
        place.check()
        lock = acquire_object(place)
    else:
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
