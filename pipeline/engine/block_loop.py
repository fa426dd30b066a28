"""The one loop of every engine: blocks read and prepared ahead of the model (pipeline.engine.feed), each
block's model part run in pieces of whole documents (pipeline.pieces), each piece handed on as it is
finished. ``Pipeline.map_pieces`` (and ``map``) call it with the pipeline's own two halves.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

from ..batch import Batch
from ..pieces import pieces
from .feed import ordered_map
from .heap import release_free_heap


def block_pieces(prepare: Callable[[Batch | pa.Table], Batch], finish: Callable[[Batch], Batch],
                 items: Iterable[Any], read: Callable[[Any], Batch | pa.Table] | None, workers: int,
                 on_prepared: Callable[[Batch], None] | None, max_tokens: int | None
                 ) -> Iterator[tuple[Any, Batch, bool]]:
    """(item, finished piece, last) for every piece of every block, in order (Pipeline.map_pieces).

    Args:
        prepare, finish: the stages before ``encode`` and from it on (Pipeline.prepare, Pipeline.finish).
        items, read, workers, on_prepared, max_tokens: as Pipeline.map_pieces.

    Raises:
        Whatever a stage raises.
    """
    def step(item: Any) -> Batch:
        return prepare(read(item) if read is not None else item)

    prepared = ordered_map(step, items, workers, name="longbert-read") if workers \
        else ((item, step(item)) for item in items)
    for item, batch in prepared:
        if on_prepared is not None:
            on_prepared(batch)
        parts = pieces(batch, max_tokens)
        del batch   # each piece holds its own rows: the whole block's vectors are never held at once
        piece = next(parts)
        while piece is not None:
            out = [finish(piece)]
            following = next(parts, None)
            release_free_heap()
            # handed over, not kept: this frame holds no reference to the finished piece while the
            # consumer writes it (its vectors and its output rows are then held once) or after
            yield item, out.pop(), following is None
            piece = following
