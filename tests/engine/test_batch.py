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


@pytest.mark.parametrize("name", ["id", "text", "error"])
def test_from_texts_refuses_a_column_named_like_the_batchs_own(name):
    """"error" carries the reader's row errors to the tokenize stage: a user's column of that name would
    turn its values into row errors, so it is refused like id and text."""
    from pipeline.errors import InputError

    with pytest.raises(InputError, match=f"column {name!r} is the batch's own"):
        longbert.Batch.from_texts(["a"], **{name: ["x"]})
