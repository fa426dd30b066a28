"""Inputs checked again while the run reads them: a file that changes after the scan must not give
rows from two versions under a manifest that certifies the first.

Each block spec carries the size and modification time (ns) its files had when the scan began to
read them (``stamp_of``); ``check_stamps`` compares them before and after a block is read (one
``os.stat`` per file: microseconds). At the end of the run, ``verify_inputs`` hashes every input again
the way the scan did and compares with the sha256 the output's metadata and manifest record (a
change that kept size and time, as by ``touch -r`` or a copy with ``cp -p``, is caught there).
An S3 object is checked by its ETag instead: each ranged GET of a block is conditional on it
(If-Match), and at the end one HEAD per object compares it with the scan's.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ..errors import RunError
from .remote import S3Path, as_path, head, is_uri
from .specs import BlockSpec, FileScan
from .streams import file_sha256


def stamp_of(paths: list[Path | S3Path]) -> tuple[int, ...]:
    """(size in bytes, modification time in ns) of each file, flat: (size0, mtime0, size1, mtime1, ...);
    an S3 object's are those of the scan's GET (pipeline.read.remote)."""
    out: list[int] = []
    for path in paths:
        st = path.stat() if isinstance(path, S3Path) else os.stat(path)
        out += [st.st_size, st.st_mtime_ns]
    return tuple(out)


def _changed(path: Path, what: str) -> RunError:
    return RunError(f"{path}: the input changed while the run read it ({what}); its rows would mix two versions "
                    "of the file, so the run stops: run again once the file no longer changes (a DIR/ output "
                    "keeps its finished parts; --resume redoes the rest only if the file is as it was)")


def block_paths(spec: BlockSpec) -> list[Path | S3Path]:
    """The files a block reads: its file, or (text) each of its files under the root folder; S3 objects
    with the size and ETag the scan saw (``spec.stamp``, ``spec.etags``), which bound and condition their reads."""
    root = as_path(spec.path)
    paths = [root / rel for rel in spec.files] if spec.format == "text" else [root]
    if not isinstance(root, S3Path):
        return paths
    sizes = spec.stamp[0::2] or (-1,) * len(paths)
    etags = spec.etags or ("",) * len(paths)
    return [S3Path(p.bucket, p.key, size, etag) for p, size, etag in zip(paths, sizes, etags)]


def check_stamps(spec: BlockSpec) -> None:
    """RunError (exit 1) naming the file when a file of the block is gone, or its size or modification
    time differs from the scan's; a spec without stamps (built by hand) is not checked."""
    if not spec.stamp or is_uri(spec.path):
        return   # S3: every ranged GET of the block is conditional on the scan's ETag (If-Match) instead
    for k, path in enumerate(block_paths(spec)):
        size, mtime = spec.stamp[2 * k], spec.stamp[2 * k + 1]
        try:
            st = os.stat(path)
        except OSError as err:
            raise _changed(path, f"it cannot be read now: {err.strerror or err}") from None
        if st.st_size != size:
            raise _changed(path, f"{size} bytes when the scan read it, {st.st_size} now")
        if st.st_mtime_ns != mtime:
            raise _changed(path, "its modification time moved after the scan read it")


def text_digest(items: list[tuple[str, str]]) -> str:
    """sha256 of a folder of text files: each (relative path, sha256 of its bytes) in order."""
    digest = hashlib.sha256()
    for rel, sha in items:
        digest.update(f"{rel}\0{sha}\0".encode())
    return digest.hexdigest()


def content_sha256(fs: FileScan) -> str:
    """The sha256 the scan records for one input (a file's stored bytes; a text folder's files)."""
    if fs.format == "text":
        return text_digest([(rel, file_sha256(fs.path / rel)[0]) for rel in fs.files])
    return file_sha256(fs.path)[0]


def verify_inputs(files: list[FileScan]) -> None:
    """Hash every input again and compare with the scan's sha256 (what the metadata and the manifest
    record); an S3 object's ETag and size are compared instead (one HEAD each: no object is fetched
    again). RunError (exit 1) naming the first file whose content differs or cannot be read."""
    for fs in files:
        if isinstance(fs.path, S3Path):
            _verify_objects(fs)
            continue
        try:
            now = content_sha256(fs)
        except OSError as err:
            raise _changed(fs.path, f"it cannot be read at the end of the run: {err.strerror or err}") from None
        if now != fs.sha256:
            raise _changed(fs.path, "its sha256 at the end of the run differs from the one the scan "
                                    "recorded")


def _verify_objects(fs: FileScan) -> None:
    """RunError when an S3 input's object (or a text folder's objects) is gone or has another ETag or
    size than the scan's GET saw (``FileScan.etags``)."""
    paths = [fs.path / rel for rel in fs.files] if fs.format == "text" else [fs.path]
    for path, (size, etag) in zip(paths, fs.etags):
        now = head(path)
        if now is None:
            raise _changed(path, "it is gone at the end of the run")
        if (now.size, now.etag) != (size, etag):
            raise _changed(path, f"its ETag or size at the end of the run ({now.etag}, {now.size} bytes) is not "
                                 f"the scan's ({etag}, {size} bytes)")
