"""The window store (pipeline.cache.store): exact round trips, rejected entries, SIGKILL, two processes, stats, errors.

Vectors are made from the window ids alone (``expected_vector``), so any process, before or after a
kill, knows what every entry must hold. Subprocesses import this module for those helpers.
"""
from __future__ import annotations

import hashlib
import multiprocessing
import os
import pickle
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pipeline.errors import ConfigError, RunError
from pipeline.options.paths import default_cache
from pipeline.cache.store import DB_NAME, NotAStore, StoreDamaged, WindowStore
from pipeline.cache.store_keys import checksum, pool_key, window_key
from pipeline.cache.store_report import clear_store, format_stats

REPO = Path(__file__).resolve().parents[2]
DIM = 384
BLOCK = 64  # windows per put_many, as a block of a run


def block_ids(run: int, block: int, n: int = BLOCK) -> list[np.ndarray]:
    """n windows of 3..512 token ids (int64, [CLS]=101 first, [SEP]=102 last), fixed by (run, block, i)."""
    rng = np.random.default_rng([run, block])
    lengths = rng.integers(1, 511, BLOCK)            # window i depends on (run, block, i) only, whatever n
    content = rng.integers(999, 30522, (BLOCK, 510))
    return [np.concatenate([[101], content[i, :lengths[i]], [102]]).astype(np.int64) for i in range(n)]


def expected_vector(ids: np.ndarray, dim: int = DIM) -> np.ndarray:
    """The vector a window must have, from its ids alone (SHAKE-128 of them; not the store's key)."""
    words = np.frombuffer(hashlib.shake_128(ids.astype("<i8").tobytes()).digest(4 * dim), dtype="<u4")
    return (words / 2.0**32 - 0.5).astype(np.float32)


def vectors_of(ids_list: list[np.ndarray], dim: int = DIM) -> np.ndarray:
    return np.stack([expected_vector(ids, dim) for ids in ids_list])              # (n, dim) float32


KEY = pool_key("a" * 64, "float32", "none", "mean|-1|mean")
LABEL = "tiny float32 mean"


def open_registered(path, key: str = KEY, dim: int = DIM, **kw) -> WindowStore:
    store = WindowStore.open(path, **kw)
    store.register(key, dim, LABEL)
    return store


def writer_main(folder: str, run: int, blocks: int, shared: int) -> None:
    """A subprocess: for each block, look its windows up, then put them (one transaction) and print the block.

    Windows i < shared of block b are the same in every run (two processes put the same keys).
    """
    store = open_registered(folder)
    for b in range(blocks):
        ids = block_ids(0, b, shared) + block_ids(run, b)[shared:]
        store.get_many(KEY, ids)
        store.put_many(KEY, ids, vectors_of(ids))
        print(b, flush=True)


def spawn_writer(folder: Path, run: int, blocks: int = 10**9, shared: int = 0) -> subprocess.Popen:
    code = (f"import sys; sys.path[:0] = [{str(REPO)!r}, {str(REPO / 'tests')!r}, {str(REPO / 'tests' / 'cache')!r}]; import test_store; "
            f"test_store.writer_main({str(folder)!r}, {run}, {blocks}, {shared})")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def raw(folder: Path) -> sqlite3.Connection:
    return sqlite3.connect(folder / DB_NAME, isolation_level=None)


# --- keys -------------------------------------------------------------------------------------

def test_pool_key_changes_with_each_part_and_needs_a_sha():
    parts = ("a" * 64, "float32", "none", "mean|-1|mean")
    keys = {pool_key(*parts)}
    for i, other in enumerate(("b" * 64, "bfloat16", "int8", "cls|-1|mean")):
        keys.add(pool_key(*parts[:i], other, *parts[i + 1:]))
    assert len(keys) == 5 and all(len(k) == 64 for k in keys)
    assert pool_key(*parts) == hashlib.sha256(
        b'["longbert-window-v1", "' + b"a" * 64 + b'", "float32", "none", "mean|-1|mean"]').hexdigest()
    with pytest.raises(ValueError, match="needs the model's sha256"):
        pool_key(None, "float32", "none", "cls")


