"""The worker side of a DIR/ output: ``PartWriter`` writes one block's part, piece by piece, under a hidden
temporary name and renames it to its pending name once complete, and returns the part's record. Whoever runs
the stages writes with it: the local engine's sink (pipeline.output.write.PartsSink.write) and each Ray
worker (pipeline.engine.part_work.write_block); the driver then commits the record to the manifest
(PartsSink.commit_part), the one step that makes a part part of the output.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import RunError
from .durable import replace_durably
from .row_groups import RowGroups, writer_options


def part_name(index: int, done: bool) -> str:
    """'_part-00003.parquet.pending' while the run goes on, 'part-00003.parquet' once it is complete.

    The pending name starts with _ (pandas and pyarrow skip it) and does not end in .parquet (a
    'DIR/*.parquet' glob in polars or duckdb does not match it), so no reader takes the parts of an
    unfinished run for the output.
    """
    return f"part-{index:05d}.parquet" if done else f"_part-{index:05d}.parquet.pending"


def partial_name(index: int) -> str:
    """The hidden name a part is written under until complete: '.part-00003.4242.partial' (this process's
    id: two attempts at one block, a retried Ray task beside a dying one, never write into one file)."""
    return f".part-{index:05d}.{os.getpid()}.partial"


@dataclass
class PartWriter:
    """One block's part in ``folder``: pieces of rows in, one Parquet file out, visible under its pending
    name (``part_name(index, False)``) only once its last piece is written and it is renamed (fsynced).

    Args:
        folder: the output folder (a DIR/ output, or a file output's staging folder), on a filesystem
            every node that writes mounts.
        schema: the output schema; every part holds its metadata, whatever metadata the pieces have.
        spec: the block's BlockSpec (index, first_row, n_rows).

    Example:
        >>> w = PartWriter(Path("out"), schema, spec)
        >>> w.write(table, last=True)   # -> {"file": "_part-00000.parquet.pending", "rows": 3, ...}
    """

    folder: Path
    schema: pa.Schema
    spec: object
    rows: int = 0
    _writer: pq.ParquetWriter | None = None
    _tmp: Path | None = None
    _groups: RowGroups = field(default_factory=RowGroups)

    def write(self, table: pa.Table, last: bool = True) -> dict | None:
        """Append a piece of the block's rows (row groups as pipeline.output.row_groups.RowGroups); with
        ``last`` close the file, rename it to its pending name and return its record (else None).

        Returns:
            The part's manifest record {file, block, first_row, rows, documents, bytes} (rows: output rows,
            more than documents at --level window; bytes: the file's size), or None before the last piece.

        Raises:
            RunError: a piece after the last one. OSError: as the filesystem (the caller aborts).
        """
        if self._tmp is None and self.rows:
            raise RunError(f"block {self.spec.index}'s part is already complete")
        table = table.replace_schema_metadata(self.schema.metadata)   # the run's metadata, not the rows stage's
        if self._writer is None:
            self._tmp = Path(self.folder) / partial_name(self.spec.index)
            self._writer = pq.ParquetWriter(self._tmp, table.schema, **writer_options(table.schema))
        self._groups.add(self._writer, table, last)
        self.rows += table.num_rows
        if not last:
            return None
        self._writer.close()
        self._writer = None
        name = part_name(self.spec.index, done=False)
        size = self._tmp.stat().st_size
        replace_durably(self._tmp, Path(self.folder) / name)
        self._tmp = None
        return {"file": name, "block": self.spec.index, "first_row": self.spec.first_row, "rows": self.rows,
                "documents": self.spec.n_rows, "bytes": size}

    @property
    def open(self) -> bool:
        """Whether a piece was written and the part is not complete yet."""
        return self._writer is not None

    def abort(self) -> None:
        """Drop the half-written file (on an error or interrupt); a completed part stays."""
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception:  # noqa: BLE001 - the run already failed; the file is removed below
                pass
            self._writer = None
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)
            self._tmp = None
