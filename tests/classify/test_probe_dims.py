"""probe's accuracy per byte and its hybrid of two BERT features: the --dims rows against a PCA fitted by
hand in each training fold with scikit-learn, bytes_per_doc against the column types extract writes, the
two-feature hybrid against a stacking written out, and the report's lines."""
from __future__ import annotations

import csv

import numpy as np
import pyarrow.parquet as pq
import pytest
from sklearn.decomposition import PCA
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from conftest import extract_cli, invoke, words
from pipeline.classify.hybrid import HybridClassifier, cross_validate_hybrid, hybrid_inputs
from pipeline.classify.probe_compact import cross_validate_stored, dims_rows, smallest_within


def data(n=60, d=24, seed=0):
    rng = np.random.default_rng(seed)
    y = np.array(["abc"[i % 3] for i in range(n)], dtype=object)
    X = rng.normal(size=(n, d)).astype(np.float32)
    X[:, :3] += np.stack([(y == c).astype(np.float32) * 1.5 for c in "abc"], axis=1)
    return X, y


def test_dims_rows_fit_the_pca_inside_each_training_fold():
    X, y = data()
    got = cross_validate_stored(X, y, 3, 0, 8, "float32")
    acc = []
    for tr, te in StratifiedKFold(3, shuffle=True, random_state=0).split(X, y):
        pca = PCA(8, svd_solver="full").fit(X[tr].astype(np.float64))     # the training rows alone
        lr = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
        lr.fit(pca.transform(X[tr]).astype(np.float32), y[tr])
        acc.append(accuracy_score(y[te], lr.predict(pca.transform(X[te]).astype(np.float32))))
    np.testing.assert_allclose(got["accuracy"], acc)


def test_dims_rows_names_bytes_and_skips():
    X, y = data()
    best = {"feature": "f_head_cls", "accuracy_mean": 0.8, "windows_per_doc": 1.0, "dimension": 24}
    rows, skipped = dims_rows(best, X, y, 3, 0, dims=(4, 8, 24, 48))
    assert skipped == []   # 24 and 48 are not below the 24 dimensions: not probed at all
    assert [(r["feature"], r["bytes_per_doc"]) for r in rows] == [
        ("f_head_cls:pca4:float32", 16), ("f_head_cls:pca4:int8", 8), ("f_head_cls:pca4:binary", 1),
        ("f_head_cls:pca8:float32", 32), ("f_head_cls:pca8:int8", 12), ("f_head_cls:pca8:binary", 1)]
    rows, skipped = dims_rows(best, data(d=64)[0], y, 3, 0, dims=(8, 41))   # training folds of 40 rows
    assert skipped == [41] and {r["dims"] for r in rows} == {8}
    small = smallest_within({**best, "accuracy_mean": 0.5}, [{**r, "accuracy_mean": 0.5} for r in rows])
    assert small["feature"] == "f_head_cls:pca8:binary"
    assert smallest_within({**best, "accuracy_mean": 0.9}, [{**r, "accuracy_mean": 0.5} for r in rows])["feature"] \
        == "f_head_cls"


@pytest.mark.parametrize("form,dims", [("int8", 8), ("binary", 8), ("float32", 8)])
def test_bytes_per_doc_is_what_extract_stores(tmp_path, tiny_model_dir, form, dims):
    """bytes_per_doc of a --dims row is the bytes of the columns extract --dims N --out-dtype FORM writes
    per document: list size x the value type's width, plus the scale column's."""
    X, y = data(d=32)
    rows = dims_rows({"feature": "f", "accuracy_mean": 0.5, "windows_per_doc": 1.0}, X, y, 3, 0, dims=(dims,))[0]
    by_form = {r["form"]: r["bytes_per_doc"] for r in rows}
    texts = [words(6 + i % 9, i) for i in range(12)]
    _, out = extract_cli(tmp_path, texts, "--max-length", "16", "--dims", str(dims), "--out-dtype", form,
                         model=tiny_model_dir, name=f"{form}.parquet")
    schema = pq.read_schema(out)
    size = 0
    for name in ("features", "features_scale"):
        if name in schema.names:
            t = schema.field(name).type
            size += t.list_size * t.value_type.bit_width // 8 if hasattr(t, "list_size") else t.bit_width // 8
    assert by_form[form] == size


