"""Read stage: check the CSV inputs once, then stream them as blocks of rows (pyarrow tables).

Called by pipeline.run (local engine) and ``longbert stats``. Every field is read as text, exactly as
written (the standard library's csv reader: no type inference, no missing-value markers), so "007",
"NA" and "3.50" stay strings. pandas' C parser was not used: it drops whitespace-only lines as
blank and silently rewrites a stray quote ('"x"y"' -> 'xy"'); both lose or change a row.
"""
from __future__ import annotations

import codecs
import csv
import glob
import hashlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from .config import ReadConfig
from .errors import InputError

_CHUNK_BYTES = 1 << 20


@dataclass
class FileScan:
    """What the scan learned about one input file."""

    path: Path
    sha256: str
    n_bytes: int
    n_rows: int                              # data records (header, empty and skipped lines excluded)
    n_bad_lines: int = 0                     # records skipped by --on-bad-lines skip


@dataclass
class CorpusScan:
    """The inputs, checked before the run starts."""

    files: list[FileScan] = field(default_factory=list)
    duplicate_ids: int = 0                   # rows whose --id-col value appeared before

    @property
    def n_rows(self) -> int:
        """Documents in the whole corpus."""
        return sum(f.n_rows for f in self.files)

    @property
    def n_bad_lines(self) -> int:
        """Lines skipped across all files."""
        return sum(f.n_bad_lines for f in self.files)

    def fingerprint(self) -> list[dict]:
        """Inputs by content (name, bytes, sha256), used to refuse a resume over different inputs."""
        return [{"name": f.path.name, "bytes": f.n_bytes, "sha256": f.sha256} for f in self.files]


def expand_inputs(patterns: tuple[str, ...]) -> list[Path]:
    """Paths and globs -> existing files, in the order given (each glob's matches sorted).

    Raises:
        InputError: no input given, a glob that matches nothing, or a path that is not a file.
    """
    if not patterns:
        raise InputError("no input given; pass one or more CSV paths or globs, e.g. `longbert extract docs.csv`")
    out: list[Path] = []
    for pattern in patterns:
        if any(ch in pattern for ch in "*?["):
            matches = sorted(glob.glob(pattern, recursive=True))
            if not matches:
                raise InputError(f"input glob {pattern!r} matches no file; check the pattern and quote it "
                                 "so the shell does not expand it")
            out.extend(Path(m) for m in matches if Path(m).is_file())
            continue
        path = Path(pattern)
        if not path.exists():
            raise InputError(f"input {pattern!r} does not exist; check the path")
        if not path.is_file():
            raise InputError(f"input {pattern!r} is not a file; pass CSV files or a glob like 'dir/*.csv'")
        out.append(path)
    return out


def _python_encoding(encoding: str) -> str:
    """utf-8 is read as utf-8-sig, so a byte-order mark before the header is dropped, not kept in a name."""
    return "utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding


def _hash_and_check_bytes(path: Path, encoding: str) -> tuple[str, int]:
    """(sha256, size) of the file; raises InputError at the first byte that does not decode."""
    digest = hashlib.sha256()
    decoder = codecs.getincrementaldecoder(_python_encoding(encoding))(errors="strict")
    done = 0
    newlines = 0
    with path.open("rb") as fh:
        while True:
            chunk = fh.read(_CHUNK_BYTES)
            final = not chunk
            try:
                decoder.decode(chunk, final=final)
            except UnicodeDecodeError as err:
                offset = done + err.start
                bad = chunk[err.start:err.start + 4] if chunk else b""
                line = newlines + chunk[:err.start].count(b"\n") + 1
                raise InputError(f"{path}: byte offset {offset} (line {line}) is not valid {encoding} "
                                 f"(bytes {bad.hex(' ')}); pass --encoding with the file's encoding "
                                 "(e.g. latin-1, cp1252, gb18030) or convert the file to UTF-8") from None
            if final:
                return digest.hexdigest(), done
            digest.update(chunk)
            done += len(chunk)
            newlines += chunk.count(b"\n")


@dataclass
class _BadRecord(Exception):
    line: int        # 1-based physical line where the record starts
    reason: str


def _records(path: Path, cfg: ReadConfig, header_only: bool = False) -> Iterator[tuple[int, dict[str, str]]]:
    """(start line, {column: field}) for every data record of ``path``, in order.

    Parsed with the standard library's csv reader (``strict=True``, no field size limit): quoted
    fields may hold commas, quotes and newlines; a completely empty line is not a record; a
    whitespace-only field is text. With --on-bad-lines skip, a record that does not parse or has
    another number of fields than the header is skipped (counted by ``scan``) and reading goes on
    at the next line; with "error" it raises _BadRecord.
    """
    csv.field_size_limit(sys.maxsize)
    restart = 0                                        # physical lines already consumed before this reader
    header: list[str] | None = None
    with path.open("r", encoding=_python_encoding(cfg.encoding), newline="") as fh:
        while True:
            reader = csv.reader(fh, strict=True)
            try:
                if header is None:
                    header = next(reader, None)
                    if header is None:
                        raise InputError(f"{path}: the file is empty; a CSV needs a header line with a "
                                         f"{cfg.text_col!r} column")
                    if header_only:
                        yield 1, {c: c for c in header}
                        return
                while True:
                    start = restart + reader.line_num + 1
                    row = next(reader, None)
                    if row is None:
                        return
                    if not row:
                        continue                       # an empty line
                    if len(row) != len(header):
                        raise _BadRecord(start, f"expected {len(header)} fields, saw {len(row)}")
                    yield start, dict(zip(header, row))
            except csv.Error as err:
                bad = _BadRecord(start if header is not None else 1, str(err))
                if header is None or cfg.on_bad_lines == "error":
                    raise bad from None
                yield -1, {"_bad": bad}
                restart = _seek_line(fh, bad.line + 1)
            except _BadRecord as bad:
                if cfg.on_bad_lines == "error":
                    raise
                yield -1, {"_bad": bad}
                restart = restart + reader.line_num


