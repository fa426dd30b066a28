"""Read stage: check every input once and cut it into a plan of blocks; ``read_block(spec)`` reads one.

Called by every engine (pipeline.run, pipeline.ray_engine) and by ``longbert stats``: ``scan`` runs on
the driver before any model loads (exit 2 with file and line on bad input), and ``read_block`` runs
wherever a block is processed, from the spec alone.

Formats (by extension, or ``--format``): CSV (``--delimiter``), TSV, JSON Lines, parquet, and folders
or globs of ``.txt`` / ``.md`` files (one document per file); ``.gz`` and ``.zst`` variants of the
line formats are read as streams. Every CSV/TSV field is read as text exactly as written (the
standard library's csv reader: no type inference, no missing-value markers), so "007", "NA" and
"3.50" stay strings. pandas' C parser was not used: it drops whitespace-only lines as blank and
silently rewrites a stray quote ('"x"y"' -> 'xy"'); both lose or change a row. Lines end in
``\\n``, ``\\r\\n`` or ``\\r``; line numbers in messages count all three.
"""
from __future__ import annotations

import codecs
import csv
import dataclasses
import glob
import gzip
import hashlib
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .config import ReadConfig
from .errors import InputError

_CHUNK_BYTES = 1 << 20
TEXT_SUFFIXES = (".txt", ".md")
_EXTENSIONS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl",
               ".parquet": "parquet", ".pq": "parquet", ".txt": "text", ".md": "text"}
_COMPRESSIONS = {".gz": "gz", ".zst": "zst"}
_MAGIC = {b"PAR1": "a parquet file", b"\x1f\x8b": "gzip-compressed", b"\x28\xb5\x2f\xfd": "zstd-compressed"}
_FORMAT_NAMES = {"csv": "CSV", "tsv": "TSV", "jsonl": "JSON Lines", "parquet": "parquet", "text": "text"}
LINE_FORMATS = ("csv", "tsv", "jsonl")


# ---------------------------------------------------------------------------------------------- specs

@dataclass(frozen=True)
class Columns:
    """What ``read_block`` takes from each row: the read options every block of a plan shares."""

    text_col: str = "text"
    id_col: str | None = None              # None: ids are row numbers (int64), or paths for text files
    keep_cols: tuple[str, ...] = ()
    encoding: str = "utf-8"
    delimiter: str | None = None           # None: "," for csv, tab for tsv
    on_bad_lines: str = "error"
    with_source: bool = False
    ids: str = "row"                       # "row" (int64 row numbers) or "string" (column values / paths)


@dataclass(frozen=True)
class BlockSpec:
    """One block of a plan: which rows of which file, and where they start there.

    A block never spans two files. ``read_block(spec)`` reads exactly ``n_rows`` rows from it.
    """

    index: int                             # position in the plan: the part number, the output order
    path: str                              # absolute path of the file (text: of the root folder)
    format: str                            # csv | tsv | jsonl | parquet | text
    first_row: int                         # the block's first row, 0-based across all inputs
    n_rows: int
    columns: Columns
    compression: str | None = None         # gz | zst | None (line formats)
    offset: int = 0                        # line formats: byte offset of the first row's first line
    line: int = 1                          # line formats: its 1-based line number
    row_groups: tuple[int, ...] = ()       # parquet: the row groups read
    skip: int = 0                          # parquet: rows of the first of them before the block
    files: tuple[str, ...] = ()            # text: one document per file, relative to ``path`` (POSIX)
    source: str = ""                       # the file (text: root folder) relative to the inputs' parent

    def to_json(self) -> str:
        """The spec as one JSON string (what Ray ships to a worker)."""
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> BlockSpec:
        """Inverse of ``to_json``."""
        d = json.loads(text)
        d["columns"] = Columns(**{**d["columns"], "keep_cols": tuple(d["columns"]["keep_cols"])})
        for key in ("row_groups", "files"):
            d[key] = tuple(d[key])
        return cls(**d)

    def identity(self) -> dict:
        """What the resume fingerprint compares: the block's place, not the machine's absolute path."""
        return {"index": self.index, "file": Path(self.path).name, "format": self.format,
                "first_row": self.first_row, "n_rows": self.n_rows, "offset": self.offset,
                "row_groups": list(self.row_groups), "skip": self.skip, "files": list(self.files)}


@dataclass
class FileScan:
    """What the scan learned about one input (a file, or a folder of text files)."""

    path: Path
    format: str
    sha256: str
    n_bytes: int
    n_rows: int                              # documents (header, blank and skipped lines excluded)
    n_bad_lines: int = 0                     # records skipped by --on-bad-lines skip


