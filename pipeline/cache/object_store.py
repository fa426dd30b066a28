"""The window store in S3-compatible object storage (``--cache s3://BUCKET/PREFIX``): AWS S3, MinIO,
SeaweedFS, Ceph, R2. A pipeline.cache.store_api.Store, opened by pipeline.cache.stores.open_store, so
runs on many machines (Ray workers, processes started together, --resume) share one store.

- Layout: immutable, content-addressed objects (pipeline.cache.object_blocks): each ``put_many`` of a
  pool key writes ONE object holding its windows (an encode block's misses), named by the sha256 of
  its bytes, with a create-if-absent put (If-None-Match: *): racing writers never overwrite or tear
  one another; a window written twice by two racing runs is kept twice, with equal vectors.
- Reads never write: a lookup lists the pool key's objects once (one LIST per 1,000 objects), then
  reads each object it needs once (small stores: every object at the first lookup), and checks its
  sha256 before using a vector. Hit counts stay in memory, with the run; nothing is written for them.
- A damaged or truncated object is left out (its windows are encoded again and stored in a new
  object) and named in a warning. Credentials that may only read: the run reads, and says once that
  new windows were not stored.
- Objects written by other processes after this one listed a pool key are seen by its next run.
"""
from __future__ import annotations

import collections
import secrets
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .object_blocks import BlockDamaged, index_length, pack_block, parse_index, parse_name, pool_folder, verify
from .object_blocks import LAYOUT
from .object_client import Client, Refused, run_error
from ..errors import StoreWarning
from .store_api import lookup
from .store_keys import window_keys

WHOLE_BELOW = 64 << 20         # a pool key whose objects total less is read whole at its first lookup
CACHED_BYTES = 256 << 20       # objects kept in memory after a read, least recently used dropped first
MAX_OBJECT = 64 << 20          # a put of more bytes (token vectors of many windows) is split into objects
THREADS = 16                   # objects read at once