def test_window_key_is_sha256_of_pool_key_and_int64_ids():
    ids = np.array([101, 7, 8, 102])
    assert window_key(KEY, ids) == hashlib.sha256(KEY.encode() + ids.astype("<i8").tobytes()).digest()
    assert window_key(KEY, ids.astype(np.int32)) == window_key(KEY, ids)
    assert window_key(KEY, ids[:3]) != window_key(KEY, ids)
    with pytest.raises(TypeError, match="1-D integer array"):
        window_key(KEY, ids.astype(np.float32))


def test_default_cache_value_then_env_then_none(monkeypatch):
    monkeypatch.delenv("LONGBERT_CACHE", raising=False)
    assert default_cache(None) is None
    monkeypatch.setenv("LONGBERT_CACHE", "/data/c")
    assert default_cache(None) == "/data/c"
    assert default_cache("/mine") == "/mine"
    monkeypatch.setenv("LONGBERT_CACHE", "")
    assert default_cache("") is None


# --- round trips ------------------------------------------------------------------------------

@pytest.mark.parametrize("folder", ["disk", None])
def test_put_then_get_is_bit_exact_per_pool_key(tmp_path, folder):
    store = open_registered(None if folder is None else tmp_path / "c")
    other = pool_key("a" * 64, "float32", "none", "cls|-1|mean")
    store.register(other, DIM, "other")
    ids = block_ids(1, 0)
    assert store.get_many(KEY, ids) == [None] * BLOCK
    assert store.put_many(KEY, ids, vectors_of(ids)) == BLOCK
    got = store.get_many(KEY, ids)
    assert all(g.dtype == np.float32 and g.tobytes() == expected_vector(i).tobytes() for g, i in zip(got, ids))
    assert store.get_many(other, ids) == [None] * BLOCK
    vecs, missing = store.lookup(KEY, ids[:3] + block_ids(2, 0, 2))
    assert missing.tolist() == [3, 4] and vecs.shape == (5, DIM) and not vecs[3:].any()
    assert vecs[:3].tobytes() == vectors_of(ids[:3]).tobytes()


def test_a_new_store_is_wal_normal_sync_32k_pages(tmp_path):
    store = WindowStore.open(tmp_path)
    assert [store._conn.execute(f"PRAGMA {p}").fetchone()[0] for p in
            ("journal_mode", "synchronous", "page_size", "busy_timeout", "application_id", "user_version")] == [
        "wal", 1, 32768, 60000, 0x4C425753, 1]   # synchronous 1 = NORMAL


def test_entries_survive_reopen_and_pickling(tmp_path):
    ids = block_ids(1, 0)
    with open_registered(tmp_path) as store:
        store.put_many(KEY, ids, vectors_of(ids))
    again = pickle.loads(pickle.dumps(open_registered(tmp_path)))
    again.register(KEY, DIM, LABEL)
    assert np.array_equal(np.stack(again.get_many(KEY, ids)), vectors_of(ids))


def _put_in_child(store: WindowStore, ids: list[np.ndarray]) -> None:
    store.put_many(KEY, ids, vectors_of(ids))


def test_a_forked_child_uses_its_own_connection(tmp_path):
    store = open_registered(tmp_path)
    ids = block_ids(3, 0)
    child = multiprocessing.get_context("fork").Process(target=_put_in_child, args=(store, ids))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    assert np.array_equal(np.stack(store.get_many(KEY, ids)), vectors_of(ids))


# --- entries that do not verify -----------------------------------------------------------------

