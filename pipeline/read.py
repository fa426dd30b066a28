"""Read stage: check the CSV inputs once, then stream them as blocks of rows (pyarrow tables).

Called by pipeline.run (local engine) and ``longbert stats``. Every field is read as text, exactly as
written (pandas ``dtype=str``, no missing-value markers), so "007", "NA" and "3.50" stay strings.
"""
from __future__ import annotations

import codecs
import csv
import glob
import hashlib
import io
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa

from .config import ReadConfig
from .errors import InputError

_CHUNK_BYTES = 1 << 20
_EOF_IN_STRING = re.compile(r"EOF inside string starting at row (\d+)")


@dataclass
class FileScan:
    """What the scan learned about one input file."""

    path: Path
    sha256: str
    n_bytes: int
    n_rows: int                              # data rows pandas will read (header and skipped lines excluded)
    skip_lines: frozenset[int] = frozenset()  # 1-based physical lines dropped (--on-bad-lines skip)
    n_bad_lines: int = 0                     # lines skipped by --on-bad-lines skip


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


class _LineFilter(io.TextIOBase):
    """A text stream over ``path`` without the given 1-based physical lines (for --on-bad-lines skip)."""

    def __init__(self, path: Path, encoding: str, skip: frozenset[int]):
        self._fh = path.open("r", encoding=_python_encoding(encoding), newline="")
        self._skip = skip
        self._line = 0
        self._buf = ""

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> str:
        while size is None or size < 0 or len(self._buf) < size:
            line = self._fh.readline()
            if not line:
                break
            self._line += 1
            if self._line not in self._skip:
                self._buf += line
        if size is None or size < 0:
            out, self._buf = self._buf, ""
        else:
            out, self._buf = self._buf[:size], self._buf[size:]
        return out

    def close(self) -> None:
        self._fh.close()
        super().close()


def _open(path: Path, encoding: str, skip: frozenset[int]):
    if skip:
        return _LineFilter(path, encoding, skip)
    return path.open("r", encoding=_python_encoding(encoding), newline="")


def _chunks(path: Path, cfg: ReadConfig, skip: frozenset[int], usecols: list[str] | None,
            chunksize: int) -> Iterator[pd.DataFrame]:
    """pandas chunks of the file, every field a str, never NaN. Warnings of skipped lines are re-raised
    to the caller as ParserWarning."""
    with _open(path, cfg.encoding, skip) as fh:
        reader = pd.read_csv(fh, dtype=str, keep_default_na=False, na_filter=False, engine="c",
                             chunksize=chunksize, usecols=usecols,
                             on_bad_lines="warn" if cfg.on_bad_lines == "skip" else "error")
        with reader:
            yield from reader


def _record_start_line(path: Path, encoding: str, skip: frozenset[int], record: int) -> int:
    """1-based physical line where CSV record ``record`` (0 = header) starts, as Python's csv reads it."""
    with _open(path, encoding, skip) as fh:
        reader = csv.reader(fh)
        last = 0
        for i, _ in enumerate(reader):
            if i == record - 1:
                last = reader.line_num
                break
    # map the filtered stream's line number back to the file's
    line = last + 1
    for s in sorted(skip):
        if s <= line:
            line += 1
    return line


def _columns(path: Path, cfg: ReadConfig) -> list[str]:
    try:
        with _open(path, cfg.encoding, frozenset()) as fh:
            header = pd.read_csv(fh, dtype=str, nrows=0, keep_default_na=False, engine="c")
    except pd.errors.EmptyDataError:
        raise InputError(f"{path}: the file is empty; a CSV needs a header line with a "
                         f"{cfg.text_col!r} column") from None
    except pd.errors.ParserError as err:
        raise InputError(f"{path}: the header cannot be parsed ({err}); fix the first line") from None
    return [str(c) for c in header.columns]


def _needed(cfg: ReadConfig) -> list[str]:
    cols = [cfg.text_col]
    if cfg.id_col is not None and cfg.id_col not in cols:
        cols.append(cfg.id_col)
    cols.extend(c for c in cfg.keep_cols if c not in cols)
    return cols


