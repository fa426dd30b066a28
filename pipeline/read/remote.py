"""Inputs in S3-compatible object storage: ``S3Path``, an object named ``s3://BUCKET/KEY`` that the readers
open as they open a local file, the listing of a prefix, and the two ways an object is read. Called by
sources (listing), the format modules (opening) and recheck (ETags).

- While the inputs are scanned (``scanning()`` around the scan, ``fetching_whole()`` around each input's
  checks, on the driver), an object is fetched whole, once, with one streamed GET into a temporary file
  (one object at a time, removed when the next is fetched and when the scan ends), so every check of the
  scan reads it as it reads a local file; the GET's ETag and size are recorded (``etag_of``).
- Otherwise (a block read by the local engine's feed threads or by a Ray actor) an object is read by
  ranged GETs (``RangeReader``), each conditional on the ETag the scan saw (If-Match): a line-format block
  fetches its byte range [offset, end), a parquet block its footer and its row groups' column chunks.
"""
from __future__ import annotations

import atexit
import contextlib
import io
import os
import posixpath
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import SimpleNamespace

from ..errors import InputError, PipelineError
from ..storage import aws_env
from . import s3_connect

SCHEME = "s3://"
FIRST_FETCH = 64 << 10       # bytes: the first ranged GET of a stream whose end is not known (a header)
MAX_FETCH = 8 << 20          # bytes: the largest ranged GET (then the buffer a reader holds)

_local = threading.local()   # .seen (uri -> (size, etag)) and .spool while this thread scans


def is_uri(path: object) -> bool:
    """True for an S3 input: an ``S3Path``, or a string that starts with ``s3://``."""
    return isinstance(path, S3Path) or (isinstance(path, str) and path.startswith(SCHEME))


def as_path(path: str) -> Path | S3Path:
    """A block spec's path string as the object the readers open: 's3://b/k' -> S3Path, else a Path."""
    return S3Path.parse(path) if path.startswith(SCHEME) else Path(path)


@dataclass(frozen=True)
class S3Path:
    """An object (or, for a folder of text files, a prefix) in a bucket; compared by bucket and key.

    ``size`` and ``etag`` are what a listing, a HEAD or the scan saw (-1 and "" when not known): reads
    are bounded by the size and conditional on the ETag.
    """

    bucket: str
    key: str                                        # no leading or trailing '/'; "" is the bucket's root
    size: int = field(default=-1, compare=False)    # bytes
    etag: str = field(default="", compare=False)

    @classmethod
    def parse(cls, uri: str) -> S3Path:
        """'s3://b/x/y.csv' -> S3Path('b', 'x/y.csv')."""
        bucket, _, key = uri[len(SCHEME):].partition("/")
        return cls(bucket, key.strip("/"))

    def __str__(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.key}" if self.key else f"{SCHEME}{self.bucket}"

    def __truediv__(self, rel: str) -> S3Path:
        return S3Path(self.bucket, f"{self.key}/{rel}" if self.key else str(rel))

    @property
    def name(self) -> str:
        return PurePosixPath(self.key).name if self.key else self.bucket

    @property
    def suffix(self) -> str:
        return PurePosixPath(self.name).suffix

    @property
    def suffixes(self) -> list[str]:
        return PurePosixPath(self.name).suffixes

    @property
    def parent(self) -> S3Path:
        return S3Path(self.bucket, posixpath.dirname(self.key))

    def resolve(self) -> S3Path:
        return self

    def as_posix(self) -> str:
        return str(self)

    def relative_to(self, root: S3Path) -> PurePosixPath:
        """The key below ``root``'s: S3Path('b', 'x/y/z.txt').relative_to(S3Path('b', 'x')) -> 'y/z.txt'."""
        if root.bucket != self.bucket or (root.key and not self.key.startswith(root.key + "/")):
            raise ValueError(f"{self} is not under {root}")
        return PurePosixPath(self.key[len(root.key) + 1:] if root.key else self.key)

    def stat(self) -> SimpleNamespace:
        """st_size and st_mtime_ns (as os.stat gives them): the scan's copy's, else a HEAD's."""
        spool = getattr(_local, "spool", None)
        if spool is not None:
            spool.fetch(self)
            size, _, mtime = _local.seen[str(self)]
        else:
            meta = _call(self, lambda store: _obstore().head(store, self.key))
            size, mtime = meta["size"], int(meta["last_modified"].timestamp() * 1e9)
        return SimpleNamespace(st_size=size, st_mtime_ns=mtime, st_mode=stat.S_IFREG)

    def open(self, mode: str = "rb") -> io.RawIOBase:
        """The object's bytes from its start: the scan's copy, else a RangeReader."""
        assert mode == "rb", mode
        return self.open_range(0, 0)

    def open_range(self, start: int, end: int = 0) -> io.RawIOBase:
        """The object's bytes from ``start`` up to ``end`` (0: its end): the scan's copy (whole), else
        ranged GETs of exactly that range."""
        spool = getattr(_local, "spool", None)
        if spool is not None:
            fh = spool.fetch(self).open("rb")
            fh.seek(start)
            return fh
        return RangeReader(self, start, end)

    def read_bytes(self) -> bytes:
        """The whole object: the scan's copy, else one GET."""
        spool = getattr(_local, "spool", None)
        return spool.fetch(self).read_bytes() if spool is not None else RangeReader(self, readahead=False).read()

    def arrow_source(self) -> str | RangeReader:
        """What pyarrow opens: the scan's copy's path, else a RangeReader of exact reads (no read-ahead)."""
        spool = getattr(_local, "spool", None)
        return str(spool.fetch(self)) if spool is not None else RangeReader(self, readahead=False)


