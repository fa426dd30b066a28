"""Bytes of one input: open a (decompressed) stream at an offset, check the first bytes and that every
byte decodes, and split a stream into lines (``\\n``, ``\\r\\n`` or ``\\r``) with their numbers and
byte offsets: the one line splitter the line formats share.

Integrity: a gzip, zstd, bzip2 or xz stream that is damaged or ends before its end marker is an
InputError (file and the decompressed byte reached), never a shorter corpus; a zero-byte compressed
file too. Bytes that do not
decode get one message wherever they are (header or data): file, byte offset, line, the --encoding to
pass, and a UTF-16 / UTF-32 byte-order mark by name. UTF-16 / UTF-32 input (with that --encoding) is
read as UTF-8 bytes. What a file is from its first bytes is ``magic``'s part.
"""
from __future__ import annotations

import bz2
import codecs
import functools
import hashlib
import lzma
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ..errors import InputError
from .encoding_advice import LINES_SHOWN, SAMPLE_BYTES, WIDE, undecodable_message
from .remote import S3Path

CHUNK_BYTES = 1 << 20
HEAD = 4096  # first bytes kept for the decode advice (a byte-order mark, the first line)


@functools.lru_cache(maxsize=None)
def python_encoding(encoding: str) -> str:
    """utf-8 is read as utf-8-sig, so a byte-order mark before the header is dropped, not kept in a name."""
    return "utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding


@functools.lru_cache(maxsize=None)
def line_decoding(encoding: str) -> str:
    """The codec for one line at a time: UTF-8's byte-order mark is dropped by hand, at offset 0 only;
    UTF-16 / UTF-32 lines come as UTF-8 from ``open_binary``."""
    name = codecs.lookup(encoding).name
    return "utf-8" if name in ("utf-8", "utf-8-sig") or name in WIDE else encoding


_NAMES = {"gz": "gzip", "zst": "zstd", "bz2": "bzip2", "xz": "xz"}


def _decompressor(kind: str):
    """A fresh one-stream decompressor object (``decompress``, ``eof``, ``unused_data``) for one gzip
    member, bzip2 / xz stream or zstd frame."""
    if kind == "gz":
        return zlib.decompressobj(wbits=31)  # gzip header and trailer (CRC-32, length) checked
    if kind == "bz2":
        return bz2.BZ2Decompressor()
    if kind == "xz":
        return lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
    import zstandard

    return zstandard.ZstdDecompressor().decompressobj()


