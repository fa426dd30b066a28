"""Text files: one document per ``.txt`` / ``.md`` file, its id the path relative to the folder (or
the glob's folder part) it was found under. A source of this format is a root folder and its files.

The format interface (see ``pipeline.read``): ``columns``, ``check``, ``scan``, ``read``, ``locate``.
"""
from __future__ import annotations

import codecs
from pathlib import Path

import pyarrow as pa

from ..errors import InputError
from .signatures import binary_kind, head_of
from .recheck import stamp_of, text_digest
from .sources import Source
from .specs import BlockSpec, Columns, FileScan, count_id, finish_table
from .streams import WIDE, hash_and_check_bytes, python_encoding


def columns(src: Source, cols: Columns) -> None:
    """Text files have no columns (only their text and path)."""
    return None


def check(src: Source, names: list[str] | None, cols: Columns, id_flag: str) -> None:
    """Keep columns cannot be read from text files: InputError."""
    if cols.keep_cols:
        raise InputError(f"{src.path}: text files have no column {cols.keep_cols[0]!r} (only their text and "
                         "path); drop --keep-col, or pass tabular inputs")


def scan(src: Source, cols: Columns, block_rows: int, first_row: int, first_index: int,
         seen: set[str] | None) -> tuple[FileScan, list[BlockSpec], int]:
    """Check that every file decodes and cut the files into blocks of ``block_rows`` files.
    The sha256 covers each file's relative path and bytes, in order."""
    shas: list[tuple[str, str]] = []
    stamps: list[int] = []
    n_bytes = dups = 0
    for rel in src.files:
        file = src.path / rel
        stamps += stamp_of([file])  # before the bytes are read: a change while they are is seen later
        _check_text(file, cols.encoding)
        sha, size = hash_and_check_bytes(file, cols.encoding, fmt="text")
        shas.append((rel, sha))
        n_bytes += size
        dups += count_id(seen, rel)
    path = str(src.path.resolve())
    specs = [BlockSpec(first_index + k, path, "text", first_row + start, len(src.files[start:start + block_rows]),
                       cols, files=src.files[start:start + block_rows],
                       stamp=tuple(stamps[2 * start:2 * (start + block_rows)]))
             for k, start in enumerate(range(0, len(src.files), block_rows))]
    return FileScan(src.path, "text", text_digest(shas), n_bytes, len(src.files), files=src.files), specs, dups


def _check_text(file: Path, encoding: str) -> None:
    """A file whose first bytes are a compressed stream, an archive, an image, a PDF or a parquet file,
    or that holds a NUL byte in its first 8,000 (as git decides a file is binary): InputError, so that
    no such bytes are embedded as a document."""
    head = head_of(file, 8000)
    kind = binary_kind(head)
    wide = codecs.lookup(encoding).name in WIDE
    if kind is None and b"\0" in head and not wide and not head.startswith((b"\xff\xfe", b"\xfe\xff")):
        kind = "binary data or UTF-16 text without a byte-order mark (it holds NUL bytes)"
    if kind is not None:
        raise InputError(f"{file}: this is {kind}, not a text document; a .txt / .md input is read as one "
                         "document of text: decompress or convert it (UTF-16 text: pass --encoding utf-16), "
                         "or move it out of the inputs")


def read(spec: BlockSpec) -> pa.Table:
    """The block's files: id = relative path, text = the decoded file, source = its path under the root."""
    root = Path(spec.path)
    texts = [(root / rel).read_bytes().decode(python_encoding(spec.columns.encoding)) for rel in spec.files]
    table = {"id": pa.array(list(spec.files), pa.string()), "text": pa.array(texts, pa.string())}
    sources = [Path(spec.source, rel).as_posix() if spec.source not in ("", ".") else rel for rel in spec.files]
    return finish_table(table, spec, sources)


def locate(spec: BlockSpec, i: int) -> str:
    """The path of the block's ``i``-th file."""
    return str(Path(spec.path) / spec.files[i])