@pytest.mark.parametrize("damage", ["flip_byte", "truncate", "dim", "checksum", "swap"])
def test_a_damaged_entry_is_ignored_then_replaced(tmp_path, damage):
    store = open_registered(tmp_path)
    ids = block_ids(1, 0, 4)
    store.put_many(KEY, ids, vectors_of(ids))
    k0, k1 = window_key(KEY, ids[0]), window_key(KEY, ids[1])
    db = raw(tmp_path)
    v0, v1 = (db.execute("SELECT vector FROM windows WHERE key = ?", (k,)).fetchone()[0] for k in (k0, k1))
    if damage == "flip_byte":
        db.execute("UPDATE windows SET vector = ? WHERE key = ?", (v0[:9] + bytes([v0[9] ^ 1]) + v0[10:], k0))
    elif damage == "truncate":
        db.execute("UPDATE windows SET vector = substr(vector, 1, 100) WHERE key = ?", (k0,))
    elif damage == "dim":
        db.execute("UPDATE windows SET dim = 383 WHERE key = ?", (k0,))
    elif damage == "checksum":
        db.execute("UPDATE windows SET checksum = checksum + 1 WHERE key = ?", (k0,))
    else:  # each vector moved to the other's key: its own checksum goes with it, but it names its key
        db.execute("UPDATE windows SET vector = ?, checksum = ? WHERE key = ?", (v1, checksum(k1, v1), k0))
    got = store.get_many(KEY, ids)
    assert got[0] is None and all(np.array_equal(g, expected_vector(i)) for g, i in zip(got[1:], ids[1:]))
    assert store.stats()["rejected"] == 1
    store.put_many(KEY, ids[:1], vectors_of(ids[:1]))
    assert store.get_many(KEY, ids[:1])[0].tobytes() == expected_vector(ids[0]).tobytes()
    assert db.execute("SELECT count(*) FROM windows").fetchone()[0] == 4


# --- processes ----------------------------------------------------------------------------------

def _check_blocks(folder: Path, committed: dict[int, int]) -> int:
    """Every block a writer printed is whole and exact, the one after it whole or absent, nothing else there."""
    store = open_registered(folder)
    assert raw(folder).execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    present = 0
    for run, last in committed.items():
        for b in range(last + 3):
            ids = block_ids(run, b)
            got = store.get_many(KEY, ids)
            whole = all(g is not None for g in got)
            assert whole or all(g is None for g in got), (run, b)       # one transaction per block
            assert whole == (b <= last) or b == last + 1, (run, b, last)
            if whole:
                assert np.stack(got).tobytes() == vectors_of(ids).tobytes(), (run, b)
                present += BLOCK
    assert store.stats()["rejected"] == 0
    assert raw(folder).execute("SELECT count(*) FROM windows").fetchone()[0] == present
    store.close()
    return present


@pytest.mark.timeout(120)
def test_sigkill_at_random_moments_leaves_only_whole_exact_blocks(tmp_path):
    rng = random.Random(18)
    committed: dict[int, int] = {}
    for run in range(1, 11):
        proc = spawn_writer(tmp_path, run)
        assert proc.stdout.readline().strip() == "0", proc.stderr.read()
        delay = rng.uniform(0.0, 0.4)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        committed[run] = int(out.split()[-1]) if out.split() else 0
        present = _check_blocks(tmp_path, committed)
        assert present >= sum(last + 1 for last in committed.values()) * BLOCK, (run, delay)


@pytest.mark.timeout(120)
def test_two_processes_write_and_read_one_store_at_once(tmp_path):
    folder = tmp_path / "new"   # both processes create it at the same moment too
    blocks, shared = 30, 32
    procs = [spawn_writer(folder, run, blocks, shared) for run in (1, 2)]
    for proc in procs:
        out, err = proc.communicate(timeout=100)
        assert (proc.returncode, err) == (0, ""), err
        assert out.split() == [str(b) for b in range(blocks)]
    store = open_registered(folder)
    for run in (1, 2):
        for b in range(blocks):
            ids = block_ids(0, b, shared) + block_ids(run, b)[shared:]
            assert np.stack(store.get_many(KEY, ids)).tobytes() == vectors_of(ids).tobytes()
    stats = store.stats()
    assert stats["entries"] == blocks * (shared + 2 * (BLOCK - shared))
    # our 2 x 30 lookups of 64 windows: the writers' counts stayed with their runs, none in the file
    assert stats["lookups"] == stats["hits"] == 2 * blocks * BLOCK