class _Wrapper:
    """A read-only byte stream over the file object ``inner``: closing it closes ``inner``; a context manager."""

    inner: BinaryIO

    def close(self) -> None:
        self.inner.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Unpacked(_Wrapper):
    """A decompressed stream that refuses to end early: every read that meets a damaged or cut stream
    raises InputError naming the file and the decompressed byte where it happened.

    gzip, bzip2, xz (standard library) and zstd: one decompressor object per member, stream or frame,
    fed 64 KiB at a time, so the bytes decompressed before a failure are known (a cut stream names
    exactly how far it decoded). The input must end exactly at the end of a member; gzip and xz
    may be followed by zero bytes (padding, as their tools allow).
    """

    def __init__(self, path: Path, compression: str):
        self.path, self.kind, self.done, self.produced = path, compression, 0, 0
        self.inner = path.open("rb")
        if self.inner.read(1) == b"":
            self.inner.close()
            raise InputError(f"{path}: the file is empty (0 bytes), not a {_NAMES[compression]} stream; "
                             "the file is cut short: download or copy it again")
        self.inner.seek(0)
        self.frame = None
        self.pending = b""

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` decompressed bytes (b"" only at the true end of the stream)."""
        n = n if n > 0 else CHUNK_BYTES
        try:
            while len(self.pending) < n and self._fill():
                pass
        except InputError:
            raise
        except Exception as err:  # EOFError, zlib.error, OSError, LZMAError, ZstdError: a damaged stream
            raise InputError(self._message(err)) from None
        got, self.pending = self.pending[:n], self.pending[n:]
        self.done += len(got)
        return got

    def _fill(self) -> bool:
        """Decompress the next 64 KiB of stored bytes into ``pending``; False at the end of the input."""
        data = self.inner.read(1 << 16)
        if not data:
            if self.frame is not None and not self.frame.eof:
                raise EOFError(f"the input ends inside a {_NAMES[self.kind]} stream")
            return False
        while data:
            if self.frame is None or self.frame.eof:
                if self.frame is not None and self.kind in ("gz", "xz"):
                    data = data.lstrip(b"\0")  # padding after the last member
                    if not data:
                        break
                self.frame = _decompressor(self.kind)
            out = self.frame.decompress(data)
            self.produced += len(out)
            self.pending += out
            data = self.frame.unused_data if self.frame.eof else b""
        return True

    def _message(self, err: Exception) -> str:
        what = "ends early" if isinstance(err, EOFError) else "is damaged"
        return (f"{self.path}: the {_NAMES[self.kind]} stream {what} after decompressed byte {self.produced} "
                f"({err}); the file is cut short or corrupt, as by an interrupted download or copy: get it again")


class _Transcoded(_Wrapper):
    """A UTF-16 / UTF-32 byte stream as UTF-8 bytes, so that the line splitter (which splits on the
    bytes \\n and \\r) and the offsets of a plan work on it as on any other file."""

    def __init__(self, inner, encoding: str):
        self.inner, self.buffer = inner, b""
        self.decoder = codecs.getincrementaldecoder(encoding)(errors="strict")

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` UTF-8 bytes (b"" at the end)."""
        n = n if n > 0 else CHUNK_BYTES
        while len(self.buffer) < n:
            chunk = self.inner.read(CHUNK_BYTES)
            self.buffer += self.decoder.decode(chunk, final=not chunk).encode("utf-8")
            if not chunk:
                break
        got, self.buffer = self.buffer[:n], self.buffer[n:]
        return got


def open_binary(path: Path | S3Path, compression: str | None, offset: int = 0, encoding: str = "utf-8",
                end: int = 0) -> BinaryIO:
    """The (decompressed) byte stream of ``path``, positioned at ``offset`` of the decompressed bytes.

    A compressed stream cannot seek: the bytes before ``offset`` are decompressed and dropped. Reads
    of a compressed stream that is damaged or ends early raise InputError (file and byte). A UTF-16 or
    UTF-32 ``encoding`` gives the text as UTF-8 bytes (offsets count those; decode them as utf-8).
    ``end`` (an uncompressed S3 object, 0: its end): the stream stops there, so only the bytes
    [offset, end) are fetched (a local file ignores it).
    """
    wide = codecs.lookup(encoding).name in WIDE
    if compression is None and not wide and isinstance(path, S3Path):
        return path.open_range(offset, end)  # type: ignore[return-value]
    if compression is None and not wide:
        fh = path.open("rb")
        fh.seek(offset)
        return fh
    fh = _Unpacked(path, compression) if compression else path.open("rb")
    if wide:
        fh = _Transcoded(fh, encoding)
    left = offset
    while left:
        got = fh.read(min(left, CHUNK_BYTES))
        if not got:
            break
        left -= len(got)
    return fh  # type: ignore[return-value]


def hash_and_check_bytes(path: Path, encoding: str, compression: str | None = None, fmt: str | None = None,
                         skip_undecodable: bool = False) -> tuple[str, int]:
    """(sha256 of the file's bytes as stored, their count); InputError at the first byte that does not
    decode, naming the (decompressed) byte offset and the line (``\\n``, ``\\r\\n`` and ``\\r`` all end a line),
    with advice that works when followed (``encoding_advice``: the whole command for a UTF-16 export,
    the lines of a file that mixes encodings). ``fmt``: the format tried, for that advice.
    ``skip_undecodable`` (--on-bad-lines skip): bytes that do not decode are left to the record
    reader, which skips and counts their records; only the hash is computed here."""
    digest = hashlib.sha256()
    decoder = codecs.getincrementaldecoder(python_encoding(encoding))(errors="strict")
    n_stored = 0
    with path.open("rb") as raw:
        if compression is None:
            stream: BinaryIO = raw
        else:
            stream = open_binary(path, compression)

        done = lines = 0
        prev_cr = False
        head = b""
        while True:
            chunk = stream.read(CHUNK_BYTES)
            final = not chunk
            try:
                if decoder is not None:
                    decoder.decode(chunk, final=final)
            except UnicodeDecodeError as err:
                if skip_undecodable and codecs.lookup(encoding).name not in WIDE:
                    decoder = None
                else:
                    bad = chunk[err.start:err.start + 4] if chunk else b""
                    line = lines + line_breaks(chunk[:err.start], prev_cr) + 1
                    start = max(chunk.rfind(b"\n", 0, err.start), chunk.rfind(b"\r", 0, err.start)) + 1
                    raise InputError(undecodable_message(path, lambda: mixed_lines(path, compression), encoding,
                                                         done + err.start, line, bad, head if done else chunk[:HEAD],
                                                         fmt, chunk[start:start + SAMPLE_BYTES])) from None
            if final:
                break
            head = head or chunk[:HEAD]
            lines += line_breaks(chunk, prev_cr)
            prev_cr = chunk.endswith(b"\r")
            done += len(chunk)
            if compression is None:
                digest.update(chunk)
        if compression is not None:
            stream.close()
            raw.seek(0)
            for block in iter(lambda: raw.read(CHUNK_BYTES), b""):
                digest.update(block)
        n_stored = raw.tell()
    return digest.hexdigest(), n_stored


def line_breaks(data: bytes, prev_cr: bool) -> int:
    """Line ends in ``data``: each \\n, \\r\\n and lone \\r once (a \\n right after a \\r that ended
    the previous chunk is the second half of that \\r\\n)."""
    n = data.count(b"\n") + data.count(b"\r") - data.count(b"\r\n")
    return n - 1 if prev_cr and data.startswith(b"\n") else n


def lines(fh: BinaryIO, offset: int, line: int) -> Iterator[tuple[int, int, bytes]]:
    """(line number, byte offset, bytes with their line end) of each line from the stream's position.

    Lines end in \\n, \\r\\n or a lone \\r (bytes.splitlines); a \\r at a chunk's end waits for the
    next chunk, which may start with its \\n.
    """
    carry = b""
    while True:
        chunk = fh.read(CHUNK_BYTES)
        if not chunk:
            if carry:
                yield line, offset, carry
            return
        parts = (carry + chunk).splitlines(keepends=True)
        carry = parts.pop() if not parts[-1].endswith(b"\n") else b""
        for part in parts:
            yield line, offset, part
            line += 1
            offset += len(part)


def file_sha256(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    n = 0
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK_BYTES), b""):
            digest.update(chunk)
            n += len(chunk)
    return digest.hexdigest(), n


def mixed_lines(path: Path, compression: str | None) -> tuple[list[int], int, int | None]:
    """(the first LINES_SHOWN lines that are not UTF-8, how many there are, the first line that is UTF-8
    with a non-ASCII character or None). Reads the whole (decompressed) file; used only when it fails."""
    bad: list[int] = []
    n_bad, good = 0, None
    with open_binary(path, compression) as fh:
        for number, _, raw in lines(fh, 0, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                n_bad += 1
                if len(bad) < LINES_SHOWN:
                    bad.append(number)
                continue
            if good is None and not raw.isascii():
                good = number
    return bad, n_bad, good
