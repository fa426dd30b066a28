"""The worker side of a DIR/ output: ``PartWriter`` writes one block's part, piece by piece, into a local
spool file of the output's place (pipeline.output.places: a ``Folder``, or an S3 ``Prefix``) and, once
complete, puts it in the place under its pending name (a rename, or one upload), and returns the part's
record. Whoever runs the stages writes with it: the local engine's sink (pipeline.output.write.PartsSink.write)
and each Ray worker (pipeline.engine.part_work.write_block); the driver then commits the record to the
manifest (PartsSink.commit_part), the one step that makes a part part of the output.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import RunError
from .manifest import finish_part, part_name  # noqa: F401 - part_name: named here by the engines
from .places import Place, place_of
from .row_groups import RowGroups, writer_options


@dataclass
class PartWriter:
    """One block's part in ``place``: pieces of rows in, one Parquet file out, visible under its pending
    name (``part_name(index, False)``) only once its last piece is written and it is put there whole.

    Args:
        place: the output's place (a Folder every node that writes mounts, a file output's staging
            folder, or an S3 Prefix), or its path or URI (pipeline.output.places.place_of).
        schema: the output schema; every part holds its metadata, whatever metadata the pieces have.
        spec: the block's BlockSpec (index, first_row, n_rows).

    Example:
        >>> w = PartWriter(Path("out"), schema, spec)
        >>> w.write(table, last=True)   # -> {"file": "_part-00000.parquet.pending", "rows": 3, ...}
    """

    place: Place | Path | str
    schema: pa.Schema
    spec: object
    rows: int = 0
    _writer: pq.ParquetWriter | None = None
    _tmp: Path | None = None
    _groups: RowGroups = field(default_factory=RowGroups)

    def __post_init__(self) -> None:
        self.place = place_of(self.place)

    def write(self, table: pa.Table, last: bool = True) -> dict | None:
        """Append a piece of the block's rows (row groups as pipeline.output.row_groups.RowGroups); with
        ``last`` close the file, put it in the place under its pending name and return its record (else None).

        Returns:
            The part's manifest record {file, block, first_row, rows, documents, bytes} (rows: output rows,
            more than documents at --level window; bytes: the file's size), or None before the last piece.

        Raises:
            RunError: a piece after the last one; an S3 failure. OSError: as the filesystem (the caller aborts).
        """
        if self._tmp is None and self.rows:
            raise RunError(f"block {self.spec.index}'s part is already complete")
        table = table.replace_schema_metadata(self.schema.metadata)   # the run's metadata, not the rows stage's
        if self._writer is None:
            self._tmp = self.place.spool(part_name(self.spec.index, done=False))
            self._writer = pq.ParquetWriter(self._tmp, table.schema, **writer_options(table.schema))
        self._groups.add(self._writer, table, last)
        self.rows += table.num_rows
        if not last:
            return None
        self._writer.close()
        self._writer = None
        tmp, self._tmp = self._tmp, None
        try:
            return finish_part(self.place, tmp, self.spec, self.rows)
        finally:
            tmp.unlink(missing_ok=True)   # an upload that failed leaves no spool file behind

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


def write_part(place: Place | Path | str, spec, table: pa.Table, schema: pa.Schema) -> dict:
    """Write a block's whole table as its pending part in ``place`` (row groups as the sinks'; the run's
    metadata from ``schema``); returns its manifest entry. For engines whose workers write their parts
    themselves; the manifest stays the committer's (PartsSink.commit_part)."""
    return PartWriter(place, schema, spec).write(table, last=True)