def test_a_write_lock_held_past_the_timeout_is_a_run_error(tmp_path):
    store = open_registered(tmp_path, timeout=0.2)
    holder = raw(tmp_path)
    holder.execute("BEGIN IMMEDIATE")
    ids = block_ids(1, 0, 2)
    with pytest.raises(RunError) as err:
        store.put_many(KEY, ids, vectors_of(ids))
    assert str(err.value) == (f"{tmp_path / DB_NAME}: another process held the store's write lock for over 0.2 s "
                              "(database is locked); run again when it is done, or pass --cache another folder")
    holder.execute("ROLLBACK")
    assert store.put_many(KEY, ids, vectors_of(ids)) == 2


def test_opening_a_new_store_waits_for_the_lock_of_one_being_created(tmp_path):
    """A store's file still in rollback mode, locked by another process creating it: SQLite answers the WAL
    pragma with SQLITE_BUSY at once (no busy handler), so two runs started together on one new --cache
    folder had one fail. Opening waits for the lock instead, and fails only past the timeout."""
    import threading

    holder = sqlite3.connect(tmp_path / DB_NAME, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")          # a new, empty file locked, as a creating process holds it
    with pytest.raises(ConfigError) as err:
        WindowStore.open(tmp_path, timeout=0.2)
    assert str(err.value) == (f"{tmp_path / DB_NAME}: another process held the store's write lock for over 0.2 s "
                              "(database is locked); run again when it is done, or pass --cache another folder")
    release = threading.Timer(0.5, lambda: holder.execute("ROLLBACK"))
    release.start()
    t0 = time.monotonic()
    store = WindowStore.open(tmp_path, timeout=10)
    waited = time.monotonic() - t0
    release.join()
    assert waited >= 0.4, waited               # it waited for the lock, not failed on it
    assert store.stats()["journal_mode"] == "wal"
    store.register(KEY, DIM, LABEL)
    ids = block_ids(1, 0, 3)
    assert store.put_many(KEY, ids, vectors_of(ids)) == 3


# --- stats and clear ----------------------------------------------------------------------------

def test_stats_count_a_known_sequence_and_clear_empties(tmp_path):
    store = open_registered(tmp_path)
    small = pool_key("b" * 64, "float16", "none", "cls|-1|mean")
    store.register(small, 8, "small float16 cls")
    a, b = block_ids(1, 0, 10), block_ids(2, 0, 4)
    store.get_many(KEY, a)                               # 10 lookups, 0 hits
    store.put_many(KEY, a[:6], vectors_of(a[:6]))
    store.get_many(KEY, a)                               # 10 lookups, 6 hits
    store.put_many(small, b, vectors_of(b, 8))
    store.get_many(small, b[:3])                         # 3 lookups, 3 hits
    s = store.stats()
    size = sum(os.path.getsize(f) for f in (tmp_path / DB_NAME, tmp_path / f"{DB_NAME}-wal"))
    assert (s["entries"], s["lookups"], s["hits"], s["rejected"], s["size_bytes"]) == (10, 23, 9, 0, size)
    assert s["hit_rate"] == 9 / 23 and s["bytes_per_1000"] == size * 100 and s["journal_mode"] == "wal"
    assert [(m["label"], m["dim"], m["entries"], m["lookups"], m["hits"], m["hit_rate"]) for m in s["models"]] == [
        (LABEL, DIM, 6, 20, 6, 0.3), ("small float16 cls", 8, 4, 3, 3, 1.0)]
    assert format_stats(s).splitlines() == [
        f"{tmp_path / DB_NAME} (wal): {size:,} bytes, 10 windows, {size * 100 / 1e6:.2f} MB per 1,000 windows",
        "hit rate: 39.1% (9 of 23 lookups)",
        "   windows   dim    lookups       hits hit rate  model",
        f"         6   384         20          6    30.0%  {LABEL}",
        "         4     8          3          3   100.0%  small float16 cls"]
    store.clear()
    s = store.stats()
    assert (s["entries"], s["lookups"], s["hits"], s["models"], s["hit_rate"]) == (0, 0, 0, [], None)
    assert store.get_many(KEY, a) == [None] * 10
    assert format_stats(store.stats()).splitlines()[1:] == [
        "hit rate: 0.0% (0 of 10 lookups)", "   windows   dim    lookups       hits hit rate  model",
        f"         0   384         10          0     0.0%  {LABEL}"]


# --- errors ---------------------------------------------------------------------------------------

HINT = "empty it with `longbert cache {} --clear`, or pass --cache another folder"


def test_a_file_or_an_uncreatable_folder_is_a_config_error(tmp_path):
    file = tmp_path / "f.txt"
    file.write_text("x")
    with pytest.raises(ConfigError) as err:
        WindowStore.open(file)
    assert str(err.value) == (f"--cache {file}: not a folder; pass --cache a writable folder "
                              "(the store is DIR/windows.sqlite3)")
    with pytest.raises(ConfigError) as err:
        WindowStore.open(file / "sub")
    assert str(err.value) == (f"--cache {file / 'sub'}: cannot create the folder (Not a directory); pass --cache "
                              "a writable folder (the store is DIR/windows.sqlite3)")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_a_config_error(tmp_path):
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(ConfigError, match="the folder is not writable; pass --cache a writable folder"):
            WindowStore.open(tmp_path)
    finally:
        tmp_path.chmod(0o700)


def _foreign(db: Path) -> None:
    sqlite3.connect(db).execute("CREATE TABLE notes (x)")


def _newer(db: Path) -> None:
    WindowStore.open(db.parent).close()
    sqlite3.connect(db).execute("PRAGMA user_version = 2")


def _no_table(db: Path) -> None:
    WindowStore.open(db.parent).close()
    sqlite3.connect(db, isolation_level=None).execute("DROP TABLE windows")


@pytest.mark.parametrize("make, message", [
    (lambda db: db.write_bytes(b"not a database at all " * 200), "{db} cannot be read as a window store "
                                                                  "(file is not a database); {hint}"),
    (_foreign, "{db} is not a longbert window store (an SQLite database of something else); {hint} "
               "(--clear deletes that file)"),
    (_newer, "{db} was written by a newer longbert (store version 2; this one reads 1); upgrade longbert, or {hint}"),
    (_no_table, "{db} is a damaged window store (tables missing); {hint}"),
])
def test_a_file_not_of_ours_is_refused_then_cleared(tmp_path, make, message):
    db = tmp_path / DB_NAME
    make(db)
    with pytest.raises(NotAStore) as err:
        WindowStore.open(tmp_path)
    assert isinstance(err.value, ConfigError)
    assert str(err.value) == message.format(db=db, hint=HINT.format(tmp_path))
    assert clear_store(tmp_path)["entries"] == 0
    store = open_registered(tmp_path)
    ids = block_ids(1, 0, 2)
    store.put_many(KEY, ids, vectors_of(ids))
    assert np.array_equal(np.stack(store.get_many(KEY, ids)), vectors_of(ids))


def test_damaged_pages_are_a_run_error_then_cleared(tmp_path):
    store = open_registered(tmp_path)
    ids = [w for b in range(20) for w in block_ids(1, b)]
    for start in range(0, len(ids), BLOCK):
        store.put_many(KEY, ids[start:start + BLOCK], vectors_of(ids[start:start + BLOCK]))
    store.close()
    with open(tmp_path / DB_NAME, "r+b") as f:   # pages 4 and 5 of 71 (B-tree pages of the windows table)
        f.seek(3 * 32768)
        f.write(b"\xff" * 2 * 32768)
    store = open_registered(tmp_path)
    with pytest.raises(StoreDamaged) as err:
        store.get_many(KEY, ids)
    assert isinstance(err.value, RunError)
    assert str(err.value) == f"{tmp_path / DB_NAME} is damaged (database disk image is malformed); " + HINT.format(
        tmp_path)
    store.close()
    assert clear_store(tmp_path)["entries"] == 0
    assert open_registered(tmp_path).get_many(KEY, ids[:3]) == [None] * 3


def test_clear_store_keeps_nothing_and_refuses_a_file(tmp_path):
    with open_registered(tmp_path) as store:
        ids = block_ids(1, 0)
        store.put_many(KEY, ids, vectors_of(ids))
        store.get_many(KEY, ids)
    stats = clear_store(tmp_path)
    assert (stats["entries"], stats["lookups"], stats["models"]) == (0, 0, [])
    with pytest.raises(ConfigError, match="not a folder"):
        clear_store(tmp_path / DB_NAME)


def test_unregistered_keys_and_wrong_shapes_are_caller_errors(tmp_path):
    store = WindowStore.open(None)
    with pytest.raises(ValueError, match="is not registered; call register"):
        store.get_many(KEY, [np.arange(3)])
    store.register(KEY, DIM, LABEL)
    with pytest.raises(ValueError, match=r"vectors must be float \(2, 384\), got float32 \(2, 383\)"):
        store.put_many(KEY, [np.arange(3), np.arange(4)], np.zeros((2, 383), np.float32))


def test_a_lookup_writes_nothing_not_even_its_counts(tmp_path):
    """The counts stay with the store object (the run): the file at rest is byte for byte as it was, and no
    -wal or -shm file is left beside it."""
    from read_only import sha256

    store = open_registered(tmp_path)
    ids = block_ids(1, 0, 8)
    store.put_many(KEY, ids, vectors_of(ids))
    store.close()
    before = sha256(tmp_path / DB_NAME)
    store = open_registered(tmp_path)
    conn = store._connection()
    changes = conn.total_changes
    for _ in range(3):
        assert np.stack(store.get_many(KEY, ids)).tobytes() == vectors_of(ids).tobytes()
    assert conn.total_changes == changes                                      # no write transaction ran
    stats = store.stats()
    assert (stats["lookups"], stats["hits"], stats["hit_counts"]) == (24, 24, "run")   # counted in memory
    store.close()
    assert sha256(tmp_path / DB_NAME) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [DB_NAME]
    with raw(tmp_path) as other:   # another connection: the file holds no counts
        assert other.execute("SELECT sum(lookups), sum(hits) FROM models").fetchone() == (0, 0)
    again = open_registered(tmp_path)
    assert (again.stats()["lookups"], again.stats()["entries"]) == (0, 8)   # a new store object: its own counts
    again.close()


READ_ONLY_CHECK = """
import sys, numpy as np
sys.path.insert(0, sys.argv[2])
from test_store import KEY, block_ids, open_registered, vectors_of
from pipeline.errors import ConfigError
store = open_registered(sys.argv[1])
ids = block_ids(1, 0, 8)
assert np.stack(store.get_many(KEY, ids)).tobytes() == vectors_of(ids).tobytes()
new = block_ids(2, 0, 4)
assert store.put_many(KEY, new, vectors_of(new)) == 0 and store.get_many(KEY, new) == [None] * 4
s = store.stats()
assert (s["read_only"], s["journal_mode"], s["entries"], s["lookups"], s["hits"]) == (True, "read-only", 8, 12, 8), s
assert store.checkpoint() is True
try:
    store.clear()
except ConfigError as err:
    print(err)
store.close()
"""


def test_a_store_on_a_read_only_mount_serves_its_windows_and_writes_nothing(tmp_path):
    from read_only import run_read_only, sha256

    folder = tmp_path / "store"
    store = open_registered(folder)
    ids = block_ids(1, 0, 8)
    store.put_many(KEY, ids, vectors_of(ids))
    store.close()
    before = sha256(folder / DB_NAME)
    done = run_read_only(folder, [sys.executable, "-c", READ_ONLY_CHECK, str(folder), str(Path(__file__).parent)],
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert done.returncode == 0, done.stderr
    assert done.stdout == (f"{folder / DB_NAME} is read-only here (a read-only mount, or a file or folder without "
                           "write permission): it cannot be cleared; make it writable, or delete the folder\n")
    assert sha256(folder / DB_NAME) == before and sorted(p.name for p in folder.iterdir()) == [DB_NAME]
