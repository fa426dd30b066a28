"""What a plan is made of: the read options (``Columns``), one block (``BlockSpec``), one input's scan
(``FileScan``), and the helpers every format module uses to build a block's table."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from .remote import S3Path

# A block's table may hold this column: per row, why the reader gives no text for it (a JSON Lines text
# that is an array, object, number or boolean), None where the text is fine. The tokenize stage makes it
# the row's error (pipeline.text.tokenize.tokenize_block), so the row is kept, with its error; "error"
# is the output's own column, so no kept input column can take the name (pipeline.columns).
ROW_ERROR = "error"


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

    @property
    def needed(self) -> list[str]:
        """The columns read from each row: text, id (when there is one), keep columns; each once."""
        return list(dict.fromkeys(c for c in (self.text_col, self.id_col, *self.keep_cols) if c is not None))


@dataclass(frozen=True)
class BlockSpec:
    """One block of a plan: which rows of which file, and where they start there.

    A block never spans two files. ``read_block(spec)`` reads exactly ``n_rows`` rows from it.
    """

    index: int                             # position in the plan: the part number, the output order
    path: str                              # absolute path of the file (text: of the root folder),
                                           # or its URI s3://BUCKET/KEY (text: s3://BUCKET/PREFIX)
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
    stamp: tuple[int, ...] = ()            # (size, mtime ns) of each file read, at the scan (read.recheck)
    etags: tuple[str, ...] = ()            # S3 (path "s3://BUCKET/KEY"): each file's ETag at the scan; reads
                                           # are conditional on it (If-Match); () for local files
    end: int = 0                           # S3, uncompressed line formats: the byte just past the block's
                                           # rows (its range is [offset, end)); 0: to the object's end

    def to_json(self) -> str:
        """The spec as one JSON string (what Ray ships to a worker)."""
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> BlockSpec:
        """Inverse of ``to_json``."""
        d = json.loads(text)
        d["columns"] = Columns(**{**d["columns"], "keep_cols": tuple(d["columns"]["keep_cols"])})
        for key in ("row_groups", "files", "stamp", "etags"):
            d[key] = tuple(d.get(key, ()))
        return cls(**d)

    def identity(self) -> dict:
        """What the resume fingerprint compares: the block's place, not the machine's absolute path."""
        return {"index": self.index, "file": Path(self.path).name, "format": self.format,
                "first_row": self.first_row, "n_rows": self.n_rows, "offset": self.offset,
                "row_groups": list(self.row_groups), "skip": self.skip, "files": list(self.files)}


@dataclass
class FileScan:
    """What the scan learned about one input (a file, or a folder of text files)."""

    path: Path | S3Path
    format: str
    sha256: str
    n_bytes: int
    n_rows: int                              # documents (header, blank and skipped lines excluded)
    n_bad_lines: int = 0                     # records skipped by --on-bad-lines skip
    files: tuple[str, ...] = ()              # text: the files under ``path`` that the sha256 covers
    etags: tuple[tuple[int, str], ...] = ()  # S3: (size, ETag) of each object read (the file, or each text file)


def count_id(seen: set[str] | None, value: str) -> int:
    """1 if ``value`` was seen before (then it is a duplicate id), else 0; ``seen`` None: ids not counted."""
    if seen is None:
        return 0
    if value in seen:
        return 1
    seen.add(value)
    return 0


def row_ids(spec: BlockSpec, values: list[str] | None) -> pa.Array:
    """The block's id column: the given values (string), or its row numbers (int64) when None."""
    if values is None:
        return pa.array(range(spec.first_row, spec.first_row + spec.n_rows), type=pa.int64())
    return pa.array(values, pa.string())


def finish_table(columns: dict[str, pa.Array], spec: BlockSpec, sources: list[str] | None = None) -> pa.Table:
    """The block's table from its columns: adds ``source`` (with_source; per row for text files, else
    the spec's file) and casts row-number ids to strings when the plan's ids are strings."""
    cols = spec.columns
    if cols.with_source:
        columns["source"] = pa.array(sources if sources is not None else [spec.source] * spec.n_rows, pa.string())
    if cols.ids == "string" and pa.types.is_integer(columns["id"].type):
        columns["id"] = pc.cast(columns["id"], pa.string())
    return pa.table(columns)


def shown(columns: list[str], most: int = 20, width: int = 60) -> str:
    """The column list for a message, cut to ``most`` names of at most ``width`` characters each."""
    names = [c if len(c) <= width else c[:width] + "..." for c in columns[:most]]
    more = f" and {len(columns) - most} more" if len(columns) > most else ""
    return f"{names}{more}"


def needed_flags(cols: Columns, id_flag: str) -> list[tuple[str, str]]:
    """(column, the option that names it) of each column read: text, id (if any), keep columns."""
    pairs = [(cols.text_col, "--text-col"), (cols.id_col, id_flag), *[(c, "--keep-col") for c in cols.keep_cols]]
    return [(c, f) for c, f in pairs if c is not None]


def check_named_once(path: Path, names: list[str], cols: Columns, id_flag: str) -> None:
    """InputError when a needed column is named more than once in ``names``."""
    for col, _ in needed_flags(cols, id_flag):
        if names.count(col) > 1:
            raise InputError(f"{path}: the header names column {col!r} {names.count(col)} times "
                             f"(columns are {names}); rename the copies so each name is used once")


def missing_message(path: Path, names: list[str], col: str, flag: str) -> str:
    """'PATH: column 'x' not found; columns are [...]; pass --text-col with one of them'."""
    return f"{path}: column {col!r} not found; columns are {shown(names)}; pass {flag} with one of them"
