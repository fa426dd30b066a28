"""``FileSink``: a single .parquet output, written row group by row group to a hidden temporary sibling and
renamed into place by ``commit``. Workers that write parts of their own (pipeline.output.parts.PartWriter, a
Ray run) write them into a hidden staging folder beside it, and ``commit_part`` streams each part's row
groups into the file in plan order, one row group at a time. pipeline.output.write opens it.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import RunError
from .durable import place_durably, remove_stale_partials, replace_durably
from .row_groups import RowGroups, writer_options


@dataclass
class FileSink:
    """One parquet file, written row group by row group (one per block, or several of a large block; in
    block order) to a hidden temporary sibling (``.NAME.PID.partial``) and renamed onto ``path`` by
    ``commit``; removed on any failure. A kill at any point leaves the previous complete file (or none)
    at ``path``.

    The sink protocol (pipeline.output.sink_api.Sink): ``open``, ``write`` (a piece of a block's rows),
    ``commit_part`` (a block's part that a worker wrote into ``parts_folder()``), ``commit``, ``abort``.
    """

    path: Path
    schema: pa.Schema
    _tmp: Path | None = None
    _writer: pq.ParquetWriter | None = None
    _next: int = 0
    rows: int = 0

    overwrite: bool = False
    redone: int = 0             # parts redone by --resume (always 0: a file is never resumed)
    _groups: RowGroups = field(default_factory=RowGroups)
    _staging: Path | None = None   # the folder workers write their parts into (parts_folder), once asked for

    def open(self, blocks: list | None = None) -> set[int]:
        """Create the temporary file; returns the block indices already done (none for a file)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_partials(self.path)
        remove_stale_partials(self.path.with_name(f"{self.path.name}-parts"))   # a killed run's staging folder
        self._tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.partial")
        self._writer = pq.ParquetWriter(self._tmp, self.schema, **writer_options(self.schema))
        return set()

    def write(self, spec, table: pa.Table, last: bool = True) -> None:
        """Append rows of the block of ``spec`` (a BlockSpec); blocks come in order 0, 1, 2, ..., each in
        one or more pieces, the last with ``last`` True. A block's rows are written as one row group, or
        as several of at least ROW_GROUP_BYTES when the block is larger (``RowGroups``).

        Raises RunError: the sink is not open (``open()``), or a block out of order."""
        self._expect(spec.index)
        self._groups.add(self._writer, table, last)
        self.rows += table.num_rows
        if last:
            self._next += 1

    def parts_folder(self) -> Path:
        """The hidden folder beside the file (``.NAME-parts.PID.partial``) where workers write their parts
        (made on first call; removed by commit and abort, or by the next run when this one is killed)."""
        if self._staging is None:
            self._staging = self.path.with_name(f".{self.path.name}-parts.{os.getpid()}.partial")
            self._staging.mkdir(exist_ok=True)
        return self._staging

    def commit_part(self, record: dict) -> None:
        """Append the part a worker wrote into ``parts_folder()`` (``record``: PartWriter's) to the file, its
        row groups as they are (one read at a time: the layout the local engine writes), then delete it.
        Parts come in plan order.

        Raises:
            RunError: the sink is not open, or a part out of order. OSError: as the filesystem.
        """
        self._expect(record["block"])
        part = self.parts_folder() / record["file"]
        reader = pq.ParquetFile(part)
        for i in range(reader.num_row_groups):
            group = reader.read_row_group(i)
            self._writer.write_table(group, row_group_size=max(group.num_rows, 1))
            self.rows += group.num_rows
            del group
        reader.close()
        part.unlink()
        self._next += 1

    def _expect(self, index: int) -> None:
        if self._writer is None or index != self._next:
            raise RunError(f"the sink got block {index} but expects block {self._next}" if self._writer
                           else "the sink is not open: call open() first, or write your own vectors with "
                                "longbert.save_features(path, ids, X)")

    def commit(self) -> int:
        """Close, fsync and rename into place, then fsync the folder; returns the file's size in bytes.

        Raises:
            RunError: without --overwrite, another program created ``path`` while the run went on (the
                lock keeps other longbert runs out): that file is kept and this run's is dropped.
        """
        assert self._writer is not None and self._tmp is not None
        self._writer.close()
        self._writer = None
        self._drop_staging()
        if self.overwrite:
            replace_durably(self._tmp, self.path)
        elif not place_durably(self._tmp, self.path):
            raise RunError(f"{self.path} was created by another program while this run went on; it is kept "
                           "and this run's output is dropped (pass --overwrite to replace it, or pick another --output)")
        self._tmp = None
        return self.path.stat().st_size

    def abort(self) -> None:
        """Remove the temporary file and the staging folder (on error or interrupt)."""
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception:  # noqa: BLE001 - the run already failed; the file is removed anyway
                pass
            self._writer = None
        if self._tmp is not None and self._tmp.exists():
            self._tmp.unlink()
        self._tmp = None
        self._drop_staging()

    def _drop_staging(self) -> None:
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None
