"""The object store's connection (pipeline.cache.object_store): obstore's calls on one bucket and prefix,
counted, over the connection of pipeline.storage (the AWS settings as boto3 reads them, the check made when a
store opens, S3's failures as the run's errors named for what they are; shared with the outputs and inputs).
Called by the object store only.
"""
from __future__ import annotations

import collections
import math
import os
import threading

import obstore
from obstore.exceptions import AlreadyExistsError, PermissionDeniedError, PreconditionError, UnauthenticatedError
from obstore.store import S3Store

from ..storage import check_bucket, check_credentials, s3_store, split_uri

Refused = (PermissionDeniedError, UnauthenticatedError)
Exists = (AlreadyExistsError, PreconditionError)


class Client:
    """obstore's calls on one bucket and prefix, counted: ``requests`` (GET, PUT, LIST, DELETE) and
    ``bytes_in``/``bytes_out``; a forked child makes its own connection. Paths are relative to the prefix."""

    def __init__(self, uri: str):
        self.uri = uri
        self.bucket, self.prefix = split_uri(uri)
        self.requests: collections.Counter = collections.Counter()
        self.bytes_in = self.bytes_out = 0
        self._store, self._pid, self._lock = None, None, threading.Lock()

    def store(self) -> S3Store:
        """The S3Store of this process (made on first use, again after a fork)."""
        with self._lock:
            if self._store is None or self._pid != os.getpid():
                self._store = s3_store(self.uri)
                self._pid = os.getpid()
            return self._store

    def close(self) -> None:
        """Drop the connection (made again on the next call)."""
        with self._lock:
            self._store = None

    def list(self, prefix: str) -> list[dict]:
        """Every object under ``prefix``: dicts with "path" (relative) and "size" (bytes)."""
        found = [obj for chunk in obstore.list(self.store(), prefix=prefix, chunk_size=1000) for obj in chunk]
        self.requests["LIST"] += max(1, math.ceil(len(found) / 1000))   # S3 pages hold 1,000 keys
        return found

    def get(self, path: str, end: int | None = None) -> bytes:
        """The object's bytes, or its first ``end`` bytes (a ranged GET; fewer when the object is shorter)."""
        self.requests["GET"] += 1
        store = self.store()
        data = bytes(obstore.get(store, path).bytes() if end is None else obstore.get_range(store, path, start=0, end=end))
        self.bytes_in += len(data)
        return data

    def put_new(self, path: str, data: bytes) -> bool:
        """Write ``data`` at ``path`` only if no object is there (If-None-Match: *); False when one was."""
        self.requests["PUT"] += 1
        try:
            obstore.put(self.store(), path, data, mode="create")
        except Exists:
            return False
        self.bytes_out += len(data)
        return True

    def delete(self, paths: list[str]) -> None:
        """Delete ``paths`` (1,000 a request)."""
        for start in range(0, len(paths), 1000):
            self.requests["DELETE"] += 1
            obstore.delete(self.store(), paths[start:start + 1000])

    def first(self, prefix: str) -> dict | None:
        """The first object under ``prefix`` (one LIST of at most one key), or None when there is none."""
        self.requests["LIST"] += 1
        chunk = next(iter(obstore.list(self.store(), prefix=prefix, chunk_size=1)), None)
        return chunk[0] if chunk else None

    def check(self) -> None:
        """One LIST of at most one key: the endpoint answers, the bucket exists, the credentials are accepted.

        Raises:
            ConfigError: as pipeline.storage.open_error.
        """
        check_credentials(self.uri)   # nothing is sent without credentials
        self.requests["LIST"] += 1
        check_bucket(self.store(), self.uri)

