"""HybridClassifier on plain texts, encoded by its LongBertVectorizer: the same cross-validated accuracy
as probe's hybrid rows on the same folds, each distinct text encoded once across the folds, and the
nested parameters of scikit-learn's estimator contract."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import StratifiedKFold, cross_val_score
from sklearn.pipeline import Pipeline

import longbert
from pipeline.classify import loaded as loaded_mod
from pipeline.classify.hybrid import HybridClassifier, hybrid_inputs
from pipeline.model.encode import Encoder
from test_probe_lexical import corpus

ML = 16   # --max-length: windows of 14 content tokens, so the corpus's longer texts make several


def labelled(n: int = 40):
    """corpus(n)'s texts, every third one made longer (several chunk and sliding windows), labels str."""
    texts, y = corpus(n)
    texts = [t + " " + " ".join(f"w{(i * 7 + k) % 40}" for k in range(12)) if i % 3 == 0 else t
             for i, t in enumerate(texts)]
    return texts, y.astype(str)


@pytest.fixture
def fresh_store(monkeypatch):
    """An empty in-memory window store for this test, and no cached pipeline holding the old one."""
    monkeypatch.setattr(loaded_mod, "_MEMORY_STORE", [])
    monkeypatch.delitem(loaded_mod._LOADED, "pipeline", raising=False)
    yield
    loaded_mod._LOADED.pop("pipeline", None)   # its store is this test's


@pytest.fixture
def encoded(monkeypatch):
    """The input_ids of every window the encoder runs, one tuple per window per call."""
    seen: list[tuple[int, ...]] = []
    real = Encoder.encode

    def counting(self, windows, *args, **kwargs):
        seen.extend(tuple(w.input_ids) for w in windows)
        return real(self, windows, *args, **kwargs)

    monkeypatch.setattr(Encoder, "encode", counting)
    return seen


def test_texts_cross_validation_equals_probes_hybrid_rows(tiny_model_dir, tmp_path, fresh_store):
    from pipeline.classify.probe import probe_corpus
    from pipeline.classify.probe_ranking import hybrid_python
    from pipeline.options.config import PipelineConfig

    texts, y = labelled()
    src = tmp_path / "c.csv"
    src.write_text("text,label\n" + "\n".join(f"{t},{label}" for t, label in zip(texts, y)) + "\n")
    cfg = PipelineConfig.from_options(inputs=(str(src),), model=str(tiny_model_dir), max_length=ML, overlap=4,
                                      progress=False)
    report = probe_corpus(cfg, "label", sample=500, folds=5, seed=0)
    singles = [r for r in report["hybrids"] if len(r["bases"]) == 1]
    pairs = [r for r in report["hybrids"] if len(r["bases"]) == 2]    # TF-IDF with two BERT features
    assert report["documents"] == len(texts) and report["left_out"] == 0 and len(singles) == 3
    assert 1 <= len(pairs) <= 2 and len(report["hybrids"]) == len(singles) + len(pairs)
    assert all(r["bases"][0] is report["results"][0] and r["bases"][1]["spec"] != r["bases"][0]["spec"] for r in pairs)
    cv = StratifiedKFold(5, shuffle=True, random_state=0)
    for row in report["hybrids"]:
        base = row["base"]
        line = hybrid_python(cfg, row["bases"] if row in pairs else base)   # the summary's Python line
        model = eval(line.removesuffix(".fit(texts, labels)"), {"longbert": longbert})
        assert model.get_params(deep=False)["seed"] == 0                  # the line's vectorizer(s): the same vectors
        for vectorizer, b in zip(model.vectorizer if row in pairs else [model.vectorizer], row["bases"]):
            vec = longbert.LongBertVectorizer(model=str(tiny_model_dir), max_length=ML, overlap=4, feature=b["spec"],
                                              aggregate=b["aggregate"])
            np.testing.assert_array_equal(vectorizer.transform(texts), vec.transform(texts))
        scores = cross_val_score(model, texts, y, cv=cv)
        assert abs(scores.mean() - row["accuracy_mean"]) <= 0.01, (row["feature"], scores, row["accuracy"])
        np.testing.assert_allclose(scores, row["accuracy"], atol=1e-12)   # the same vectors: the same folds' scores


def test_each_distinct_text_is_encoded_once_across_the_folds(tiny_model_dir, fresh_store, encoded):
    texts, y = labelled()
    texts, y = texts + texts[:10], np.concatenate([y, y[:10]])   # 10 texts twice
    vec = longbert.LongBertVectorizer(model=str(tiny_model_dir), max_length=ML, strategy="chunk")
    model = Pipeline([("hybrid", HybridClassifier(vectorizer=vec, inner_folds=3))])
    scores = cross_val_score(model, texts, y, cv=StratifiedKFold(5, shuffle=True, random_state=0))
    assert scores.shape == (5,) and np.all((scores >= 0) & (scores <= 1))
    tok = vec._pipeline().encode_stage().tokenizer
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in dict.fromkeys(texts)]   # the 40 distinct texts
    windows = {(tok.cls_token_id, *c[s:s + ML - 2], tok.sep_token_id) for c in ids for s in range(0, len(c), ML - 2)}
    assert len(encoded) == len(set(encoded)) == len(windows) > 40      # once each, several windows for the long texts
    assert set(encoded) == windows
    cross_val_score(model, texts, y, cv=StratifiedKFold(5, shuffle=True, random_state=1))
    assert len(encoded) == len(windows)                               # other folds: nothing encoded again


