"""The window store's SQLite file (pipeline.cache.store): the folder check, the connection and its
settings, the schema, the checkpoint that folds the write-ahead log in, and SQLite's failures as the
run's errors."""
from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from ..errors import ConfigError, RunError

DB_NAME = "windows.sqlite3"
APPLICATION_ID = 0x4C425753    # 'LBWS' in the database header: the file is a longbert window store
SCHEMA_VERSION = 1             # PRAGMA user_version; a newer one is refused (ConfigError)
BUSY_TIMEOUT_S = 60.0          # how long a writer waits for another process's write lock
PAGE_SIZE = 32768  # a 1.6 KB (384-d) or 6.2 KB (1536-d) row packs 20 or 5 to a page: 1.11x / 1.08x raw float32
CHECKPOINT_WAIT_MS = 2000  # close waits this long for another process's write; that one folds the log in itself


def folder_error(folder: Path, problem: str) -> ConfigError:
    return ConfigError(f"--cache {folder}: {problem}; pass --cache a writable folder (the store is DIR/{DB_NAME})")


def check_folder(folder: Path) -> Path:
    """Create ``folder`` if needed; ConfigError when it is a file or cannot be written."""
    if folder.exists() and not folder.is_dir():
        raise folder_error(folder, "not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise folder_error(folder, f"cannot create the folder ({err.strerror})") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise folder_error(folder, "the folder is not writable")
    return folder / DB_NAME


def clear_hint(db_file: Path | None) -> str:
    folder = db_file.parent if db_file is not None else "DIR"
    return f"empty it with `longbert cache {folder} --clear`, or pass --cache another folder"


class NotAStore(ConfigError):
    """DIR/windows.sqlite3 is not a readable store of ours (foreign, damaged, newer): ``clear_store`` deletes it."""


class StoreDamaged(RunError):
    """SQLite found the file damaged after it opened (a page unreadable): ``clear_store`` deletes it."""


def open_error(db_file: Path | None, err: sqlite3.Error, timeout: float) -> ConfigError:
    """A SQLite failure while opening, as a ConfigError (exit 2: nothing ran yet)."""
    name = getattr(err, "sqlite_errorname", "") or ""
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return ConfigError(str(run_error(db_file, err, timeout)))
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
        return NotAStore(f"{db_file} cannot be read as a window store ({err}); {clear_hint(db_file)}")
    return ConfigError(f"{db_file} cannot be opened as a window store ({err}); pass --cache a writable folder")


def run_error(db_file: Path | None, err: sqlite3.Error, timeout: float) -> RunError:
    """A SQLite failure after the store opened, as the run's error (exit 1)."""
    name = getattr(err, "sqlite_errorname", "") or ""
    where = db_file if db_file is not None else "the in-memory window store"
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return RunError(f"{where}: another process held the store's write lock for over {timeout:g} s ({err}); "
                        "run again when it is done, or pass --cache another folder")
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
        return StoreDamaged(f"{where} is damaged ({err}); {clear_hint(db_file)}")
    return RunError(f"{where}: the window store failed ({err}); free disk space or pass --cache another folder")


_SCHEMA = (
    # one row per pool key: what the caller registered (a human label, the vector length) and the counters
    "CREATE TABLE models (id INTEGER PRIMARY KEY, pool_key TEXT NOT NULL UNIQUE, label TEXT NOT NULL, "
    "dim INTEGER NOT NULL, lookups INTEGER NOT NULL DEFAULT 0, hits INTEGER NOT NULL DEFAULT 0, "
    "rejected INTEGER NOT NULL DEFAULT 0)",
    "CREATE TABLE windows (key BLOB PRIMARY KEY, model INTEGER NOT NULL, dim INTEGER NOT NULL, "
    "checksum INTEGER NOT NULL, vector BLOB NOT NULL)",
    # entries per model without reading the vectors: 15x faster stats() for 0.6% more bytes
    "CREATE INDEX windows_model ON windows (model)",
)


def connect(db_file: Path | None, timeout: float) -> sqlite3.Connection:
    """Open and configure a connection: autocommit (we BEGIN ourselves), WAL, NORMAL sync, busy timeout."""
    target = str(db_file) if db_file is not None else ":memory:"
    conn = sqlite3.connect(target, timeout=timeout, isolation_level=None, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")                 # only takes effect in a new file
        if db_file is not None:
            set_wal(conn, timeout)                                   # persistent in the file; first statement
            conn.execute("PRAGMA synchronous = NORMAL")              # per connection
            conn.execute("PRAGMA journal_size_limit = 67108864")     # truncate the WAL to 64 MiB after checkpoints
        init_schema(conn, db_file)
    except BaseException:
        conn.close()
        raise
    return conn


def set_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """``PRAGMA journal_mode = WAL``, retried for up to ``timeout`` s while another process holds a lock.

    SQLite does not call the busy handler for this pragma: a new store's file, still in rollback mode
    while another process creates its tables, answers SQLITE_BUSY at once (two runs started together
    on one new --cache folder). Raises sqlite3.OperationalError (SQLITE_BUSY) when the lock stays taken.
    """
    deadline, pause = time.monotonic() + timeout, 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL").fetchone()
            return
        except sqlite3.OperationalError as err:
            busy = (getattr(err, "sqlite_errorname", "") or "").startswith("SQLITE_BUSY")
            if not busy or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def init_schema(conn: sqlite3.Connection, db_file: Path | None) -> None:
    """Create the tables in a new database, or check that an existing one is a store of ours."""
    conn.execute("BEGIN IMMEDIATE")  # two processes creating one store at once: the second sees the first's
    try:
        if not check_schema(conn, db_file):
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def check_schema(conn: sqlite3.Connection, db_file: Path | None) -> bool:
    """True when the database is a store of ours, False when it is empty (no tables: a new store).

    Raises:
        NotAStore: another program's database, a newer store version, or tables missing.
    """
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    if app_id == 0 and not tables:
        return False
    if app_id != APPLICATION_ID:
        raise NotAStore(f"{db_file} is not a longbert window store (an SQLite database of something "
                        f"else); {clear_hint(db_file)} (--clear deletes that file)")
    if version > SCHEMA_VERSION:
        raise NotAStore(f"{db_file} was written by a newer longbert (store version {version}; this one "
                        f"reads {SCHEMA_VERSION}); upgrade longbert, or {clear_hint(db_file)}")
    if not {"models", "windows"} <= tables:
        raise NotAStore(f"{db_file} is a damaged window store (tables missing); {clear_hint(db_file)}")
    return True


def open_file(folder: Path | None, timeout: float) -> tuple[sqlite3.Connection, Path | None, bool]:
    """(connection, database file, read-only) of the store in ``folder`` (None: a new in-memory store): a
    store this process cannot write (``writable``: a read-only mount, a backup) opened read-only
    (``connect_read_only``), else the folder made if needed and the store opened, or created, for writing.

    Raises:
        ConfigError: as check_folder and open_error. NotAStore: as check_schema.
    """
    db_file = None if folder is None else folder / DB_NAME
    read_only = db_file is not None and db_file.is_file() and not writable(db_file)
    if db_file is not None and not read_only:
        db_file = check_folder(folder)
    try:
        conn = connect_read_only(db_file, timeout) if read_only else connect(db_file, timeout)
    except sqlite3.Error as err:
        raise open_error(db_file, err, timeout) from None
    return conn, db_file, read_only


def read_only_error(db_file: Path) -> ConfigError:
    """What a write that a read-only store cannot make (``longbert cache DIR --clear``) raises."""
    return ConfigError(f"{db_file} is read-only here (a read-only mount, or a file or folder without write "
                       "permission): it cannot be cleared; make it writable, or delete the folder")


def writable(db_file: Path) -> bool:
    """Whether this process may write the store file ``db_file`` and its folder (where SQLite puts its -wal
    and -shm files): False on a read-only mount, or for a file or folder without write permission."""
    folder_ok = os.access(db_file.parent, os.W_OK | os.X_OK)
    return folder_ok and (not db_file.exists() or os.access(db_file, os.W_OK))


def connect_read_only(db_file: Path, timeout: float) -> sqlite3.Connection:
    """A connection that only reads ``db_file`` and writes nothing beside it (no -wal or -shm file, no lock):
    SQLite's ``mode=ro&immutable=1``. It reads the database file alone, as ``close`` leaves it at rest (the
    log folded in); windows still in another process's -wal file are not seen.

    Raises:
        sqlite3.Error: the file cannot be read. NotAStore: as check_schema, or an empty file.
    """
    uri = f"{db_file.resolve().as_uri()}?mode=ro&immutable=1"
    conn = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None, check_same_thread=False)
    try:
        if not check_schema(conn, db_file):
            raise NotAStore(f"{db_file} is an empty database, not a window store, and read-only here; pass --cache "
                            "a folder with a store, or a writable folder")
    except BaseException:
        conn.close()
        raise
    return conn


def checkpoint(conn: sqlite3.Connection, timeout: float) -> bool:
    """``PRAGMA wal_checkpoint(TRUNCATE)`` on ``conn``, waiting at most CHECKPOINT_WAIT_MS for other
    processes (then ``timeout`` s again); True when the whole log is in the database file and emptied."""
    conn.execute(f"PRAGMA busy_timeout = {CHECKPOINT_WAIT_MS}")
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
    return busy == 0
