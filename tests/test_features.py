"""Feeding classifiers: load_features, LongBertVectorizer, `longbert stats` and `longbert probe` (tiny BERT)."""
from __future__ import annotations

import json
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import invoke, reference_vectors, words, write_csv
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from pipeline.config import STRATEGIES, PipelineConfig
from pipeline.errors import InputError
from pipeline.features import features_matrix, load_features
from pipeline.probe import format_probe, probe_files
from pipeline.stats import corpus_stats, format_stats
from pipeline.vectorizer import LongBertVectorizer
from pipeline.write import output_schema

ML = 16          # --max-length: C = 14 content tokens
C = ML - 2
PNG = b"\x89PNG\r\n\x1a\n"

ROWS = [  # id, label, text: one empty row (null features), single-window rows, one long row
    {"id": "d0", "label": "a", "text": words(5)},
    {"id": "d1", "label": "a", "text": ""},
    {"id": "d2", "label": "a", "text": words(9, 3)},
    {"id": "d3", "label": "b", "text": words(C, 1)},
    {"id": "d4", "label": "b", "text": words(40, 2)},
]


def extract(runner, model_dir, tmp_path, rows, *extra, name="out.parquet"):
    src = write_csv(tmp_path / "in.csv", rows)
    out = tmp_path / name
    target = f"{out}/" if name.endswith("/") else out  # a trailing / asks for a directory of parts
    result = invoke(runner, ["extract", src, "-o", target, "--model", model_dir, "--no-progress", *extra])
    assert result.exit_code == 0, result.output
    return out


def pyarrow_rows(path):
    """Independent reader: pyarrow straight to Python lists."""
    return pq.read_table(path).to_pylist()


# ---------------------------------------------------------------- load_features

def test_load_features_matches_pyarrow_and_direct_model(runner, tiny_model_dir, tiny_bert, tmp_path):
    model, tok = tiny_bert
    out = extract(runner, tiny_model_dir, tmp_path, ROWS, "--id-col", "id", "--keep-col", "label",
                  "--max-length", ML)
    ids, X, meta = load_features(out)
    rows = pyarrow_rows(out)
    with_features = [r for r in rows if r["features"] is not None]
    assert X.dtype == np.float32 and X.shape == (4, 32)
    assert ids.tolist() == ["d0", "d2", "d3", "d4"] == [r["id"] for r in with_features]
    np.testing.assert_array_equal(X, np.array([r["features"] for r in with_features], dtype=np.float32))
    assert meta["left_out"] == [{"id": "d1", "error": "empty text"}]
    assert meta["n_rows"] == 5
    assert meta["kept"]["label"].tolist() == ["a", "a", "b", "b"]
    assert meta["rows"]["n_tokens"].tolist() == [5, 9, C, 40]
    assert meta["strategy"]["name"] == "head_tail" and meta["pooling"] == "mean"
    # the three single-window rows against a direct BertModel call
    single = [ROWS[i]["text"] for i in (0, 2, 3)]
    windows = [[tok.cls_token_id, *tok(t, add_special_tokens=False)["input_ids"], tok.sep_token_id] for t in single]
    np.testing.assert_allclose(X[:3], reference_vectors(model, tok, windows, "mean"), atol=1e-5)


def test_float16_storage_is_upcast_to_float32(runner, tiny_model_dir, tmp_path):
    out32 = extract(runner, tiny_model_dir, tmp_path, ROWS, "--max-length", ML)
    out16 = extract(runner, tiny_model_dir, tmp_path, ROWS, "--max-length", ML, "--out-dtype", "float16",
                    name="half.parquet")
    ids32, X32, _ = load_features(out32)
    ids16, X16, meta = load_features(out16)
    assert meta["out_dtype"] == "float16" and X16.dtype == np.float32
    assert ids16.dtype == np.int64 and ids16.tolist() == ids32.tolist() == [0, 2, 3, 4]
    np.testing.assert_array_equal(X16, X32.astype(np.float16).astype(np.float32))


