"""Read stage: check every input once and cut it into a plan of blocks; ``read_block(spec)`` reads one.

``scan`` runs before any model loads (exit 2 with file and line on bad input), and ``read_block`` runs
wherever a block is processed, from the spec alone.

Formats (by extension, or ``--format``): CSV (``--delimiter``), TSV, JSON Lines, parquet, and folders
or globs of ``.txt`` / ``.md`` files (one document per file); ``.gz``, ``.zst``, ``.bz2`` and ``.xz``
variants of the line formats are read as streams, and what a file is comes from its first bytes too
(``magic``). Folders and globs are walked by one walker (``sources.walk``): symlinks followed once,
each file once, files of other extensions in a folder counted and the first few named
(``Plan.skipped_files``, ``Plan.skipped_names``), a glob matching files of no known format refused. A
file reached through several inputs is read once; a pipe is copied to a temporary file (``pipes``).
While the run reads, each block's files are checked against the scan's size and time, and the
engines compare every input's sha256 with the scan's before the output is committed (``recheck``).
Inputs named ``s3://BUCKET/...`` (objects, prefixes, globs over keys) take every format and check
(``remote``: the scan fetches each object once to a temporary file; a block's reads are ranged GETs
conditional on the scan's ETag; ``s3_connect``: the S3 connection from the AWS variables).

Layout: ``sources`` (command-line inputs -> Sources), ``pipes``, ``remote`` and ``s3_connect`` (S3),
``magic`` (first bytes), ``streams``
(bytes: opening, decompression, decode check, the line splitter), ``encoding_advice``, ``specs``
(Columns, BlockSpec, FileScan), ``recheck``, and one module per format family: ``lines`` (CSV, TSV,
JSON Lines; with ``json_text`` and ``line_messages``), ``parquet``, ``text``. Each format module has the same
functions: ``columns(src, cols)``, ``check(src, names, cols, id_flag)``, ``scan(src, cols, block_rows,
first_row, first_index, seen)``, ``read(spec)`` and ``locate(spec, i)``. ``FORMATS`` maps a format name
to its module: a new format is one module and one row there.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pyarrow as pa

from ..options.config import ReadConfig
from ..errors import InputError
from . import lines, parquet, remote, text
from .recheck import block_paths, check_stamps, verify_inputs
from .remote import S3Path
from .sources import LINE_FORMATS, SKIPPED_SHOWN, TEXT_SUFFIXES, Source, expand_inputs, walk
from .specs import BlockSpec, Columns, FileScan

FORMATS: dict[str, ModuleType] = {"csv": lines, "tsv": lines, "jsonl": lines, "parquet": parquet, "text": text}

__all__ = ["BlockSpec", "Columns", "FileScan", "FORMATS", "LINE_FORMATS", "Plan", "Source", "TEXT_SUFFIXES",
           "block_from_texts", "expand_inputs", "read_block", "read_blocks", "row_location", "scan", "verify_inputs",
           "walk"]


@dataclass
class Plan:
    """The inputs, checked before the run starts, as a list of block specs in input order."""

    files: list[FileScan] = field(default_factory=list)
    blocks: list[BlockSpec] = field(default_factory=list)
    columns: Columns = field(default_factory=Columns)
    duplicate_ids: int = 0                   # rows whose id appeared before (all rows are kept)
    id_note: str | None = None               # e.g. "ids from column 'id'" when --id-col was not given
    skipped_files: int = 0                   # files in input folders left out for their extension
    skipped_names: list[str] = field(default_factory=list)  # the first few of them (paths as reached)

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
    found = {src: FORMATS[src.format].columns(src, base) for src in sources}
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
    with remote.scan_context():
        sources = expand_inputs(cfg)
        cols, note, found = _resolve_ids(sources, cfg)
        plan = Plan(columns=cols, id_note=note, skipped_files=sum(src.skipped for src in sources),
                    skipped_names=[n for src in sources for n in src.skipped_names][:SKIPPED_SHOWN])
        id_flag = "--id-col" if cfg.id_col is not None else "--id-col (the input column 'id' is used when present)"
        parent = _common_parent(sources)
        seen: set[str] | None = set() if cols.ids == "string" else None
        for src in sources:
            fmt = FORMATS[src.format]
            with remote.fetching_whole() if isinstance(src.path, S3Path) else contextlib.nullcontext():
                fmt.check(src, found[src] or [], cols, id_flag)
                fs, specs, dups = fmt.scan(src, cols, cfg.block_rows, plan.n_rows, len(plan.blocks), seen)
            if isinstance(src.path, S3Path):
                fs, specs = _remote_scan(src, fs, specs)
            source = _relative(src.path, parent)
            plan.files.append(fs)
            plan.blocks.extend(dataclasses.replace(s, source=source) for s in specs)
            plan.duplicate_ids += dups
    return plan


def _remote_scan(src: Source, fs: FileScan, specs: list[BlockSpec]) -> tuple[FileScan, list[BlockSpec]]:
    """An S3 input's scan with the (size, ETag) of each object its GET saw, and each block's ETags (its
    reads are conditional on them) and, for an uncompressed line format, its range's end (the next
    block's offset; the last block's is the object's size)."""
    objects = [src.path / rel for rel in fs.files] if src.format == "text" else [src.path]
    fs = dataclasses.replace(fs, etags=tuple(remote.etag_of(p) for p in objects))
    specs = [dataclasses.replace(s, etags=tuple(remote.etag_of(p)[1] for p in block_paths(s))) for s in specs]
    if src.format in LINE_FORMATS and src.compression is None and specs:
        ends = [nxt.offset for nxt in specs[1:]] + [fs.etags[0][0]]   # the last block: to the object's end
        specs = [dataclasses.replace(s, end=end) for s, end in zip(specs, ends)]
    return fs, specs


