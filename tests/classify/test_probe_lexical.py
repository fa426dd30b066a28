"""probe CORPUS's lexical baseline (TF-IDF word uni+bigrams + LogisticRegression, C by an inner
search) and its --out CSV: each number against an independent computation on the same folds."""
from __future__ import annotations

import csv
import re

import numpy as np
import pytest
from conftest import extract_cli, invoke, words
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score
from sklearn.model_selection import StratifiedKFold

from pipeline.classify.folds import LEXICAL_CS, LEXICAL_NAME, cross_validate_lexical
from pipeline.classify.probe import CSV_COLUMNS, lexical_summary


def corpus(n: int = 24):
    """Two classes told apart by a few words, with noise words shared by both."""
    rng = np.random.default_rng(3)
    texts, labels = [], []
    for i in range(n):
        label = "ab"[i % 2]
        marks = ["w1 w2", "w3"] if label == "a" else ["w5 w6", "w7"]
        noise = " ".join(f"w{k}" for k in rng.integers(10, 30, size=6))
        if i % 6 == 5:                                    # a few hard rows: the other class's words
            marks = ["w5 w6"] if label == "a" else ["w1 w2"]
        texts.append(f"{noise} {' '.join(marks)} {words(3, i)}")
        labels.append(label)
    return texts, np.asarray(labels, dtype=object)