@dataclass
class Plan:
    """The inputs, checked before the run starts, as a list of block specs in input order."""

    files: list[FileScan] = field(default_factory=list)
    blocks: list[BlockSpec] = field(default_factory=list)
    columns: Columns = field(default_factory=Columns)
    duplicate_ids: int = 0                   # rows whose id appeared before (all rows are kept)
    id_note: str | None = None               # e.g. "ids from column 'id'" when --id-col was not given

    @property
    def n_rows(self) -> int:
        """Documents in the whole corpus."""
        return sum(f.n_rows for f in self.files)

    @property
    def n_bad_lines(self) -> int:
        """Lines skipped across all files."""
        return sum(f.n_bad_lines for f in self.files)

    @property
    def id_type(self) -> pa.DataType:
        """pa.int64() for row numbers, pa.string() for ids read from the inputs (or text file paths)."""
        return pa.int64() if self.columns.ids == "row" else pa.string()

    def fingerprint(self) -> list[dict]:
        """Inputs by content (name, bytes, sha256), used to refuse a resume over different inputs."""
        return [{"name": f.path.name, "bytes": f.n_bytes, "sha256": f.sha256} for f in self.files]

    def plan_fingerprint(self) -> str:
        """sha256 of every block's place (file name, first row, rows, offset or row groups)."""
        return hashlib.sha256(json.dumps([b.identity() for b in self.blocks]).encode()).hexdigest()


# ---------------------------------------------------------------------------------------------- inputs

@dataclass(frozen=True)
class Source:
    """One input as resolved from the command line: a file with its format, or a folder of text files."""

    path: Path                               # the file; text: the folder the ids are relative to
    format: str
    compression: str | None = None
    by_extension: bool = True                # the format came from the name, not --format
    files: tuple[str, ...] = ()              # text: the documents, relative to ``path`` (POSIX)


def _format_of(path: Path, override: str | None) -> tuple[str, str | None, bool]:
    """(format, compression, by_extension) of a file name: 'a.jsonl.gz' -> ('jsonl', 'gz', True)."""
    suffixes = [s.lower() for s in path.suffixes]
    compression = _COMPRESSIONS.get(suffixes[-1]) if suffixes else None
    if compression:
        suffixes = suffixes[:-1]
    if override is not None:
        return override, compression, False
    fmt = _EXTENSIONS.get(suffixes[-1]) if suffixes else None
    return fmt or "csv", compression, fmt is not None  # an unknown extension is read as CSV


def _glob_base(pattern: str) -> Path:
    """The folder part of a glob before its first wildcard: 'docs/**/*.txt' -> docs."""
    parts = Path(pattern).parts
    base = [p for p in parts[:next(i for i, p in enumerate(parts) if any(c in p for c in "*?["))]]
    return Path(*base) if base else Path(".")


def _text_source(root: Path, files: list[Path], override: str | None) -> Source:
    rel = tuple(f.relative_to(root).as_posix() for f in files)
    return Source(root, "text", None, override is None, rel)


def expand_inputs(cfg: ReadConfig) -> list[Source]:
    """Paths, folders and globs -> the inputs, in the order given (each glob's matches sorted).

    A folder stands for its ``.txt`` / ``.md`` files (recursively, sorted by relative path), one
    document each, ids relative to the folder; a glob's text files get ids relative to the glob's
    folder part; a single text file's id is its name.

    Raises:
        InputError: no input, a glob that matches no file, a path that does not exist, a folder with
            no text files, or a folder with --format other than text.
    """
    if not cfg.inputs:
        raise InputError("no input given; pass one or more files, folders or globs, e.g. `longbert extract docs.csv`")
    out: list[Source] = []
    for pattern in cfg.inputs:
        if any(ch in pattern for ch in "*?["):
            matches = [Path(m) for m in sorted(glob.glob(pattern, recursive=True)) if Path(m).is_file()]
            if not matches:
                raise InputError(f"input glob {pattern!r} matches no file; check the pattern and quote it "
                                 "so the shell does not expand it")
            base = _glob_base(pattern)
            texts = [m for m in matches if _format_of(m, cfg.format)[0] == "text"]
            if texts:
                out.append(_text_source(base, texts, cfg.format))
            out.extend(Source(m, *_format_of(m, cfg.format)) for m in matches if m not in texts)
            continue
        path = Path(pattern)
        if not path.exists():
            raise InputError(f"input {pattern!r} does not exist; check the path")
        if path.is_dir():
            if cfg.format not in (None, "text"):
                raise InputError(f"input {pattern!r} is a folder, read as text files; for --format {cfg.format} "
                                 f"pass its files or a glob like '{pattern.rstrip('/')}/*.{cfg.format}'")
            files = sorted((p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES
                            and not any(part.startswith(".") for part in p.relative_to(path).parts)),
                           key=lambda p: p.relative_to(path).as_posix())
            if not files:
                raise InputError(f"input folder {pattern!r} holds no .txt or .md files; pass files or a glob instead")
            out.append(_text_source(path, files, cfg.format))
            continue
        fmt, compression, by_ext = _format_of(path, cfg.format)
        if fmt == "text":
            out.append(_text_source(path.parent, [path], cfg.format))
        else:
            out.append(Source(path, fmt, compression, by_ext))
    return out


