"""CSV, TSV and JSON Lines: the line formats, read with one line splitter (``streams.lines``).

Every CSV/TSV field is read as text exactly as written (the standard library's csv reader: no type
inference, no missing-value markers), so "007", "NA" and "3.50" stay strings. pandas' C parser was
not used: it drops whitespace-only lines as blank and silently rewrites a stray quote
('"x"y"' -> 'xy"'); both lose or change a row. Lines end in ``\\n``, ``\\r\\n`` or ``\\r``; line
numbers in messages count all three. A JSON Lines record is one line holding one JSON object; an id or
kept value that is not a string is kept as its text exactly as written (``json_text``: ``1.50`` stays
"1.50"), a text that is not a string is a row error naming its JSON type (the row is kept), and a null
is a null (a null text an empty text), as parquet gives. A JSON Lines record
that names a key twice, or holds a lone surrogate (``"\\ud83d"``) in a value read, is a bad record.
A bad last record with no final line end (cut inside a quote or a JSON value) means the file was cut
short: an InputError naming line and byte, even with ``--on-bad-lines skip``.

The format interface (see ``pipeline.read``): ``columns``, ``check``, ``scan``, ``read``, ``locate``.
"""
from __future__ import annotations

import csv
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from ..errors import InputError
from .sources import FORMAT_NAMES, Source, how
from .specs import (ROW_ERROR, BlockSpec, Columns, FileScan, check_named_once, count_id, finish_table, missing_message,
                    needed_flags, row_ids)
from .encoding_advice import undecodable_message
from .json_text import raw_values
from .line_messages import BadRecord, bad_message, cut_message, delimiter_hint
from .magic import magic_check
from .recheck import block_paths, stamp_of
from .streams import hash_and_check_bytes, line_decoding, lines, mixed_lines, open_binary


@dataclass
class _Record:
    line: int                     # 1-based line where the record starts
    offset: int                   # its byte offset
    values: dict[str, str] | None  # None: a bad record (skipped)
    bad: BadRecord | None = None
    error: str | None = None       # a row error: the row is kept, with this error and an empty text


class _Undecodable(Exception):
    """A data line that does not decode, under --on-bad-lines skip: its record is skipped and counted."""


def _decode(src: Source, cols: Columns, raw: bytes, offset: int, line: int, skip: bool = False) -> str:
    """One line's text; InputError (file, byte, line, the --encoding to pass) if it does not decode,
    or with ``skip`` (a data line under --on-bad-lines skip) _Undecodable, naming the bytes."""
    try:
        text = raw.decode(line_decoding(cols.encoding))
    except UnicodeDecodeError as err:
        if skip:
            raise _Undecodable(f"not valid {cols.encoding} (bytes {raw[err.start:err.start + 4].hex(' ')})") from None
        raise InputError(undecodable_message(src.path, lambda: mixed_lines(src.path, src.compression), cols.encoding,
                                             offset + err.start, line, raw[err.start:err.start + 4],
                                             raw[:4096] if offset == 0 else b"", src.format, raw)) from None
    return text[1:] if offset == 0 and text.startswith("\ufeff") else text


class _Feed:
    """Decoded lines for csv.reader, remembering the line and offsets of the record being read."""

    def __init__(self, lines: Iterator[tuple[int, int, bytes]], src: Source, cols: Columns):
        self.lines = lines
        self.src, self.cols = src, cols
        self.start: tuple[int, int, int] | None = None   # (line, offset, end of that line) of the record
        self.mark = False
        self.last = b"\n"                                 # the last line read, as bytes
        self.skip = False                                 # data lines: an undecodable one is _Undecodable

    @property
    def unterminated(self) -> bool:
        """The last line read has no line end: it is the file's last line, cut or never ended."""
        return not self.last.endswith((b"\n", b"\r"))

    def __iter__(self) -> _Feed:
        return self

    def __next__(self) -> str:
        line, offset, raw = next(self.lines)
        self.last = raw
        if self.mark:
            self.start, self.mark = (line, offset, offset + len(raw)), False
        return _decode(self.src, self.cols, raw, offset, line, self.skip)


