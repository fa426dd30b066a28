"""Text files: one document per ``.txt`` / ``.md`` file, its id the path relative to the folder (or
the glob's folder part) it was found under. A source of this format is a root folder and its files.

The format interface (see ``pipeline.read``): ``columns``, ``check``, ``scan``, ``read``, ``locate``.
"""
from __future__ import annotations

import codecs
import posixpath
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from ..errors import InputError
from .signatures import binary_kind, head_of
from .recheck import block_paths, stamp_of, text_digest
from .remote import S3Path, is_uri
from .sources import Source
from .specs import BlockSpec, Columns, FileScan, count_id, finish_table
from .encoding_advice import LINES_SHOWN, folder_message
from .streams import WIDE, hash_and_check_bytes, line_breaks, line_decoding, lines, open_binary, python_encoding


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
    n_bytes = dups = n_bad = 0
    skip = _skips(cols)
    for rel in src.files:
        file = src.path / rel
        stamps += stamp_of([file])  # before the bytes are read: a change while they are is seen later
        _check_text(file, cols.encoding)
        try:
            sha, size = hash_and_check_bytes(file, cols.encoding, fmt="text", skip_undecodable=skip)
        except InputError as err:
            raise InputError(_mixed_folder(src, cols.encoding) or str(err)) from None
        if skip:
            n_bad += sum(1 for _, line in _lines(file, cols.encoding) if line is None)
        shas.append((rel, sha))
        n_bytes += size
        dups += count_id(seen, rel)
    path = str(src.path.resolve())
    specs = [BlockSpec(first_index + k, path, "text", first_row + start, len(src.files[start:start + block_rows]),
                       cols, files=src.files[start:start + block_rows],
                       stamp=tuple(stamps[2 * start:2 * (start + block_rows)]))
             for k, start in enumerate(range(0, len(src.files), block_rows))]
    return FileScan(src.path, "text", text_digest(shas), n_bytes, len(src.files), n_bad, files=src.files), specs, dups


def _skips(cols: Columns) -> bool:
    """--on-bad-lines skip, for an encoding read line by line (not UTF-16/32): lines that do not decode
    are left out of their document and counted."""
    return cols.on_bad_lines == "skip" and codecs.lookup(cols.encoding).name not in WIDE


def _lines(file: Path | S3Path, encoding: str) -> Iterator[tuple[bytes, str | None]]:
    """Each line of a file (its line end kept) and its text, None where it does not decode."""
    with open_binary(file, None) as fh:
        for _, _, raw in lines(fh, 0, 1):
            try:
                yield raw, raw.decode(line_decoding(encoding))
            except UnicodeDecodeError:
                yield raw, None


def _mixed_folder(src: Source, encoding: str) -> str | None:
    """folder_message when a folder's text files mix encodings: some are not UTF-8 while another is
    UTF-8 with non-ASCII text (else None: --encoding may be right for every file). Reads every file;
    called only once a file has failed."""
    if len(src.files) < 2 or codecs.lookup(encoding).name != "utf-8":
        return None
    bad, n_bad, good, first = [], 0, None, ""
    for rel in src.files:
        data = (src.path / rel).read_bytes()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as err:
            n_bad += 1
            bad += [rel][:LINES_SHOWN - len(bad)]
            first = first or (f"{rel}: byte offset {err.start} (line {line_breaks(data[:err.start], False) + 1}), "
                              f"bytes {data[err.start:err.start + 4].hex(' ')}")
            continue
        good = good or (rel if not data.isascii() else None)
    if good is None or not bad:
        return None
    return folder_message(src.path, bad, n_bad, good, first)


def _check_text(file: Path | S3Path, encoding: str) -> None:
    """A file whose first bytes are a compressed stream, an archive, an image, a PDF or a parquet file,
    or that holds a NUL byte in its first 8,000 (as git decides a file is binary): InputError, so that
    no such bytes are embedded as a document."""
    head = head_of(file, 8000)
    kind = binary_kind(head)
    wide = codecs.lookup(encoding).name in WIDE
    if kind is None and b"\0" in head and not wide and not head.startswith((b"\xff\xfe", b"\xfe\xff")):
        kind = "binary data or UTF-16 text without a byte-order mark (it holds NUL bytes)"
    if kind is not None:
        wide_hint = " (UTF-16 text: pass --encoding utf-16)" if "NUL bytes" in kind else ""
        raise InputError(f"{file}: this is {kind}, not a text document; a .txt / .md input is read as one "
                         f"document of text: decompress or convert it{wide_hint}, or move it out of the inputs")


def read(spec: BlockSpec) -> pa.Table:
    """The block's files: id = relative path, text = the decoded file, source = its path under the root."""
    texts = [_text_of(file, spec.columns) for file in block_paths(spec)]
    table = {"id": pa.array(list(spec.files), pa.string()), "text": pa.array(texts, pa.string())}
    join = posixpath.join if is_uri(spec.source) else lambda a, b: Path(a, b).as_posix()   # a URI keeps its '//'
    sources = [join(spec.source, rel) if spec.source not in ("", ".") else rel for rel in spec.files]
    return finish_table(table, spec, sources)


def _text_of(file: Path | S3Path, cols: Columns) -> str:
    """A file's text; under --on-bad-lines skip without the lines that do not decode (counted by scan)."""
    data = file.read_bytes()
    try:
        return data.decode(python_encoding(cols.encoding))
    except UnicodeDecodeError:
        if not _skips(cols):
            raise
    return "".join(text for _, text in _lines(file, cols.encoding) if text is not None).removeprefix("\ufeff")


def locate(spec: BlockSpec, i: int) -> str:
    """The path of the block's ``i``-th file."""
    return str(block_paths(spec)[i])
