"""The window plan of a block: the windows of every requested strategy -> each distinct window once, and
per strategy where its windows are in that list. Beside the batch (which carries a plan and makes one
again when rows are taken) and used by the dedup stage (pipeline.text.dedup).

Two windows are the same model input when their token ids are equal (the forward pass sees nothing
else: positions start at 0, token_type_ids are 0, the attention mask covers the whole window), so
each unique id sequence is encoded once and every feature reads its vectors from there.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .types import Window


@dataclass
class WindowPlan:
    """Which unique window each requested window reads from.

    ``unique`` holds each distinct window once (the first requested copy, in request order);
    ``index[s][j]`` is the position in ``unique`` of window j of strategy list s.
    """

    unique: list[Window]
    index: list[np.ndarray]      # per strategy list: int64 (n_windows of that list,) into unique
    requested: int               # windows all strategy lists asked for, duplicates included
    shared_spans: int            # saved: same document and same token spans as another strategy's window
    identical_ids: int           # saved: same token ids as a window elsewhere in the block (other spans or docs)

    @property
    def saved(self) -> int:
        """Windows not encoded because an identical one was: requested - len(unique)."""
        return self.requested - len(self.unique)


def plan_windows(per_strategy: list[list[Window]]) -> WindowPlan:
    """De-duplicate the windows of a block, first by (document, token spans), then by token ids.

    Within a document, head's window is chunk's first and sliding's first, so those share one
    entry by their spans. Across the block (duplicate documents, repeated boilerplate), windows
    whose ids are equal share one entry too: they are looked up in a dict keyed by the ids' bytes,
    i.e. a hash of the ids followed by an exact comparison of the whole sequence on a hash match.

    Example: one 20-token document, C = 14, lists [head, chunk] -> head [0,14), chunk [0,14) [14,20):
    unique = [[0,14), [14,20)], index = [[0], [0, 1]], requested 3, shared_spans 1, identical_ids 0.

    Args:
        per_strategy: for each strategy, the windows of all documents of the block (any order).

    Returns:
        The WindowPlan; ``len(unique) + saved == requested``.
    """
    unique: list[Window] = []
    by_span: dict[tuple, int] = {}
    by_ids: dict[bytes, int] = {}
    index: list[np.ndarray] = []
    shared = identical = requested = 0
    for windows in per_strategy:
        idx = np.empty(len(windows), dtype=np.int64)
        for j, w in enumerate(windows):
            requested += 1
            span_key = (w.doc, w.spans)
            if span_key in by_span:
                idx[j] = by_span[span_key]
                shared += 1
                continue
            ids_key = w.input_ids.tobytes()  # dict lookup: hash, then exact equality of the bytes
            if ids_key in by_ids:
                idx[j] = by_ids[ids_key]
                identical += 1
            else:
                idx[j] = by_ids[ids_key] = len(unique)
                unique.append(w)
            by_span[span_key] = int(idx[j])
        index.append(idx)
    return WindowPlan(unique=unique, index=index, requested=requested, shared_spans=shared,
                      identical_ids=identical)
