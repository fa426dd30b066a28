"""The sink protocol every output implements (pipeline.output.write's FileSink and PartsSink; an object-store
sink is one more class of this shape), as Ray Data's ``Datasink``: open, write, commit, abort, plus the two
steps that let workers write parts of their own while the driver alone commits them. The driver
(pipeline.engine.driver) sees only this protocol.
"""
from __future__ import annotations

from pathlib import Path
from typing import Protocol

import pyarrow as pa


class Sink(Protocol):
    """Where a run's rows go. ``redone``: parts a resumed run found damaged or missing and redoes."""

    redone: int

    def open(self, blocks: list) -> set[int]:
        """Prepare the output for the plan's ``blocks`` (BlockSpecs); returns the indices already done
        (a resumed run's committed parts; empty for a new output)."""

    def write(self, spec, table: pa.Table, last: bool = True) -> None:
        """Write a piece of the rows of the block of ``spec`` (the driver's own; ``last``: its last piece)."""

    def parts_folder(self) -> Path:
        """The folder where workers write whole parts (pipeline.output.parts.PartWriter), every node
        seeing it at the same path."""

    def commit_part(self, record: dict) -> None:
        """Make a part a worker wrote (``record``: PartWriter's) part of the output; called in plan order."""

    def commit(self) -> int:
        """Make the output complete and visible; returns its size in bytes."""

    def abort(self) -> None:
        """Leave no output that looks complete (a DIR/ keeps its committed parts for --resume)."""
