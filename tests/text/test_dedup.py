"""The dedup stage: each distinct window once, shared by strategies and by texts with the same ids."""
from __future__ import annotations

from conftest import STAGE_ML as ML
from conftest import words

import longbert


def test_dedup_stage_keeps_each_distinct_window_once(tiny_model_dir):
    """head and chunk windows of three texts (two the same): the unique windows are the distinct id lists,
    and every requested window points at the unique window with its ids."""
    pipe = longbert.Pipeline.from_options(model=str(tiny_model_dir), feature=["chunk:mean", "head:cls"],
                                          max_length=ML)
    texts = [words(20), words(20), words(5, 3)]
    batch = pipe["dedup"](pipe["segment"](pipe["tokenize"](longbert.Batch.from_texts(texts))))
    requested = [w for ws in batch.windows.values() for w in ws]
    assert len(requested) == (2 + 2 + 1) + 3                  # chunk: 20 = 14 + 6 tokens, 5; head: one per text
    distinct = {tuple(w.input_ids.tolist()) for w in requested}
    assert len(batch.unique) == len(distinct) == 3            # doc 1 repeats doc 0; head = chunk's first window
    assert {tuple(w.input_ids.tolist()) for w in batch.unique} == distinct
    for windows, index in zip(batch.windows.values(), batch.plan.index):
        assert [batch.unique[i].input_ids.tolist() for i in index] == [w.input_ids.tolist() for w in windows]
    assert batch.plan.requested == len(requested) and batch.plan.saved == len(requested) - 3
