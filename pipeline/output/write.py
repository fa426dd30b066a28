"""Write stage: sinks that stream row groups to parquet without ever leaving a file (or directory) at
the output path that looks complete before the run is, and the overwrite/resume rules. The schema they
write is pipeline.output.schema's.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..options.config import PipelineConfig
from .durable import replace_durably  # noqa: F401 - the sinks' module has named it
from ..errors import ConfigError, RunError
from .file_sink import FileSink
from .manifest import (DONE_MANIFEST, MANIFEST, MANIFEST_FORMAT, MANIFEST_KEY, OLD_MANIFEST,  # noqa: F401 - shared names
                       commit_parts, finish_part, foreign_files, load_manifest, manifest_data, part_name, part_ok,
                       read_manifest, run_files, save_manifest)
from .parts import PartWriter
from .places import Place, place_of
from .resume import check_same_run

__all__ = ["FileSink", "PartsSink", "PartWriter", "part_name", "open_sink", "read_manifest", "load_manifest"]


FLOAT16_LIMIT = 65520.0   # |x| >= 65520 rounds to inf in float16 (65504 is its largest finite value)


def fits_float16(values: np.ndarray, axis: int | None = None) -> np.ndarray:
    """True where every value stays finite when written with ``--out-dtype float16``: |x| < 65520
    (NaN and inf fail), checked without a cast, so without numpy's overflow warning.

    ``axis``: None -> one bool for the whole array; 1 -> one per row of an (n, D) array.
    Example: [65519.0] -> True (stored as 65504); [65520.0] -> False (inf).
    """
    return (np.abs(values) < FLOAT16_LIMIT).all(axis=axis)




@dataclass
class PartsSink:
    """A directory of parts, one per block (``part-00000.parquet`` ...), and a manifest, in a local folder
    or under an S3 prefix (``path``: the folder, or ``s3://BUCKET/PREFIX/``; pipeline.output.places).

    While the run goes on, parts are ``_part-NNNNN.parquet.pending`` and the manifest is
    ``_manifest.json``: pandas and pyarrow skip names starting with ``_`` and read no rows; a
    ``DIR/*.parquet`` glob (polars, duckdb) matches nothing; ``pl.read_parquet(DIR)`` and duckdb's
    ``read_parquet('DIR/**')``, which skip nothing, fail on the JSON file. So no reader takes an
    unfinished directory for a complete one. ``commit`` renames the parts to ``part-NNNNN.parquet`` and
    replaces the JSON by ``_manifest.parquet``: 0 rows of the output schema, the manifest in its schema
    metadata. The finished directory then holds only parquet files of one schema, which every reader
    reads whole. Each part is written under a temporary name (on S3: a local file, then one upload) and
    put in place whole; the manifest (rewritten atomically after each part) lists the finished blocks, so
    --resume redoes only the blocks without a part, and a part the manifest does not list is no part of
    the output. A directory of an older run, with ``manifest.json``, is resumed the same way.
    """

    path: Path | str | Place    # a folder, "s3://BUCKET/PREFIX/" or a place; a Path or the URI once made
    schema: pa.Schema
    fingerprint: dict
    resume: bool = False
    parts: dict[int, dict] = field(default_factory=dict)     # block index -> {file, block, first_row, rows, bytes}
    n_blocks: int = 0
    redone: int = 0            # parts --resume found listed but damaged (size, footer or rows) and redoes
    _open: PartWriter | None = None   # the part of the block whose pieces are coming in
    _done_gone: bool = False    # _manifest.parquet removed (by this run's first save)

    def __post_init__(self) -> None:
        self.place: Place = place_of(self.path)
        self.path = self.place.location if self.place.remote else self.place.path

    def open(self, blocks: list) -> set[int]:
        """Create the directory or pick up a previous run; returns the indices of the blocks already done.

        Args:
            blocks: the plan's BlockSpecs (index, first_row, n_rows).

        Raises:
            ConfigError: --resume over a run with other options or inputs (names what changed), or whose
                manifest is empty or unreadable (names the file).
            RunError: an S3 failure.
        """
        place = self.place
        place.make()
        self.n_blocks = len(blocks)
        old = load_manifest(place) if self.resume else None
        was_complete = False
        sizes = place.names()
        if old is not None:
            check_same_run(old.get("fingerprint", {}), self.fingerprint, place.location)
            by_rows = {}
            for p in old["parts"]:
                if part_ok(place, p, sizes):
                    by_rows[(p["first_row"], p.get("documents", p["rows"]))] = p   # older parts: rows = documents
                else:   # damaged, or gone: its block is done again
                    if p["file"] in sizes:
                        place.delete([p["file"]])
                    self.redone += 1
            for spec in blocks:
                part = by_rows.get((spec.first_row, spec.n_rows))
                if part is not None:
                    self.parts[spec.index] = {**part, "block": spec.index}
            was_complete = bool(old.get("complete")) and len(self.parts) == len(blocks)
        else:
            place.delete([n for n in run_files(sizes) if n.startswith(("part-", "_part-"))])
        self._drop_unlisted()   # parts a killed run's workers wrote but its driver never committed
        self._done_gone = DONE_MANIFEST not in sizes
        if not was_complete:  # a finished run stays as it is: nothing is redone
            self._save(complete=False)
        if OLD_MANIFEST in sizes:
            place.delete([OLD_MANIFEST])
        return set(self.parts)

    @property
    def rows(self) -> int:
        """Rows in the finished parts."""
        return sum(p["rows"] for p in self.parts.values())

    def write(self, spec, table: pa.Table, last: bool = True) -> None:
        """Write rows of the block of ``spec`` (a BlockSpec: index, first_row) to its part, in one or more
        pieces, the last with ``last`` True (pipeline.output.parts.PartWriter); then commit the part
        (``commit_part``). Blocks may come in any order, but one block's pieces come together. Each part
        holds the run's metadata (this sink's schema's), whatever metadata ``table`` has.

        Raises:
            RunError: a piece of another block while one is being written; an S3 failure.
        """
        if self._open is None:
            self._open = PartWriter(self.place, self.schema, spec)
        elif self._open.spec.index != spec.index:
            raise RunError(f"the sink got a piece of block {spec.index} while block {self._open.spec.index} "
                           "is not finished")
        record = self._open.write(table, last)
        if record is not None:
            self._open = None
            self.commit_part(record)

    def parts_folder(self) -> Place:
        """Where workers write their parts (PartWriter): this output's place, a Folder or an S3 Prefix
        (it pickles without its connection; a worker opens its own)."""
        return self.place

    def commit_part(self, record: dict) -> None:
        """The driver's step: list a part a worker completed (``record``: PartWriter.write's or
        pipeline.output.parts.write_part's, its file in this place under its pending name) in the
        manifest, saved atomically. Until then the part is not part of the output: --resume redoes its
        block and ``commit`` deletes it.

        Raises:
            RunError: the record's file is missing or not the size it says (a worker's part went astray);
                an S3 failure.
        """
        size = self.place.size(record["file"])
        if size != record["bytes"]:
            where = self.place.where(record["file"])
            raise RunError(f"the part of block {record['block']} is missing or not {record['bytes']} bytes "
                           f"({where}); every worker must write to the same output (object storage, or a "
                           "filesystem every node mounts at the same path): re-run with --resume")
        self.parts[record["block"]] = dict(record)
        self._save(complete=False)

    def commit(self) -> int:
        """Give every part its final name, delete parts no manifest lists (a retried or cut-off worker's),
        mark the manifest complete; returns the parts' size in bytes."""
        assert len(self.parts) == self.n_blocks, (len(self.parts), self.n_blocks)
        self._drop_unlisted()
        size = commit_parts(self.place, self.parts)
        self._save(complete=True)
        self.place.clean_spool()
        return size

    def abort(self) -> None:
        """Keep finished parts for --resume; drop a half-written one."""
        if self._open is not None:
            self._open.abort()
            self._open = None
        self.place.clean_spool()

    def _drop_unlisted(self) -> None:
        """Remove parts and half-written files that the manifest does not list (a retried or cut-off
        worker's), and this place's local spool."""
        listed = {p["file"] for p in self.parts.values()}
        self.place.delete([n for n in run_files(self.place.names())
                           if n.startswith(("_part-", ".part-")) and n not in listed])
        self.place.clean_spool()

    def _save(self, complete: bool) -> None:
        data = manifest_data(self.parts, self.n_blocks, self.fingerprint, self.schema, complete)
        save_manifest(self.place, data, self.schema, drop_done=not self._done_gone)
        self._done_gone = not complete

    record = commit_part   # the name a worker-written part's commit had beside the places


def check_output(cfg: PipelineConfig) -> None:
    """The overwrite/resume rules for ``cfg.write.output`` (pipeline.output.lock runs them before any input or
    model file is read, and open_sink again). --overwrite replaces a .parquet file, or a DIR/ that holds
    a longbert run and nothing else; a folder that also holds other files is never written into, so
    the finished DIR/ stays one that every parquet reader reads whole.

    Raises:
        ConfigError: the output exists without --overwrite/--resume, a DIR/ holds files that are not a
            longbert run's (names some), or --resume with a file output.
    """
    if cfg.write.is_directory:
        place = place_of(cfg.write.output)
        out = place.location + ("/" if place.remote else "")
        if not place.remote and place.path.exists() and not place.path.is_dir():
            raise ConfigError(f"--output {out!r} exists and is not a directory; pick another path")
        names = place.names()   # {} for a folder not yet made or an empty prefix
        foreign = foreign_files(place) if names else []
        has_run = bool(run_files(names))
        if foreign:
            named = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            what = "also holds files that are not part of its longbert run" if has_run else \
                "is a non-empty directory that holds no longbert run"
            raise ConfigError(f"--output {out!r} {what} ({named}); longbert writes only into an empty "
                              "directory or one of its own runs (--overwrite replaces only a longbert output): "
                              "pick an empty or new directory, or move those files out")
        if has_run and not (cfg.write.overwrite or cfg.write.resume):
            raise ConfigError(f"--output {out!r} already holds a run; pass --resume to continue it or "
                              "--overwrite to replace it")
        return
    out = Path(cfg.write.output)
    if cfg.write.resume:
        raise ConfigError("--resume needs a directory output of numbered parts: pass -o DIR/ (ending in /)")
    if out.exists() and not cfg.write.overwrite:
        raise ConfigError(f"--output {str(out)!r} exists; pass --overwrite to replace it or choose another path")
    if out.is_dir():
        raise ConfigError(f"--output {str(out)!r} is a directory; end it with / for numbered parts")


def check_resume(cfg: PipelineConfig, fingerprint: dict) -> None:
    """--resume over a DIR/ whose manifest is unreadable or from other options or inputs: refused before
    the model loads (PartsSink.open checks the same again).

    Raises:
        ConfigError: as load_manifest and check_same_run.
    """
    if cfg.write.is_directory and cfg.write.resume and not cfg.write.overwrite:
        place = place_of(cfg.write.output)
        old = load_manifest(place) if place.exists() else None
        if old is not None:
            check_same_run(old.get("fingerprint", {}), fingerprint, place.location)


def open_sink(cfg: PipelineConfig, schema: pa.Schema, fingerprint: dict) -> FileSink | PartsSink:
    """The sink for ``cfg.write.output``, after the overwrite/resume checks (check_output).

    Raises:
        ConfigError: as check_output.
    """
    check_output(cfg)
    if cfg.write.is_directory:
        return PartsSink(place_of(cfg.write.output), schema, fingerprint, resume=cfg.write.resume and not cfg.write.overwrite)
    return FileSink(Path(cfg.write.output), schema, overwrite=cfg.write.overwrite)