def test_a_hybrid_of_two_features_equals_its_stacking_written_out():
    X1, y = data(seed=1)
    X2, _ = data(seed=2)
    texts = [f"{'w1 w2' if c == 'a' else 'w3'} {words(5, i)}" for i, c in enumerate(y)]
    tr, te = next(StratifiedKFold(3, shuffle=True, random_state=0).split(X1, y))
    model = HybridClassifier(seed=0).fit(hybrid_inputs([texts[i] for i in tr], X1[tr], X2[tr]), y[tr])
    assert len(model.bert_models_) == 2 and model.meta_model_.coef_.shape[1] == 3 * 3
    pairs = hybrid_inputs([texts[i] for i in te], X1[te], X2[te])
    level = np.hstack([model.text_model_.predict_proba([texts[i] for i in te]),
                       model.bert_models_[0].predict_proba(X1[te]), model.bert_models_[1].predict_proba(X2[te])])
    np.testing.assert_array_equal(model.predict(pairs), model.classes_[np.argmax(model.meta_model_.predict_proba(level), 1)])
    one = cross_validate_hybrid(texts, (X1, X2), y, 3, 0)
    from pipeline.classify.hybrid import cross_validate_hybrids
    many = cross_validate_hybrids(texts, [X1, (X1, X2)], y, 3, 0)
    np.testing.assert_allclose(many[1]["accuracy"], one["accuracy"])


def test_probe_out_has_bytes_per_doc_and_the_two_feature_hybrid(runner, tiny_model_dir, tmp_path):
    from pipeline.compact import bytes_per_vector

    rng = np.random.default_rng(3)
    rows = []
    for i in range(30):
        label = "ab"[i % 2]
        rows.append(f"{' '.join(f'w{k}' for k in rng.integers(10, 30, size=6))} {'w1 w2' if label == 'a' else 'w5 w6'},"
                    f"{label}")
    src = tmp_path / "c.csv"
    src.write_text("text,label\n" + "\n".join(rows) + "\n")
    out = tmp_path / "rank.csv"
    result = invoke(runner, ["probe", src, "--label-col", "label", "--model", tiny_model_dir, "--max-length", 16,
                             "--overlap", 4, "--folds", 2, "--out", out])
    assert result.exit_code == 0, result.output
    with open(out, newline="") as fh:
        ranked = list(csv.DictReader(fh))
    for r in ranked:
        if r["kind"] == "bert":
            assert int(r["bytes_per_doc"]) == 4 * int(r["dim"])
        elif r["kind"] == "compact":
            form = r["feature"].rsplit(":", 1)[1]
            assert int(r["bytes_per_doc"]) == bytes_per_vector(int(r["dim"]), form)
        else:
            assert r["bytes_per_doc"] == ""
    best_dim = int(max((r for r in ranked if r["kind"] == "bert"), key=lambda r: float(r["accuracy"]))["dim"])
    below = [n for n in (32, 64, 128, 256) if n < best_dim]   # 2 folds of 30: 15 training rows, too few for any
    assert [r for r in ranked if ":pca" in r["feature"]] == []
    assert (f"dims {', '.join(map(str, below))} not probed: a PCA keeps no more dimensions than a training fold "
            "has documents" in result.output) == bool(below)
    pairs = [r for r in ranked if r["kind"] == "hybrid" and "+" in r["feature"]]
    assert pairs, [r["feature"] for r in ranked if r["kind"] == "hybrid"]
    assert "smallest within 0.005 of" in result.output
    assert "best hybrid: " in result.output and "tried: it stacks TF-IDF + " in result.output


def test_plot_draws_accuracy_per_byte_on_a_log_axis(tmp_path):
    pytest.importorskip("matplotlib")
    from test_probe_plot import corpus_report

    from pipeline.classify.probe_plot import plot_corpus_probe

    report = corpus_report()
    best = report["best"]
    compact = [{"feature": f"{best['feature']}:pca{n}:{form}", "form": form, "dims": n, "dimension": n,
                "bytes_per_doc": b, "accuracy_mean": 0.8, "accuracy_std": 0.01}
               for n, form, b in ((4, "int8", 8), (4, "binary", 1), (8, "float32", 32))]
    fig = plot_corpus_probe({**report, "compact": compact}, tmp_path / "p.png")
    assert (tmp_path / "p.png").is_file() and len(fig.axes) == 3
    ax = fig.axes[2]
    assert ax.get_xscale() == "log" and "bytes per document" in ax.get_xlabel()
    xs = sorted(float(line.get_xdata()[0]) for line in ax.lines if line.get_marker() == "o")
    assert xs == sorted([1.0, 8.0, 32.0, 4.0 * best["dimension"]])