def _obstore():
    import obstore

    return obstore


def _call(path: S3Path, request):
    """``request(store)`` on the object's bucket; obstore's failures as the run's errors (s3_connect.error)."""
    try:
        return request(s3_connect.store(path.bucket))
    except PipelineError:
        raise
    except Exception as err:  # noqa: BLE001 - obstore's errors (and OSError for a 404), named by the message
        raise s3_connect.error(str(path), err, scanning()) from None


class RangeReader(io.RawIOBase):
    """A read-only, seekable file over one object, read by ranged GETs (If-Match the ETag when known).

    ``readahead`` (streams: the line splitter, decompression): each GET fetches the next
    ``FIRST_FETCH`` bytes, doubling up to ``MAX_FETCH``, or, when ``end`` is given, up to ``MAX_FETCH``
    of [start, end) at once; a read may return fewer bytes than asked. Without it (pyarrow), a read of n
    bytes is one GET of exactly those bytes, returned whole.
    """

    def __init__(self, path: S3Path, start: int = 0, end: int = 0, readahead: bool = True):
        super().__init__()
        if path.size < 0:
            meta = _call(path, lambda store: _obstore().head(store, path.key))
            path = S3Path(path.bucket, path.key, meta["size"], path.etag or meta["e_tag"] or "")
        self.path, self.pos = path, start
        self.limit = min(end, path.size) if end else path.size
        self.readahead = readahead
        self.fetch = MAX_FETCH if end else FIRST_FETCH
        self.buf, self.buf_at = b"", 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, pos: int, whence: int = 0) -> int:
        self.pos = pos if whence == 0 else self.pos + pos if whence == 1 else self.path.size + pos
        return self.pos

    def _get(self, start: int, stop: int) -> bytes:
        options = {"range": (start, stop), **({"if_match": self.path.etag} if self.path.etag else {})}
        return bytes(_call(self.path, lambda store: _obstore().get(store, self.path.key, options=options)).bytes())

    def read(self, n: int | None = -1) -> bytes:
        """Up to ``n`` bytes (all that is left when n < 0); b"" at ``end`` or the object's end. With
        ``readahead`` a read returns what the buffer or one GET holds, possibly fewer than ``n``."""
        left = self.limit - self.pos
        short = self.readahead and n is not None and n >= 0   # a stream's read: what one GET gave
        n = left if n is None or n < 0 else min(n, left)
        out: list[bytes] = []
        while n > 0:
            at = self.pos - self.buf_at
            if not 0 <= at < len(self.buf):
                want = min(self.fetch, left) if self.readahead else n
                self.buf, self.buf_at, at = self._get(self.pos, self.pos + want), self.pos, 0
                self.fetch = min(2 * self.fetch, MAX_FETCH)
                if not self.buf:
                    break   # the object ends before the size the scan saw (the reader then finds rows missing)
            piece = self.buf[at:at + n]
            out.append(piece)
            self.pos, n, left = self.pos + len(piece), n - len(piece), left - len(piece)
            if short:
                break
        return b"".join(out)

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


