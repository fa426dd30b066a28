"""The sink protocol every output implements (pipeline.output.file_sink.FileSink and pipeline.output.write's
PartsSink, over a local folder or an S3 prefix), as Ray Data's ``Datasink``: open, write, commit, abort,
plus the two steps that let workers write parts of their own while the driver alone commits them. The driver
(pipeline.engine.driver) sees only this protocol.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa

if TYPE_CHECKING:
    from .places import Place


class Sink(Protocol):
    """Where a run's rows go. ``redone``: parts a resumed run found damaged or missing and redoes."""

    redone: int

    def open(self, blocks: list) -> set[int]:
        """Prepare the output for the plan's ``blocks`` (BlockSpecs); returns the indices already done
        (a resumed run's committed parts; empty for a new output)."""

    def write(self, spec, table: pa.Table, last: bool = True) -> None:
        """Write a piece of the rows of the block of ``spec`` (the driver's own; ``last``: its last piece)."""

    def parts_folder(self) -> Path | Place:
        """Where workers write whole parts (pipeline.output.parts.PartWriter): a folder every node sees at
        the same path, or an S3 Prefix (pipeline.output.places; it pickles without its connection)."""

    def commit_part(self, record: dict) -> None:
        """Make a part a worker wrote (``record``: PartWriter's) part of the output; called in plan order."""

    def commit(self) -> int:
        """Make the output complete and visible; returns its size in bytes."""

    def abort(self) -> None:
        """Leave no output that looks complete (a DIR/ keeps its committed parts for --resume)."""