def _how(src: Source) -> str:
    """'read as CSV (from the extension .csv)' for messages."""
    name = _FORMAT_NAMES[src.format]
    if src.by_extension:
        ext = "".join(src.path.suffixes[-2:]) if src.compression else src.path.suffix
        return f"read as {name} (from the extension {ext or '(none)'})"
    return f"read as {name} (--format {src.format})"


# ---------------------------------------------------------------------------------------------- bytes

def _python_encoding(encoding: str) -> str:
    """utf-8 is read as utf-8-sig, so a byte-order mark before the header is dropped, not kept in a name."""
    return "utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding


def _open_binary(path: Path, compression: str | None, offset: int = 0) -> BinaryIO:
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
        got = fh.read(min(left, _CHUNK_BYTES))
        if not got:
            break
        left -= len(got)
    return fh


def _magic_check(src: Source, path: Path) -> None:
    """A file whose first bytes say it is another format than the one tried: InputError with the fix."""
    with path.open("rb") as fh:
        head = fh.read(4)
    for magic, what in _MAGIC.items():
        if not head.startswith(magic):
            continue
        if what == "a parquet file" and src.format != "parquet":
            raise InputError(f"{path}: this is a parquet file (it starts with PAR1) but was {_how(src)}; "
                             "name it .parquet or pass --format parquet")
        if what.endswith("compressed") and src.compression != ("gz" if what.startswith("gzip") else "zst"):
            ext = ".gz" if what.startswith("gzip") else ".zst"
            raise InputError(f"{path}: the file is {what} but was {_how(src)} as plain text; name it "
                             f"{path.name}{ext} so it is decompressed")
    if src.format == "parquet" and head != b"PAR1":
        raise InputError(f"{path}: not a parquet file (it does not start with PAR1) but was {_how(src)}; "
                         "pass --format csv, tsv or jsonl for a text file")


def _hash_and_check_bytes(path: Path, encoding: str, compression: str | None = None) -> tuple[str, int]:
    """(sha256 of the file's bytes as stored, their count); InputError at the first byte that does not
    decode, naming the (decompressed) byte offset and the line (``\\n``, ``\\r\\n`` and ``\\r`` all end a line)."""
    digest = hashlib.sha256()
    decoder = codecs.getincrementaldecoder(_python_encoding(encoding))(errors="strict")
    n_stored = 0
    with path.open("rb") as raw:
        if compression is None:
            stream: BinaryIO = raw
        else:
            stream = _open_binary(path, compression)

        done = lines = 0
        prev_cr = False
        while True:
            chunk = stream.read(_CHUNK_BYTES)
            final = not chunk
            try:
                decoder.decode(chunk, final=final)
            except UnicodeDecodeError as err:
                bad = chunk[err.start:err.start + 4] if chunk else b""
                line = lines + _line_breaks(chunk[:err.start], prev_cr) + 1
                raise InputError(f"{path}: byte offset {done + err.start} (line {line}) is not valid {encoding} "
                                 f"(bytes {bad.hex(' ')}); pass --encoding with the file's encoding "
                                 "(e.g. latin-1, cp1252, gb18030) or convert the file to UTF-8") from None
            if final:
                break
            lines += _line_breaks(chunk, prev_cr)
            prev_cr = chunk.endswith(b"\r")
            done += len(chunk)
            if compression is None:
                digest.update(chunk)
        if compression is not None:
            stream.close()
            raw.seek(0)
            for block in iter(lambda: raw.read(_CHUNK_BYTES), b""):
                digest.update(block)
        n_stored = raw.tell()
    return digest.hexdigest(), n_stored


def _line_breaks(data: bytes, prev_cr: bool) -> int:
    """Line ends in ``data``: each \\n, \\r\\n and lone \\r once (a \\n right after a \\r that ended
    the previous chunk is the second half of that \\r\\n)."""
    n = data.count(b"\n") + data.count(b"\r") - data.count(b"\r\n")
    return n - 1 if prev_cr and data.startswith(b"\n") else n


def _lines(fh: BinaryIO, offset: int, line: int) -> Iterator[tuple[int, int, bytes]]:
    """(line number, byte offset, bytes with their line end) of each line from the stream's position.

    Lines end in \\n, \\r\\n or a lone \\r (bytes.splitlines); a \\r at a chunk's end waits for the
    next chunk, which may start with its \\n.
    """
    carry = b""
    while True:
        chunk = fh.read(_CHUNK_BYTES)
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


# ---------------------------------------------------------------------------------------------- records