def _common_parent(sources: list[Source]) -> Path | S3Path | None:
    """The folder the ``source`` column is relative to: the local inputs' common parent folder, or the
    S3 inputs' common prefix when all are in one bucket (None: S3 inputs of several buckets, or mixed
    with local ones, keep their URIs)."""
    if all(isinstance(s.path, S3Path) for s in sources) and len({s.path.bucket for s in sources}) == 1:
        keys = [s.path.parent.key for s in sources]   # a text folder's own name stays in "source"
        return S3Path(sources[0].path.bucket, posixpath.commonpath(keys) if all(keys) else "")
    if any(isinstance(s.path, S3Path) for s in sources):
        return None
    folders = [str(s.path.resolve().parent) for s in sources]
    return Path(os.path.commonpath(folders)) if folders else Path(".")


def _relative(path: Path | S3Path, parent: Path | S3Path | None) -> str:
    if isinstance(path, S3Path):
        return path.relative_to(parent).as_posix() if parent is not None else str(path)
    return Path(os.path.relpath(path.resolve(), parent)).as_posix()


def read_block(spec: BlockSpec) -> pa.Table:
    """Read exactly the rows of one block.

    Args:
        spec: a block of a ``scan`` plan (also after a JSON round trip: ``BlockSpec.from_json``).

    Returns:
        A table of ``spec.n_rows`` rows, in input order, with columns ``id`` (int64 row number, or
        string: the id column's value or the text file's path), ``text`` (string), each keep column
        (string, null where a parquet or JSON value is null; a JSON number as written) and, with ``with_source``, ``source`` (string).

    Raises:
        RunError: a file of the block is gone, or its size or modification time is not the scan's
            (``recheck.check_stamps``, before and after the rows are read: exit 1, naming the file).
        InputError: the file changed since the scan in a way the stamps missed (fewer rows than planned).
    """
    check_stamps(spec)
    table = FORMATS[spec.format].read(spec)
    check_stamps(spec)  # and after: a change while the block was read
    return table


def row_location(spec: BlockSpec, i: int) -> str:
    """Where row ``i`` of the block is in its input, for messages: 'docs.csv line 7', 'a.parquet row 12',
    'notes/a.txt'. Re-reads the block (used only when a row is reported)."""
    return FORMATS[spec.format].locate(spec, i)


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
