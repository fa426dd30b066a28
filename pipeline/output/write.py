"""Write stage: sinks that stream row groups to parquet without ever leaving a file (or directory) at
the output path that looks complete before the run is, and the overwrite/resume rules. The schema they
write is pipeline.output.schema's.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..options.config import PipelineConfig
from .durable import fsync_dir, replace_durably
from ..errors import ConfigError, RunError
from .file_sink import FileSink
from .parts import PartWriter, part_name
from .resume import check_same_run

__all__ = ["FileSink", "PartsSink", "PartWriter", "part_name", "open_sink", "read_manifest", "load_manifest"]

MANIFEST = "_manifest.json"          # while the run goes on (pandas and pyarrow skip a leading _)
DONE_MANIFEST = "_manifest.parquet"  # once complete: 0 rows of the output schema, the manifest in its metadata
OLD_MANIFEST = "manifest.json"       # the name before 0.2; still read by --resume and load_features
MANIFEST_KEY = b"longbert_manifest"
MANIFEST_FORMAT = "longbert-parts/1"


FLOAT16_LIMIT = 65520.0   # |x| >= 65520 rounds to inf in float16 (65504 is its largest finite value)


def fits_float16(values: np.ndarray, axis: int | None = None) -> np.ndarray:
    """True where every value stays finite when written with ``--out-dtype float16``: |x| < 65520
    (NaN and inf fail), checked without a cast, so without numpy's overflow warning.

    ``axis``: None -> one bool for the whole array; 1 -> one per row of an (n, D) array.
    Example: [65519.0] -> True (stored as 65504); [65520.0] -> False (inf).
    """
    return (np.abs(values) < FLOAT16_LIMIT).all(axis=axis)


def read_manifest(path: Path) -> dict | None:
    """The manifest of a DIR/ output: ``_manifest.parquet`` (complete), ``_manifest.json`` (running or
    killed) or an older run's ``manifest.json``; None when there is none.

    Raises:
        OSError, ValueError: a manifest that cannot be read.
    """
    path = Path(path)
    if (path / DONE_MANIFEST).exists():
        return json.loads(pq.read_schema(path / DONE_MANIFEST).metadata[MANIFEST_KEY])
    for name in (MANIFEST, OLD_MANIFEST):
        if (path / name).exists():
            return json.loads((path / name).read_text(encoding="utf-8"))
    return None


@dataclass
class PartsSink:
    """A directory of parts, one per block (``part-00000.parquet`` ...), and a manifest.

    While the run goes on, parts are ``_part-NNNNN.parquet.pending`` and the manifest is
    ``_manifest.json``: pandas and pyarrow skip names starting with ``_`` and read no rows; a
    ``DIR/*.parquet`` glob (polars, duckdb) matches nothing; ``pl.read_parquet(DIR)`` and duckdb's
    ``read_parquet('DIR/**')``, which skip nothing, fail on the JSON file. So no reader takes an
    unfinished directory for a complete one. ``commit`` renames the parts to ``part-NNNNN.parquet`` and
    replaces the JSON by ``_manifest.parquet``: 0 rows of the output schema, the manifest in its schema
    metadata. The finished directory then holds only parquet files of one schema, which every reader
    reads whole. Each part is written under a temporary name and renamed; the manifest (rewritten
    atomically after each part) lists the finished blocks, so --resume redoes only the blocks without
    a part. A directory of an older run, with ``manifest.json``, is resumed the same way.
    """

    path: Path
    schema: pa.Schema
    fingerprint: dict
    resume: bool = False
    parts: dict[int, dict] = field(default_factory=dict)     # block index -> {file, block, first_row, rows, bytes}
    n_blocks: int = 0
    redone: int = 0            # parts --resume found listed but damaged (size, footer or rows) and redoes
    _open: PartWriter | None = None   # the part of the block whose pieces are coming in

    def open(self, blocks: list) -> set[int]:
        """Create the directory or pick up a previous run; returns the indices of the blocks already done.

        Args:
            blocks: the plan's BlockSpecs (index, first_row, n_rows).

        Raises:
            ConfigError: --resume over a run with other options or inputs (names what changed), or whose
                manifest is empty or unreadable (names the file).
        """
        self.path.mkdir(parents=True, exist_ok=True)
        self.n_blocks = len(blocks)
        old = load_manifest(self.path) if self.resume else None
        was_complete = False
        if old is not None:
            check_same_run(old.get("fingerprint", {}), self.fingerprint, self.path)
            by_rows = {}
            for p in old["parts"]:
                if part_ok(self.path / p["file"], p):
                    by_rows[(p["first_row"], p.get("documents", p["rows"]))] = p   # older parts: rows = documents
                else:   # damaged, or gone: its block is done again
                    (self.path / p["file"]).unlink(missing_ok=True)
                    self.redone += 1
            for spec in blocks:
                part = by_rows.get((spec.first_row, spec.n_rows))
                if part is not None:
                    self.parts[spec.index] = {**part, "block": spec.index}
            was_complete = bool(old.get("complete")) and len(self.parts) == len(blocks)
        else:
            for old_part in [*self.path.glob("part-*.parquet"), *self.path.glob("_part-*.parquet*")]:
                old_part.unlink()
        self._drop_unlisted()   # parts a killed run's workers wrote but its driver never committed
        if not was_complete:  # a finished run stays as it is: nothing is redone
            self._save(complete=False)
        (self.path / OLD_MANIFEST).unlink(missing_ok=True)
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
            RunError: a piece of another block while one is being written.
        """
        if self._open is None:
            self._open = PartWriter(self.path, self.schema, spec)
        elif self._open.spec.index != spec.index:
            raise RunError(f"the sink got a piece of block {spec.index} while block {self._open.spec.index} "
                           "is not finished")
        record = self._open.write(table, last)
        if record is not None:
            self._open = None
            self.commit_part(record)

    def parts_folder(self) -> Path:
        """Where workers write their parts (PartWriter): the output folder itself."""
        return self.path

    def commit_part(self, record: dict) -> None:
        """The driver's step: list a part a worker completed (``record``: PartWriter.write's, its file in
        this folder under its pending name) in the manifest, rewritten atomically. Until then the part is
        not part of the output: --resume redoes its block and ``commit`` deletes it.

        Raises:
            RunError: the record's file is missing or not the size it says (a worker's part went astray).
        """
        file = self.path / record["file"]
        if not file.is_file() or file.stat().st_size != record["bytes"]:
            raise RunError(f"the part of block {record['block']} is missing or not {record['bytes']} bytes "
                           f"({file}); every worker must write to the same folder (a filesystem every node "
                           "mounts at the same path): re-run with --resume")
        self.parts[record["block"]] = dict(record)
        self._save(complete=False)

    def commit(self) -> int:
        """Give every part its final name, delete parts no manifest lists (a retried or cut-off worker's),
        mark the manifest complete; returns the parts' size in bytes."""
        assert len(self.parts) == self.n_blocks, (len(self.parts), self.n_blocks)
        self._drop_unlisted()
        for index, part in sorted(self.parts.items()):
            final = part_name(index, done=True)
            if part["file"] != final:
                os.replace(self.path / part["file"], self.path / final)
                part["file"] = final
        fsync_dir(self.path)
        self._save(complete=True)
        return sum((self.path / p["file"]).stat().st_size for p in self.parts.values())

    def abort(self) -> None:
        """Keep finished parts for --resume; drop a half-written one."""
        if self._open is not None:
            self._open.abort()
            self._open = None
        for stale in self.path.glob(".part-*.partial"):
            stale.unlink(missing_ok=True)

    def _drop_unlisted(self) -> None:
        """Remove parts and half-written files that the manifest does not list."""
        listed = {p["file"] for p in self.parts.values()}
        for stale in [*self.path.glob("_part-*.parquet.pending"), *self.path.glob(".part-*.partial")]:
            if stale.name not in listed:
                stale.unlink(missing_ok=True)

    def _save(self, complete: bool) -> None:
        parts = [self.parts[i] for i in sorted(self.parts)]
        data = {"format": MANIFEST_FORMAT, "complete": complete, "fingerprint": self.fingerprint,
                "rows": sum(p["rows"] for p in parts), "blocks": self.n_blocks, "parts": parts,
                "longbert": json.loads(self.schema.metadata[b"longbert"])}
        if complete:
            tmp = self.path / f".{DONE_MANIFEST}.partial"
            meta = {**self.schema.metadata, MANIFEST_KEY: json.dumps(data).encode()}
            pq.write_table(self.schema.with_metadata(meta).empty_table(), tmp)
            replace_durably(tmp, self.path / DONE_MANIFEST)
            (self.path / MANIFEST).unlink(missing_ok=True)
            fsync_dir(self.path)
            return
        (self.path / DONE_MANIFEST).unlink(missing_ok=True)
        tmp = self.path / f".{MANIFEST}.partial"
        tmp.write_text(json.dumps(data, indent=1))
        replace_durably(tmp, self.path / MANIFEST)


def part_ok(file: Path, part: dict) -> bool:
    """A part --resume may keep: it exists, has the size the manifest recorded (manifests since 0.3 record
    it), a footer pyarrow reads, and the recorded number of rows."""
    try:
        if "bytes" in part and file.stat().st_size != part["bytes"]:
            return False
        return pq.read_metadata(file).num_rows == part["rows"]
    except (OSError, pa.ArrowException):
        return False


def load_manifest(path: Path) -> dict | None:
    """read_manifest for --resume: None when there is none.

    Raises:
        ConfigError (exit 2): a manifest that is empty or cannot be read, naming the file and the fix.
    """
    try:
        manifest = read_manifest(path)
        if manifest is not None and not isinstance(manifest.get("parts"), list):
            raise ValueError("it lists no parts")
        return manifest
    except (OSError, ValueError, KeyError, TypeError, AttributeError, pa.ArrowException) as err:
        files = [path / m for m in (DONE_MANIFEST, MANIFEST, OLD_MANIFEST) if (path / m).exists()]
        file = files[0] if files else path
        why = "is empty (0 bytes: the run that wrote it was cut off before it reached the disk)" \
            if file.is_file() and file.stat().st_size == 0 else f"cannot be read ({err})"
        raise ConfigError(f"--resume: {file} {why}, so the finished parts cannot be told from unfinished ones; "
                          "pass --overwrite instead of --resume to start the run again") from None


# What a DIR/ output holds: its parts (finished, pending, half-written) and its manifest (and their
# temporary names). Anything else in the folder is the user's.
_RUN_FILE = re.compile(r"(_?part-\d+\.parquet(\.pending)?|\.part-\d+(\.\d+)?\.partial|_manifest\.(json|parquet)"
                       r"|manifest\.json|\._manifest\.(json|parquet)\.partial)")


def foreign_files(folder: Path) -> list[str]:
    """The names in ``folder`` that no longbert run writes there (sorted; sub-folders end in /).

    Example: a run's folder with a README.txt added -> ["README.txt"]; a run's own folder -> [].
    """
    return sorted(e.name + ("/" if e.is_dir() else "") for e in folder.iterdir() if not _RUN_FILE.fullmatch(e.name))


def check_output(cfg: PipelineConfig) -> None:
    """The overwrite/resume rules for ``cfg.write.output`` (pipeline.output.lock runs them before any input or
    model file is read, and open_sink again). --overwrite replaces a .parquet file, or a DIR/ that holds
    a longbert run and nothing else; a folder that also holds other files is never written into, so
    the finished DIR/ stays one that every parquet reader reads whole.

    Raises:
        ConfigError: the output exists without --overwrite/--resume, a DIR/ holds files that are not a
            longbert run's (names some), or --resume with a file output.
    """
    out = Path(cfg.write.output)
    if cfg.write.is_directory:
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--output {str(out)!r} exists and is not a directory; pick another path")
        if not out.is_dir():
            return
        entries = {e.name for e in out.iterdir()}
        foreign = foreign_files(out)
        has_run = len(foreign) < len(entries)
        if foreign:
            named = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            what = "also holds files that are not part of its longbert run" if has_run else \
                "is a non-empty directory that holds no longbert run"
            raise ConfigError(f"--output {str(out)!r} {what} ({named}); longbert writes only into an empty "
                              "directory or one of its own runs (--overwrite replaces only a longbert output): "
                              "pick an empty or new directory, or move those files out")
        if has_run and not (cfg.write.overwrite or cfg.write.resume):
            raise ConfigError(f"--output {str(out)!r} already holds a run; pass --resume to continue it or "
                              "--overwrite to replace it")
        return
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
    out = Path(cfg.write.output)
    if cfg.write.is_directory and cfg.write.resume and not cfg.write.overwrite and out.is_dir():
        old = load_manifest(out)
        if old is not None:
            check_same_run(old.get("fingerprint", {}), fingerprint, out)


def open_sink(cfg: PipelineConfig, schema: pa.Schema, fingerprint: dict) -> FileSink | PartsSink:
    """The sink for ``cfg.write.output``, after the overwrite/resume checks (check_output).

    Raises:
        ConfigError: as check_output.
    """
    check_output(cfg)
    out = Path(cfg.write.output)
    if cfg.write.is_directory:
        return PartsSink(out, schema, fingerprint, resume=cfg.write.resume and not cfg.write.overwrite)
    return FileSink(out, schema, overwrite=cfg.write.overwrite)