def test_features_matrix_honours_slices():
    values = np.arange(12, dtype=np.float32)
    arr = pa.FixedSizeListArray.from_arrays(pa.array(values), list_size=3)      # 4 rows of 3
    np.testing.assert_array_equal(features_matrix(arr.slice(1, 2)), values.reshape(4, 3)[1:3])


def test_directory_of_parts_equals_single_file_and_incomplete_is_refused(runner, tiny_model_dir, tmp_path):
    common = ["--id-col", "id", "--keep-col", "label", "--max-length", ML, "--block-rows", 2]
    single = extract(runner, tiny_model_dir, tmp_path, ROWS, *common)
    parts = extract(runner, tiny_model_dir, tmp_path, ROWS, *common, name="parts/")
    manifest = json.loads((parts / "manifest.json").read_text())
    assert [p["rows"] for p in manifest["parts"]] == [2, 2, 1]
    ids1, X1, meta1 = load_features(single)
    ids2, X2, meta2 = load_features(parts)
    assert ids2.tolist() == ids1.tolist()
    np.testing.assert_array_equal(X2, X1)
    assert meta2["left_out"] == meta1["left_out"] and meta2["kept"]["label"].tolist() == ["a", "a", "b", "b"]

    manifest["complete"] = False
    (parts / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match=r"incomplete .* --resume"):
        load_features(parts)


def test_load_features_refuses_what_is_not_ours(tmp_path):
    plain = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"id": [1], "x": [2.0]}), plain)
    with pytest.raises(InputError, match=r"not a longbert features file .*columns are \['id', 'x'\]"):
        load_features(plain)
    with pytest.raises(InputError, match="no such file or directory"):
        load_features(tmp_path / "missing.parquet")
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(InputError, match="no manifest.json"):
        load_features(tmp_path / "empty_dir")


# ---------------------------------------------------------------- LongBertVectorizer

TEXTS = [words(5), words(40, 2), words(100, 7), words(C), words(C + 1, 5), words(1)]
LABELS = ["x", "y", "y", "x", "y", "x"]


def test_vectorizer_in_pipeline_equals_extract(runner, tiny_model_dir, tmp_path):
    vec = LongBertVectorizer(model=str(tiny_model_dir), max_length=ML, overlap=4, head_tokens=4)
    pipe = make_pipeline(vec, LogisticRegression(max_iter=200))
    rows = [{"text": t} for t in TEXTS]
    for strategy in ("head_tail", "sliding", "chunk"):  # one instance: set_params must reload
        out = extract(runner, tiny_model_dir, tmp_path, rows, "--max-length", ML, "--overlap", 4,
                      "--head-tokens", 4, "--strategy", strategy, name=f"{strategy}.parquet")
        expected = np.array([r["features"] for r in pyarrow_rows(out)], dtype=np.float32)
        pipe.set_params(longbertvectorizer__strategy=strategy)
        pipe.fit(TEXTS, LABELS)
        got = pipe[0].transform(TEXTS)
        assert got.dtype == np.float32 and got.shape == (len(TEXTS), 32)
        np.testing.assert_allclose(got, expected, atol=1e-6)
        assert pipe.predict(TEXTS).shape == (len(TEXTS),)
    # the loaded model is held per process, not by the instance: no parameter, not in pickles
    assert set(vec.__dict__) == set(vec.get_params()) == set(LongBertVectorizer().get_params())
    assert set(clone(vec).__dict__) == set(vec.__dict__)
    blob = pickle.dumps(vec)
    assert len(blob) < 5_000  # the tiny model alone is > 100 kB
    np.testing.assert_allclose(pickle.loads(blob).transform(TEXTS), expected, atol=1e-6)


def test_vectorizer_refuses_texts_it_cannot_embed(tiny_model_dir):
    vec = LongBertVectorizer(model=str(tiny_model_dir), max_length=ML)
    with pytest.raises(ValueError, match=r"2 text\(s\) cannot be embedded, at positions 1 \(empty text\), "
                                         r"3 \(empty text\)") as info:
        vec.transform([words(3), "  ", words(4), ""])
    assert isinstance(info.value, InputError)
    with pytest.raises(ValueError, match="no tokens after normalisation"):
        vec.transform([words(3), "\u200b"])
    with pytest.raises(ValueError, match="single string"):
        vec.transform(words(3))
    with pytest.raises(ValueError, match="position 1 is NoneType"):
        vec.transform([words(3), None])


