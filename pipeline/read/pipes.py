"""Inputs that cannot seek (a pipe such as ``/dev/stdin`` or ``<(zcat x.jsonl.gz)``, a character
device): copied once to a temporary file, which the scan and every block then read like any file.

The reader reads each input more than once (the scan, then each block from its byte offset), which
a pipe cannot give. The copy lives in a temporary folder removed when the process exits. A copy
whose first bytes are a compressed stream (gzip, zstd, bzip2, xz) is read decompressed, since a
pipe has no file name to say so.
"""
from __future__ import annotations

import atexit
import dataclasses
import shutil
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError
from .signatures import head_of, stream_of

if TYPE_CHECKING:
    from .sources import Source


def is_pipe(path: Path) -> bool:
    """True for an input that exists but is neither a regular file nor a folder (a pipe, a socket,
    a character device): it can be read once, from its start, and cannot seek."""
    mode = path.stat().st_mode
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _remove(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def spool(src: Source) -> Source:
    """The source with its bytes copied to a temporary regular file (named as the pipe: 'stdin', '63').

    Returns:
        The same Source with ``path`` the copy and ``spooled_from`` the name given; its compression
        is the one its first bytes name, when they name one and its name does not.

    Raises:
        InputError: the copy failed (no space left, the pipe cannot be read), naming the pipe and the fix.
    """
    folder = tempfile.mkdtemp(prefix="longbert-pipe-")
    atexit.register(_remove, folder)
    copy = Path(folder) / (src.path.name or "stdin")
    try:
        with src.path.open("rb") as pipe, copy.open("wb") as out:
            shutil.copyfileobj(pipe, out, 1 << 20)
    except OSError as err:
        _remove(folder)
        raise InputError(f"{src.path}: this input is a pipe, which the reader copies to a temporary file first, "
                         f"and the copy failed ({err.strerror or err}); save it to a file and pass that file "
                         f"(e.g. `zcat x.jsonl.gz > x.jsonl`)") from None
    compression = src.compression or stream_of(head_of(copy))
    return dataclasses.replace(src, path=copy, compression=compression, spooled_from=str(src.path))
