"""The first bytes of the files the reader meets: compressed streams (those it decompresses and those it
does not), zip / Office / image / PDF / parquet files. Pure functions of bytes, no Source: used by
pipeline.read.magic (the checks), pipes (a spooled pipe's compression) and text (binary .txt files).
"""
from __future__ import annotations

from pathlib import Path

# the streams the reader decompresses: compression -> (first bytes, name, file extension)
STREAMS = {"gz": (b"\x1f\x8b", "gzip", ".gz"), "zst": (b"\x28\xb5\x2f\xfd", "zstd", ".zst"),
           "bz2": (b"BZh", "bzip2", ".bz2"), "xz": (b"\xfd7zXZ\x00", "xz", ".xz")}
# compressed files the reader does not read: first bytes -> (what it is, the command that unpacks it)
UNSUPPORTED = {b"\x04\x22\x4d\x18": ("LZ4-compressed", "lz4 -d FILE"),
               b"7z\xbc\xaf\x27\x1c": ("a 7z archive", "7z x FILE"),
               b"Rar!\x1a\x07": ("a RAR archive", "unrar x FILE"),
               b"LZIP": ("lzip-compressed", "lzip -d FILE"),
               b"\x1f\x9d": ("compressed with Unix compress (.Z)", "uncompress FILE")}
ZIP = b"PK\x03\x04"
BINARY = {ZIP: "a zip archive (an .xlsx, .docx or .zip file)", b"\x89PNG": "a PNG image",
          b"%PDF": "a PDF document", b"\xff\xd8\xff": "a JPEG image",
          b"\xd0\xcf\x11\xe0": "an old Office file (.xls, .doc)", b"PAR1": "a parquet file"}
HEAD_BYTES = 8


def head_of(path: Path, n: int = HEAD_BYTES) -> bytes:
    """The first ``n`` bytes of a file (fewer when it is shorter)."""
    with path.open("rb") as fh:
        return fh.read(n)


def stream_of(head: bytes) -> str | None:
    """The compression ('gz', 'zst', 'bz2', 'xz') whose magic bytes ``head`` starts with, else None."""
    return next((kind for kind, (magic, _, _) in STREAMS.items() if head.startswith(magic)), None)


def binary_kind(head: bytes) -> str | None:
    """What a file that is not plain text is, from its first bytes ('bzip2-compressed', 'a PNG image',
    'a 7z archive'...), or None when they name no known binary format."""
    kind = stream_of(head)
    if kind is not None:
        return f"{STREAMS[kind][1]}-compressed"
    for table in (UNSUPPORTED, BINARY):
        for magic, what in table.items():
            if head.startswith(magic):
                return what[0] if isinstance(what, tuple) else what
    return None
