"""Parallel feeding: map a function over blocks in worker threads, a bounded number ahead of the consumer,
results in input order; the local engine (pipeline.engine.local) reads, tokenizes and segments blocks with
it ahead of the encoder, in ``feed_workers()`` threads.

Threads, not processes: the fast tokenizer's batch call and pyarrow's readers release the GIL, and a
block's prepared windows (numpy arrays, many small objects) would cost a pickle round trip to come back
from a process (bench/feeder.py measures the split).
"""
from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def passive_omp_wait() -> None:
    """Let torch's OpenMP threads sleep between parallel regions instead of spinning (``OMP_WAIT_POLICY=
    PASSIVE``, unless the environment already sets it). Call it before torch is imported: OpenMP reads the
    variable once, when it starts. The command line calls it on import.

    A spinning OpenMP thread holds its core for a while after each parallel region, which the feeder
    threads tokenizing the next blocks then cannot use. Measured on 2 AMD EPYC cores (bench/feeder.py
    --docs 2000, forward pass stubbed): the encode stage's own CPU time 2.97 -> 0.78 s and the whole run's
    17.4 -> 13.2 CPU s; ``extract examples/corpus.csv --strategy chunk`` with the real model: the same
    wall time (0.996x per pair, 4 pairs) and 0.94x the CPU seconds.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def feed_workers() -> int:
    """How many blocks to prepare at once: one, on every machine.

    The fast tokenizer's batch call, most of the feeding work, already spreads a block over every core
    (its Rust side's thread pool), and the work that holds Python's lock (read, segment, dedup) is small:
    a second feed thread only makes two batch calls compete for the same cores. Measured with the
    forward pass stubbed (bench/feeder.py --docs 2000, 2 cores): one feed thread against two, 3.24 s
    against 3.57 s wall on an AMD EPYC and 2.98 s against 3.42 s on an Intel Xeon with AMX; with the
    real model in bfloat16 on the Xeon (labelled.csv, chunk, blocks of 32 documents), 19.5 s against
    19.7 s in each of 3 interleaved pairs (docs/performance.md, Feeding the model).
    Example: -> 1 (a test or benchmark may replace it to compare).
    """
    return 1


def ordered_map(fn: Callable[[T], R], items: Iterable[T], workers: int,
                name: str = "longbert-feed") -> Iterator[tuple[T, R]]:
    """Yield ``(item, fn(item))`` for each item, in the order of ``items``, computing up to ``workers`` of
    them at once in a thread pool.

    Memory stays flat: at most ``workers`` results are computed or waiting (submitted, not yet yielded),
    plus the one the consumer holds; a new item is submitted only when the consumer takes a result.
    ``workers=1`` is one thread preparing the next item while the consumer works on the current one.

    Args:
        fn: the work per item (called in a worker thread).
        items: the inputs, in order (consumed lazily).
        workers: threads, >= 1.
        name: the threads' name prefix (seen in py-spy and thread dumps).

    Yields:
        (item, result) in input order.

    Raises:
        ValueError: workers < 1. Whatever ``fn`` raises, when its item's turn comes (items after it are
            cancelled if not started; started ones finish before the generator closes).

    Example: ordered_map(len, ["ab", "c"], workers=2) -> ("ab", 2), ("c", 1).
    """
    if workers < 1:
        raise ValueError(f"workers={workers} must be >= 1")
    source = iter(items)
    pending: deque[tuple[T, Future]] = deque()
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
    try:
        for item in source:
            pending.append((item, pool.submit(fn, item)))
            if len(pending) == workers:
                break
        while pending:
            item, future = pending.popleft()
            result = future.result()
            following = next(source, _END)
            if following is not _END:
                pending.append((following, pool.submit(fn, following)))
            yield item, result
    finally:
        # a generator dropped while a worker still runs fn (an interrupted run) may be closed from that
        # worker itself, which cannot wait for its own thread: it only cancels what has not started
        inside = threading.current_thread().name.startswith(f"{name}_")
        pool.shutdown(wait=not inside, cancel_futures=True)


_END = object()
