"""What the encode stage asks of a window store (``Store``), and the look-up as arrays built on it.
Called by pipeline.model.window_cache; pipeline.cache.store.WindowStore (SQLite) is the embedded default.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from ..errors import ConfigError


@runtime_checkable
class Store(Protocol):
    """A window store: window vectors by (pool key, the window's exact token ids), kept across runs.

    The encode stage (through pipeline.model.window_cache.WindowCache) calls only these methods, so
    any object that has them plugs in: ``Pipeline.from_config(cfg, store=my_store)``. Keys are
    built in pipeline.cache.store_keys: ``pool_key`` names one kind of vector (weights, dtype, quantize,
    pooling), ``window_key(pool, ids)`` is the 32-byte content hash of one window under it; a store
    that files entries under ``window_key`` shares its entries with every store keyed the same way.

    Contract:
        - ``register`` comes first for each pool key; ``get_*``/``put_*`` with an unregistered key raise
          ValueError.
        - a ``get_*`` writes nothing a later run depends on; it counts lookups, hits and rejected
          entries for ``stats`` (in memory is enough).
        - a ``put_*`` stores its whole list or nothing (one transaction); a put of a key already
          there replaces it (equal keys always carry equal vectors).
        - an entry that cannot be verified is a miss (None): the window is encoded again and put.
        - the store is picklable when the pipeline is shipped to other processes (Ray, joblib): each
          copy must reach the same entries, or start empty, never give other vectors.
    """

    def register(self, pool: str, dim: int, label: str) -> None:
        """Declare a pool key: its vectors' length (float32 values, > 0) and a label for reports.
        Idempotent; a changed dim or label replaces the old one (entries of another length then miss)."""

    def get_many(self, pool: str, ids_list: list) -> list[np.ndarray | None]:
        """Per window (1-D integer token ids, [CLS] ... [SEP]): its stored (dim,) float32 vector, or None."""

    def put_many(self, pool: str, ids_list: list, vectors: np.ndarray) -> int:
        """Store (n, dim) float vectors, one per window, as float32; returns n. ValueError: another shape."""

    def get_tokens(self, pool: str, ids_list: list) -> list[np.ndarray | None]:
        """Per window: its stored (len(ids) - 2, dim) float32 content-token vectors (a late feature's), or None."""

    def put_tokens(self, pool: str, ids_list: list, tokens: list[np.ndarray]) -> int:
        """Store each window's (len(ids) - 2, dim) token vectors; returns how many. ValueError: another shape."""

    def stats(self) -> dict:
        """At least ``entries``, ``lookups``, ``hits``, ``rejected`` (ints) and ``hit_rate`` (hits /
        lookups, None before any lookup), look-ups not yet written included."""

    def clear(self) -> None:
        """Delete every entry and reset the counters; registered pool keys stay."""

    def close(self) -> None:
        """Write what is pending (the counters) and release the store's resources; called at a run's end."""


METHODS = ("register", "get_many", "put_many", "get_tokens", "put_tokens", "stats", "clear", "close")


def check_store(store: object) -> None:
    """Refuse an object that lacks a Store method, before a run uses it.

    Raises:
        ConfigError: naming the methods missing, e.g. "store=DictStore lacks get_tokens, put_tokens".
    """
    missing = [m for m in METHODS if not callable(getattr(store, m, None))]
    if missing:
        raise ConfigError(f"store={type(store).__name__} lacks {', '.join(missing)}; a window store needs "
                          f"{', '.join(METHODS)} (longbert.stages.cache.store_api.Store)")


def lookup(store: Store, pool: str, ids_list: list, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """``store.get_many`` as arrays: (n, dim) float32 vectors (zeros where missing) and the missing positions.

    Args:
        store: any Store. pool: a key registered with ``dim``. ids_list: n windows' token ids.

    Returns:
        (vectors (n, dim) float32, missing (m,) int64 ascending).
        Example: 3 windows, the second not stored -> vectors[1] == 0, missing == [1].

    Raises:
        As ``store.get_many``.
    """
    found = store.get_many(pool, ids_list)
    vectors = np.zeros((len(found), dim), dtype=np.float32)                       # (n, dim)
    for i, vec in enumerate(found):
        if vec is not None:
            vectors[i] = vec
    missing = np.array([i for i, v in enumerate(found) if v is None], dtype=np.int64)  # (m,)
    return vectors, missing
