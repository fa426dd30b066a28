"""Feeding classifiers: load_features, LongBertVectorizer, `longbert stats` and `longbert probe` (tiny BERT)."""
from __future__ import annotations

import dataclasses
import json
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import extract_cli, invoke, reference_vectors, words, write_csv
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from pipeline.options.config import PipelineConfig
from pipeline.options.features_config import STRATEGIES
from pipeline.errors import InputError
from pipeline.classify.features import features_matrix, load_features
from pipeline.classify.probe_files import format_probe, probe_files
from pipeline.engine.stats import corpus_stats, format_stats
from pipeline.classify.vectorizer import LongBertVectorizer
from pipeline.types import ModelFacts
from pipeline.output.schema import output_schema
from pipeline.output.write import read_manifest

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
    """conftest.extract_cli on ``rows`` in in.csv without --overwrite (exit 0; a ``name`` ending in / asks for a
    directory of parts): the output path."""
    _, out = extract_cli(tmp_path, None, *extra, model=model_dir, name=name, rows=rows, src=tmp_path / "in.csv",
                         runner=runner, overwrite=False)
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
    assert ids16.tolist() == ids32.tolist() == ["d0", "d2", "d3", "d4"]   # the input column 'id', found
    np.testing.assert_array_equal(X16, X32.astype(np.float16).astype(np.float32))


def test_duckdb_needs_the_readme_cast_polars_reads_the_size(runner, tiny_model_dir, tmp_path):
    duckdb, pl = pytest.importorskip("duckdb"), pytest.importorskip("polars")
    out = extract(runner, tiny_model_dir, tmp_path, ROWS, "--id-col", "id", "--max-length", ML)
    expected = [r["features"] for r in pyarrow_rows(out)]
    # Parquet has no fixed-size list: duckdb sees FLOAT[]; the README's one-line cast gives FLOAT[D] back
    types = {row[0]: row[1] for row in duckdb.sql(f"DESCRIBE SELECT * FROM read_parquet('{out}')").fetchall()}
    assert types["features"] == "FLOAT[]"
    cast = duckdb.sql(f"SELECT id, features::FLOAT[32] AS features FROM read_parquet('{out}')")
    assert dict((c[0], str(c[1])) for c in cast.description)["features"] == "FLOAT[32]"
    got = [None if f is None else list(f) for _, f in cast.fetchall()]
    assert [g is None for g in got] == [e is None for e in expected]
    np.testing.assert_array_equal(np.array([g for g in got if g]), np.array([e for e in expected if e]))
    assert pl.read_parquet(out).schema["features"] == pl.Array(pl.Float32, 32)


def test_features_matrix_honours_slices():
    values = np.arange(12, dtype=np.float32)
    arr = pa.FixedSizeListArray.from_arrays(pa.array(values), list_size=3)      # 4 rows of 3
    np.testing.assert_array_equal(features_matrix(arr.slice(1, 2)), values.reshape(4, 3)[1:3])


def test_directory_of_parts_equals_single_file_and_incomplete_is_refused(runner, tiny_model_dir, tmp_path):
    common = ["--id-col", "id", "--keep-col", "label", "--max-length", ML, "--block-rows", 2]
    single = extract(runner, tiny_model_dir, tmp_path, ROWS, *common)
    parts = extract(runner, tiny_model_dir, tmp_path, ROWS, *common, name="parts/")
    manifest = read_manifest(parts)
    assert [p["rows"] for p in manifest["parts"]] == [2, 2, 1]
    ids1, X1, meta1 = load_features(single)
    ids2, X2, meta2 = load_features(parts)
    assert ids2.tolist() == ids1.tolist()
    np.testing.assert_array_equal(X2, X1)
    assert meta2["left_out"] == meta1["left_out"] and meta2["kept"]["label"].tolist() == ["a", "a", "b", "b"]

    manifest["complete"] = False               # as a killed run leaves it
    (parts / "_manifest.parquet").unlink()
    (parts / "_manifest.json").write_text(json.dumps(manifest))
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
    with pytest.raises(InputError, match="no _manifest.parquet or _manifest.json"):
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
    """Window count by the README rule, computed here without pipeline.text.segment."""
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
    assert plot.read_bytes()[:8] == PNG and f"plot -> {plot}" in result.output


