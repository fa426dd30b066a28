"""The window store is one file at rest: after a run, a close or a collection, ``windows.sqlite3`` alone
holds every window (no -wal file left), and ``longbert cache`` folds in what a killed run left in the log."""
from __future__ import annotations

import gc
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import invoke, write_csv
from test_cache import ML, TEXTS, assert_same, counts, extract, unique_windows

import longbert
from pipeline.cache.store import DB_NAME, WindowStore
from pipeline.errors import RunError

ROOT = Path(__file__).resolve().parents[2]


def windows_in_file(db: Path) -> int:
    """The windows the file holds, read with sqlite3 alone (the copy has no -wal beside it)."""
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT count(*) FROM windows").fetchone()[0]
    finally:
        conn.close()


def copy_file_alone(store: Path, to: Path) -> Path:
    to.mkdir()
    shutil.copy(store / DB_NAME, to / DB_NAME)
    return to


def test_copying_the_store_file_alone_carries_every_window(runner, tiny_model_dir, tmp_path):
    store = tmp_path / "store"
    first, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "first", "--strategy", "chunk", "--cache", store)
    n = len(unique_windows(tiny_model_dir, TEXTS))
    assert counts(out) == (n, 0)
    assert sorted(p.name for p in store.iterdir()) == [DB_NAME]     # no -wal, no -shm left beside it
    copy = copy_file_alone(store, tmp_path / "copy")
    assert windows_in_file(copy / DB_NAME) == n
    again, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "again", "--strategy", "chunk", "--cache", copy)
    assert counts(out) == (0, n)
    assert_same(again, first)


def test_pipeline_run_leaves_the_store_whole_and_stays_usable(tiny_model_dir, tmp_path):
    src = write_csv(tmp_path / "in.csv", [{"id": f"d{i}", "text": t} for i, t in enumerate(TEXTS)])
    store = tmp_path / "store"
    pipe = longbert.Pipeline.from_options(model=str(tiny_model_dir), max_length=ML, strategy="chunk", cache=str(store))
    n = len(unique_windows(tiny_model_dir, TEXTS))
    first = pipe.run(str(src), str(tmp_path / "a.parquet"))
    assert (first.windows, first.windows_cached) == (n, 0)
    assert sorted(p.name for p in store.iterdir()) == [DB_NAME]     # the pipeline still holds its store
    assert windows_in_file(copy_file_alone(store, tmp_path / "copy") / DB_NAME) == n
    second = pipe.run(str(src), str(tmp_path / "b.parquet"))        # the closed store connects again
    assert (second.windows, second.windows_cached) == (0, n)


def test_close_and_collection_fold_the_log_into_the_file(tmp_path):
    ids = [np.arange(i, i + 5) for i in range(7)]
    vectors = np.arange(7 * 4, dtype=np.float32).reshape(7, 4)
    store = WindowStore.open(tmp_path / "a")
    store.register("k", 4, "test")
    store.put_many("k", ids, vectors)
    assert (tmp_path / "a" / f"{DB_NAME}-wal").stat().st_size > 0    # open: the windows are in the log
    store.close()
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [DB_NAME]
    assert windows_in_file(copy_file_alone(tmp_path / "a", tmp_path / "a_copy") / DB_NAME) == 7
    np.testing.assert_array_equal(store.lookup("k", ids)[0], vectors)  # a closed file store connects again
    del store
    gc.collect()
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [DB_NAME]
    memory = WindowStore.open(None)
    memory.close()
    with pytest.raises(RunError, match=r"^the in-memory window store was closed, and its windows with it; "
                                       r"open a new one with WindowStore.open\(None\)$"):
        memory.stats()


def test_cache_command_folds_in_the_log_a_killed_run_left(runner, tmp_path):
    """A process that ends without closing (os._exit, as a kill) leaves its windows in the -wal file;
    ``longbert cache`` counts them and leaves them in windows.sqlite3."""
    code = ("import os, sys, numpy as np\nfrom pipeline.cache.store import WindowStore\n"
            "s = WindowStore.open(sys.argv[1]); s.register('k', 4, 'test')\n"
            "s.put_many('k', [np.arange(i, i + 3) for i in range(9)], np.ones((9, 4), dtype=np.float32))\n"
            "os._exit(0)\n")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "s")], check=True, cwd=ROOT, timeout=120)
    assert (tmp_path / "s" / f"{DB_NAME}-wal").stat().st_size > 0
    result = invoke(runner, ["cache", tmp_path / "s"])
    assert result.exit_code == 0, result.output
    size = (tmp_path / "s" / DB_NAME).stat().st_size
    assert result.output.splitlines()[0] == (f"{tmp_path / 's' / DB_NAME} (wal): {size:,} bytes, 9 windows, "
                                             f"{size * 1000 / 9 / 1e6:.2f} MB per 1,000 windows")
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == [DB_NAME]
    assert windows_in_file(copy_file_alone(tmp_path / "s", tmp_path / "copy") / DB_NAME) == 9


def test_cache_report_says_when_another_process_keeps_part_of_the_log():
    from pipeline.cache.store_report import format_stats

    stats = {"path": "/s/windows.sqlite3", "journal_mode": "wal", "size_bytes": 3000, "wal_bytes": 1000,
             "entries": 2, "bytes_per_1000": 1.5e6, "hit_rate": None, "rejected": 0, "models": []}
    assert format_stats(stats, folded=False).splitlines()[0] == (
        "/s/windows.sqlite3 (wal): 3,000 bytes, 2 windows, 1.50 MB per 1,000 windows; 1,000 of those bytes are "
        "still in windows.sqlite3-wal (another process has the store open): copy both files, or copy once it is done")
    assert format_stats(stats).splitlines()[0] == ("/s/windows.sqlite3 (wal): 3,000 bytes, 2 windows, "
                                                   "1.50 MB per 1,000 windows")
