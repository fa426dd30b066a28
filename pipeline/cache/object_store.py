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
  new windows were not stored. Credentials that may list but not read: refused when the store opens
  (exit 2, naming s3:GetObject); an object refused later, or that cannot be read for another reason,
  is named for that reason (never "damaged"), its windows are encoded again, and no copy is added.
- Objects written by other processes after this one listed a pool key are seen by its next run.
"""
from __future__ import annotations

import collections
import secrets
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from obstore.exceptions import NotFoundError

from .object_blocks import LAYOUT, BlockDamaged, index_length, pack_block, parse_index, parse_name, pool_folder, verify
from .object_client import Client, Refused
from .object_report import read_failure, store_stats
from ..errors import ConfigError, StoreWarning
from ..storage import denied, endpoint, first_line, open_error, refused, run_error
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
        self._unread: set[str] = set()                               # objects that could not be read (not damaged)
        self.no_read = False                                         # a read was refused: nothing is written
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
                return path, None, ("damaged", str(err))
            except Exception as err:  # noqa: BLE001 - refused, gone since the listing, or failed: named apart
                return path, None, (read_failure(err), err)

        index, spare = {}, {}
        with ThreadPoolExecutor(THREADS) as pool_:
            for path, data, entries in pool_.map(read, sorted(objects)):
                if data is None:
                    self._left_out(path, *entries)
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

    def _left_out(self, path: str, kind: str, why) -> None:
        """Leave ``path`` out for the life of this store object, and say why once: "damaged" (its bytes are
        not its name's: a repair copy is stored), "refused" (the credentials may not read it: said once
        per store, and nothing more is written), "gone" (deleted since the listing: silent), "failed"
        (another error: named, and no copy is added)."""
        if path in self._damaged or path in self._unread:
            return
        if kind == "damaged":
            self._damaged.add(path)
            warnings.warn(f"window store {self.uri}: the object {path} is damaged ({why}); its windows are "
                          "encoded again and stored in a new object; delete it, or clear the store with "
                          f"`longbert cache {self.uri} --clear`", StoreWarning, stacklevel=3)
            return
        self._unread.add(path)
        if kind == "refused" and not self.no_read:
            self.no_read = True
            warnings.warn(f"window store {self.uri}: reading {path} was refused: {refused(self.uri, why, 'GET')}; "
                          "the windows of the objects it cannot read are encoded again, and this run stores "
                          "nothing (the store may hold them already)", StoreWarning, stacklevel=3)
        elif kind == "failed":
            warnings.warn(f"window store {self.uri}: the object {path} could not be read at {endpoint()} "
                          f"({first_line(why)}); its windows are encoded again, and the next run reads it again",
                          StoreWarning, stacklevel=3)

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
            except Exception as err:  # noqa: BLE001 - refused, gone or failed: its windows are misses
                return path, None, (read_failure(err), err)
            if verify(parse_name(path)[0], data):
                return path, data, None
            return path, None, ("damaged", "its sha256 is not its name's")

        with ThreadPoolExecutor(min(THREADS, max(1, len(todo)))) as pool_:
            for path, data, why in pool_.map(read, todo):
                if data is None:
                    self._left_out(path, *why)
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
                elif self._spare[pool].get(keys[i]):      # left out: another object holding the window
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
            if self.read_only or self.no_read or not fresh:
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
            warnings.warn(f"window store {self.uri}: writing was refused: {refused(self.uri, err, 'PUT')}; "
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
        """The store's objects, each read and checked, counted (pipeline.cache.object_report.store_stats:
        its keys), with this store object's lookups, hits and rejected (a run's, kept with it)."""
        return store_stats(self.uri, self.client, self._listing(), dict(self._dims), dict(self._counts),
                           WHOLE_BELOW, THREADS)

    def clear(self) -> None:
        """Delete every object under ``PREFIX/windows-v1/`` (nothing else under the prefix or the bucket).

        Raises:
            ConfigError (exit 2): the credentials may not delete (naming s3:DeleteObject, the fix, and how
                many objects were deleted before the refusal). RunError: another failure (as run_error).
        """
        paths = [o["path"] for o in self._listing()]
        try:
            self.client.delete(paths)
        except Exception as err:  # noqa: BLE001
            if denied(err):
                left = len(self._listing())
                raise ConfigError(f"longbert cache {self.uri} --clear: deleting the stored windows was refused: "
                                  f"{refused(self.uri, err, 'DELETE')}; {len(paths) - left} of {len(paths)} "
                                  "objects were deleted") from None
            raise run_error(self.uri, "deleting the stored windows", err) from None
        with self._lock:
            self._index, self._spare, self._objects, self._counts = {}, {}, collections.OrderedDict(), {}
            self._held = 0

    def check_read(self) -> None:
        """The credentials may read the stored objects: one LIST of one key under the layout, and a 1-byte
        ranged GET of it (nothing when the store is empty).

        Raises:
            ConfigError (exit 2): the read was refused (naming s3:GetObject and the fix); as open_error.
        """
        try:
            first = self.client.first(f"{LAYOUT}/")
            if first is not None:
                self.client.get(first["path"], 1)
        except NotFoundError:
            return   # deleted since the listing (a --clear): nothing to read, nothing refused
        except Exception as err:  # noqa: BLE001 - obstore's errors, named
            if denied(err):
                raise ConfigError(f"--cache {self.uri}: the stored windows cannot be read: "
                                  f"{refused(self.uri, err, 'GET')}, or pass --cache another store") from None
            raise open_error(self.uri, err) from None

    def close(self) -> None:
        """Drop what this store object holds in memory and its connection; nothing is pending (every put
        was written when it returned). The next call lists and connects again."""
        with self._lock:
            self._index, self._spare, self._objects = {}, {}, collections.OrderedDict()
            self._held = 0
            self.client.close()


def open_s3(uri: str) -> ObjectStore:
    """Open ``s3://BUCKET/PREFIX`` and check it (the opener in pipeline.cache.stores.SCHEMES): one LIST
    (the endpoint, the bucket, the credentials), then one LIST and a 1-byte GET of a stored object (the
    credentials may read it; ObjectStore.check_read).

    Raises:
        ConfigError: credentials missing (naming the variables), nothing answering at the endpoint, the
            bucket missing, the credentials refused, a permission missing (listing, reading), a TLS
            failure (pipeline.storage.open_error).
    """
    store = ObjectStore(uri)
    store.client.check()
    store.check_read()
    return store