def _seek_line(fh, line: int) -> int:
    """Position ``fh`` at the start of 1-based physical ``line``; returns the lines before it."""
    fh.seek(0)
    for _ in range(line - 1):
        if not fh.readline():
            break
    return line - 1


def _bad_message(path: Path, bad: _BadRecord) -> str:
    if "unexpected end of data" in bad.reason:
        what = "a quoted field starts here and never ends (unbalanced \"); close the quote"
    else:
        what = f"{bad.reason}; fix the line"
    return f"{path}: line {bad.line}: {what}, or pass --on-bad-lines skip to drop such lines"


def scan_file(path: Path, cfg: ReadConfig, seen_ids: set[str] | None = None) -> tuple[FileScan, int]:
    """Check one file before the run: bytes decode, header has the columns, every record parses.

    Returns:
        (FileScan, rows whose --id-col value was seen before, in this or an earlier file).

    Raises:
        InputError: bad bytes (file, byte offset, line), a missing column (lists those present), or a
            CSV fault (file, line) when --on-bad-lines is "error".
    """
    sha, n_bytes = _hash_and_check_bytes(path, cfg.encoding)
    try:
        columns = list(next(_records(path, cfg, header_only=True))[1])
    except _BadRecord as bad:
        raise InputError(f"{path}: the header line cannot be parsed ({bad.reason}); fix the first line") from None
    for col, flag in [(cfg.text_col, "--text-col"), (cfg.id_col, "--id-col"),
                      *[(c, "--keep-col") for c in cfg.keep_cols]]:
        if col is not None and col not in columns:
            raise InputError(f"{path}: column {col!r} not found; columns are {columns}; pass {flag} with one of them")
    n_rows = n_bad = dups = 0
    try:
        for line, record in _records(path, cfg):
            if line < 0:
                n_bad += 1
                continue
            n_rows += 1
            if seen_ids is not None and cfg.id_col is not None:
                value = record[cfg.id_col]
                if value in seen_ids:
                    dups += 1
                else:
                    seen_ids.add(value)
    except _BadRecord as bad:
        raise InputError(_bad_message(path, bad)) from None
    return FileScan(path, sha, n_bytes, n_rows, n_bad), dups


def scan(cfg: ReadConfig) -> CorpusScan:
    """Check every input before anything is loaded or written (see scan_file for the errors).

    Also counts duplicate ids (with --id-col): they are kept, and the summary warns with the count.
    """
    seen: set[str] | None = set() if cfg.id_col is not None else None
    result = CorpusScan()
    for path in expand_inputs(cfg.inputs):
        fs, dups = scan_file(path, cfg, seen)
        result.files.append(fs)
        result.duplicate_ids += dups
    return result


def read_blocks(cfg: ReadConfig, corpus: CorpusScan, start_row: int = 0) -> Iterator[pa.Table]:
    """Stream the corpus as blocks of ``cfg.block_rows`` rows (the last may be shorter).

    Rows are numbered 0.. across all inputs in order; block k holds rows [k*B, (k+1)*B), so a block
    may span two files. Only one block of rows is in memory at once.

    Args:
        cfg: read options. corpus: the result of ``scan(cfg)`` (the inputs are known to parse).
        start_row: skip rows before this one (resume); a multiple of cfg.block_rows.

    Yields:
        pyarrow tables with columns ``id`` (int64 row number, or the --id-col string), ``text``
        (string) and each --keep-col (string), in input order.
    """
    assert start_row % cfg.block_rows == 0
    row = 0
    pending: list[dict[str, str]] = []
    first = start_row
    for fs in corpus.files:
        if row + fs.n_rows <= start_row:
            row += fs.n_rows
            continue
        for line, record in _records(fs.path, cfg):
            if line < 0:
                continue
            row += 1
            if row <= start_row:
                continue
            pending.append(record)
            if len(pending) == cfg.block_rows:
                yield _to_block(pending, first, cfg)
                first += len(pending)
                pending = []
    if pending:
        yield _to_block(pending, first, cfg)


def _to_block(records: list[dict[str, str]], first_row: int, cfg: ReadConfig) -> pa.Table:
    columns: dict[str, pa.Array] = {}
    if cfg.id_col is None:
        columns["id"] = pa.array(range(first_row, first_row + len(records)), type=pa.int64())
    else:
        columns["id"] = pa.array([r[cfg.id_col] for r in records], type=pa.string())
    columns["text"] = pa.array([r[cfg.text_col] for r in records], type=pa.string())
    for col in cfg.keep_cols:
        columns[col] = pa.array([r[col] for r in records], type=pa.string())
    return pa.table(columns)


def block_from_texts(texts: list[str], ids: list | None = None) -> pa.Table:
    """An input block from Python strings (the scikit-learn vectorizer's path): id = 0.. unless given."""
    id_arr = pa.array(range(len(texts)), type=pa.int64()) if ids is None else pa.array([str(i) for i in ids])
    return pa.table({"id": id_arr, "text": pa.array([str(t) for t in texts], type=pa.string())})
