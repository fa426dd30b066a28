"""The Batch a user builds from Python: the kinds of texts it takes, cleaning copies, errors."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import longbert
from pipeline.errors import InputError


def test_batch_from_texts_takes_lists_series_and_arrays():
    texts = ["a b", "c"]
    for given in (texts, tuple(texts), pd.Series(texts), np.array(texts)):
        b = longbert.Batch.from_texts(given, ids=["x", "y"], lang=["en", None])
        assert b.texts == texts and b.ids == ["x", "y"] and b.rows.column("lang").to_pylist() == ["en", None]
    assert longbert.Batch.from_texts(texts).ids == [0, 1]
    cleaned = longbert.Batch.from_texts(texts, ids=["x", "y"]).with_texts(["A B", "C"])
    assert cleaned.texts == ["A B", "C"] and cleaned.ids == ["x", "y"]
    with pytest.raises(InputError, match="a list of texts was expected"):
        longbert.Batch.from_texts("one text")
    with pytest.raises(InputError, match=r"text at position 1 is NoneType, not str"):
        longbert.Batch.from_texts(["a", None])
    with pytest.raises(InputError, match="ids has 1 values for 2 texts"):
        longbert.Batch.from_texts(texts, ids=["x"])