class _Spool:
    """The scan's copy of one object at a time, in a temporary folder removed when the scan ends."""

    def __init__(self):
        self.folder = Path(tempfile.mkdtemp(prefix="longbert-s3-"))
        atexit.register(shutil.rmtree, self.folder, True)
        self.uri, self.file = "", self.folder / "object"

    def fetch(self, path: S3Path) -> Path:
        """The local copy of ``path``, fetched with one streamed GET unless it is the copy held;
        records its (size, etag, mtime ns) in the thread's ``seen``.

        Raises:
            InputError: the GET failed (s3_connect.error), or the copy could not be written.
        """
        if self.uri == str(path):
            return self.file
        self.uri = ""
        try:
            with self.file.open("wb") as out:
                meta = self._copy(path, out)
        except OSError as err:
            raise InputError(f"input {path}: the scan copies each object to {self.folder.parent} to check it, and "
                             f"the copy failed ({err.strerror or err}); set TMPDIR to a folder with room for the "
                             "largest input object") from None
        _local.seen[str(path)] = (meta["size"], meta["e_tag"] or "", int(meta["last_modified"].timestamp() * 1e9))
        self.uri = str(path)
        return self.file

    @staticmethod
    def _copy(path: S3Path, out) -> dict:
        """Stream the object into ``out``; returns the GET's metadata (obstore's ObjectMeta)."""
        result = _call(path, lambda store: _obstore().get(store, path.key))
        chunks = iter(result.stream(min_chunk_size=MAX_FETCH))
        while True:
            chunk = _call(path, lambda _: next(chunks, None))
            if chunk is None:
                return result.meta
            out.write(chunk)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def scanning() -> bool:
    """True while this thread scans the inputs (failures are then InputError, exit 2)."""
    return getattr(_local, "seen", None) is not None


@contextlib.contextmanager
def scan_context() -> Iterator[None]:
    """The scan of the inputs: S3 failures are InputError (exit 2), ETags seen are kept (``etag_of``)
    until it ends, and the temporary copies are removed then."""
    outer = scanning()
    if not outer:
        _local.seen = {}
    try:
        yield
    finally:
        if not outer:
            spool = getattr(_local, "spool_made", None)
            if spool is not None:
                spool.close()
            _local.seen = _local.spool_made = _local.spool = None


@contextlib.contextmanager
def fetching_whole() -> Iterator[None]:
    """Inside ``scan_context``: each object opened is fetched whole, once, and read from its local copy."""
    if getattr(_local, "spool_made", None) is None:
        _local.spool_made = _Spool()
    _local.spool = _local.spool_made
    try:
        yield
    finally:
        _local.spool = None


def etag_of(path: S3Path) -> tuple[int, str]:
    """(size, ETag) the scan's GET of ``path`` saw (inside ``scan_context``)."""
    size, etag, _ = _local.seen[str(path)]
    return size, etag


def worker_env(paths: list[str]) -> dict[str, str]:
    """This process's AWS_* variables when one of ``paths`` (block specs' paths) is an S3 URI, else {}:
    another process that reads those blocks (a Ray actor) is started with them, so it reaches the same
    endpoint with the same credentials. Example: ["s3://b/a.csv"] -> {"AWS_ENDPOINT_URL": ..., ...}."""
    return aws_env() if any(is_uri(p) for p in paths) else {}


def check_access(root: S3Path) -> None:
    """The credentials are set (else InputError naming the variables, nothing sent)."""
    s3_connect.check_credentials(str(root))


def head(path: S3Path) -> S3Path | None:
    """The object at ``path`` with its size and ETag, or None when there is none (a 404)."""
    try:
        meta = _obstore().head(s3_connect.store(path.bucket), path.key)
    except PipelineError:
        raise
    except Exception as err:  # noqa: BLE001
        if isinstance(err, FileNotFoundError) or type(err).__name__ == "NotFoundError":
            return None
        raise s3_connect.error(str(path), err, scanning()) from None
    return S3Path(path.bucket, path.key, meta["size"], meta["e_tag"] or "")


def list_objects(root: S3Path, deep: bool = True) -> list[S3Path]:
    """Every object under the prefix ``root`` (the whole bucket for key ""), sorted by key, with sizes and
    ETags; folder markers (keys ending in '/') are left out. One LIST request per 1,000 keys. ``deep``
    False: only the objects directly under it (a glob such as 'PREFIX/*.jsonl' needs no deeper key)."""
    def listing(store):
        if not deep:
            return _obstore().list_with_delimiter(store, prefix=root.key or None)["objects"]
        return [obj for chunk in _obstore().list(store, prefix=root.key or None, chunk_size=1000) for obj in chunk]

    found = _call(root, listing)
    return sorted((S3Path(root.bucket, o["path"], o["size"], o.get("e_tag") or "") for o in found
                   if not o["path"].endswith("/")), key=lambda p: p.key)