def scan_file(path: Path, cfg: ReadConfig, seen_ids: set[str] | None = None) -> tuple[FileScan, int]:
    """Check one file before the run: bytes decode, header has the columns, every record parses.

    Returns:
        (FileScan, duplicate ids found in this file).

    Raises:
        InputError: bad bytes (file, byte offset, line), a missing column (lists those present), or a
            CSV fault (file, line) when --on-bad-lines is "error".
    """
    sha, n_bytes = _hash_and_check_bytes(path, cfg.encoding)
    columns = _columns(path, cfg)
    for col, flag in [(cfg.text_col, "--text-col"), (cfg.id_col, "--id-col"),
                      *[(c, "--keep-col") for c in cfg.keep_cols]]:
        if col is not None and col not in columns:
            raise InputError(f"{path}: column {col!r} not found; columns are {columns}; pass {flag} with one of them")
    skip: frozenset[int] = frozenset()
    idcol = cfg.id_col
    while True:
        try:
            n_rows, dups = 0, 0
            local_seen: set[str] = set()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", pd.errors.ParserWarning)
                for chunk in _chunks(path, cfg, skip, [idcol or cfg.text_col], 65536):
                    n_rows += len(chunk)
                    if seen_ids is not None and idcol is not None:
                        for value in chunk[idcol]:
                            if value in seen_ids or value in local_seen:
                                dups += 1
                            else:
                                local_seen.add(value)
            if seen_ids is not None:
                seen_ids.update(local_seen)
            n_warned = sum(str(w.message).count("Skipping line") for w in caught
                           if issubclass(w.category, pd.errors.ParserWarning))
            return FileScan(path, sha, n_bytes, n_rows, skip, n_warned + len(skip)), dups
        except pd.errors.ParserError as err:
            message = str(err)
            eof = _EOF_IN_STRING.search(message)
            if eof:
                line = _record_start_line(path, cfg.encoding, skip, int(eof.group(1)))
                if cfg.on_bad_lines == "skip":
                    skip = skip | {line}
                    continue
                raise InputError(f"{path}: line {line}: a quoted field starts here and never ends (unbalanced "
                                 "\"); close the quote, or pass --on-bad-lines skip to drop that line") from None
            raise InputError(f"{path}: {message.replace('Error tokenizing data. C error: ', '').strip()}; fix "
                             "that line, or pass --on-bad-lines skip to drop such lines") from None


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
    may span two files. Only ``cfg.block_rows`` rows (plus one pandas chunk) are in memory at once.

    Args:
        cfg: read options. corpus: the result of ``scan(cfg)``.
        start_row: skip rows before this one (resume); must be a multiple of cfg.block_rows.

    Yields:
        pyarrow tables with columns ``id`` (int64 row number, or the --id-col string), ``text``
        (string) and each --keep-col (string), in input order.
    """
    assert start_row % cfg.block_rows == 0
    usecols = _needed(cfg)
    row = 0
    pending: list[pd.DataFrame] = []
    pending_rows = 0
    for fs in corpus.files:
        if row + fs.n_rows <= start_row:
            row += fs.n_rows
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pd.errors.ParserWarning)  # counted by the scan
            for chunk in _chunks(fs.path, cfg, fs.skip_lines, usecols, cfg.block_rows):
                if row + len(chunk) <= start_row:
                    row += len(chunk)
                    continue
                if row < start_row:
                    chunk = chunk.iloc[start_row - row:]
                    row = start_row
                chunk = chunk.assign(_row=range(row, row + len(chunk)))
                row += len(chunk)
                pending.append(chunk)
                pending_rows += len(chunk)
                while pending_rows >= cfg.block_rows:
                    frame = pd.concat(pending, ignore_index=True)
                    yield _to_block(frame.iloc[:cfg.block_rows], cfg)
                    rest = frame.iloc[cfg.block_rows:]
                    pending, pending_rows = ([rest], len(rest)) if len(rest) else ([], 0)
    if pending_rows:
        yield _to_block(pd.concat(pending, ignore_index=True), cfg)


def _to_block(frame: pd.DataFrame, cfg: ReadConfig) -> pa.Table:
    columns: dict[str, pa.Array] = {}
    if cfg.id_col is None:
        columns["id"] = pa.array(frame["_row"].to_numpy(), type=pa.int64())
    else:
        columns["id"] = pa.array(frame[cfg.id_col].tolist(), type=pa.string())
    columns["text"] = pa.array(frame[cfg.text_col].tolist(), type=pa.string())
    for col in cfg.keep_cols:
        columns[col] = pa.array(frame[col].tolist(), type=pa.string())
    return pa.table(columns)


def block_from_texts(texts: list[str], ids: list | None = None) -> pa.Table:
    """An input block from Python strings (the scikit-learn vectorizer's path): id = 0.. unless given."""
    id_arr = pa.array(range(len(texts)), type=pa.int64()) if ids is None else pa.array([str(i) for i in ids])
    return pa.table({"id": id_arr, "text": pa.array([str(t) for t in texts], type=pa.string())})