class _LineReader:
    """The records of one line-format input (CSV, TSV, JSON Lines) from a byte offset, with the header."""

    def __init__(self, src: Source, cols: Columns):
        self.src = src
        self.cols = cols
        self.delimiter = cols.delimiter or ("\t" if src.format == "tsv" else ",")
        self.end = 0                  # a block of an S3 object: the records are read from [offset, end) only
        csv.field_size_limit(sys.maxsize)

    def header(self) -> list[str] | None:
        """The CSV/TSV header's names (None for JSON Lines); InputError if it cannot be parsed."""
        if self.src.format == "jsonl":
            return None
        with open_binary(self.src.path, self.src.compression, 0, self.cols.encoding) as fh:
            feed = _Feed(lines(fh, 0, 1), self.src, self.cols)
            reader = csv.reader(feed, delimiter=self.delimiter, strict=True)
            try:
                for row in reader:
                    if row:
                        return row
            except csv.Error as err:
                raise InputError(f"{self.src.path}: the header line cannot be parsed ({err}; {how(self.src)}); "
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
            with open_binary(self.src.path, self.src.compression, offset, self.cols.encoding, self.end) as fh:
                feed = _Feed(lines(fh, offset, line), self.src, self.cols)
                reader = csv.reader(feed, delimiter=self.delimiter, strict=True)
                while True:
                    feed.mark, feed.start = True, None
                    feed.skip = self.cols.on_bad_lines == "skip" and not skip_header
                    try:
                        row = next(reader)
                    except StopIteration:
                        return
                    except (csv.Error, _Undecodable) as err:
                        assert feed.start is not None
                        start_line, start_offset, first_end = feed.start
                        yield _Record(start_line, start_offset, None,
                                      BadRecord(start_line, str(err), start_offset, feed.unterminated))
                        offset, line = first_end, start_line + 1  # go on at the next line
                        break
                    if not row:
                        continue                       # an empty line
                    if skip_header:
                        skip_header = False
                        continue
                    start_line, start_offset, _ = feed.start
                    if len(row) != len(header):
                        yield _Record(start_line, start_offset, None, BadRecord(
                            start_line, f"expected {len(header)} fields, saw {len(row)}", start_offset,
                            feed.unterminated))
                        continue
                    yield _Record(start_line, start_offset, dict(zip(header, row)))

    def _json_records(self, offset: int, line: int) -> Iterator[_Record]:
        with open_binary(self.src.path, self.src.compression, offset, self.cols.encoding, self.end) as fh:
            for number, start, raw in lines(fh, offset, line):
                try:
                    text = _decode(self.src, self.cols, raw, start, number, self.cols.on_bad_lines == "skip")
                except _Undecodable as err:
                    yield _Record(number, start, None, BadRecord(number, str(err), start))
                    continue
                if not text.strip():
                    continue
                values, reason = self._json_values(text)
                if reason is not None:
                    cut = not raw.endswith((b"\n", b"\r"))
                    yield _Record(number, start, None, BadRecord(number, reason, start, cut))
                    continue
                error = values.pop(_TEXT_ERROR, None)
                yield _Record(number, start, values, error=error)

    def _json_values(self, text: str) -> tuple[dict[str, str] | None, str | None]:
        """(the needed values of one JSON Lines record, None), or (None, why the record is bad)."""
        try:
            obj = json.loads(text, object_pairs_hook=_object)
        except _RepeatedKey as err:
            return None, str(err)
        except ValueError as err:
            return None, f"not valid JSON ({err})"
        if not isinstance(obj, dict):
            return None, f"a JSON {type(obj).__name__}, not an object"
        missing = [k for k in self.cols.needed if k not in obj]
        if missing:
            return None, f"no key {missing[0]!r} (keys: {sorted(obj)[:10]})"
        values = _json_texts(text, obj, self.cols)
        if "\\ud" not in text and "\\uD" not in text:
            return values, None  # strictly decoded UTF-8 holds no surrogates: only a \\u escape makes one
        for key, value in values.items():
            lone = _SURROGATE.search(value or "")
            if lone:
                return None, (f"key {key!r} holds a lone surrogate \\u{ord(lone.group()):04x} (half of a UTF-16 "
                              "pair, which no UTF-8 text can hold)")
        return values, None


_SURROGATE = re.compile("[\ud800-\udfff]")


class _RepeatedKey(ValueError):
    """A JSON object that names one key twice (json keeps the last value silently)."""


def _object(pairs: list[tuple[str, object]]) -> dict:
    """``object_pairs_hook`` for json.loads: a dict, or _RepeatedKey naming the first repeated key."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        key = next(k for i, (k, _) in enumerate(pairs) if k in (p for p, _ in pairs[:i]))
        raise _RepeatedKey(f"the object names the key {key!r} twice (JSON keeps only the last value)")
    return obj


_TEXT_ERROR = "\0text error"   # the key _json_texts files a text's row error under (no JSON key holds a NUL here)
_JSON_KINDS = ((bool, "boolean"), (int, "number"), (float, "number"), (list, "array"), (dict, "object"))


def _json_texts(text: str, obj: dict, cols: Columns) -> dict[str, str | None]:
    """The needed values of one record: a string as it is; a JSON null as None (the text column: "",
    an empty text, as a null parquet text); any other id or kept value as its text exactly as written in
    the line (``1.50`` stays "1.50", ``1E+3`` "1E+3", ``[1, 2]`` "[1, 2]"), never re-printed. A text that
    is an array, object, number or boolean is never embedded as its JSON: the row keeps an empty text
    and, under _TEXT_ERROR, its error ("text is a JSON array, not a string"), as parquet refuses such a column."""
    values = {k: obj[k] for k in cols.needed}
    if all(isinstance(v, str) for v in values.values()):
        return values
    value = values[cols.text_col]
    error = None
    if value is not None and not isinstance(value, str):
        kind = next(name for t, name in _JSON_KINDS if isinstance(value, t))
        error, values[cols.text_col] = f"{cols.text_col} is a JSON {kind}, not a string", None
    raw = raw_values(text, [k for k, v in values.items() if v is not None and not isinstance(v, str)])
    out = {k: v if v is None or isinstance(v, str) else raw[k] for k, v in values.items()}
    if out[cols.text_col] is None:
        out[cols.text_col] = ""
    if error is not None:
        out[_TEXT_ERROR] = error
    return out


# ---------------------------------------------------------------------------------------------- interface

def columns(src: Source, cols: Columns) -> list[str]:
    """The input's column names: the CSV/TSV header, or the first JSON object's keys ([] if none)."""
    magic_check(src, src.path)
    reader = _LineReader(src, cols)
    if src.format != "jsonl":
        return reader.header()
    with open_binary(src.path, src.compression, 0, cols.encoding) as fh:
        for number, start, raw in lines(fh, 0, 1):
            try:
                text = _decode(src, cols, raw, start, number, cols.on_bad_lines == "skip")
            except _Undecodable:
                continue  # the record reader skips and counts it
            if text.strip():
                try:
                    obj = json.loads(text)
                except ValueError:
                    return []
                return list(obj) if isinstance(obj, dict) else []
    return []


def nested_key_message(path, key: str, flag: str) -> str:
    """The InputError of a dotted key (``--text-col body.text``) whose first part is a top-level key of
    the records: longbert reads top-level keys only, so the message gives the command that flattens them.

    Example: ("in.jsonl", "body.text", "--text-col") -> "in.jsonl: --text-col 'body.text' names a key
    nested in 'body', and only top-level keys are read; flatten the records first: `jq -c '. +
    {"body.text": .body.text}' in.jsonl > in.flat.jsonl`, then pass in.flat.jsonl with --text-col body.text".
    """
    from pathlib import Path

    path = Path(path)
    head, flat = key.split(".", 1)[0], f"{path.name.split('.')[0]}.flat.jsonl"
    getter = "".join(f'.["{part}"]' if not part.isidentifier() else f".{part}" for part in key.split("."))
    return (f"{path}: {flag} {key!r} names a key nested in {head!r}, and only top-level keys are read; flatten the "
            f"records first: `jq -c '. + {{\"{key}\": {getter}}}' {path.name} > {flat}`, then pass {flat} with "
            f"{flag} {key}")


def check(src: Source, names: list[str], cols: Columns, id_flag: str) -> None:
    """Needed columns present and named once; otherwise InputError with the columns and the fix
    (a JSON Lines key missing from the first object is checked line by line instead)."""
    check_named_once(src.path, names, cols, id_flag)
    if not names and src.format != "jsonl":
        raise InputError(f"{src.path}: the file is empty (it holds no header line, only blank lines or nothing); "
                         f"a {FORMAT_NAMES[src.format]} file needs a header line with a {cols.text_col!r} column")
    for col, flag in needed_flags(cols, id_flag):
        if col in names:
            continue
        if src.format == "jsonl":
            if not names:
                return  # the first line is not an object: the record check reports it with its line
            if "." in col and col.split(".", 1)[0] in names:
                raise InputError(nested_key_message(src.path, col, flag))
            continue    # a later line may have the key; each line is checked (a bad line if it lacks it)
        if names and names[0].lstrip().startswith("{"):
            raise InputError(f"{src.path}: the first line looks like JSON Lines, but the file was {how(src)}; "
                             f"pass --format jsonl or name it .jsonl (no column {col!r} in a {FORMAT_NAMES[src.format]} "
                             "header)")
        raise InputError(missing_message(src.path, names, col, flag) + delimiter_hint(names, cols, src.format))


def scan(src: Source, cols: Columns, block_rows: int, first_row: int, first_index: int,
         seen: set[str] | None) -> tuple[FileScan, list[BlockSpec], int]:
    """Check every byte and record of one input and cut it into blocks of at most ``block_rows`` rows.

    Returns:
        (the FileScan, its block specs numbered from ``first_index``, duplicate ids counted in ``seen``).

    Raises:
        InputError: an empty CSV/TSV, bytes that do not decode, a bad record (--on-bad-lines error).
    """
    stamp = stamp_of([src.path])  # before the bytes are read: a change while they are is seen later
    sha, n_bytes = hash_and_check_bytes(src.path, cols.encoding, src.compression, src.format,
                                        skip_undecodable=cols.on_bad_lines == "skip")
    reader = _LineReader(src, cols)
    header = reader.header()
    if header == [] and src.format != "jsonl":
        raise InputError(f"{src.path}: the file is empty; a {FORMAT_NAMES[src.format]} file needs a header line "
                         f"with a {cols.text_col!r} column")
    specs: list[BlockSpec] = []
    n_rows = n_bad = dups = 0
    start: _Record | None = None
    in_block = 0
    path = str(src.path.resolve())
    for rec in reader.records(header):
        if rec.values is None:
            if rec.bad.cut:
                raise InputError(cut_message(src, rec.bad))
            if cols.on_bad_lines == "error":
                raise InputError(bad_message(src, rec.bad))
            n_bad += 1
            continue
        if in_block == 0:
            start = rec
        in_block += 1
        n_rows += 1
        if cols.id_col is not None:
            dups += count_id(seen, rec.values[cols.id_col] or "")  # a null id counts as "", as in parquet
        if in_block == block_rows:
            specs.append(BlockSpec(first_index + len(specs), path, src.format, first_row + n_rows - in_block,
                                   in_block, cols, src.compression, start.offset, start.line, stamp=stamp))
            in_block = 0
    if in_block:
        specs.append(BlockSpec(first_index + len(specs), path, src.format, first_row + n_rows - in_block,
                               in_block, cols, src.compression, start.offset, start.line, stamp=stamp))
    return FileScan(src.path, src.format, sha, n_bytes, n_rows, n_bad), specs, dups


def _block_records(spec: BlockSpec) -> Iterator[_Record]:
    """The good records of a block, from its offset (more than ``n_rows`` if the file goes on)."""
    reader = _LineReader(Source(block_paths(spec)[0], spec.format, spec.compression), spec.columns)
    header = reader.header()
    reader.end = spec.end
    for rec in reader.records(header, spec.offset, spec.line):
        if rec.values is not None:
            yield rec


def read(spec: BlockSpec) -> pa.Table:
    """The ``spec.n_rows`` rows of a block: id, text and keep columns as strings (ids: row numbers when
    there is no id column). InputError when the file holds fewer rows there than the scan found."""
    cols = spec.columns
    records: list[dict[str, str]] = []
    errors: list[str | None] = []
    for rec in _block_records(spec):
        records.append(rec.values)
        errors.append(rec.error)
        if len(records) == spec.n_rows:
            break
    if len(records) != spec.n_rows:
        raise InputError(f"{spec.path}: {len(records)} rows from line {spec.line}, but the scan found "
                         f"{spec.n_rows}; the file changed during the run: run again")
    table = {"id": row_ids(spec, [r[cols.id_col] for r in records] if cols.id_col else None),
             "text": pa.array([r[cols.text_col] for r in records], pa.string())}
    for col in cols.keep_cols:
        table[col] = pa.array([r[col] for r in records], pa.string())
    if any(errors):  # a row error of the reader's (pipeline.read.specs.ROW_ERROR): the tokenize stage keeps it
        table[ROW_ERROR] = pa.array(errors, pa.string())
    return finish_table(table, spec)


def locate(spec: BlockSpec, i: int) -> str:
    """'PATH line N': the line where row ``i`` of the block starts (re-reads the block)."""
    for seen, rec in enumerate(_block_records(spec)):
        if seen == i:
            return f"{spec.path} line {rec.line}"
    return spec.path
