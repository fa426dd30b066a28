"""A block cut into pieces of at most a token budget, so that the model's part of a run (encode, aggregate,
rows) holds a piece's vectors, never a whole block's: the engines' block loop (Pipeline.map_pieces) calls it.

A block is counted in rows (--block-rows), and 256 long documents cost many times the memory of 256
short ones: at --level token every content token keeps a vector, and late chunking keeps each window's
hidden states. What a piece holds grows with its window tokens, so a piece is bounded by those
(--block-tokens), whatever the rows: consecutive documents, each whole, in row order.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .batch import Batch


def window_tokens(batch: Batch) -> np.ndarray:
    """int64 (n_docs,): each document's positions in its windows, specials included, summed over every
    strategy's windows (after ``segment``); before ``segment``, its content tokens; 0 before ``tokenize``.

    Example: a head+tail run of two documents of 1,000 and 10 tokens -> [512, 12].
    """
    n = len(batch)
    cost = np.zeros(n, dtype=np.int64)
    if batch.windows is not None:
        for windows in batch.windows.values():
            for w in windows:
                cost[w.doc] += len(w.input_ids)
    elif batch.docs is not None:
        cost[:] = [d.n_kept for d in batch.docs]
    return cost


def piece_bounds(cost: np.ndarray, budget: int | None) -> list[tuple[int, int]]:
    """Cut rows 0..n-1 into consecutive [start, stop) ranges whose ``cost`` sums to at most ``budget``;
    a row that alone costs more than the budget is a range of its own (a document is never split).

    Args:
        cost: (n,) non-negative ints, one per row. budget: the most per range; None: one range.

    Returns:
        The ranges, in order, covering every row once; [(0, 0)] for n == 0 (an empty block is one piece).

    Example: cost [300, 300, 300, 900, 10], budget 600 -> [(0, 2), (2, 3), (3, 4), (4, 5)].
    """
    n = len(cost)
    if budget is None or n == 0 or int(np.sum(cost)) <= budget:
        return [(0, n)]
    bounds, start, held = [], 0, 0
    for i, c in enumerate(cost.tolist()):
        if i > start and c > 0 and held + c > budget:   # a document of no window never starts a piece
            bounds.append((start, i))
            start, held = i, 0
        held += c
    bounds.append((start, n))
    return bounds


def pieces(batch: Batch, budget: int | None) -> Iterator[Batch]:
    """``batch`` as consecutive pieces of whole documents of at most ``budget`` window tokens each
    (piece_bounds of window_tokens), each cut by ``Batch.take``: its documents and windows renumbered
    from 0 and its window plan made again. The stages after give each piece exactly what they give
    those documents alone; a batch within the budget is yielded itself.

    Yields:
        Batches of consecutive rows of ``batch``, in row order, together holding each row once.
    """
    bounds = piece_bounds(window_tokens(batch), budget)
    if len(bounds) == 1:
        yield batch
        return
    for k, (start, stop) in enumerate(bounds):
        piece = batch.take(np.arange(start, stop, dtype=np.int64))
        # the rows the stages before dropped from this block are counted once, with its first piece
        yield piece if k == 0 or piece.dropped is None else piece.replace(dropped=None)
