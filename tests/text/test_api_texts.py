"""What encode and LongBertVectorizer take as texts (pipeline.classify.vectorizer.text_list): list, tuple, numpy
array, pandas Series, one-column DataFrame; anything else a TypeError naming it (case B56)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import CASES, reference_vectors, words

import longbert
from pipeline.texts import TextError, TextsTypeError, text_list
from pipeline.classify.vectorizer import LongBertVectorizer

TEXTS = [words(5), words(12, 3), words(7, 9)]


def test_text_list_accepts_the_documented_kinds():
    df = pd.read_csv(CASES / "B56.csv")
    texts = df["text"].tolist()
    assert len(texts) == 3
    for given in (texts, tuple(texts), np.array(texts), np.array(texts, dtype=object), df["text"], df[["text"]],
                  np.array(texts)[:, None], df["text"].astype("string")):
        assert text_list(given, "encode") == texts, type(given)
    assert text_list([], "encode") == []
    assert text_list([1, None], "encode") == [1, None]  # elements are checked by the caller, row by row


@pytest.mark.parametrize("given, named", [
    ("one text", "got a single string (str)"),
    (b"one text", "got a single string (bytes)"),
    ({"a": "x"}, "got dict"),
    ({"x", "y"}, "got set"),
    ((t for t in ["x"]), "got generator"),
    (pd.DataFrame({"id": [1], "text": ["x"]}), "got a DataFrame of 2 columns ['id', 'text']; pass its text column"),
    (np.array([["a", "b"]]), "got a numpy array of shape (1, 2)"),
    (np.array("a"), "got a numpy array of shape ()"),
    (42, "got int"),
])
def test_text_list_refuses_everything_else_naming_it(given, named):
    with pytest.raises(TypeError, match="a list of texts was expected") as info:
        text_list(given, "encode")
    assert named in str(info.value)
    assert isinstance(info.value, TextError)  # also a ValueError, as a bare string was before


def test_encode_takes_a_one_column_frame_as_its_texts(tiny_model_dir, tiny_bert):
    model, tok = tiny_bert
    df = pd.DataFrame({"id": [1, 2, 3], "text": TEXTS})
    ref = reference_vectors(model, tok, [tok(t)["input_ids"] for t in TEXTS], pooling="mean")  # (3, 32)
    opts = dict(model=str(tiny_model_dir), show_progress_bar=False)
    for given in (df[["text"]], df["text"], TEXTS, tuple(TEXTS), np.array(TEXTS)):
        X = longbert.encode(given, **opts)
        assert X.shape == (3, 32)
        np.testing.assert_allclose(X, ref, atol=1e-5)
    for given, named in ((df, "DataFrame of 2 columns"), (TEXTS[0], "single string"), (iter(TEXTS), "list_iterator")):
        with pytest.raises(TypeError, match=f"encode: a list of texts was expected, got .*{named}"):
            longbert.encode(given, **opts)


def test_vectorizer_takes_the_same_kinds(tiny_model_dir, tiny_bert):
    model, tok = tiny_bert
    ref = reference_vectors(model, tok, [tok(t)["input_ids"] for t in TEXTS], pooling="mean")
    vec = LongBertVectorizer(model=str(tiny_model_dir), cache=None)
    df = pd.DataFrame({"text": TEXTS})
    np.testing.assert_allclose(vec.transform(df), ref, atol=1e-5)
    np.testing.assert_allclose(vec.transform(tuple(TEXTS)), ref, atol=1e-5)
    with pytest.raises(TextsTypeError, match="transform: a list of texts was expected, got a single string"):
        vec.transform(TEXTS[0])
    with pytest.raises(TypeError, match="got a DataFrame of 2 columns"):
        vec.transform(df.assign(id=[1, 2, 3]))
