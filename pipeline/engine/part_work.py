"""What an engine hands its driver (pipeline.engine.driver): a finished ``Piece`` of a block's rows (the
local engine: the driver writes it) or a ``PartDone`` record of a part a worker wrote itself (the Ray
engine: the driver only commits it). ``write_block`` is a worker's whole job for one block, the same on
any engine that runs workers: the block loop over one spec, each piece checked as the driver checks it,
the part written with pipeline.output.parts.PartWriter.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from ..batch import Batch
from ..counts import BlockCounts
from ..errors import RunError
from ..output.parts import PartWriter
from ..output.places import Place
from ..read import BlockSpec, read_block
from .columns import as_written
from .run import documents_of, fail_on_row_error, peak_memory


@dataclass
class Piece:
    """A finished piece of a block (the stages' output Batch), ``last`` for the block's last piece."""

    spec: BlockSpec
    out: Batch
    last: bool


@dataclass
class PartDone:
    """A block's part, written and complete, as a worker reports it: no row and no vector, only the
    part's record (pipeline.output.parts.PartWriter: file, block, first_row, rows, documents, bytes)
    and what the block did (its counts, the rows kept after the stages, the rows each stage dropped) and
    the peak resident memory of the worker's process when it finished (bytes; pipeline.engine.run.peak_memory)."""

    spec: BlockSpec
    part: dict
    counts: BlockCounts = field(default_factory=BlockCounts)
    kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    peak_bytes: int = 0


def written_table(pipe, schema: pa.Schema, out: Batch) -> pa.Table:
    """The table of a finished piece as the file takes it (pipeline.engine.columns.as_written).

    Raises:
        RunError: no stage made an output table. ConfigError: columns no stage declared, or missing.
    """
    if out.table is None:
        raise RunError(f"no stage made the output table (stages: {', '.join(pipe.names)}); keep 'rows'")
    return as_written(out.table, schema, pipe.names)   # a column no stage declared: refused by name


def write_block(pipe, spec: BlockSpec, folder: Place | Path | str, schema: pa.Schema, strict: bool = False) -> PartDone:
    """A worker's job for one block: read it, run ``pipe``'s stages over it in pieces (--block-tokens,
    Pipeline.map_pieces), and write the rows to the block's part in ``folder``; only one piece's
    vectors are held at a time.

    Args:
        pipe: the run's Pipeline (its model loaded here on first use). spec: the block.
        folder: the sink's parts_folder(), seen by every worker (a folder every node mounts, or an S3
            Prefix: the part is uploaded straight there). schema: the output schema (its metadata
            goes in every part). strict: --strict, raise at the first row with an error.

    Returns:
        The block's PartDone (a small record: its size does not grow with the rows).

    Raises:
        RunError: --strict and a row with an error (naming its file and line), no output table.
        ConfigError: a stage's undeclared column. Whatever a stage raises. The half-written part is removed.
    """
    writer = PartWriter(folder, schema, spec)
    done = PartDone(spec, {})
    first_doc = 0   # the piece's first document within its block
    try:
        for _, out, last in pipe.map_pieces([spec], read=lambda s: Batch(rows=read_block(s)),
                                            max_tokens=pipe.cfg.encode.block_tokens):
            table = written_table(pipe, schema, out)
            done.counts.add(out.counts or BlockCounts())
            done.kept += len(out)
            for name, n in (out.dropped or {}).items():
                done.dropped[name] = done.dropped.get(name, 0) + n
            del out   # the piece's vectors: not held while the next piece is encoded
            if strict:
                fail_on_row_error(table, spec, first_doc)
            first_doc += documents_of(table)
            record = writer.write(table, last)
            if record is not None:
                done.part = record
    except BaseException:
        writer.abort()
        raise
    done.peak_bytes = peak_memory()
    return done
