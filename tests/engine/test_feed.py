"""The parallel feeder (pipeline.engine.feed.ordered_map behind Pipeline.map) keeps input order,
gives exactly the single-thread result, and prepares a bounded number of blocks ahead."""
from __future__ import annotations

import random
import threading
import time

import pyarrow.parquet as pq
import pytest

import pipeline.engine.local as local_engine
import pipeline.engine.local as stream   # the local engine: its feeder threads
from pipeline.options.config import PipelineConfig
from pipeline.engine.feed import ordered_map
from conftest import words, write_csv


def test_ordered_map_keeps_input_order_under_uneven_work():
    """Items finish out of order (random sleeps); results still come back in input order, each fn(item)."""
    delays = [random.Random(k).uniform(0, 0.004) for k in range(40)]

    def work(k: int) -> tuple[int, str]:
        time.sleep(delays[k])
        return k * k, threading.current_thread().name

    out = list(ordered_map(work, range(40), workers=4, name="t-feed"))
    assert [item for item, _ in out] == list(range(40))
    assert [res[0] for _, res in out] == [k * k for k in range(40)]
    assert all(res[1].startswith("t-feed") for _, res in out)


def test_ordered_map_raises_the_failing_items_error_in_its_turn():
    def work(k: int) -> int:
        if k == 5:
            raise KeyError("item 5")
        return k

    got = []
    with pytest.raises(KeyError, match="item 5"):
        for item, res in ordered_map(work, range(10), workers=3):
            got.append(res)
    assert got == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="workers=0 must be >= 1"):
        list(ordered_map(work, range(3), workers=0))


@pytest.mark.parametrize("workers", [1, 3])
def test_map_prepares_at_most_workers_blocks_ahead(workers):
    """A stage before encode counts the blocks started; while the consumer holds block k, exactly
    min(k + 1 + workers, n) have started (the queue fills), never more (it is bounded)."""
    from pipeline.batch import Batch
    from pipeline.engine.compose import Pipeline

    n = 12
    started: list[int] = []
    lock = threading.Lock()

    def count(batch):
        with lock:
            started.append(int(batch.ids[0]))
        return batch

    blocks = [Batch.from_texts(["x"], ids=[str(k)]) for k in range(n)]
    seen = []
    for k, out in enumerate(Pipeline([count]).map(blocks, workers=workers)):
        assert out.ids == [str(k)]
        expected = min(k + 1 + workers, n)
        deadline = time.monotonic() + 10.0
        while len(started) < expected and time.monotonic() < deadline:
            time.sleep(0.001)  # let the workers start what was submitted
        seen.append(len(started))
        time.sleep(0.002)      # any worker allowed to start more would do so now
        assert len(started) == expected
    assert seen == [min(k + 1 + workers, n) for k in range(n)]
    assert sorted(started) == list(range(n))


def test_parallel_feeder_equals_single_thread_run(tmp_path, tiny_model_dir, monkeypatch):
    """The same corpus (documents of uneven length, several blocks, one empty text) through run() with
    4 feed threads and with 1: the output tables are equal, value for value, in input order."""
    rows = [{"id": f"d{i}", "text": words(7 + (i * 37) % 900, i) if i != 9 else ""} for i in range(60)]
    csv_path = write_csv(tmp_path / "in.csv", rows)
    tables = {}
    for workers in (1, 4):
        monkeypatch.setattr(stream, "feed_workers", lambda w=workers: w)
        out = tmp_path / f"out{workers}.parquet"
        cfg = PipelineConfig.from_options(inputs=(str(csv_path),), id_col="id", model=str(tiny_model_dir),
                                          strategy="chunk", block_rows=7, progress=False, output=str(out))
        summary = local_engine.run(cfg)
        assert summary.documents == 60
        tables[workers] = pq.read_table(out)
    assert tables[4].column("id").to_pylist() == [r["id"] for r in rows]
    assert tables[4].equals(tables[1])
    assert tables[4].schema.metadata == tables[1].schema.metadata


def test_a_feed_closed_from_its_own_worker_does_not_wait_for_itself():
    """An interrupted run can drop the feed while a worker runs: closing it there cancels what has not
    started instead of joining the worker's own thread (RuntimeError: cannot join current thread)."""
    seen: dict = {}
    done = threading.Event()

    def fn(x):
        if x == 2:
            try:
                feed.close()
            except Exception as err:          # noqa: BLE001 - the test reports what closing raised
                seen["error"] = err
            seen["thread"] = threading.current_thread().name
            done.set()
        return x

    feed = ordered_map(fn, range(5), workers=1, name="feedtest")
    assert [next(feed), next(feed)] == [(0, 0), (1, 1)]    # item 2 is now submitted
    assert done.wait(30)
    assert seen.get("error") is None and seen["thread"].startswith("feedtest_")
    assert list(feed) == []                               # closed: nothing more comes