def test_stats_plot_draws_lengths_windows_and_time(tiny_model_dir, tmp_path):
    from pipeline.engine.stats import plot_stats

    src = write_csv(tmp_path / "in.csv", [{"text": words(n, i)} for i, n in enumerate(LENGTHS)])
    cfg = PipelineConfig.from_options(inputs=(str(src),), model=str(tiny_model_dir), max_length=ML, head_tokens=4,
                                      overlap=4, strategy="sliding")
    result = corpus_stats(cfg, windows_per_second=2.0)
    fig = plot_stats(result, tmp_path / "stats.png")
    assert (tmp_path / "stats.png").read_bytes()[:8] == PNG
    lengths_ax, windows_ax, time_ax = fig.axes
    assert lengths_ax.get_xlim()[0] == pytest.approx(1)   # the shortest non-empty document, not 0 or 10^0 by default
    assert lengths_ax.get_title() == "Lengths: 8 documents, 50% over C, 1 empty not shown"
    assert [t.get_text() for t in windows_ax.get_yticklabels()] == ["head", "tail", "head_tail", "chunk", "sliding *",
                                                                    "late"]
    s = result["strategies"]
    assert [t.get_text() for t in windows_ax.texts] == [f"{s[n]['windows_total']:,}" for n in STRATEGIES]
    assert [p.get_width() for p in windows_ax.patches] == [s[n]["windows_total"] for n in STRATEGIES]
    assert [p.get_width() for p in time_ax.patches] == pytest.approx([s[n]["seconds"] for n in STRATEGIES])
    assert time_ax.texts[3].get_text() == f"{s['chunk']['seconds']:.1f} s"
    # longer documents: the axis starts at the shortest one
    src2 = write_csv(tmp_path / "long.csv", [{"text": words(n)} for n in (30, 60, 900)])
    result2 = corpus_stats(dataclasses.replace(cfg, read=dataclasses.replace(cfg.read, inputs=(str(src2),))), 2.0)
    fig2 = plot_stats(result2, tmp_path / "stats2.png")
    assert fig2.axes[0].get_xscale() == "log" and fig2.axes[0].get_xlim()[0] == pytest.approx(30)


def test_stats_asks_for_no_offsets_and_help_lists_its_options(runner, tiny_model_dir, tmp_path, monkeypatch):
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    calls = []
    real = PreTrainedTokenizerBase.__call__

    def recording(self, *args, **kwargs):
        calls.append(kwargs.get("return_offsets_mapping", False))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(PreTrainedTokenizerBase, "__call__", recording)
    src = write_csv(tmp_path / "in.csv", [{"text": words(n)} for n in (3, 20, 50)])
    result = invoke(runner, ["stats", src, "--model", tiny_model_dir, "--max-length", ML, "--overlap", 4,
                             "--max-tokens-per-doc", 20, "--windows-per-second", 1])
    assert result.exit_code == 0, result.output
    assert calls and not any(calls)                           # no call asks for offsets
    chunk_line = next(line for line in result.output.splitlines() if line.startswith(" chunk"))
    assert chunk_line.split()[2:4] == [f"{(1 + 2 + 2) / 3:.2f}", "5"]   # 3, 20 -> 14 + 6, 50 capped to 20
    assert "tokens       total 73;" in result.output          # whole documents, exactly
    result = invoke(runner, ["stats", src, "--model", tiny_model_dir, "--keep-col", "label", "--windows-per-second", 1])
    assert result.exit_code == 0, result.output   # extract's command line is accepted (tests/options/test_options.py)
    assert ("Warning: --keep-col label has no effect: stats counts tokens and windows and writes no vectors"
            in result.output.splitlines())


# ---------------------------------------------------------------- probe

