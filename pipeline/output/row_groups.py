"""How a block's output rows become Parquet row groups: held until they make one (at least ROW_GROUP_BYTES,
or the block's end) and written with the options that keep the writer's memory small. The sinks
(pipeline.output.write) write every block, whole or in pieces, through ``RowGroups``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq
def writer_options(schema: pa.Schema) -> dict:
    """The ParquetWriter options of an output of ``schema``: dictionary encoding only for the columns whose
    values are not floating point and not vectors (ids, kept columns, token ids...): a vector is a
    fixed_size_list, whatever its values (float32, int8, packed bits).

    Why: a column of float vectors has hardly two equal values, so its dictionary is abandoned for plain
    encoding after its first page anyway, but the writer first hashes every value of the row group:
    writing one document of 77,508 tokens with 384-wide float32 token vectors (113 MB) took 1.67 GB
    more memory with the dictionary and 0.44 GB without it (pyarrow 26, docs/performance.md, memory).
    An int8 or binary vector column would keep a dictionary (at most 256 values), and with it a 4-byte index
    per value of the row group: four times the int8 values, as much as the float32 vectors they replace.
    The values written are the same either way.

    Example: fields id (string), features (fixed_size_list<int8>[384]), token_ids (list<int32>) ->
    {"use_dictionary": ["id", "token_ids.list.element"]}.
    """
    def leaf(name: str, t: pa.DataType) -> tuple[str, pa.DataType, bool]:   # Parquet's path of a list's values
        vector = False
        while pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            vector = vector or pa.types.is_fixed_size_list(t)
            name, t = f"{name}.list.element", t.value_type
        return name, t, vector

    leaves = [leaf(f.name, f.type) for f in schema]
    return {"use_dictionary": [path for path, t, vector in leaves if not (pa.types.is_floating(t) or vector)]}


ROW_GROUP_BYTES = 8 << 20   # a block's rows are held until they reach this, then written as one row group


@dataclass
class RowGroups:
    """The rows of the block being written, held until they make a row group: at least ROW_GROUP_BYTES
    (8 MiB) of Arrow data, or the block's end. A block's rows are one row group when they are smaller (the
    layout of a block written whole), and at most one row group is held at any time.

    Example: pieces of 3, 3 and 2 MiB with ``last`` on the third -> one row group of 8 MiB; pieces of
    50 MiB (--level token) -> one row group each, written as they come.
    """

    held: list = field(default_factory=list)   # pa.Table pieces not yet written
    held_bytes: int = 0
    peak_bytes: int = 0                        # the most ever held at once

    def add(self, writer: pq.ParquetWriter, table: pa.Table, last: bool) -> None:
        """Hold ``table``; write what is held as one row group when it reaches ROW_GROUP_BYTES or ``last``."""
        self.held.append(table)
        self.held_bytes += table.nbytes
        self.peak_bytes = max(self.peak_bytes, self.held_bytes)
        if last or self.held_bytes >= ROW_GROUP_BYTES:
            group = self.held[0] if len(self.held) == 1 else pa.concat_tables(self.held)
            self.held, self.held_bytes = [], 0
            writer.write_table(group, row_group_size=max(group.num_rows, 1))

