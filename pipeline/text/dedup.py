"""Window de-duplication, the ``dedup`` stage: the windows of every requested strategy in a block -> the
unique windows to encode (pipeline.plan.plan_windows). Between segment and encode, once per block.
"""
from __future__ import annotations

from ..batch import Batch
from ..plan import plan_windows
from ..stage import Stage


class Dedup(Stage):
    """``windows`` -> ``plan``: each distinct window once, shared by strategies and by identical token
    ids (``plan_windows``); no parameters."""

    name, requires, fills = "dedup", ("windows",), ("plan",)

    def get_params(self, deep: bool = True) -> dict:
        return {}

    def __call__(self, batch: Batch) -> Batch:
        self.check(batch)
        return batch.replace(plan=plan_windows(list(batch.windows.values())))
