"""The rows stage: one output row per text in input order, the ids, counts, errors and vectors it was handed."""
from __future__ import annotations

import numpy as np
from conftest import words

import longbert
from pipeline.columns import ERROR, FEATURES, ID, N_TOKENS, N_WINDOWS


def test_rows_stage_writes_one_row_per_text(pipe):
    """30 tokens in chunk windows of 14 are 3 windows; a blank text is a row with its error and no vector."""
    batch = pipe.process(longbert.Batch.from_texts([words(30), " ", words(3)], ids=["a", "b", "c"]))
    table = batch.table
    assert table.column(ID).to_pylist() == ["a", "b", "c"]
    assert table.column(N_TOKENS).to_pylist() == [30, 0, 3]
    assert table.column(N_WINDOWS).to_pylist() == [3, 0, 1]
    assert table.column(ERROR).to_pylist() == [None, "empty text", None]
    vectors = table.column(FEATURES).to_pylist()
    assert vectors[1] is None
    np.testing.assert_array_equal(np.array([vectors[0], vectors[2]], dtype=np.float32),
                                  batch.vectors[FEATURES][[0, 2]])
    assert batch.counts.documents == 3 and batch.counts.errors == 1
