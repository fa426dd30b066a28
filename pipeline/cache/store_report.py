"""``longbert cache DIR`` (or ``s3://BUCKET/PREFIX``): the window store's report, and ``--clear``."""
from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from .store import DB_NAME, NotAStore, StoreDamaged, WindowStore
from .stores import is_folder, open_store


def report_store(uri: str, clear: bool = False) -> tuple[dict, bool]:
    """``longbert cache URI [--clear]``: the store's stats() after an optional clear, and whether a folder's
    write-ahead log was folded into its file (True for other stores).

    Raises:
        ConfigError: a folder without a store (and not --clear); as open_store and clear_store.
    """
    if not is_folder(uri):
        store = open_store(uri)
        try:
            if clear:
                store.clear()
            return store.stats(), True
        finally:
            store.close()
    if clear:
        return clear_store(uri), True
    if not (Path(uri).expanduser() / DB_NAME).is_file():
        raise ConfigError(f"{uri}: no window store there (no {DB_NAME}); runs with --cache {uri} make one")
    with WindowStore.open(uri) as store:
        folded = store.checkpoint()   # the windows a run left in the write-ahead log go into the file first
        return store.stats(), folded


def clear_store(path: str | Path) -> dict:
    """``longbert cache DIR --clear``: empty the store in ``path``; a file that is not a readable store
    of ours (NotAStore, StoreDamaged) is deleted with its -wal/-shm files and a new store is made.

    Returns:
        The emptied store's stats(). Raises ConfigError: ``path`` is not a writable folder, or another
        process holds the lock.
    """
    for attempt in (1, 2):
        try:
            with WindowStore.open(path) as store:
                store.clear()
                return store.stats()
        except (NotAStore, StoreDamaged):
            if attempt == 2:
                raise
            for suffix in ("", "-wal", "-shm"):
                Path(f"{Path(path).expanduser() / DB_NAME}{suffix}").unlink(missing_ok=True)
    raise AssertionError("unreachable")  # the second attempt returned or raised


def format_stats(stats: dict, folded: bool = True) -> str:
    """The text of ``longbert cache DIR`` for a ``WindowStore.stats()`` dict: size, hit rate, a table per model.
    ``folded=False``: the checkpoint before it left part of the log (``WindowStore.checkpoint``), and the
    first line says how much is still outside ``windows.sqlite3``. A store whose runs keep the hit counts
    (``hit_counts`` "run") says so, instead of "no lookups yet"."""
    where = stats["path"] or "in-memory window store"
    lines = [f"{where} ({stats['journal_mode']}): {stats['size_bytes']:,} bytes, {stats['entries']:,} windows"]
    if stats["bytes_per_1000"] is not None:
        lines[0] += f", {stats['bytes_per_1000'] / 1e6:.2f} MB per 1,000 windows"
    if not folded and stats.get("wal_bytes"):  # another process is using it: not all its windows are in the file
        lines[0] += (f"; {stats['wal_bytes']:,} of those bytes are still in {DB_NAME}-wal (another process has "
                     "the store open): copy both files, or copy once it is done")
    rate = stats["hit_rate"]
    if rate is None and stats.get("hit_counts") == "run":   # its reads write nothing, counts included
        lines.append("hit rate: not kept in the store (its reads write nothing); each run's summary line says "
                     "how many windows came from it (\"N windows encoded, M from the cache\")")
    else:
        lines.append("hit rate: no lookups yet" if rate is None else
                     f"hit rate: {rate:.1%} ({stats['hits']:,} of {stats['lookups']:,} lookups)")
    if stats["rejected"]:
        lines[-1] += f"; {stats['rejected']:,} entries failed verification and were encoded again"
    if stats["models"]:
        lines.append(f"{'windows':>10} {'dim':>5} {'lookups':>10} {'hits':>10} {'hit rate':>8}  model")
    for m in stats["models"]:
        hit = "-" if m["hit_rate"] is None else f"{m['hit_rate']:.1%}"
        lookups, hits = (f"{m['lookups']:,}", f"{m['hits']:,}") if m["lookups"] or stats.get("hit_counts") != "run" \
            else ("-", "-")   # not kept in the store: "-", not 0
        lines.append(f"{m['entries']:>10,} {m['dim']:>5} {lookups:>10} {hits:>10} {hit:>8}  {m['label']}")
    return "\n".join(lines)
