"""Bytes of one input: open a (decompressed) stream at an offset, check the first bytes and that every
byte decodes, and split a stream into lines (``\\n``, ``\\r\\n`` or ``\\r``) with their numbers and
byte offsets: the one line splitter the line formats share.

Integrity: a gzip or zstd stream that is damaged or ends before its end marker is an InputError
(file and decompressed byte), never a shorter corpus; a zero-byte compressed file too. Bytes that do not
decode get one message wherever they are (header or data): file, byte offset, line, the --encoding to
pass, and a UTF-16 / UTF-32 byte-order mark by name. UTF-16 / UTF-32 input (with that --encoding) is
read as UTF-8 bytes. A zip (.xlsx), PNG, PDF, JPEG or old Office file is named as such.
"""
from __future__ import annotations

import codecs
import functools
import gzip
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ..errors import InputError
from .sources import Source, how

CHUNK_BYTES = 1 << 20
_MAGIC = {b"PAR1": "a parquet file", b"\x1f\x8b": "gzip-compressed", b"\x28\xb5\x2f\xfd": "zstd-compressed"}


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


_BINARY = {b"PK\x03\x04": "a zip archive (an .xlsx, .docx or .zip file)", b"\x89PNG": "a PNG image",
           b"%PDF": "a PDF document", b"\xff\xd8\xff": "a JPEG image", b"\xd0\xcf\x11\xe0": "an old Office file (.xls, .doc)"}
_NAMES = {"gz": "gzip", "zst": "zstd"}
_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32 (little-endian)", "utf-32"), (b"\x00\x00\xfe\xff", "UTF-32 (big-endian)", "utf-32"),
         (b"\xff\xfe", "UTF-16 (little-endian)", "utf-16"), (b"\xfe\xff", "UTF-16 (big-endian)", "utf-16"))
WIDE = ("utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be")


class _Unpacked:
    """A decompressed stream that refuses to end early: every read that meets a damaged or cut stream
    raises InputError naming the file and the decompressed byte where it happened.

    gzip: the standard library (CRC and length are checked at each member's end). zstd: one
    ``decompressobj`` per frame; the input must end exactly at the end of a frame.
    """

    def __init__(self, path: Path, compression: str):
        self.path, self.kind, self.done = path, compression, 0
        self.raw = path.open("rb")
        if self.raw.read(1) == b"":
            self.raw.close()
            raise InputError(f"{path}: the file is empty (0 bytes), not a {_NAMES[compression]} stream; "
                             "the file is cut short: download or copy it again")
        self.raw.seek(0)
        if compression == "gz":
            self.gz: gzip.GzipFile | None = gzip.GzipFile(fileobj=self.raw, mode="rb")
        else:
            import zstandard

            self.gz, self.zstd, self.frame, self.pending = None, zstandard, None, b""

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` decompressed bytes (b"" only at the true end of the stream)."""
        try:
            got = self.gz.read(n) if self.gz is not None else self._zstd_read(n if n > 0 else CHUNK_BYTES)
        except InputError:
            raise
        except Exception as err:  # EOFError, BadGzipFile, zlib.error, ZstdError: a damaged stream
            raise InputError(self._message(err)) from None
        self.done += len(got)
        return got

    def _zstd_read(self, n: int) -> bytes:
        while not self.pending:
            data = self.raw.read(1 << 16)
            if not data:
                if self.frame is not None and not self.frame.eof:
                    raise EOFError("the input ends inside a zstd frame")
                return b""
            while data:
                if self.frame is None or self.frame.eof:
                    self.frame = self.zstd.ZstdDecompressor().decompressobj()
                self.pending += self.frame.decompress(data)
                data = self.frame.unused_data if self.frame.eof else b""
        got, self.pending = self.pending[:n], self.pending[n:]
        return got

    def _message(self, err: Exception) -> str:
        what = "ends early" if isinstance(err, EOFError) else "is damaged"
        return (f"{self.path}: the {_NAMES[self.kind]} stream {what} after decompressed byte {self.done} ({err}); "
                "the file is cut short or corrupt, as by an interrupted download or copy: get it again")

    def close(self) -> None:
        if self.gz is not None:
            self.gz.close()
        self.raw.close()

    def __enter__(self) -> _Unpacked:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Transcoded:
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

    def close(self) -> None:
        self.inner.close()

    def __enter__(self) -> _Transcoded:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_binary(path: Path, compression: str | None, offset: int = 0, encoding: str = "utf-8") -> BinaryIO:
    """The (decompressed) byte stream of ``path``, positioned at ``offset`` of the decompressed bytes.

    A compressed stream cannot seek: the bytes before ``offset`` are decompressed and dropped. Reads
    of a compressed stream that is damaged or ends early raise InputError (file and byte). A UTF-16 or
    UTF-32 ``encoding`` gives the text as UTF-8 bytes (offsets count those; decode them as utf-8).
    """
    wide = codecs.lookup(encoding).name in WIDE
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


def decode_message(path: Path, encoding: str, offset: int, line: int, bad: bytes, head: bytes) -> str:
    """The one message for bytes that do not decode, in a header or a data line: file, byte offset, line,
    the bytes, and the --encoding to pass (named exactly when ``head``, the file's first bytes, is a
    UTF-16 / UTF-32 byte-order mark)."""
    for bom, name, option in _BOMS:
        if head.startswith(bom) and codecs.lookup(encoding).name not in WIDE:
            return (f"{path}: the file starts with a {name} byte-order mark (bytes {bom.hex(' ')}), so it is "
                    f"{name.split()[0]} text, not {encoding} (a spreadsheet's \"Unicode Text\" export is UTF-16); "
                    f"pass --encoding {option}, or convert the file to UTF-8")
    return (f"{path}: byte offset {offset} (line {line}) is not valid {encoding} (bytes {bad.hex(' ')}); pass "
            "--encoding with the file's encoding (e.g. latin-1, cp1252, gb18030) or convert the file to UTF-8")


def magic_check(src: Source, path: Path) -> None:
    """A file whose first bytes say it is another format than the one tried: InputError with the fix."""
    with path.open("rb") as fh:
        head = fh.read(4)
    for magic, what in _BINARY.items():
        if head.startswith(magic):
            raise InputError(f"{path}: this is {what} (it starts with bytes {magic.hex(' ')}), not text; it was "
                             f"{how(src)}; export it as CSV or JSON Lines (a spreadsheet: save as \"CSV UTF-8\"), "
                             "or leave it out of the inputs")
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
        head = b""
        while True:
            chunk = stream.read(CHUNK_BYTES)
            final = not chunk
            try:
                decoder.decode(chunk, final=final)
            except UnicodeDecodeError as err:
                bad = chunk[err.start:err.start + 4] if chunk else b""
                line = lines + line_breaks(chunk[:err.start], prev_cr) + 1
                raise InputError(decode_message(path, encoding, done + err.start, line, bad,
                                                head if done else chunk[:4])) from None
            if final:
                break
            head = head or chunk[:4]
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