def test_plain_texts_equal_pairs_of_the_vectorizers_vectors(tiny_model_dir):
    texts, y = labelled(30)
    vec = longbert.LongBertVectorizer(model=str(tiny_model_dir), max_length=ML, strategy="head")
    on_texts = HybridClassifier(vectorizer=vec, inner_folds=3).fit(texts[:24], y[:24])
    V = vec.transform(texts)
    on_pairs = HybridClassifier(inner_folds=3).fit(hybrid_inputs(texts[:24], V[:24]), y[:24])
    expected = on_pairs.predict_proba(hybrid_inputs(texts[24:], V[24:]))
    np.testing.assert_allclose(on_texts.predict_proba(texts[24:]), expected, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(on_texts.predict_proba(np.asarray(texts[24:], dtype=object)), expected, rtol=1e-6)
    np.testing.assert_allclose(on_texts.predict_proba(hybrid_inputs(texts[24:], V[24:])), expected, rtol=1e-6)
    assert on_texts.score(texts[24:], y[24:]) == pytest.approx(np.mean(on_texts.predict(texts[24:]) == y[24:]))
    assert on_pairs.vectorizer_ is None and on_texts.vectorizer_ is not vec
    with pytest.raises(ValueError, match="fitted on \\(text, vector\\) pairs"):
        on_pairs.predict(texts[24:])


def test_nested_params_clone_and_set_params(tiny_model_dir):
    vec = longbert.LongBertVectorizer(model=str(tiny_model_dir), max_length=ML, strategy="head")
    model = HybridClassifier(vectorizer=vec, meta_C=0.5)
    params = model.get_params()
    assert params["vectorizer"] is vec and params["meta_C"] == 0.5
    assert {k: params[f"vectorizer__{k}"] for k in ("strategy", "max_length", "model")} == \
        {"strategy": "head", "max_length": ML, "model": str(tiny_model_dir)}
    assert set(model.get_params(deep=False)) == {"text_C", "bert_C", "meta_C", "inner_folds", "seed", "vectorizer",
                                                 "analyzer"}
    twin = clone(model)
    assert twin.vectorizer is not vec and twin.vectorizer.get_params() == vec.get_params()
    twin.set_params(vectorizer__strategy="chunk", bert_C=2.0)
    assert (twin.vectorizer.strategy, twin.bert_C, vec.strategy, model.bert_C) == ("chunk", 2.0, "head", 1.0)
    wrapped = Pipeline([("hybrid", model)])
    wrapped.set_params(hybrid__vectorizer__layers=(-2,))
    assert vec.layers == (-2,) and wrapped.get_params()["hybrid__vectorizer__layers"] == (-2,)
    assert HybridClassifier().get_params()["vectorizer"] is None


def test_x_of_neither_kind_is_refused_with_both_kinds_named():
    with pytest.raises(ValueError, match=r"a list of texts was expected, got a numpy array of shape \(4, 3\).*or pass hybrid_inputs"):
        HybridClassifier().fit(np.zeros((4, 3)), ["a", "b", "a", "b"])


def test_summary_gives_the_texts_line_of_the_winning_hybrid(tiny_model_dir):
    from pipeline.classify.probe_ranking import hybrid_summary
    from pipeline.options.config import PipelineConfig

    cfg = PipelineConfig.from_options(inputs=("c.csv",), model=str(tiny_model_dir), max_length=ML, overlap=4)
    base = {"feature": "f_chunk_max_L-2_agg-mean-max", "spec": "chunk:max:-2", "aggregate": "mean,max",
            "strategy": "chunk", "extract_options": "--feature chunk:max:-2", "accuracy_mean": 0.8}
    hybrid = {"feature": "hybrid:" + base["feature"], "base": base, "accuracy_mean": 0.9, "accuracy_std": 0.01}
    lines = hybrid_summary([hybrid], base, {"accuracy_mean": 0.85}, cfg, "label")
    assert lines[0] == ("best hybrid: hybrid:f_chunk_max_L-2_agg-mean-max 0.900 ± 0.010 beats the best BERT feature "
                        "f_chunk_max_L-2_agg-mean-max (0.800) by +0.100 and beats the lexical baseline (0.850) by +0.050")
    assert lines[-1] == ("  or on the texts alone: longbert.HybridClassifier(vectorizer=longbert.LongBertVectorizer("
                         f"feature='chunk:max:-2', aggregate='mean,max', model={str(tiny_model_dir)!r}, max_length=16))"
                         ".fit(texts, labels)")
    assert hybrid_summary([{**hybrid, "accuracy_mean": 0.84}], base, {"accuracy_mean": 0.85}, cfg)[1:] == []