# ---------------------------------------------------------------- stats

LENGTHS = [0, 1, 13, C, C + 1, 29, 40, 100]


def expected_windows(strategy: str, n: int, overlap: int) -> int:
    """Window count by the README rule, computed here without pipeline.segment."""
    if n == 0:
        return 0
    if n <= C or strategy in ("head", "tail", "head_tail"):
        return 1
    if strategy == "chunk":
        return -(-n // C)
    step = C - overlap
    return 1 + -(-(n - C) // step)


def test_stats_window_counts_equal_extract(runner, tiny_model_dir, tmp_path):
    rows = [{"text": words(n, i)} for i, n in enumerate(LENGTHS)]
    src = write_csv(tmp_path / "in.csv", rows)
    opts = dict(inputs=(str(src),), model=str(tiny_model_dir), max_length=ML, head_tokens=4, overlap=4)
    result = corpus_stats(PipelineConfig.from_options(**opts), windows_per_second=10.0)
    for strategy in STRATEGIES:
        out = extract(runner, tiny_model_dir, tmp_path, rows, "--max-length", ML, "--head-tokens", 4,
                      "--overlap", 4, "--strategy", strategy, name=f"{strategy}.parquet")
        n_windows = [r["n_windows"] for r in pyarrow_rows(out)]
        s = result["strategies"][strategy]
        assert s["windows_total"] == sum(n_windows) == sum(expected_windows(strategy, n, 4) for n in LENGTHS)
        assert s["windows_mean"] == pytest.approx(sum(n_windows) / len(LENGTHS))
        assert s["seconds"] == pytest.approx(s["forward_tokens"] / ML / 10.0)
    # forward tokens by hand: every content token once (+2 per window) for chunk, at most C for head
    assert result["strategies"]["chunk"]["forward_tokens"] == sum(LENGTHS) + 2 * result["strategies"]["chunk"]["windows_total"]
    assert result["strategies"]["head"]["forward_tokens"] == sum(min(n, C) + 2 for n in LENGTHS if n)
    lengths = np.array(LENGTHS)
    assert result["documents"] == len(LENGTHS) and result["empty"] == 1
    assert result["tokens"] == {"total": int(lengths.sum()), "mean": pytest.approx(lengths.mean()),
                                "median": float(np.median(lengths)), "p90": pytest.approx(np.percentile(lengths, 90)),
                                "p99": pytest.approx(np.percentile(lengths, 99)), "max": 100}
    assert result["over_window"] == sum(n > C for n in LENGTHS) == 4
    text = format_stats(result)
    assert "documents    8 (1 with no tokens)" in text and "4 of 8 documents (50.0%) have more than 14 tokens" in text


def test_stats_cli_plot_measured_speed_and_unusable_strategy(runner, tiny_model_dir, tmp_path):
    src = write_csv(tmp_path / "in.csv", [{"text": words(n)} for n in (3, 20, 50)])
    plot = tmp_path / "plots" / "lengths.png"
    # default --overlap 128 cannot work with C = 14: sliding is reported n/a, the others still counted
    result = invoke(runner, ["stats", src, "--model", tiny_model_dir, "--max-length", ML, "--strategy", "chunk",
                             "--plot", plot])
    assert result.exit_code == 0, result.output
    assert "measured on cpu, 4 windows of 16" in result.output
    assert " sliding    n/a: --overlap=128 must be in [0, 14)" in result.output
    chunk_line = next(line for line in result.output.splitlines() if line.startswith("*chunk"))
    assert chunk_line.split()[2:5] == [f"{(1 + 2 + 4) / 3:.2f}", "7", f"{73 + 2 * 7}"]
    assert plot.read_bytes()[:8] == PNG


# ---------------------------------------------------------------- probe

def write_features(path, X, labels, null_rows=()):
    """A features parquet with extract's schema (synthetic vectors), for probe-only tests."""
    cfg = PipelineConfig.from_options(model="synthetic", keep_cols=("label",), max_length=ML, strategy="chunk")
    n, dim = X.shape
    schema = output_schema(cfg, pa.string(), dim, dim, dim)
    valid = np.array([i not in null_rows for i in range(n)])
    features = pa.FixedSizeListArray.from_arrays(pa.array(X.astype(np.float32).reshape(-1)), list_size=dim,
                                                 mask=pa.array(~valid))
    table = pa.Table.from_pydict({
        "id": [f"r{i}" for i in range(n)], "label": list(labels), "n_tokens": pa.array([5] * n, pa.int32()),
        "n_windows": pa.array([1] * n, pa.int32()), "truncated": [False] * n, "features": features,
        "error": [None if v else "empty text" for v in valid]}, schema=schema)
    pq.write_table(table, path)
    return path


def manual_cv(X, y, folds, seed):
    """Independent cross-validation loop: (accuracy per fold, macro-F1 per fold)."""
    acc, f1 = [], []
    for train, test in StratifiedKFold(folds, shuffle=True, random_state=seed).split(X, y):
        model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(X[train], y[train])
        pred = model.predict(X[test])
        acc.append(np.mean(pred == y[test]))
        f1.append(f1_score(y[test], pred, average="macro"))
    return np.array(acc), np.array(f1)


def test_probe_separable_near_perfect_and_shuffled_at_chance(tmp_path):
    rng = np.random.default_rng(0)
    y = np.array(["a", "b"] * 50)
    X = rng.normal(size=(100, 8))
    X[:, 0] += np.where(y == "b", 6.0, 0.0)          # class b shifted by 6 sd on one axis
    separable = write_features(tmp_path / "sep.parquet", X, y)
    noise = write_features(tmp_path / "noise.parquet", rng.normal(size=(200, 8)), rng.permutation(["a", "b"] * 100))
    sep, chance = probe_files([separable, noise], label_col="label", folds=5, seed=3)
    acc, f1 = manual_cv(X.astype(np.float32), y, 5, 3)
    np.testing.assert_allclose(sep["accuracy"], acc)
    np.testing.assert_allclose(sep["f1_macro"], f1)
    assert sep["accuracy_mean"] >= 0.97 and sep["accuracy_std"] == pytest.approx(acc.std())
    assert chance["majority"] == 0.5 and abs(chance["accuracy_mean"] - 0.5) < 0.12
    assert (sep["strategy"], sep["dimension"], sep["rows"], sep["classes"]) == ("chunk", 8, 100, 2)


def test_probe_leaves_out_null_rows_and_explains_errors(tmp_path, runner):
    rng = np.random.default_rng(1)
    y = np.array(["a", "b", "c"] * 10)
    path = write_features(tmp_path / "f.parquet", rng.normal(size=(30, 4)), y, null_rows=(0, 1, 2))
    (r,) = probe_files([path], label_col="label", folds=3)
    assert r["rows"] == 27 and r["left_out"] == 3
    assert f"{path}: 3 rows without features left out" in format_probe([r])
    with pytest.raises(InputError, match=r"no label column 'topic'; columns are \['id', 'label', .*--keep-col topic"):
        probe_files([path], label_col="topic")
    with pytest.raises(InputError, match=r"needs >= 10 rows per class; 'a': 9 rows, 'b': 9 rows, 'c': 9 rows; "
                                         r"lower --folds to 9"):
        probe_files([path], label_col="label", folds=10)
    # through the CLI: the table, the chart, and exit 2 with the message
    plot = tmp_path / "probe.png"
    result = invoke(runner, ["probe", path, "--label-col", "label", "--folds", 3, "--plot", plot])
    assert result.exit_code == 0, result.output
    header, line = result.output.splitlines()[:2]
    assert header.split() == ["file", "strategy", "pooling", "dim", "rows", "accuracy", "macro-F1"]
    assert line.split()[1:5] == ["chunk", "mean", "4", "27"]
    assert f"{r['accuracy_mean']:.3f} ± {r['accuracy_std']:.3f}" in line
    assert plot.read_bytes()[:8] == PNG
    result = invoke(runner, ["probe", path, "--label-col", "topic"])
    assert result.exit_code == 2 and "Error: " in result.output and "--keep-col topic" in result.output
