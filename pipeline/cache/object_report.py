"""The S3 window store's report (``longbert cache s3://...``, ObjectStore.stats): every listed object read
and checked, so only windows a run could use are counted, and the objects left out counted apart by why
(damaged, refused, failed). Called by pipeline.cache.object_store only.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from obstore.exceptions import NotFoundError

from .object_blocks import BlockDamaged, index_length, parse_index, parse_name, verify
from .object_client import Client
from ..storage import denied, endpoint, first_line, refused


def check_object(client: Client, obj: dict, whole: bool) -> tuple[str, dict | None, object]:
    """(status, header, why) of one listed object ({"path", "size"}): "ok" (``whole``: its sha256 matches its
    name; else its index reads and its size is the index's: a cut or grown object, not a changed byte),
    "damaged" (why: the text), "refused", "gone" or "failed" (why: the exception)."""
    path, size = obj["path"], obj["size"]
    sha, n = parse_name(path)
    try:
        data = client.get(path, None if whole else index_length(n))
        if whole and not verify(sha, data):
            raise BlockDamaged("its sha256 is not its name's")
        header, entries = parse_index(data, n)
        expected = index_length(n) + 4 * sum(values for _, _, values in entries)
        if size != expected:
            raise BlockDamaged(f"it holds {size:,} bytes, its index says {expected:,}")
    except BlockDamaged as err:
        return "damaged", None, str(err)
    except Exception as err:  # noqa: BLE001 - gone (not counted), refused or failed: named apart
        return read_failure(err), None, err
    return "ok", header, None


def read_failure(err: BaseException) -> str:
    """How a read failed: "gone" (deleted since the listing), "refused" (a permission), "failed" (other)."""
    if isinstance(err, NotFoundError):
        return "gone"
    return "refused" if denied(err) else "failed"


def store_stats(uri: str, client: Client, listing: list[dict], dims: dict, counts: dict, whole_below: int,
                threads: int) -> dict:
    """The stats of the store at ``uri`` from its ``listing`` (every object under windows-v1/).

    Args:
        client: the store's connection. dims: pool key -> (dim, label) registered in this process.
        counts: pool key -> [lookups, hits, rejected] of this process. whole_below: a store of fewer bytes
            is read whole (each sha256 checked), else each object's index only. threads: reads at once.

    Returns:
        Keys as WindowStore.stats: path, journal_mode ("objects"), size_bytes, entries, objects, lookups, hits,
        rejected, hit_rate, bytes_per_1000, models (per pool key: label, dim, entries, bytes, lookups...);
        ``left_out``: {"damaged"|"refused"|"failed": [objects, windows, bytes, the first reason]} for the
        objects not counted; ``hit_counts``: "run" (runs keep them; the store holds none). A window two
        racing runs both stored counts twice.
    """
    named = [o for o in listing if parse_name(o["path"]) is not None]
    whole = sum(o["size"] for o in named) < whole_below
    with ThreadPoolExecutor(min(threads, max(1, len(named)))) as pool_:
        checked = list(pool_.map(lambda o: check_object(client, o, whole), named))
    by_pool: dict[str, list] = {}
    left_out: dict[str, list] = {}
    for obj, (status, header, why) in zip(named, checked):
        n = parse_name(obj["path"])[1]
        if status == "gone":
            continue
        if status != "ok":
            entry = left_out.setdefault(status, [0, 0, 0, _reason(uri, status, why)])
            entry[0], entry[1], entry[2] = entry[0] + 1, entry[1] + n, entry[2] + obj["size"]
            continue
        entry = by_pool.setdefault(obj["path"].split("/")[1], [0, 0, 0, header])
        entry[0], entry[1], entry[2] = entry[0] + n, entry[1] + obj["size"], entry[2] + 1
    models = []
    for pool in sorted(set(by_pool) | set(counts)):
        entries, size, _, header = by_pool.get(pool, (0, 0, 0, None))
        dim, label = dims.get(pool, (0, "?"))
        if header is not None and pool not in dims:
            dim, label = header.get("dim", 0), header.get("label", "?")
        lookups, hits, rejected = counts.get(pool, (0, 0, 0))
        models.append({"pool_key": pool, "label": label, "dim": dim, "entries": entries, "bytes": size,
                       "lookups": lookups, "hits": hits, "rejected": rejected,
                       "hit_rate": hits / lookups if lookups else None})
    entries, size = sum(m["entries"] for m in models), sum(m["bytes"] for m in models)
    lookups, hits = sum(m["lookups"] for m in models), sum(m["hits"] for m in models)
    return {"path": uri, "journal_mode": "objects", "size_bytes": size, "wal_bytes": 0,
            "entries": entries, "objects": sum(e[2] for e in by_pool.values()),
            "lookups": lookups, "hits": hits,
            "rejected": sum(m["rejected"] for m in models), "hit_rate": hits / lookups if lookups else None,
            "bytes_per_1000": size * 1000 / entries if entries else None, "models": models,
            "left_out": left_out, "hit_counts": "run"}


def _reason(uri: str, status: str, why) -> str:
    """The first reason of a left-out object, for ``longbert cache``: the damage, the permission, the failure."""
    if status == "damaged":
        return str(why)
    if status == "refused":
        return refused(uri, why, "GET")
    return f"reading failed at {endpoint()} ({first_line(why)})"
