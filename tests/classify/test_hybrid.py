"""HybridClassifier (stacking of TF-IDF + LR and BERT vectors + LR) against a stacking written out
by hand on the same folds, and its scikit-learn estimator contract."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, cross_val_score
from sklearn.preprocessing import StandardScaler

import longbert
from pipeline.classify.hybrid import HybridClassifier, cross_validate_hybrid, hybrid_inputs
from test_probe_lexical import corpus


def data(n: int = 30):
    texts, y = corpus(n)
    y = y.astype(str)
    rng = np.random.default_rng(5)
    V = rng.normal(size=(n, 6)).astype(np.float32)
    V[:, 0] += np.where(y == "a", 0.8, -0.8)        # a weak vector signal beside the words
    return texts, V, y


def stack_by_hand(texts, V, y, k, seed, text_C=1.0, meta_C=1.0):
    """Out-of-fold probabilities of each base model on StratifiedKFold(k, shuffle, seed), the second level
    on [text probs, bert probs], base models refitted on all rows; returns a predict_proba function."""
    texts = np.asarray(texts, dtype=object)

    def text_fit(tt, yy):
        vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2)
        return vec, LogisticRegression(C=text_C, max_iter=2000).fit(vec.fit_transform(tt), yy)

    def bert_fit(vv, yy):
        sc = StandardScaler().fit(vv)
        return sc, LogisticRegression(max_iter=2000).fit(sc.transform(vv), yy)

    p = np.zeros((len(y), 4))
    for tr, te in StratifiedKFold(k, shuffle=True, random_state=seed).split(V, y):
        vec, lr = text_fit(texts[tr], y[tr])
        sc, lr2 = bert_fit(V[tr], y[tr])
        p[te, :2] = lr.predict_proba(vec.transform(texts[te]))
        p[te, 2:] = lr2.predict_proba(sc.transform(V[te]))
    meta = LogisticRegression(C=meta_C, max_iter=2000).fit(p, y)
    vec, lr = text_fit(texts, y)
    sc, lr2 = bert_fit(V, y)
    return lambda tt, vv: meta.predict_proba(np.hstack([lr.predict_proba(vec.transform(np.asarray(tt, dtype=object))),
                                                        lr2.predict_proba(sc.transform(vv))]))


def test_fit_predict_proba_equal_a_hand_written_stacking():
    texts, V, y = data()
    model = HybridClassifier(text_C=1.0, inner_folds=3, seed=2).fit(hybrid_inputs(texts[:24], V[:24]), y[:24])
    expected = stack_by_hand(texts[:24], V[:24], y[:24], 3, 2)(texts[24:], V[24:])
    got = model.predict_proba(hybrid_inputs(texts[24:], V[24:]))
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-9)
    assert model.predict(hybrid_inputs(texts[24:], V[24:])).tolist() == \
        np.array(["a", "b"])[expected.argmax(1)].tolist()
    assert model.classes_.tolist() == ["a", "b"] and model.inner_folds_ == 3


def test_cross_validated_score_equals_the_hand_written_stacking_on_the_same_folds():
    texts, V, y = data()
    got = cross_validate_hybrid(texts, V, y, 3, 0, text_C=1.0, inner_folds=3)
    acc = []
    t = np.asarray(texts, dtype=object)
    for tr, te in StratifiedKFold(3, shuffle=True, random_state=0).split(V, y):
        proba = stack_by_hand(t[tr], V[tr], y[tr], 3, 0)(t[te], V[te])
        acc.append(np.mean(np.array(["a", "b"])[proba.argmax(1)] == y[te]))
    np.testing.assert_allclose(got["accuracy"], acc)
    assert got["accuracy_mean"] == pytest.approx(np.mean(acc)) and got["accuracy_std"] == pytest.approx(np.std(acc))


def test_estimator_contract_clone_params_score_and_cross_val_score():
    texts, V, y = data()
    X = hybrid_inputs(texts, V)
    model = longbert.HybridClassifier(text_C=1.0, meta_C=0.5, inner_folds=3)
    assert model.get_params() == {"text_C": 1.0, "bert_C": 1.0, "meta_C": 0.5, "inner_folds": 3, "seed": 0,
                                  "vectorizer": None, "analyzer": "word"}
    twin = clone(model).set_params(text_C=10.0)
    assert twin.get_params()["text_C"] == 10.0 and model.text_C == 1.0 and not hasattr(twin, "meta_model_")
    fitted = twin.fit(X, y)
    assert fitted.score(X, y) == pytest.approx(np.mean(fitted.predict(X) == y))
    scores = cross_val_score(model, X, y, cv=StratifiedKFold(3, shuffle=True, random_state=0))
    assert scores.shape == (3,) and np.all((scores >= 0) & (scores <= 1))
    np.testing.assert_allclose(scores, cross_validate_hybrid(texts, V, y, 3, 0, text_C=1.0, meta_C=0.5, inner_folds=3)["accuracy"])


def test_bad_inputs_are_refused():
    texts, V, y = data(8)
    with pytest.raises(ValueError, match="8 texts and vectors of shape"):
        hybrid_inputs(texts, V[:5])
    with pytest.raises(ValueError, match="hybrid_inputs"):
        HybridClassifier().fit(V, y)
    with pytest.raises(ValueError, match="a class has 1 training row"):
        HybridClassifier().fit(hybrid_inputs(texts[:3], V[:3]), np.array(["a", "a", "b"]))


def test_default_text_C_is_the_baseline_search_on_fit_rows():
    from pipeline.classify.folds import lexical_model

    texts, V, y = data()
    model = HybridClassifier(inner_folds=3).fit(hybrid_inputs(texts, V), y)
    search = lexical_model(3, 0).fit(np.asarray(texts, dtype=object), y)   # smallest class 15: k stays 3
    assert model.text_C_ == search.best_params_["lr__C"]
    fixed = HybridClassifier(text_C=model.text_C_, inner_folds=3).fit(hybrid_inputs(texts, V), y)
    np.testing.assert_allclose(model.predict_proba(hybrid_inputs(texts, V)), fixed.predict_proba(hybrid_inputs(texts, V)))


def test_probe_compact_rows_equal_the_probe_of_hand_quantized_vectors():
    from pipeline.classify.folds import cross_validate_probe
    from pipeline.classify.probe import compact_rows

    _, V, y = data(80)
    V = V * np.linspace(0.1, 3.0, V.shape[1], dtype=np.float32) + 2.0   # an offset: the signs of V alone are all +1
    best = {"feature": "f_head_cls", "windows_per_doc": 1.0, "accuracy_mean": 0.8}
    int8, binary = compact_rows(best, V, y, 4, 1)
    scale = np.abs(V).max(axis=1, keepdims=True) / 127
    by_hand = np.round(V / scale) * scale
    assert int8["accuracy"] == cross_validate_probe(by_hand.astype(np.float32), y, 4, 1)["accuracy"]
    center = V[:64].astype(np.float64).mean(axis=0).astype(np.float32)      # extract's: its first 64 documents
    assert binary["accuracy"] == cross_validate_probe(np.where(V > center, 1.0, -1.0).astype(np.float32), y, 4, 1)["accuracy"]
    assert binary["accuracy_mean"] > 0.6                                     # the centred signs still separate
    assert cross_validate_probe(np.where(V > 0, 1.0, -1.0).astype(np.float32), y, 4, 1)["accuracy_mean"] < 0.6
    assert (int8["bytes_per_vector"], binary["bytes_per_vector"], int8["float32_bytes"]) == (6 + 4, 1, 24)
    assert int8["feature"] == "f_head_cls:int8" and binary["kind"] == "compact" and int8["dimension"] == 6
    assert int8["accuracy_kept"] == pytest.approx(int8["accuracy_mean"] / 0.8)


def test_probe_hybrid_rows_are_the_hybrid_cross_validation_of_each_feature():
    from pipeline.classify.probe import hybrid_rows

    texts, V, y = data()
    top = [({"feature": "f_a", "windows_per_doc": 2.0}, V), ({"feature": "f_b", "windows_per_doc": 1.0}, V[:, :3])]
    rows = hybrid_rows(top, texts, y, 3, 0, lexical_dim=100)
    assert [r["feature"] for r in rows] == ["hybrid:f_a", "hybrid:f_b"]
    assert [r["dimension"] for r in rows] == [106, 103] and [r["windows_per_doc"] for r in rows] == [2.0, 1.0]
    for r, (_, X) in zip(rows, top):
        assert r["accuracy"] == cross_validate_hybrid(texts, X, y, 3, 0)["accuracy"]


@pytest.mark.parametrize("folds", [3, 5])
def test_hybrid_rows_with_the_lexical_rows_C_equal_a_search_per_hybrid(folds):
    """The probe fits the lexical half once per outer fold and takes the lexical row's C where its
    search is the hybrid's own: the rows equal HybridClassifier cross-validated through scikit-learn."""
    from pipeline.classify.folds import cross_validate_lexical
    from pipeline.classify.hybrid import search_folds
    from pipeline.classify.probe import hybrid_rows
    from sklearn.model_selection import StratifiedKFold

    texts, V, y = data(40)
    lexical = cross_validate_lexical(texts, y, folds, 0)
    outer = StratifiedKFold(folds, shuffle=True, random_state=0).split(V, y)
    reused = [search_folds(y[tr], 5) == lexical["inner_folds"] for tr, _ in outer]
    assert all(reused) == (folds == 5)   # 3 outer folds: the lexical row searches with k = 3, a hybrid with 5
    top = [({"feature": "f_a", "windows_per_doc": 2.0}, V), ({"feature": "f_b", "windows_per_doc": 1.0}, V[:, :3])]
    rows = hybrid_rows(top, texts, y, folds, 0, lexical_dim=100, lexical=lexical)
    for r, (_, X) in zip(rows, top):
        reference = cross_validate_hybrid(texts, X, y, folds, 0)
        assert r["accuracy"] == reference["accuracy"] and r["f1_macro"] == reference["f1_macro"]


def test_fit_takes_probes_fast_path(monkeypatch):
    """fit analyses the texts once into n-gram counts and fits every lexical model on rows of them (as probe's
    hybrid rows): the per-text TF-IDF models are never built, and the probabilities are the hand-written
    stacking's (test_fit_predict_proba_equal_a_hand_written_stacking)."""
    import pipeline.classify.folds as folds_mod
    import pipeline.classify.hybrid as hybrid_mod

    def slow(*args, **kwargs):
        raise AssertionError("the per-text TF-IDF path was taken")

    monkeypatch.setattr(folds_mod, "lexical_model", slow)
    monkeypatch.setattr(hybrid_mod, "text_model", slow)
    texts, V, y = data()
    model = HybridClassifier(inner_folds=3).fit(hybrid_inputs(texts, V), y)
    assert model.text_model_.predict_proba(texts).shape == (len(texts), 2)
    assert [name for name, _ in model.text_model_.steps] == ["counts", "lexical"]