@dataclass
class _BadRecord(Exception):
    line: int        # 1-based physical line where the record starts
    reason: str


@dataclass
class _Record:
    line: int                     # 1-based line where the record starts
    offset: int                   # its byte offset
    values: dict[str, str] | None  # None: a bad record (skipped)
    bad: _BadRecord | None = None


class _Feed:
    """Decoded lines for csv.reader, remembering the line and offsets of the record being read."""

    def __init__(self, lines: Iterator[tuple[int, int, bytes]], encoding: str):
        self.lines = lines
        self.encoding = encoding
        self.start: tuple[int, int, int] | None = None   # (line, offset, end of that line) of the record
        self.mark = False

    def __iter__(self) -> _Feed:
        return self

    def __next__(self) -> str:
        line, offset, raw = next(self.lines)
        if self.mark:
            self.start, self.mark = (line, offset, offset + len(raw)), False
        text = raw.decode(self.encoding)
        return text[1:] if offset == 0 and text.startswith("\ufeff") else text


def _decoding(encoding: str) -> str:
    """The codec for one line at a time: UTF-8's byte-order mark is dropped by hand, at offset 0 only."""
    return "utf-8" if codecs.lookup(encoding).name in ("utf-8", "utf-8-sig") else encoding


class _LineReader:
    """The records of one line-format input (CSV, TSV, JSON Lines) from a byte offset, with the header."""

    def __init__(self, src: Source, cols: Columns):
        self.src = src
        self.cols = cols
        self.delimiter = cols.delimiter or ("\t" if src.format == "tsv" else ",")
        self.encoding = _decoding(cols.encoding)
        csv.field_size_limit(sys.maxsize)

    def header(self) -> list[str] | None:
        """The CSV/TSV header's names (None for JSON Lines); InputError if it cannot be parsed."""
        if self.src.format == "jsonl":
            return None
        with _open_binary(self.src.path, self.src.compression) as fh:
            feed = _Feed(_lines(fh, 0, 1), self.encoding)
            reader = csv.reader(feed, delimiter=self.delimiter, strict=True)
            try:
                for row in reader:
                    if row:
                        return row
            except csv.Error as err:
                raise InputError(f"{self.src.path}: the header line cannot be parsed ({err}; {_how(self.src)}); "
                                 "fix the first line, or pass --format / --delimiter for the file's real "
                                 "format") from None
        return []

    def records(self, header: list[str] | None, offset: int = 0, line: int = 1) -> Iterator[_Record]:
        """Every data record from ``offset`` (at ``line``), bad ones as _Record(values=None).

        CSV/TSV: with ``offset`` 0 the header is skipped. A record that does not parse or has another
        number of fields than the header is bad; reading goes on at the line after the one where it
        started. JSON Lines: a line that is not a JSON object, or lacks a needed key, is bad; blank
        lines are no records.
        """
        if self.src.format == "jsonl":
            yield from self._json_records(offset, line)
            return
        assert header is not None
        skip_header = offset == 0
        while True:
            with _open_binary(self.src.path, self.src.compression, offset) as fh:
                feed = _Feed(_lines(fh, offset, line), self.encoding)
                reader = csv.reader(feed, delimiter=self.delimiter, strict=True)
                while True:
                    feed.mark, feed.start = True, None
                    try:
                        row = next(reader)
                    except StopIteration:
                        return
                    except csv.Error as err:
                        assert feed.start is not None
                        start_line, start_offset, first_end = feed.start
                        yield _Record(start_line, start_offset, None, _BadRecord(start_line, str(err)))
                        offset, line = first_end, start_line + 1  # go on at the next line
                        break
                    if not row:
                        continue                       # an empty line
                    if skip_header:
                        skip_header = False
                        continue
                    start_line, start_offset, _ = feed.start
                    if len(row) != len(header):
                        yield _Record(start_line, start_offset, None,
                                      _BadRecord(start_line, f"expected {len(header)} fields, saw {len(row)}"))
                        continue
                    yield _Record(start_line, start_offset, dict(zip(header, row)))

    def _json_records(self, offset: int, line: int) -> Iterator[_Record]:
        needed = [c for c in (self.cols.text_col, self.cols.id_col, *self.cols.keep_cols) if c is not None]
        with _open_binary(self.src.path, self.src.compression, offset) as fh:
            for number, start, raw in _lines(fh, offset, line):
                text = raw.decode(self.encoding)
                if start == 0 and text.startswith("\ufeff"):
                    text = text[1:]
                if not text.strip():
                    continue
                try:
                    obj = json.loads(text)
                except ValueError as err:
                    yield _Record(number, start, None, _BadRecord(number, f"not valid JSON ({err})"))
                    continue
                if not isinstance(obj, dict):
                    yield _Record(number, start, None,
                                  _BadRecord(number, f"a JSON {type(obj).__name__}, not an object"))
                    continue
                missing = [k for k in needed if k not in obj]
                if missing:
                    yield _Record(number, start, None,
                                  _BadRecord(number, f"no key {missing[0]!r} (keys: {sorted(obj)[:10]})"))
                    continue
                yield _Record(number, start, {k: _json_text(obj[k]) for k in needed})


