"""HybridClassifier as a scikit-learn estimator of texts: every form of texts LongBertVectorizer takes
(a list, a Series, a one-column DataFrame, an (n, 1) array) gives one prediction per text, other forms
are refused naming what was given, its tags declare text input as the vectorizer's do, scikit-learn's
check_estimator passes as it does for the vectorizer, and every method raises NotFittedError before fit."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import NotFittedError
from sklearn.utils.estimator_checks import check_estimator

import longbert
from pipeline.classify.hybrid import HybridClassifier, hybrid_inputs
from pipeline.errors import TextError, TextsTypeError
from test_hybrid_texts import ML, labelled


def _vectorizer(model_dir) -> longbert.LongBertVectorizer:
    return longbert.LongBertVectorizer(model=str(model_dir), max_length=ML, strategy="head")


@pytest.fixture(scope="module")
def fitted(tiny_model_dir):
    """(a HybridClassifier fitted on 24 plain texts, the 6 held-out texts, their vectorizer vectors (6, D))."""
    texts, y = labelled(30)
    vec = _vectorizer(tiny_model_dir)
    model = HybridClassifier(vectorizer=vec, inner_folds=3).fit(texts[:24], y[:24])
    return model, texts[24:], vec.transform(texts[24:])


def _forms(texts: list[str]) -> dict[str, object]:
    frame = pd.DataFrame({"text": texts})
    return {"list": list(texts), "Series": frame.text, "one-column DataFrame": frame[["text"]],
            "(n, 1) array": frame[["text"]].to_numpy(), "1-D object array": np.asarray(texts, dtype=object)}


@pytest.mark.parametrize("form", ["list", "Series", "one-column DataFrame", "(n, 1) array", "1-D object array"])
def test_every_form_of_texts_gives_one_prediction_per_text(fitted, form):
    model, texts, V = fitted
    X = _forms(texts)[form]
    # the reference: the same model on (text, vector) pairs of the vectorizer's own vectors of the list
    expected = model.predict_proba(hybrid_inputs(texts, V))
    got = model.predict_proba(X)
    assert got.shape == (len(texts), len(model.classes_))
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-9)
    assert list(model.predict(X)) == list(model.classes_[np.argmax(expected, axis=1)])
    labels = model.classes_[np.argmax(expected, axis=1)]
    assert model.score(X, labels) == 1.0


def test_fit_on_a_one_column_dataframe_equals_fit_on_the_list(tiny_model_dir, fitted):
    model, held_out, _ = fitted
    texts, y = labelled(30)
    frame = pd.DataFrame({"text": texts[:24]})
    on_frame = HybridClassifier(vectorizer=_vectorizer(tiny_model_dir), inner_folds=3).fit(frame[["text"]], y[:24])
    np.testing.assert_allclose(on_frame.predict_proba(held_out), model.predict_proba(held_out), rtol=1e-6, atol=1e-9)


def test_other_forms_are_refused_naming_what_was_given(fitted):
    model, texts, _ = fitted
    two = pd.DataFrame({"text": texts, "title": texts})
    with pytest.raises(TextsTypeError, match=r"^HybridClassifier\.predict: a list of texts was expected, got a "
                       r"DataFrame of 2 columns \['text', 'title'\]; pass its text column, e.g\. df\['text'\]; "
                       r"or pass hybrid_inputs\(texts, vectors\): \(text, vector\) pairs$"):
        model.predict(two)
    with pytest.raises(TextsTypeError, match=r"^HybridClassifier\.fit: a list of texts was expected, got a numpy "
                       r"array of shape \(4, 3\)"):
        HybridClassifier().fit(np.zeros((4, 3)), ["a", "b", "a", "b"])
    with pytest.raises(TextsTypeError, match="got a single string"):
        model.predict(texts[0])
    with pytest.raises(TextError, match="text at position 1 is float, not str"):
        model.predict(pd.Series([texts[0], np.nan]))


def test_tags_declare_text_input_as_the_vectorizers(tiny_model_dir):
    vec = _vectorizer(tiny_model_dir)
    mine, theirs = HybridClassifier(vectorizer=vec).__sklearn_tags__(), vec.__sklearn_tags__()
    assert (mine.input_tags.string, mine.input_tags.one_d_array, mine.input_tags.two_d_array) == (True, True, False)
    assert mine.input_tags == theirs.input_tags
    assert mine.estimator_type == "classifier"


def test_check_estimator_passes_as_it_does_for_the_vectorizer(tiny_model_dir):
    """scikit-learn's checks feed 2-D numeric arrays; an estimator whose tags say it takes no 2-D array
    (text input, as the vectorizer's) is given only the checks that apply to it, and passes them."""
    def statuses(est) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for r in check_estimator(est, on_fail=None):
                out.setdefault(r["status"], []).append(r["check_name"])
        return out

    vec = _vectorizer(tiny_model_dir)
    mine, theirs = statuses(HybridClassifier(vectorizer=vec)), statuses(vec)
    assert "failed" not in mine and "failed" not in theirs
    assert mine == theirs and len(mine["passed"]) >= 1


@pytest.mark.parametrize("method", ["predict", "predict_proba", "score"])
def test_every_method_raises_not_fitted_before_fit(method):
    model = HybridClassifier()
    args = (["a b", "c d"], ["x", "y"]) if method == "score" else (["a b", "c d"],)
    with pytest.raises(NotFittedError, match="This HybridClassifier instance is not fitted yet"):
        getattr(model, method)(*args)