def by_hand(texts, y, folds, seed, analyzer="word"):
    """Nested CV written out: for each outer training fold, every C's mean inner accuracy (inner
    StratifiedKFold on that training fold alone), the best C (first on ties, as GridSearchCV), refit on
    the whole training fold, scored on the outer test fold; TF-IDF of word or character (``analyzer``)
    uni+bigrams."""
    texts = np.asarray(texts, dtype=object)
    y = y.astype(str)
    smallest = np.unique(y, return_counts=True)[1].min()
    inner_k = max(2, min(folds, smallest - -(-smallest // folds)))

    def fit(tr_texts, tr_y, C):
        vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2, analyzer=analyzer)
        lr = LogisticRegression(max_iter=2000, C=C).fit(vec.fit_transform(tr_texts), tr_y)
        return vec, lr

    acc, f1 = [], []
    for tr, te in StratifiedKFold(folds, shuffle=True, random_state=seed).split(texts, y):
        inner = StratifiedKFold(inner_k, shuffle=True, random_state=seed)
        means = []
        for C in LEXICAL_CS:
            s = []
            for itr, ite in inner.split(texts[tr], y[tr]):
                vec, lr = fit(texts[tr][itr], y[tr][itr], C)
                s.append(accuracy_score(y[tr][ite], lr.predict(vec.transform(texts[tr][ite]))))
            means.append(np.mean(s))
        vec, lr = fit(texts[tr], y[tr], LEXICAL_CS[int(np.argmax(means))])
        pred = lr.predict(vec.transform(texts[te]))
        acc.append(accuracy_score(y[te], pred))
        f1.append(f1_score(y[te], pred, average="macro"))
    return np.array(acc), np.array(f1)


@pytest.mark.parametrize("folds,seed,jobs", [(3, 0, 1), (4, 7, 1), (4, 7, 2)])
def test_lexical_scores_equal_a_hand_written_nested_cv(folds, seed, jobs):
    texts, y = corpus()
    got = cross_validate_lexical(texts, y, folds, seed, jobs=jobs)   # jobs=2: the outer folds in 2 processes
    acc, f1 = by_hand(texts, y, folds, seed)
    np.testing.assert_allclose(got["accuracy"], acc)
    np.testing.assert_allclose(got["f1_macro"], f1)
    assert got["accuracy_mean"] == pytest.approx(acc.mean()) and got["accuracy_std"] == pytest.approx(acc.std())
    assert got["f1_macro_mean"] == pytest.approx(f1.mean()) and got["f1_macro_std"] == pytest.approx(f1.std())
    assert 0.5 < got["accuracy_mean"] < 1.0          # the hard rows keep it off 1: not a constant


def test_lexical_dimension_is_the_training_folds_vocabulary():
    texts, y = corpus()
    sizes = [len(TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2)
                 .fit(np.asarray(texts, dtype=object)[tr]).vocabulary_)
             for tr, _ in StratifiedKFold(3, shuffle=True, random_state=0).split(texts, y.astype(str))]
    assert cross_validate_lexical(texts, y, 3, 0)["dimension"] == int(round(np.mean(sizes)))


def test_summary_says_plainly_when_the_baseline_wins():
    lex = {"feature": LEXICAL_NAME, "accuracy_mean": 0.9, "accuracy_std": 0.01, "f1_macro_mean": 0.89, "folds": 5}
    best = {"feature": "f_chunk_mean", "accuracy_mean": 0.8}
    assert "beats every BERT feature" in lexical_summary(lex, best)
    assert "lexical_model(5, 0).fit(texts, labels)" in lexical_summary(lex, best)
    assert "beats every BERT feature" not in lexical_summary(lex, {**best, "accuracy_mean": 0.95})
    assert lexical_summary(lex, {**best, "accuracy_mean": 0.95}).endswith(
        ": the best BERT feature f_chunk_mean beats it (0.900) by +0.050")
    assert lexical_summary(lex, {**best, "accuracy_mean": 0.9}).endswith(
        ": the best BERT feature f_chunk_mean ties it (0.900)")


def test_probe_out_csv_has_the_columns_and_the_baseline_row(runner, tiny_model_dir, tmp_path):
    texts, y = corpus(16)
    src = tmp_path / "c.csv"
    src.write_text("text,label\n" + "\n".join(f"{t},{l}" for t, l in zip(texts, y)) + "\n")
    out = tmp_path / "rank.csv"
    result = invoke(runner, ["probe", src, "--label-col", "label", "--model", tiny_model_dir, "--max-length", 16,
                             "--overlap", 4, "--folds", 2, "--out", out])
    assert result.exit_code == 0, result.output
    assert f"ranking -> {out}" in result.output
    with open(out, newline="") as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames) == CSV_COLUMNS
        rows = list(reader)
    assert {r["kind"] for r in rows} == {"bert", "lexical", "hybrid", "compact"}
    bert = sorted([r for r in rows if r["kind"] == "bert"], key=lambda r: -float(r["accuracy"]))   # stable
    assert sorted(r["feature"] for r in rows if r["kind"] == "hybrid" and "+" not in r["feature"]) == \
        sorted(f"hybrid:{r['feature']}" for r in bert[:3])
    assert {r["feature"].split("+")[0] for r in rows if "+" in r["feature"]} == {f"hybrid:{bert[0]['feature']}"}
    compact = {r["feature"]: r for r in rows if r["kind"] == "compact"}
    assert set(compact) == {f"{bert[0]['feature']}:int8", f"{bert[0]['feature']}:binary"}
    assert {r["dim"] for r in compact.values()} == {bert[0]["dim"]}
    assert f"compact int8: {bert[0]['feature']}:int8 keeps" in result.output
    lexical = [r for r in rows if r["kind"] == "lexical"]
    assert len(lexical) == 1 and lexical[0]["feature"] == LEXICAL_NAME
    acc, f1 = by_hand(texts, y, 2, 0)                   # every document is in the sample (16 < 500)
    assert float(lexical[0]["accuracy"]) == pytest.approx(acc.mean())
    assert float(lexical[0]["accuracy_sd"]) == pytest.approx(acc.std())
    assert float(lexical[0]["macro_f1"]) == pytest.approx(f1.mean())
    assert float(lexical[0]["windows_per_doc"]) == 0.0
    accs = [float(r["accuracy"]) for r in rows]
    assert accs == sorted(accs, reverse=True)
    ranked = [line for line in result.output.splitlines() if re.match(r"\s*\d+\s+f_", line)]
    assert len([r for r in rows if r["kind"] == "bert"]) == len(ranked)
    assert re.search(rf"^\s*-\s+{LEXICAL_NAME}\s", result.output, re.M)   # the baseline's table row
    assert f"{LEXICAL_NAME}" in result.output and "lexical baseline" in result.output


def test_out_is_refused_for_feature_files(runner, tiny_model_dir, tmp_path):
    _, features = extract_cli(tmp_path, [words(5, i) for i in range(4)], model=tiny_model_dir)
    result = invoke(runner, ["probe", features, "--label-col", "label", "--out", tmp_path / "r.csv"])
    assert result.exit_code == 2
    assert "--out applies only to a corpus, not to extract's outputs" in result.output


def test_fold_tfidf_from_corpus_counts_is_tfidfvectorizer_fitted_on_the_fold():
    from sklearn.feature_extraction.text import CountVectorizer

    from pipeline.classify.folds import FoldTfidf

    texts, y = corpus()
    texts = np.asarray(texts, dtype=object)
    counts = CountVectorizer(ngram_range=(1, 2)).fit_transform(texts).tocsr()
    rng = np.random.default_rng(0)
    train = np.sort(rng.choice(len(texts), size=len(texts) * 2 // 3, replace=False))
    test = np.setdiff1d(np.arange(len(texts)), train)
    vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2).fit(texts[train])
    fold = FoldTfidf(min_df=2).fit(counts[train])
    assert fold.n_features_ == len(vec.vocabulary_)
    for rows in (train, test):
        want = vec.transform(texts[rows]).toarray()
        got = fold.transform(counts[rows]).toarray()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
