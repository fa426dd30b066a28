"""Bytes of one input: open a (decompressed) stream at an offset, check the first bytes and that every
byte decodes, and split a stream into lines (``\\n``, ``\\r\\n`` or ``\\r``) with their numbers and
byte offsets: the one line splitter the line formats share."""
from __future__ import annotations

import codecs
import gzip
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ..errors import InputError
from .sources import Source, how

CHUNK_BYTES = 1 << 20
_MAGIC = {b"PAR1": "a parquet file", b"\x1f\x8b": "gzip-compressed", b"\x28\xb5\x2f\xfd": "zstd-compressed"}


def python_encoding(encoding: str) -> str:
    """utf-8 is read as utf-8-sig, so a byte-order mark before the header is dropped, not kept in a name."""
    return "utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding


def line_decoding(encoding: str) -> str:
    """The codec for one line at a time: UTF-8's byte-order mark is dropped by hand, at offset 0 only."""
    return "utf-8" if codecs.lookup(encoding).name in ("utf-8", "utf-8-sig") else encoding


def open_binary(path: Path, compression: str | None, offset: int = 0) -> BinaryIO:
    """The (decompressed) byte stream of ``path``, positioned at ``offset`` of the decompressed bytes.

    A compressed stream cannot seek: the bytes before ``offset`` are decompressed and dropped.
    """
    if compression is None:
        fh = path.open("rb")
        fh.seek(offset)
        return fh
    if compression == "gz":
        fh = gzip.open(path, "rb")
    else:
        import zstandard

        fh = zstandard.ZstdDecompressor().stream_reader(path.open("rb"), closefd=True)
    left = offset
    while left:
        got = fh.read(min(left, CHUNK_BYTES))
        if not got:
            break
        left -= len(got)
    return fh


def magic_check(src: Source, path: Path) -> None:
    """A file whose first bytes say it is another format than the one tried: InputError with the fix."""
    with path.open("rb") as fh:
        head = fh.read(4)
    for magic, what in _MAGIC.items():
        if not head.startswith(magic):
            continue
        if what == "a parquet file" and src.format != "parquet":
            raise InputError(f"{path}: this is a parquet file (it starts with PAR1) but was {how(src)}; "
                             "name it .parquet or pass --format parquet")
        if what.endswith("compressed") and src.compression != ("gz" if what.startswith("gzip") else "zst"):
            ext = ".gz" if what.startswith("gzip") else ".zst"
            raise InputError(f"{path}: the file is {what} but was {how(src)} as plain text; name it "
                             f"{path.name}{ext} so it is decompressed")
    if src.format == "parquet" and head != b"PAR1":
        raise InputError(f"{path}: not a parquet file (it does not start with PAR1) but was {how(src)}; "
                         "pass --format csv, tsv or jsonl for a text file")


def hash_and_check_bytes(path: Path, encoding: str, compression: str | None = None) -> tuple[str, int]:
    """(sha256 of the file's bytes as stored, their count); InputError at the first byte that does not
    decode, naming the (decompressed) byte offset and the line (``\\n``, ``\\r\\n`` and ``\\r`` all end a line)."""
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
        while True:
            chunk = stream.read(CHUNK_BYTES)
            final = not chunk
            try:
                decoder.decode(chunk, final=final)
            except UnicodeDecodeError as err:
                bad = chunk[err.start:err.start + 4] if chunk else b""
                line = lines + line_breaks(chunk[:err.start], prev_cr) + 1
                raise InputError(f"{path}: byte offset {done + err.start} (line {line}) is not valid {encoding} "
                                 f"(bytes {bad.hex(' ')}); pass --encoding with the file's encoding "
                                 "(e.g. latin-1, cp1252, gb18030) or convert the file to UTF-8") from None
            if final:
                break
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