class ObjectStore:
    """Window vectors by (pool key, token ids) in ``s3://BUCKET/PREFIX/windows-v1/``; see the module.

    Use ``open_s3(uri)`` (it checks the endpoint, the bucket and the credentials); a store pickles as its
    URI and opens again lazily. ``requests`` counts the requests made (GET, PUT, LIST, DELETE).
    """

    def __init__(self, uri: str):
        self.uri = uri
        self.client = Client(uri)
        self._lock = threading.RLock()
        self._dims: dict[str, tuple[int, str]] = {}                  # pool key -> (dim, label)
        self._index: dict[str, dict[bytes, tuple[str, int, int]]] = {}   # pool -> key -> (path, offset, values)
        self._spare: dict[str, dict[bytes, list]] = {}             # pool -> key -> other objects holding it
        self._objects: collections.OrderedDict[str, bytes] = collections.OrderedDict()   # path -> verified bytes
        self._held = 0                                               # bytes in _objects
        self._damaged: set[str] = set()
        self._counts: dict[str, list[int]] = {}                     # pool -> [lookups, hits, rejected]
        self.read_only = False

    def __reduce__(self):
        return (ObjectStore, (self.uri,))

    def __enter__(self) -> ObjectStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def requests(self) -> collections.Counter:
        """Requests made by this store object: Counter of "GET", "PUT", "LIST", "DELETE"."""
        return self.client.requests

    def register(self, pool: str, dim: int, label: str) -> None:
        """Declare a pool key (its vectors' length, a label for ``longbert cache``); writes nothing."""
        if not isinstance(dim, (int, np.integer)) or dim <= 0:
            raise ValueError(f"dim must be a positive int, got {dim!r}")
        with self._lock:
            self._dims[pool] = (int(dim), label)

    def _dim(self, pool: str) -> int:
        try:
            return self._dims[pool][0]
        except KeyError:
            raise ValueError(f"pool key {pool[:12]}... is not registered; call register(pool, dim, label)") from None

    # ------------------------------------------------------------------ reading

    def _load_index(self, pool: str) -> dict[bytes, tuple[str, int, int]]:
        """The pool key's index, listed and read once per store object (see the module)."""
        if pool in self._index:
            return self._index[pool]
        try:
            objects = [(o["path"], o["size"], parse_name(o["path"])) for o in self.client.list(pool_folder(pool))]
        except Exception as err:  # noqa: BLE001 - obstore's errors: the run's error
            raise run_error(self.uri, "listing the stored windows", err) from None
        objects = [(path, size, named) for path, size, named in objects if named is not None]
        whole = sum(size for _, size, _ in objects) < WHOLE_BELOW

        def read(item):
            path, _, (sha, n) = item
            try:
                data = self.client.get(path, None if whole else index_length(n))
                if whole and not verify(sha, data):
                    raise BlockDamaged("its sha256 is not its name's")
                return path, data, parse_index(data, n)[1]
            except BlockDamaged as err:
                return path, None, str(err)
            except Exception as err:  # noqa: BLE001 - an object gone since the listing (cleared): left out
                return path, None, f"it cannot be read ({type(err).__name__})"

        index, spare = {}, {}
        with ThreadPoolExecutor(THREADS) as pool_:
            for path, data, entries in pool_.map(read, sorted(objects)):
                if data is None:
                    self._damage(path, entries)
                    continue
                if whole:
                    self._keep(path, data)
                for key, offset, values in entries:
                    if key in index:
                        spare.setdefault(key, []).append((path, offset, values))
                    else:
                        index[key] = (path, offset, values)
        self._index[pool], self._spare[pool] = index, spare
        return index

    def _damage(self, path: str, why: str) -> None:
        """Leave ``path`` out for the life of this store object, and say so once."""
        if path not in self._damaged:
            self._damaged.add(path)
            warnings.warn(f"window store {self.uri}: the object {path} is damaged ({why}); its windows are "
                          "encoded again and stored in a new object; delete it, or clear the store with "
                          f"`longbert cache {self.uri} --clear`", StoreWarning, stacklevel=2)

    def _keep(self, path: str, data: bytes) -> None:
        """Hold an object's verified bytes, dropping the least recently kept beyond CACHED_BYTES."""
        if path in self._objects:
            self._held -= len(self._objects.pop(path))
        self._objects[path] = data
        self._held += len(data)
        while self._held > CACHED_BYTES and len(self._objects) > 1:
            self._held -= len(self._objects.popitem(last=False)[1])

    def _fetch(self, paths: set[str]) -> None:
        """Read the objects in ``paths`` not in memory (at once), checking each one's sha256."""
        todo = sorted(p for p in paths if p not in self._objects)

        def read(path):
            try:
                data = self.client.get(path)
            except Exception as err:  # noqa: BLE001 - gone or unreadable: its windows are misses
                return path, None, f"it cannot be read ({type(err).__name__})"
            return (path, data, "") if verify(parse_name(path)[0], data) else (path, None, "its sha256 is not its name's")

        with ThreadPoolExecutor(min(THREADS, max(1, len(todo)))) as pool_:
            for path, data, why in pool_.map(read, todo):
                if data is None:
                    self._damage(path, why)
                else:
                    self._keep(path, data)

    def _values(self, pool: str, keys: list[bytes]) -> list[bytes | None]:
        """The stored float32 bytes of each key (None: not stored, or only in damaged objects)."""
        index = self._load_index(pool)
        out: list[bytes | None] = [None] * len(keys)
        todo = list(range(len(keys)))
        while todo:
            wanted = {index[keys[i]][0] for i in todo if keys[i] in index}
            self._fetch(wanted)
            again = []
            for i in todo:
                entry = index.get(keys[i])
                if entry is None:
                    continue
                path, offset, values = entry
                if path in self._objects:
                    out[i] = self._objects[path][offset:offset + 4 * values]
                elif self._spare[pool].get(keys[i]):      # damaged: another object holding the window
                    index[keys[i]] = self._spare[pool][keys[i]].pop(0)
                    again.append(i)
                else:
                    del index[keys[i]]
            todo = again
        return out

    def _count(self, pool: str, lookups: int, hits: int, rejected: int) -> None:
        counts = self._counts.setdefault(pool, [0, 0, 0])
        for i, n in enumerate((lookups, hits, rejected)):
            counts[i] += n

    def get_many(self, pool: str, ids_list: list) -> list[np.ndarray | None]:
        """Per window (1-D integer token ids) its stored (dim,) float32 vector, or None; writes nothing.

        Raises:
            ValueError: ``pool`` is not registered. RunError: the store cannot be listed.
        """
        dim = self._dim(pool)
        with self._lock:
            found = self._values(pool, window_keys(pool, ids_list))
            out = [None if v is None or len(v) != 4 * dim else np.frombuffer(v, dtype="<f4").astype(np.float32)
                   for v in found]
            self._count(pool, len(out), sum(v is not None for v in out),
                        sum(v is not None and len(v) != 4 * dim for v in found))
        return out

    def get_tokens(self, pool: str, ids_list: list) -> list[np.ndarray | None]:
        """Per window its stored (len(ids) - 2, hidden) float32 token vectors, or None; writes nothing."""
        hidden = self._dim(pool)
        with self._lock:
            found = self._values(pool, window_keys(pool, ids_list))
            out = []
            for v, ids in zip(found, ids_list):
                ok = v is not None and len(v) == 4 * (len(ids) - 2) * hidden
                out.append(np.frombuffer(v, dtype="<f4").astype(np.float32).reshape(-1, hidden) if ok else None)
            self._count(pool, len(out), sum(v is not None for v in out), sum(v is not None for v in found) -
                        sum(v is not None for v in out))
        return out

    def lookup(self, pool: str, ids_list: list) -> tuple[np.ndarray, np.ndarray]:
        """``get_many`` as arrays (pipeline.cache.store_api.lookup)."""
        return lookup(self, pool, ids_list, self._dim(pool))

    # ------------------------------------------------------------------ writing

    def _write(self, pool: str, kind: str, keys: list[bytes], values: list[bytes]) -> int:
        """Store each key's float32 bytes in new objects (at most MAX_OBJECT bytes each); returns how many
        windows were stored (0 when the credentials may only read)."""
        dim, label = self._dims[pool]
        with self._lock:
            index = self._load_index(pool)
            fresh = [(k, v) for k, v in zip(keys, values) if k not in index]
            if self.read_only or not fresh:
                return 0
            groups, size = [[]], 0
            for k, v in fresh:
                if groups[-1] and size + len(v) > MAX_OBJECT:
                    groups.append([])
                    size = 0
                groups[-1].append((k, v))
                size += len(v)
            for group in groups:
                if not self._put(pool, kind, dim, label, group):
                    return 0
        return len(fresh)

    def _put(self, pool: str, kind: str, dim: int, label: str, group: list[tuple[bytes, bytes]]) -> bool:
        """One object, create-if-absent; False when the credentials may not write (said once)."""
        name, data = pack_block(pool, dim, label, kind, [k for k, _ in group], [v for _, v in group])
        path = pool_folder(pool) + name
        if path in self._damaged:     # the damaged object has this very name: a repair copy beside it
            path = pool_folder(pool) + name.replace(".lbw", f"-{secrets.token_hex(4)}.lbw")
        try:
            self.client.put_new(path, data)   # False: the same bytes are there already (another writer)
        except Refused as err:
            self.read_only = True
            warnings.warn(f"window store {self.uri}: the credentials may not write ({str(err).splitlines()[0][:200]}); "
                          "this run reads the stored windows, and new windows were not stored", StoreWarning,
                          stacklevel=3)
            return False
        except Exception as err:  # noqa: BLE001 - obstore's errors: the run's error
            raise run_error(self.uri, f"writing {path}", err) from None
        self._keep(path, data)
        for key, offset, values in parse_index(data, len(group))[1]:
            self._index[pool][key] = (path, offset, values)
        return True

    def put_many(self, pool: str, ids_list: list, vectors: np.ndarray) -> int:
        """Store (n, dim) float vectors as float32, one object for the windows not stored yet.

        Returns:
            n. Raises ValueError: unregistered pool or another shape; RunError: the write failed.
        """
        dim = self._dim(pool)
        vecs = np.asarray(vectors)
        if vecs.ndim != 2 or vecs.shape != (len(ids_list), dim) or vecs.dtype.kind != "f":
            raise ValueError(f"vectors must be float ({len(ids_list)}, {dim}), got {vecs.dtype} {vecs.shape}")
        data = np.ascontiguousarray(vecs, dtype="<f4")
        self._write(pool, "vectors", window_keys(pool, ids_list), [row.tobytes() for row in data])
        return len(ids_list)

    def put_tokens(self, pool: str, ids_list: list, tokens: list[np.ndarray]) -> int:
        """Store each window's (len(ids) - 2, hidden) token vectors. Returns how many. ValueError: another shape."""
        hidden = self._dim(pool)
        for ids, mat in zip(ids_list, tokens):
            if mat.shape != (len(ids) - 2, hidden):
                raise ValueError(f"token vectors must be ({len(ids) - 2}, {hidden}), got {mat.shape}")
        self._write(pool, "tokens", window_keys(pool, ids_list),
                    [np.ascontiguousarray(m, dtype="<f4").tobytes() for m in tokens])
        return len(ids_list)

    # ------------------------------------------------------------------ the store as a whole

    def _listing(self) -> list[dict]:
        try:
            return self.client.list(f"{LAYOUT}/")
        except Exception as err:  # noqa: BLE001
            raise run_error(self.uri, "listing the store", err) from None

    def stats(self) -> dict:
        """The store's objects counted from one listing (windows from the object names, so a window two
        racing runs both stored counts twice), with this store object's lookups, hits and rejected.
        Keys as WindowStore.stats: path, journal_mode, size_bytes, entries, lookups, hits, rejected,
        hit_rate, bytes_per_1000, models (per pool key: label and dim read from one of its objects)."""
        by_pool: dict[str, list] = {}
        listing = self._listing()
        for obj in listing:
            named = parse_name(obj["path"])
            if named is not None:
                entry = by_pool.setdefault(obj["path"].split("/")[1], [0, 0, obj["path"]])
                entry[0] += named[1]
                entry[1] += obj["size"]
        models = []
        for pool in sorted(set(by_pool) | set(self._counts)):
            entries, size, path = by_pool.get(pool, (0, 0, None))
            dim, label = self._dims.get(pool, (0, "?"))
            if path is not None and (pool not in self._dims):
                try:
                    head = parse_index(self.client.get(path, index_length(parse_name(path)[1])), parse_name(path)[1])[0]
                    dim, label = head.get("dim", 0), head.get("label", "?")
                except Exception:  # noqa: BLE001 - a damaged object: the label stays unknown
                    pass
            lookups, hits, rejected = self._counts.get(pool, (0, 0, 0))
            models.append({"pool_key": pool, "label": label, "dim": dim, "entries": entries, "bytes": size,
                           "lookups": lookups, "hits": hits, "rejected": rejected,
                           "hit_rate": hits / lookups if lookups else None})
        entries, size = sum(m["entries"] for m in models), sum(m["bytes"] for m in models)
        lookups, hits = sum(m["lookups"] for m in models), sum(m["hits"] for m in models)
        return {"path": self.uri, "journal_mode": "objects", "size_bytes": size, "wal_bytes": 0,
                "entries": entries, "objects": sum(parse_name(o["path"]) is not None for o in listing),
                "lookups": lookups, "hits": hits,
                "rejected": sum(m["rejected"] for m in models), "hit_rate": hits / lookups if lookups else None,
                "bytes_per_1000": size * 1000 / entries if entries else None, "models": models}

    def clear(self) -> None:
        """Delete every object under ``PREFIX/windows-v1/`` (nothing else under the prefix or the bucket)."""
        paths = [o["path"] for o in self._listing()]
        try:
            self.client.delete(paths)
        except Exception as err:  # noqa: BLE001
            raise run_error(self.uri, "deleting the stored windows", err) from None
        with self._lock:
            self._index, self._spare, self._objects, self._counts = {}, {}, collections.OrderedDict(), {}
            self._held = 0

    def close(self) -> None:
        """Drop what this store object holds in memory and its connection; nothing is pending (every put
        was written when it returned). The next call lists and connects again."""
        with self._lock:
            self._index, self._spare, self._objects = {}, {}, collections.OrderedDict()
            self._held = 0
            self.client.close()


def open_s3(uri: str) -> ObjectStore:
    """Open ``s3://BUCKET/PREFIX`` and check it with one LIST (the opener in pipeline.cache.stores.SCHEMES).

    Raises:
        ConfigError: credentials missing (naming the variables), nothing answering at the endpoint, the
            bucket missing, the credentials refused (pipeline.storage.open_error).
    """
    store = ObjectStore(uri)
    store.client.check()
    return store