def write_features(path, X, labels, null_rows=()):
    """A features parquet with extract's schema (synthetic vectors), for probe-only tests."""
    cfg = PipelineConfig.from_options(model="synthetic", keep_cols=("label",), max_length=ML, strategy="chunk")
    n, dim = X.shape
    facts = ModelFacts(name="synthetic", sha256=None, family="bert", hidden_size=dim, num_hidden_layers=1,
                       max_length=ML, cls_id=2, sep_id=3, unk_id=1, token_type_ids=True, has_pooler=None)
    schema = output_schema(cfg, pa.string(), facts, dim, dim)
    valid = np.array([i not in null_rows for i in range(n)])
    features = pa.FixedSizeListArray.from_arrays(pa.array(X.astype(np.float32).reshape(-1)), list_size=dim,
                                                 mask=pa.array(~valid))
    table = pa.Table.from_pydict({
        "id": [f"r{i}" for i in range(n)], "label": list(labels), "n_tokens": pa.array([5] * n, pa.int32()),
        "n_unknown": pa.array([0] * n, pa.int32()),
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
    with pytest.raises(InputError) as info:
        probe_files([path], label_col="topic")
    assert str(info.value) == (f"{path}: no column 'topic' to label with; the columns that can be labels are "
                               "['id', 'label'] (id and the --keep-col columns); extract again with --keep-col "
                               "topic, or pass --label-col with one of them")
    with pytest.raises(InputError) as info:
        probe_files([path], label_col="n_tokens")
    assert str(info.value) == (f"{path}: --label-col 'n_tokens' is a column longbert computes, not a label; pass "
                               "one of ['id', 'label'], or extract again with --keep-col LABEL")
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


def test_probe_label_col_id_and_one_row_classes(tmp_path, runner):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(12, 4))
    # --label-col id works: the ids are the labels (here r0..r11, one row each: no k-fold can split them)
    unique = write_features(tmp_path / "u.parquet", X, ["a", "b"] * 6)
    with pytest.raises(InputError) as info:
        probe_files([unique], label_col="id", folds=2)
    assert str(info.value) == (
        f"{unique}: stratified 2-fold needs >= 2 rows per class; 'r0': 1 row, 'r1': 1 row, 'r10': 1 row, "
        "'r11': 1 row, 'r2': 1 row and 7 more classes; a class of 1 row cannot be split by any --folds (2 is the "
        "least): add rows to the 1-row classes or leave them out, or label with another --label-col")
    # one row in a class: --folds 2 is refused without advising --folds 2
    single = write_features(tmp_path / "s.parquet", X, ["a"] * 6 + ["b"] * 5 + ["c"])
    result = invoke(runner, ["probe", single, "--label-col", "label", "--folds", 2])
    assert result.exit_code == 2
    assert result.output == (f"Error: {single}: stratified 2-fold needs >= 2 rows per class; 'c': 1 row; a class of "
                             "1 row cannot be split by any --folds (2 is the least): add rows to the 1-row classes "
                             "or leave them out, or label with another --label-col\n")
    # ids that repeat are labels like any other column
    ids_path = tmp_path / "ids.parquet"
    table = pq.read_table(write_features(tmp_path / "tmp.parquet", X, ["a"] * 12))
    table = table.set_column(0, "id", pa.array(["p", "q"] * 6))
    pq.write_table(table, ids_path)
    (r,) = probe_files([ids_path], label_col="id", folds=3, seed=1)
    acc, f1 = manual_cv(X.astype(np.float32), np.array(["p", "q"] * 6), 3, 1)
    np.testing.assert_allclose(r["accuracy"], acc)
    assert (r["classes"], r["majority"]) == (2, 0.5)


def test_probe_plot_has_title_and_values_on_bars(tmp_path):
    from pipeline.classify.probe_plot import plot_probe

    rng = np.random.default_rng(3)
    y = np.array(["a", "b"] * 10)
    paths = [write_features(tmp_path / f"{i}.parquet", rng.normal(size=(20, 4)), y) for i in range(2)]
    results = probe_files(paths, label_col="label", folds=2)
    fig = plot_probe(results, tmp_path / "p" / "probe.png")
    assert (tmp_path / "p" / "probe.png").read_bytes()[:8] == PNG
    (ax,) = fig.axes
    assert ax.get_title() == "Linear probe: 2-fold stratified CV, 2 classes, 20 rows"
    expected = [f"{r['accuracy_mean']:.3f}" for r in results] + [f"{r['f1_macro_mean']:.3f}" for r in results]
    assert [t.get_text() for t in ax.texts] == expected


@pytest.mark.parametrize("form", ["int8", "binary"])
def test_probe_reads_compact_outputs_as_load_features_decodes_them(tmp_path, runner, tiny_model_dir, form):
    rows = [{"text": words(5 + i, i), "label": "ab"[i % 2]} for i in range(12)]
    src = write_csv(tmp_path / "in.csv", rows)
    out = tmp_path / f"{form}.parquet"
    result = invoke(runner, ["extract", src, "-o", out, "--model", tiny_model_dir, "--no-progress",
                             "--max-length", ML, "--keep-col", "label", "--out-dtype", form])
    assert result.exit_code == 0, result.output
    (r,) = probe_files([out], label_col="label", folds=3, seed=0)
    assert r["dimension"] == 32 and r["rows"] == 12              # decoded: D values, not ceil(D / 8) bytes
    table = pq.read_table(out)
    stored = np.stack(table.column("features").to_numpy(zero_copy_only=False))
    X = (stored.astype(np.float32) * table.column("features_scale").to_numpy()[:, None] if form == "int8"
         else np.unpackbits(stored.astype(np.uint8), axis=1, count=32).astype(np.float32) * 2 - 1)
    acc, _ = manual_cv(X, np.array([row["label"] for row in rows], dtype=object), 3, 0)
    np.testing.assert_allclose(r["accuracy"], acc)
    if form == "int8":
        with pytest.raises(InputError, match="'features_scale' is a column longbert computes"):
            probe_files([out], label_col="features_scale")