def _json_text(value) -> str:
    """A JSON value as text: strings as they are, anything else as its JSON text (7 -> '7', null -> 'null')."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _bad_message(src: Source, bad: _BadRecord) -> str:
    if "unexpected end of data" in bad.reason:
        what = "a quoted field starts here and never ends (unbalanced \"); close the quote"
    else:
        what = f"{bad.reason}; fix the line"
    hint = ""
    if src.format == "jsonl":
        hint = f" ({_how(src)}; pass --format csv or tsv if it is not JSON Lines)"
    elif src.format != "csv" or src.compression or not src.by_extension:
        hint = f" ({_how(src)})"
    return f"{src.path}: line {bad.line}: {what}{hint}, or pass --on-bad-lines skip to drop such lines"


# ---------------------------------------------------------------------------------------------- scan

def _columns_of(src: Source, cols: Columns) -> list[str] | None:
    """The input's column names (CSV header, parquet schema, first JSON object's keys); None for text."""
    if src.format == "text":
        return None
    _magic_check(src, src.path)
    if src.format == "parquet":
        try:
            return pq.read_schema(src.path).names
        except (OSError, pa.ArrowException) as err:
            raise InputError(f"{src.path}: cannot be read as parquet ({err}); check the file") from None
    reader = _LineReader(src, cols)
    if src.format == "jsonl":
        with _open_binary(src.path, src.compression) as fh:
            for _, _, raw in _lines(fh, 0, 1):
                text = raw.decode(reader.encoding, errors="replace").lstrip("\ufeff")
                if text.strip():
                    try:
                        obj = json.loads(text)
                    except ValueError:
                        return []
                    return list(obj) if isinstance(obj, dict) else []
        return []
    return reader.header()


def _check_columns(src: Source, columns: list[str], cols: Columns, id_flag: str) -> None:
    """Needed columns present and named once; otherwise InputError with the columns and the fix."""
    needed = [(cols.text_col, "--text-col"), (cols.id_col, id_flag), *[(c, "--keep-col") for c in cols.keep_cols]]
    for col, _ in needed:
        if col is not None and columns.count(col) > 1:
            raise InputError(f"{src.path}: the header names column {col!r} {columns.count(col)} times "
                             f"(columns are {columns}); rename the copies so each name is used once")
    for col, flag in needed:
        if col is None or col in columns:
            continue
        if src.format == "jsonl":
            if not columns:
                return  # the first line is not an object: the record check reports it with its line
            continue    # a later line may have the key; each line is checked (a bad line if it lacks it)
        if src.format in ("csv", "tsv") and columns and columns[0].lstrip().startswith("{"):
            raise InputError(f"{src.path}: the first line looks like JSON Lines, but the file was {_how(src)}; "
                             f"pass --format jsonl or name it .jsonl (no column {col!r} in a {_FORMAT_NAMES[src.format]} "
                             "header)")
        msg = f"{src.path}: column {col!r} not found; columns are {_shown(columns)}; pass {flag} with one of them"
        if src.format in ("csv", "tsv") and len(columns) == 1:
            head = columns[0]
            delim = cols.delimiter or ("\t" if src.format == "tsv" else ",")
            for char, name, fix in (("\t", "a tab", "--format tsv or --delimiter $'\\t'"),
                                    (";", "a semicolon", "--delimiter ';'"),
                                    (",", "a comma", "--delimiter ','"), ("|", "a '|'", "--delimiter '|'")):
                if char != delim and char in head:
                    msg += f" (the header has no {delim!r} but has {name}: pass {fix})"
                    break
        raise InputError(msg)


def _shown(columns: list[str], most: int = 20, width: int = 60) -> str:
    """The column list for a message, cut to ``most`` names of at most ``width`` characters each."""
    names = [c if len(c) <= width else c[:width] + "..." for c in columns[:most]]
    more = f" and {len(columns) - most} more" if len(columns) > most else ""
    return f"{names}{more}"


def _resolve_ids(sources: list[Source], cfg: ReadConfig) -> tuple[Columns, str | None, dict[Source, list[str]]]:
    """Decide where ids come from; returns the Columns, a note for the summary and each input's columns.

    --id-col given: that column (strings). Else, when every tabular input has a column ``id``: that one,
    and the summary says so. Else row numbers (int64, output column ``row``); text files' ids are their
    paths, which cannot be mixed with row numbers.

    Raises:
        InputError: text files mixed with tabular inputs that have no id column.
    """
    base = Columns(text_col=cfg.text_col, id_col=cfg.id_col, keep_cols=cfg.keep_cols, encoding=cfg.encoding,
                   delimiter=cfg.delimiter, on_bad_lines=cfg.on_bad_lines, with_source=cfg.with_source)
    found = {src: _columns_of(src, base) for src in sources}
    tabular = [s for s in sources if s.format != "text"]
    has_text = len(tabular) < len(sources)
    id_col, note = cfg.id_col, None
    if id_col is None and tabular and all("id" in (found[s] or []) for s in tabular):
        id_col, note = "id", "ids from the input column 'id' (pass --id-col to choose another)"
    if has_text and tabular and id_col is None:
        raise InputError("text files (ids are their paths) are mixed with inputs that have no id column "
                         f"({tabular[0].path}); pass --id-col with a column of those inputs")
    ids = "string" if (id_col is not None or has_text) else "row"
    return dataclasses.replace(base, id_col=id_col, ids=ids), note, found


def scan(cfg: ReadConfig) -> Plan:
    """Check every input before anything is loaded or written, and plan it as blocks.

    Checks: a format's magic bytes (a parquet file named .csv...), bytes that decode (file, byte offset,
    line), the needed columns (named once, present; else the columns and the --text-col / --delimiter /
    --format fix), every record (file and line of a bad one, or --on-bad-lines skip), a parquet text
    column's type. Counts duplicate ids (kept; the summary warns).

    Returns:
        A Plan: blocks of at most ``cfg.block_rows`` rows, none spanning two files (parquet: within
        row groups), in input order, numbered 0...

    Raises:
        InputError: as above, naming the file, the line where there is one, and the fix.
    """
    sources = expand_inputs(cfg)
    cols, note, found = _resolve_ids(sources, cfg)
    plan = Plan(columns=cols, id_note=note)
    id_flag = "--id-col" if cfg.id_col is not None else "--id-col (the input column 'id' is used when present)"
    parent = _common_parent(sources)
    seen: set[str] | None = set() if cols.ids == "string" else None
    for src in sources:
        if src.format != "text":
            _check_columns(src, found[src] or [], cols, id_flag)
        elif cols.keep_cols:
            raise InputError(f"{src.path}: text files have no column {cols.keep_cols[0]!r} (only their text and "
                             "path); drop --keep-col, or pass tabular inputs")
        scan_source = {"text": _scan_text, "parquet": _scan_parquet}.get(src.format, _scan_lines)
        fs, specs, dups = scan_source(src, cols, cfg.block_rows, plan.n_rows, len(plan.blocks), seen)
        source = _relative(src.path, parent)
        plan.files.append(fs)
        plan.blocks.extend(dataclasses.replace(s, source=source) for s in specs)
        plan.duplicate_ids += dups
    return plan


def _common_parent(sources: list[Source]) -> Path:
    folders = [str(s.path.resolve().parent) for s in sources]  # a text folder's own name stays in "source"
    return Path(os.path.commonpath(folders)) if folders else Path(".")


def _relative(path: Path, parent: Path) -> str:
    return Path(os.path.relpath(path.resolve(), parent)).as_posix()


def _count_id(seen: set[str] | None, value: str) -> int:
    if seen is None:
        return 0
    if value in seen:
        return 1
    seen.add(value)
    return 0


def _scan_lines(src: Source, cols: Columns, block_rows: int, first_row: int, first_index: int,
                seen: set[str] | None) -> tuple[FileScan, list[BlockSpec], int]:
    sha, n_bytes = _hash_and_check_bytes(src.path, cols.encoding, src.compression)
    reader = _LineReader(src, cols)
    header = reader.header()
    if header == [] and src.format != "jsonl":
        raise InputError(f"{src.path}: the file is empty; a {_FORMAT_NAMES[src.format]} file needs a header line "
                         f"with a {cols.text_col!r} column")
    specs: list[BlockSpec] = []
    n_rows = n_bad = dups = 0
    start: _Record | None = None
    in_block = 0
    path = str(src.path.resolve())
    for rec in reader.records(header):
        if rec.values is None:
            if cols.on_bad_lines == "error":
                raise InputError(_bad_message(src, rec.bad))
            n_bad += 1
            continue
        if in_block == 0:
            start = rec
        in_block += 1
        n_rows += 1
        if cols.id_col is not None:
            dups += _count_id(seen, rec.values[cols.id_col])
        if in_block == block_rows:
            specs.append(BlockSpec(first_index + len(specs), path, src.format, first_row + n_rows - in_block,
                                   in_block, cols, src.compression, start.offset, start.line))
            in_block = 0
    if in_block:
        specs.append(BlockSpec(first_index + len(specs), path, src.format, first_row + n_rows - in_block,
                               in_block, cols, src.compression, start.offset, start.line))
    return FileScan(src.path, src.format, sha, n_bytes, n_rows, n_bad), specs, dups


def _file_sha256(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    n = 0
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK_BYTES), b""):
            digest.update(chunk)
            n += len(chunk)
    return digest.hexdigest(), n


def _scan_parquet(src: Source, cols: Columns, block_rows: int, first_row: int, first_index: int,
                  seen: set[str] | None) -> tuple[FileScan, list[BlockSpec], int]:
    sha, n_bytes = _file_sha256(src.path)
    pf = pq.ParquetFile(src.path)
    text_type = pf.schema_arrow.field(cols.text_col).type
    if not (pa.types.is_string(text_type) or pa.types.is_large_string(text_type)
            or (pa.types.is_dictionary(text_type) and pa.types.is_string(text_type.value_type))):
        raise InputError(f"{src.path}: column {cols.text_col!r} has type {text_type}, not a string; pass "
                         "--text-col with a text column, or convert the column to strings")
    for col in (cols.id_col, *cols.keep_cols):
        if col is not None and pa.types.is_nested(pf.schema_arrow.field(col).type):
            raise InputError(f"{src.path}: column {col!r} has type {pf.schema_arrow.field(col).type}, which "
                             "has no text form; pass a column of strings or numbers")
    dups = 0
    if cols.id_col is not None and seen is not None:
        for value in _as_strings(pf.read(columns=[cols.id_col]).column(0)).to_pylist():
            dups += _count_id(seen, value if value is not None else "")
    specs: list[BlockSpec] = []
    path = str(src.path.resolve())
    row = first_row
    groups: list[int] = []      # small row groups are merged into one block up to block_rows
    skip = n = 0
    for g in range(pf.num_row_groups):
        g_rows = pf.metadata.row_group(g).num_rows
        at = 0
        while at < g_rows:
            if n == 0:
                groups, skip = [], at
            take = min(block_rows - n, g_rows - at)
            groups.append(g)
            n += take
            at += take
            if n == block_rows:
                specs.append(BlockSpec(first_index + len(specs), path, "parquet", row, n, cols,
                                       row_groups=tuple(groups), skip=skip))
                row += n
                n = 0
    if n:
        specs.append(BlockSpec(first_index + len(specs), path, "parquet", row, n, cols,
                               row_groups=tuple(groups), skip=skip))
        row += n
    return FileScan(src.path, "parquet", sha, n_bytes, row - first_row), specs, dups


def _scan_text(src: Source, cols: Columns, block_rows: int, first_row: int, first_index: int,
               seen: set[str] | None) -> tuple[FileScan, list[BlockSpec], int]:
    digest = hashlib.sha256()
    n_bytes = dups = 0
    for rel in src.files:
        file = src.path / rel
        sha, size = _hash_and_check_bytes(file, cols.encoding)
        digest.update(f"{rel}\0{sha}\0".encode())
        n_bytes += size
        dups += _count_id(seen, rel)
    path = str(src.path.resolve())
    specs = [BlockSpec(first_index + k, path, "text", first_row + start, len(src.files[start:start + block_rows]),
                       cols, files=src.files[start:start + block_rows])
             for k, start in enumerate(range(0, len(src.files), block_rows))]
    return FileScan(src.path, "text", digest.hexdigest(), n_bytes, len(src.files)), specs, dups


# ---------------------------------------------------------------------------------------------- read

def read_block(spec: BlockSpec) -> pa.Table:
    """Read exactly the rows of one block.

    Args:
        spec: a block of a ``scan`` plan (also after a JSON round trip: ``BlockSpec.from_json``).

    Returns:
        A table of ``spec.n_rows`` rows, in input order, with columns ``id`` (int64 row number, or
        string: the id column's value or the text file's path), ``text`` (string), each keep column
        (string, null where a parquet value is null) and, with ``with_source``, ``source`` (string).

    Raises:
        InputError: the file changed since the scan (fewer rows than planned).
    """
    cols = spec.columns
    if spec.format == "text":
        root = Path(spec.path)
        texts = [(root / rel).read_bytes().decode(_python_encoding(cols.encoding)) for rel in spec.files]
        table = {"id": pa.array(list(spec.files), pa.string()), "text": pa.array(texts, pa.string())}
        sources = [Path(spec.source, rel).as_posix() if spec.source not in ("", ".") else rel for rel in spec.files]
        return _finish(table, cols, spec, sources)
    if spec.format == "parquet":
        return _read_parquet_block(spec)
    src = Source(Path(spec.path), spec.format, spec.compression)
    reader = _LineReader(src, cols)
    header = reader.header()
    records: list[dict[str, str]] = []
    for rec in reader.records(header, spec.offset, spec.line):
        if rec.values is not None:
            records.append(rec.values)
            if len(records) == spec.n_rows:
                break
    if len(records) != spec.n_rows:
        raise InputError(f"{spec.path}: {len(records)} rows from line {spec.line}, but the scan found "
                         f"{spec.n_rows}; the file changed during the run: run again")
    table = {"id": _ids(spec, [r[cols.id_col] for r in records] if cols.id_col else None),
             "text": pa.array([r[cols.text_col] for r in records], pa.string())}
    for col in cols.keep_cols:
        table[col] = pa.array([r[col] for r in records], pa.string())
    return _finish(table, cols, spec, None)


def _ids(spec: BlockSpec, values: list[str] | None) -> pa.Array:
    if values is None:
        return pa.array(range(spec.first_row, spec.first_row + spec.n_rows), type=pa.int64())
    return pa.array(values, pa.string())


def _finish(columns: dict[str, pa.Array], cols: Columns, spec: BlockSpec, sources: list[str] | None) -> pa.Table:
    if cols.with_source:
        columns["source"] = pa.array(sources if sources is not None else [spec.source] * spec.n_rows, pa.string())
    if cols.ids == "string" and pa.types.is_integer(columns["id"].type):
        columns["id"] = pc.cast(columns["id"], pa.string())
    return pa.table(columns)


def _as_strings(column) -> pa.ChunkedArray | pa.Array:
    """Any scalar column as strings (ints '7', floats '3.5', dictionary-encoded text decoded)."""
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    if pa.types.is_string(column.type):
        return column
    return pc.cast(column, pa.string())


_ROW_GROUP_CACHE: dict[tuple, pa.Table] = {}


def _read_parquet_block(spec: BlockSpec) -> pa.Table:
    """Rows [skip, skip + n_rows) of the spec's row groups. The last row groups read are kept (one
    entry), so consecutive blocks of one large row group decode it once."""
    cols = spec.columns
    names = list(dict.fromkeys(c for c in (cols.id_col, cols.text_col, *cols.keep_cols) if c is not None))
    key = (spec.path, os.stat(spec.path).st_mtime_ns, spec.row_groups, tuple(names))
    data = _ROW_GROUP_CACHE.get(key)
    if data is None:
        data = pq.ParquetFile(spec.path).read_row_groups(list(spec.row_groups), columns=names)
        _ROW_GROUP_CACHE.clear()
        _ROW_GROUP_CACHE[key] = data
    part = data.slice(spec.skip, spec.n_rows)
    if part.num_rows != spec.n_rows:
        raise InputError(f"{spec.path}: the row groups {list(spec.row_groups)} hold fewer rows than the scan "
                         "found; the file changed during the run: run again")
    text = _as_strings(part.column(cols.text_col)).combine_chunks()
    table = {"id": _ids(spec, None) if cols.id_col is None else
             _as_strings(part.column(cols.id_col)).combine_chunks(),
             "text": pc.fill_null(text, "")}  # a null text is an empty one: kept, with error "empty text"
    for col in cols.keep_cols:
        table[col] = _as_strings(part.column(col)).combine_chunks()
    return _finish(table, cols, spec, None)


def row_location(spec: BlockSpec, i: int) -> str:
    """Where row ``i`` of the block is in its input, for messages: 'docs.csv line 7', 'a.parquet row 12',
    'notes/a.txt'. Re-reads the block (used only when a row is reported)."""
    if spec.format == "text":
        return str(Path(spec.path) / spec.files[i])
    if spec.format == "parquet":
        return f"{spec.path} row {spec.first_row - _first_row_of_file(spec) + i + 1}"
    src = Source(Path(spec.path), spec.format, spec.compression)
    reader = _LineReader(src, spec.columns)
    seen = 0
    for rec in reader.records(reader.header(), spec.offset, spec.line):
        if rec.values is not None:
            if seen == i:
                return f"{spec.path} line {rec.line}"
            seen += 1
    return spec.path


def _first_row_of_file(spec: BlockSpec) -> int:
    """The plan row number of the file's first row, from the spec's own row groups."""
    meta = pq.ParquetFile(spec.path).metadata
    return spec.first_row - spec.skip - sum(meta.row_group(g).num_rows for g in range(spec.row_groups[0]))


def read_blocks(plan: Plan) -> Iterator[pa.Table]:
    """``read_block`` of each block of the plan in order (a convenience for ``longbert stats`` and
    tests; the engines map read_block over the plan's blocks themselves).

    Yields:
        pyarrow tables as ``read_block`` returns them.
    """
    for spec in plan.blocks:
        yield read_block(spec)


def block_from_texts(texts: list[str], ids: list | None = None) -> pa.Table:
    """An input block from Python strings (the scikit-learn vectorizer's path): id = 0.. unless given."""
    id_arr = pa.array(range(len(texts)), type=pa.int64()) if ids is None else pa.array([str(i) for i in ids])
    return pa.table({"id": id_arr, "text": pa.array([str(t) for t in texts], type=pa.string())})
