"""The object store's connection (pipeline.cache.object_store): an S3 client (obstore) configured from the
standard AWS variables only, the check made when a store opens, S3's failures as the run's errors, and a
count of requests and bytes. Called by the object store only.

Why obstore: its ``put(mode="create")`` sends ``If-None-Match: *``, a conditional put that AWS S3, MinIO,
SeaweedFS and R2 honour, so an object is written once and two writers that race never overwrite one
another; it reads the AWS variables itself, talks to any S3-compatible endpoint, and ships as a wheel.
"""
from __future__ import annotations

import collections
import math
import os
import threading
from datetime import timedelta

import obstore
from obstore.exceptions import (AlreadyExistsError, NotFoundError, PermissionDeniedError, PreconditionError,
                                UnauthenticatedError)
from obstore.store import S3Store

from ..errors import ConfigError, RunError

CONNECT_TIMEOUT = "5s"          # a TCP connection: an endpoint where nothing listens fails in seconds
REQUEST_TIMEOUT = "120s"        # one request, body included (a 64 MiB object on a slow link)
RETRIES = {"max_retries": 3, "retry_timeout": timedelta(seconds=30)}   # then the open check fails (< 60 s)
KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
OTHER_CREDENTIALS = ("AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                     "AWS_CONTAINER_CREDENTIALS_FULL_URI")   # role credentials obstore also reads from the environment
Refused = (PermissionDeniedError, UnauthenticatedError)
Exists = (AlreadyExistsError, PreconditionError)


def split_uri(uri: str) -> tuple[str, str]:
    """(bucket, prefix) of "s3://BUCKET/PREFIX" (prefix "" for a whole bucket). Example: "s3://b/x/y" -> ("b", "x/y")."""
    bucket, _, prefix = uri.split("://", 1)[1].partition("/")
    return bucket, prefix.strip("/")


def endpoint() -> str:
    """Where requests go, for messages: $AWS_ENDPOINT_URL, else AWS S3 in $AWS_REGION."""
    return os.environ.get("AWS_ENDPOINT_URL") or f"AWS S3 ({os.environ.get('AWS_REGION') or 'us-east-1'})"


def check_credentials(uri: str) -> None:
    """Credentials are set: both of AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a role's variables.

    Raises:
        ConfigError: naming the variables missing (nothing is sent).
    """
    if any(os.environ.get(v) for v in OTHER_CREDENTIALS):
        return
    missing = [v for v in KEYS if not os.environ.get(v)]
    if missing:
        raise ConfigError(f"--cache {uri}: no credentials for {endpoint()}: {' and '.join(missing)} "
                          f"{'is' if len(missing) == 1 else 'are'} not set; set {' and '.join(KEYS)} "
                          "(and AWS_SESSION_TOKEN for temporary ones), or pass --cache a folder")


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
                url = os.environ.get("AWS_ENDPOINT_URL", "")
                config = {"endpoint": url} if url else {}
                self._store = S3Store(self.bucket, prefix=self.prefix or None, config=config,
                                      client_options={"allow_http": url.startswith("http://"),
                                                      "connect_timeout": CONNECT_TIMEOUT, "timeout": REQUEST_TIMEOUT},
                                      retry_config=RETRIES)
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

    def check(self) -> None:
        """One LIST of at most one key: the endpoint answers, the bucket exists, the credentials are accepted.

        Raises:
            ConfigError: as ``open_error``.
        """
        check_credentials(self.uri)
        try:
            self.requests["LIST"] += 1
            next(iter(obstore.list(self.store(), chunk_size=1)), None)
        except Exception as err:  # noqa: BLE001 - obstore's errors, named by the message below
            raise open_error(self.uri, err) from None


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else type(err).__name__


def open_error(uri: str, err: Exception) -> ConfigError:
    """An S3 failure while a store opens, as the ConfigError (exit 2) that names its cause and the fix."""
    text, bucket = str(err), split_uri(uri)[0]
    if "NoSuchBucket" in text or isinstance(err, NotFoundError):
        return ConfigError(f"--cache {uri}: the bucket {bucket!r} does not exist at {endpoint()}; create it "
                           f"(e.g. aws s3 mb s3://{bucket}) or pass --cache another bucket")
    if isinstance(err, Refused) or any(c in text for c in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied",
                                                           "403 Forbidden", "ExpiredToken", "InvalidToken")):
        key = os.environ.get("AWS_ACCESS_KEY_ID") or "(not set)"
        return ConfigError(f"--cache {uri}: {endpoint()} refused the credentials (AWS_ACCESS_KEY_ID={key}): "
                           f"{_code(text)}; check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN")
    if "error sending request" in text or "timed out" in text.lower() or "connect" in text.lower():
        return ConfigError(f"--cache {uri}: nothing answers at {endpoint()} ({_first_line(err)}); start the server, "
                           "or set AWS_ENDPOINT_URL to its address (unset for AWS S3)")
    return ConfigError(f"--cache {uri}: the store at {endpoint()} cannot be read ({_first_line(err)})")


def _code(text: str) -> str:
    """S3's error code in a response (<Code>X</Code>), else the message's first line."""
    if "<Code>" in text:
        return text.split("<Code>", 1)[1].split("</Code>", 1)[0]
    return text.strip().splitlines()[0][:200] if text.strip() else "refused"


def run_error(uri: str, what: str, err: Exception) -> RunError:
    """An S3 failure after the store opened, as the run's error (exit 1)."""
    return RunError(f"--cache {uri}: {what} failed at {endpoint()} ({_first_line(err)}); run again, or pass --cache "
                    "another store")
