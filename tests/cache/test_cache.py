"""The window store in runs (issue 18): extract --cache DIR, probe, the vectorizer and encode (tiny BERT).

Counts come from the summary line and from a counter on the forward pass; expected counts from
longbert's own tokenizer and segmenter; values against a run without the store.
"""
from __future__ import annotations

import dataclasses
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import extract_cli, invoke, words, write_csv
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_score
from sklearn.pipeline import make_pipeline

import longbert
import pipeline.model.encode as encode_mod
import pipeline.classify.loaded as loaded_mod
from pipeline.options.config import PipelineConfig
from pipeline.errors import ConfigError
from pipeline.model.facts import model_facts
from pipeline.text.segment import segment
from pipeline.cache.store import DB_NAME
from pipeline.text.tokenize import tokenize_block
from pipeline.model.window_cache import WindowCache
from pipeline.model.encode import EncodeSpec

ROOT = Path(__file__).resolve().parents[2]
ML = 16                        # --max-length: C = 14 content tokens
SEG = ("--max-length", ML)
# 0 to 5 chunk windows each; the last two share their first window with the first two
TEXTS = [words(5), words(40, 2), words(100, 7), words(14), words(15, 5), words(1), words(29, 3),
         words(14) + " " + words(20, 9), words(5) + " w39", words(60, 11)]


def summary(output: str) -> str:
    return [x for x in output.splitlines() if "documents," in x][-1]


def counts(output: str) -> tuple[int, int]:
    """(windows encoded, windows from the cache) of the summary line."""
    line = summary(output)
    encoded = int(line.split(" windows encoded")[0].split()[-1])
    cached = int(line.split(" from the cache")[0].split()[-1])
    return encoded, cached


def extract(runner, model_dir, tmp_path, texts, name, *extra):
    """conftest.extract_cli with SEG from NAME.csv (``texts`` with ids, written unless NAME.csv exists) to
    NAME.parquet (exit 0): (its rows, the output)."""
    src = tmp_path / f"{name}.csv"
    result, out = extract_cli(tmp_path, None if src.exists() else texts, *SEG, *extra, model=model_dir,
                              name=f"{name}.parquet", ids=True, src=src, runner=runner)
    return pd.read_parquet(out), result.output


def plain(value):
    """Nested numpy arrays (list columns read by pandas) -> nested lists; other values as they are."""
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value]
    return value


def assert_same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Every column equal; vector columns within 1e-6 (float32), nulls in the same rows."""
    assert list(a.columns) == list(b.columns)
    for col in a.columns:
        x, y = a[col].tolist(), b[col].tolist()
        if col.startswith(("features", "f_", "token_features")):
            assert [v is None for v in x] == [v is None for v in y], col
            for u, v in zip(x, y):
                if u is not None:
                    np.testing.assert_allclose(np.array(plain(u), dtype=np.float64),
                                               np.array(plain(v), dtype=np.float64), atol=1e-6, rtol=0)
        else:
            assert [plain(u) for u in x] == [plain(v) for v in y], col


def unique_windows(model_dir, texts, strategy="chunk", **options) -> set[tuple[int, ...]]:
    """The distinct window token ids of ``texts``, from longbert's tokenizer and segmenter."""
    cfg = PipelineConfig.from_options(model=str(model_dir), strategy=strategy, max_length=ML, **options)
    facts, tok = model_facts(cfg.model)
    docs = tokenize_block(texts, tok, None)
    return {tuple(w.input_ids.tolist()) for d in docs if d.error is None
            for w in segment(d, cfg.segment, facts.cls_id, facts.sep_id)}


@pytest.fixture
def forward(monkeypatch):
    """Counts windows through the model (Encoder._forward calls), for every engine in this process."""
    seen: list[int] = []
    real = encode_mod.Encoder._forward

    def counting(self, model, windows, batch, *args):
        seen.append(len(batch))
        return real(self, model, windows, batch, *args)

    monkeypatch.setattr(encode_mod.Encoder, "_forward", counting)
    return seen


# ---------------------------------------------------------------- extract


@pytest.mark.parametrize("extra", [("--strategy", "chunk"), ("--strategy", "sliding", "--overlap", 4, "--level", "window"),
                                   ("--overlap", 4, "--feature", "head:cls", "--feature", "chunk:mean:-2",
                                    "--feature", "sliding:max")])
def test_second_run_encodes_nothing_and_equals_a_fresh_run(runner, tiny_model_dir, tmp_path, extra):
    store = tmp_path / "store"
    fresh, out0 = extract(runner, tiny_model_dir, tmp_path, TEXTS, "fresh", *extra)
    first, out1 = extract(runner, tiny_model_dir, tmp_path, TEXTS, "first", "--cache", store, *extra)
    second, out2 = extract(runner, tiny_model_dir, tmp_path, TEXTS, "second", "--cache", store, *extra)
    n = int(summary(out0).split(" windows encoded")[0].split()[-1])
    assert "from the cache" not in summary(out0)                  # without --cache: today's line
    assert counts(out1) == (n, 0) and counts(out2) == (0, n)
    assert_same(first, fresh)
    assert_same(second, fresh)


def test_other_aggregate_or_normalize_encode_nothing(runner, tiny_model_dir, tmp_path):
    store = tmp_path / "store"
    extract(runner, tiny_model_dir, tmp_path, TEXTS, "first", "--strategy", "chunk", "--cache", store)
    n = len(unique_windows(tiny_model_dir, TEXTS))
    for extra in (("--aggregate", "max"), ("--aggregate", "weighted"), ("--normalize",)):
        cached, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "again", "--strategy", "chunk",
                              "--cache", store, *extra)
        fresh, _ = extract(runner, tiny_model_dir, tmp_path, TEXTS, "fresh", "--strategy", "chunk", *extra)
        assert counts(out) == (0, n), extra
        assert_same(cached, fresh)


def test_grown_corpus_encodes_exactly_the_new_windows(runner, tiny_model_dir, tmp_path):
    old = [words(10 + 7 * i, i) for i in range(30)]
    # 3 new documents (10%): one all new, one made of an old document's two first windows, one half old
    new = [words(33, 17), words(28, 3), old[5] + " " + words(20, 21)]
    store = tmp_path / "store"
    extract(runner, tiny_model_dir, tmp_path, old, "old", "--strategy", "chunk", "--cache", store)
    grown, out = extract(runner, tiny_model_dir, tmp_path, old + new, "grown", "--strategy", "chunk", "--cache", store)
    have = unique_windows(tiny_model_dir, old)
    want = unique_windows(tiny_model_dir, new) - have
    assert 0 < len(want) < len(unique_windows(tiny_model_dir, new))   # the test covers shared windows
    assert counts(out) == (len(want), len(unique_windows(tiny_model_dir, old + new)) - len(want))
    fresh, _ = extract(runner, tiny_model_dir, tmp_path, old + new, "fresh", "--strategy", "chunk")
    assert_same(grown, fresh)


def test_damaged_entry_is_encoded_again(runner, tiny_model_dir, tmp_path):
    store = tmp_path / "store"
    fresh, _ = extract(runner, tiny_model_dir, tmp_path, TEXTS, "first", "--strategy", "chunk", "--cache", store)
    with sqlite3.connect(store / DB_NAME) as conn:
        key, blob = conn.execute("SELECT key, vector FROM windows ORDER BY key LIMIT 1").fetchone()
        conn.execute("UPDATE windows SET vector = ? WHERE key = ?", (bytes(len(blob)), key))   # zeros: CRC fails
        conn.execute("UPDATE windows SET vector = ? WHERE key = (SELECT key FROM windows ORDER BY key LIMIT 1 "
                     "OFFSET 1)", (blob[:-4],))                                                 # one value short
    again, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "again", "--strategy", "chunk", "--cache", store)
    n = len(unique_windows(tiny_model_dir, TEXTS))
    assert counts(out) == (2, n - 2)
    assert_same(again, fresh)
    third, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "third", "--strategy", "chunk", "--cache", store)
    assert counts(out) == (0, n)                                  # the re-encoded entries replaced the damaged
    shown = invoke(runner, ["cache", store])
    assert shown.exit_code == 0
    assert "2 entries failed verification and were encoded again" in shown.output


def test_two_runs_share_one_store_at_once(tiny_model_dir, tmp_path):
    texts = [words(20 + 3 * i, i) for i in range(40)]
    src = write_csv(tmp_path / "c.csv", [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)])
    store = tmp_path / "store"
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "extract", str(src), "-o",
                               str(tmp_path / f"run{i}.parquet"), "--model", str(tiny_model_dir), "--no-progress",
                               "--max-length", str(ML), "--strategy", "chunk", "--block-rows", "4",
                               "--cache", str(store)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for i in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    runner_fresh = __import__("click.testing", fromlist=["CliRunner"]).CliRunner()
    fresh, _ = extract(runner_fresh, tiny_model_dir, tmp_path, texts, "c", "--strategy", "chunk")
    for i in range(2):
        assert_same(pd.read_parquet(tmp_path / f"run{i}.parquet"), fresh)
    n = len(unique_windows(tiny_model_dir, texts))
    assert sum(counts(o)[0] for o, _ in outs) >= n                 # each window encoded by one run at least
    _, out = extract(runner_fresh, tiny_model_dir, tmp_path, texts, "c", "--strategy", "chunk", "--cache", store)
    assert counts(out) == (0, n)


def test_a_run_served_wholly_from_the_store_leaves_its_file_byte_identical(runner, tiny_model_dir, tmp_path):
    """Its hit counts stay with the run (its summary line), so a backup of the store stays the same file."""
    from read_only import sha256

    store = tmp_path / "store"
    first, _ = extract(runner, tiny_model_dir, tmp_path, TEXTS, "a", "--strategy", "chunk", "--cache", store)
    before = sha256(store / DB_NAME)
    n = len(unique_windows(tiny_model_dir, TEXTS))
    for name in ("b", "c"):
        again, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, name, "--strategy", "chunk", "--cache", store)
        assert counts(out) == (0, n)
        assert_same(again, first)
        assert sha256(store / DB_NAME) == before and sorted(p.name for p in store.iterdir()) == [DB_NAME]


def test_a_store_on_a_read_only_mount_serves_a_run(runner, tiny_model_dir, tmp_path):
    """Every window from a read-only store: the same output, the file untouched; a window it lacks is
    encoded and not stored (the run still succeeds)."""
    from read_only import run_read_only, sha256

    store = tmp_path / "store"
    fresh, _ = extract(runner, tiny_model_dir, tmp_path, TEXTS + [words(33, 17)], "fresh", "--strategy", "chunk")
    extract(runner, tiny_model_dir, tmp_path, TEXTS, "a", "--strategy", "chunk", "--cache", store)
    before = sha256(store / DB_NAME)
    src = write_csv(tmp_path / "more.csv", [{"id": f"d{i}", "text": t} for i, t in enumerate(TEXTS + [words(33, 17)])])
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    done = run_read_only(store, [sys.executable, str(ROOT / "cli.py"), "extract", str(src), "-o",
                                 str(tmp_path / "ro.parquet"), "--model", str(tiny_model_dir), "--no-progress",
                                 "--max-length", str(ML), "--strategy", "chunk", "--cache", str(store)], env=env)
    assert done.returncode == 0, done.stderr
    n = len(unique_windows(tiny_model_dir, TEXTS))
    new = len(unique_windows(tiny_model_dir, TEXTS + [words(33, 17)])) - n
    assert counts(done.stdout + done.stderr) == (new, n)
    assert_same(pd.read_parquet(tmp_path / "ro.parquet"), fresh)
    assert sha256(store / DB_NAME) == before and sorted(p.name for p in store.iterdir()) == [DB_NAME]


def test_token_level_encodes_and_fills_the_store(runner, tiny_model_dir, tmp_path, forward):
    store = tmp_path / "store"
    n = len(unique_windows(tiny_model_dir, TEXTS))
    fresh, _ = extract(runner, tiny_model_dir, tmp_path, TEXTS, "fresh", "--strategy", "chunk", "--level", "token")
    tokens, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "tok", "--strategy", "chunk", "--level", "token",
                          "--cache", store)
    assert counts(out) == (n, 0)                                  # token states are not stored: all encoded
    assert_same(tokens, fresh)
    _, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "tok", "--strategy", "chunk", "--level", "token",
                     "--cache", store)
    assert counts(out) == (n, 0)
    forward.clear()
    doc, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "doc", "--strategy", "chunk", "--cache", store)
    assert counts(out) == (0, n) and forward == []
    assert_same(doc, fresh[[c for c in fresh.columns if c not in ("token_ids", "positions", "offsets",
                                                                  "token_features")]])


def test_cache_is_not_in_the_resume_fingerprint(runner, tiny_model_dir, tmp_path):
    a = PipelineConfig.from_options(inputs=("x.csv",))
    b = PipelineConfig.from_options(inputs=("x.csv",), cache=str(tmp_path))
    assert a.fingerprint() == b.fingerprint() and b.to_dict()["write"]["cache"] == str(tmp_path)
    src = write_csv(tmp_path / "r.csv", [{"text": t} for t in TEXTS])
    out = tmp_path / "parts/"
    args = ["extract", src, "-o", f"{out}/", "--model", tiny_model_dir, "--no-progress", *SEG, "--block-rows", 4]
    assert invoke(runner, args).exit_code == 0
    result = invoke(runner, [*args, "--resume", "--cache", tmp_path / "store"])
    assert result.exit_code == 0, result.output
    assert "already complete" in result.output


def test_env_variable_is_the_default_and_config_file_wins(runner, tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("LONGBERT_CACHE", str(tmp_path / "env"))
    _, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "a", "--strategy", "chunk")
    assert (tmp_path / "env" / DB_NAME).is_file() and counts(out)[1] == 0
    (tmp_path / "c.yaml").write_text(f"cache: {tmp_path / 'file'}\n")
    _, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "a", "--strategy", "chunk", "--config",
                     tmp_path / "c.yaml")
    assert (tmp_path / "file" / DB_NAME).is_file() and counts(out)[1] == 0
    _, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "a", "--strategy", "chunk")
    assert counts(out) == (0, len(unique_windows(tiny_model_dir, TEXTS)))


def test_cache_errors_exit_2(runner, tiny_model_dir, tmp_path):
    src = write_csv(tmp_path / "e.csv", [{"text": t} for t in TEXTS])
    (tmp_path / "afile").write_text("x")
    result = invoke(runner, ["extract", src, "-o", tmp_path / "e.parquet", "--model", tiny_model_dir,
                             "--cache", tmp_path / "afile"])
    assert result.exit_code == 2 and "Invalid value for '--cache'" in result.output and "is a file" in result.output
    assert not (tmp_path / "e.parquet").exists()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / DB_NAME).write_text("not sqlite " * 100)
    result = invoke(runner, ["extract", src, "-o", tmp_path / "e.parquet", "--model", tiny_model_dir,
                             "--cache", tmp_path / "bad"])
    assert result.exit_code == 2 and "longbert cache" in result.output and "--clear" in result.output


def test_no_sha256_refuses_cache(tiny_model_dir, tmp_path):
    cfg = PipelineConfig.from_options(model=str(tiny_model_dir), max_length=ML, cache=str(tmp_path))
    facts, _ = model_facts(cfg.model)
    spec = EncodeSpec.from_config(cfg)
    with pytest.raises(ConfigError) as err:
        WindowCache.open(spec, dataclasses.replace(facts, sha256=None), cfg.write.cache)
    assert "--cache needs the model's sha256" in str(err.value) and "--model DIR" in str(err.value)
    assert WindowCache.open(spec, facts, None) is None and WindowCache.open(spec, facts, "") is None


def test_open_by_folder_opens_the_sqlite_store(tiny_model_dir, tmp_path):
    """WindowCache.open with a folder's path (str or Path) opens the SQLite store there: a window put is found."""
    cfg = PipelineConfig.from_options(model=str(tiny_model_dir), max_length=ML)
    facts, tok = model_facts(cfg.model)
    spec = EncodeSpec.from_config(cfg)
    windows = [w for d in tokenize_block([words(20)], tok, None) for w in segment(d, cfg.segment, facts.cls_id,
                                                                                  facts.sep_id)]
    vectors = np.arange(len(windows) * facts.hidden_size, dtype=np.float32).reshape(len(windows), -1)
    for folder in (str(tmp_path / "s"), tmp_path / "p"):
        cache = WindowCache.open(spec, facts, folder)
        assert cache.lookup(windows)[1] == list(range(len(windows)))      # empty: every window missing
        cache.put(windows, vectors)
        found, missing = cache.lookup(windows)
        cache.store.close()
        assert missing == [] and np.array_equal(found, vectors) and (Path(folder) / DB_NAME).is_file()


def test_layers_named_two_ways_share_one_entry(runner, tiny_model_dir, tmp_path):
    store = tmp_path / "store"
    extract(runner, tiny_model_dir, tmp_path, TEXTS, "a", "--strategy", "chunk", "--layers=-2", "--cache", store)
    _, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "b", "--strategy", "chunk", "--layers", "1",
                     "--cache", store)
    assert counts(out) == (0, len(unique_windows(tiny_model_dir, TEXTS)))   # 2 layers: -2 is layer 1


# ---------------------------------------------------------------- longbert cache


def test_cache_command_prints_and_clears(runner, tiny_model_dir, tmp_path):
    store = tmp_path / "store"
    result = invoke(runner, ["cache", store])
    assert result.exit_code == 2 and f"no window store there (no {DB_NAME})" in result.output
    extract(runner, tiny_model_dir, tmp_path, TEXTS, "a", "--strategy", "chunk", "--cache", store)
    extract(runner, tiny_model_dir, tmp_path, TEXTS, "b", "--strategy", "chunk", "--cache", store)
    n = len(unique_windows(tiny_model_dir, TEXTS))
    shown = invoke(runner, ["cache", store]).output
    assert f"{n:,} windows" in shown.splitlines()[0]
    assert ("hit rate: not kept in the store (its reads write nothing); each run's summary line says how many "
            "windows came from it (\"N windows encoded, M from the cache\")") in shown   # the runs kept them
    assert shown.splitlines()[-1].split()[:2] == [str(n), "32"] and "float32 mean layers -1" in shown
    cleared = invoke(runner, ["cache", store, "--clear"])
    assert cleared.exit_code == 0 and " 0 windows" in cleared.output.splitlines()[0]
    _, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "c", "--strategy", "chunk", "--cache", store)
    assert counts(out) == (n, 0)


def test_cache_command_without_folder(runner, monkeypatch, tmp_path):
    monkeypatch.delenv("LONGBERT_CACHE", raising=False)
    result = invoke(runner, ["cache"])
    assert result.exit_code == 2 and "no store folder; pass FOLDER or set LONGBERT_CACHE" in result.output


# ---------------------------------------------------------------- vectorizer and encode


@pytest.fixture
def fresh_memory(monkeypatch):
    monkeypatch.setattr(loaded_mod, "_MEMORY_STORE", [])
    loaded_mod._LOADED.clear()
    yield
    loaded_mod._LOADED.clear()


def test_cross_val_score_encodes_each_document_once(tiny_model_dir, forward, fresh_memory):
    texts = [words(8 + 9 * i, i) for i in range(20)]
    labels = [i % 2 for i in range(20)]
    vec = longbert.LongBertVectorizer(model=str(tiny_model_dir), max_length=ML, strategy="chunk")
    scores = cross_val_score(make_pipeline(vec, LogisticRegression(max_iter=200)), texts, labels, cv=5)
    assert scores.shape == (5,)
    assert sum(forward) == len(unique_windows(tiny_model_dir, texts))   # 5 folds x (train + test): once each
    batches = len(forward)
    plain = longbert.LongBertVectorizer(model=str(tiny_model_dir), max_length=ML, strategy="chunk", cache=None)
    np.testing.assert_allclose(vec.transform(texts), plain.transform(texts), atol=1e-6, rtol=0)
    assert sum(forward[batches:]) == len(unique_windows(tiny_model_dir, texts))   # cache=None: all encoded


def test_encode_cache_folder(tiny_model_dir, tmp_path, forward, fresh_memory):
    first = longbert.encode(TEXTS, model=str(tiny_model_dir), max_length=ML, strategy="chunk",
                            cache=str(tmp_path / "store"))
    n = sum(forward)
    assert n == len(unique_windows(tiny_model_dir, TEXTS))
    loaded_mod._LOADED.clear()                  # a new process would load again: the folder stays
    again = longbert.encode(TEXTS, model=str(tiny_model_dir), max_length=ML, strategy="chunk",
                            cache=str(tmp_path / "store"), aggregate="max")
    assert sum(forward) == n
    plain = longbert.encode(TEXTS, model=str(tiny_model_dir), max_length=ML, strategy="chunk", aggregate="max")
    np.testing.assert_allclose(again, plain, atol=1e-6, rtol=0)
    assert first.shape == again.shape
    vec = longbert.LongBertVectorizer(model=str(tiny_model_dir), max_length=ML, strategy="chunk",
                                      cache=str(tmp_path / "store"))
    vec.transform(TEXTS)
    assert sum(forward) == 2 * n                    # the plain encode above encoded again; the folder: nothing


def test_probe_fills_the_store_extract_reuses(runner, tiny_model_dir, tmp_path):
    texts = [words(10 + 5 * i, i) for i in range(24)]
    src = write_csv(tmp_path / "p.csv", [{"text": t, "label": i % 2} for i, t in enumerate(texts)])
    store = tmp_path / "store"
    result = invoke(runner, ["probe", src, "--label-col", "label", "--model", tiny_model_dir, *SEG, "--overlap", 4,
                             "--folds", 2, "--sample", 24, "--cache", store])
    assert result.exit_code == 0, result.output
    assert f"--cache {store}" in result.output                    # the suggested extract command keeps it
    for strategy in ("chunk", "head_tail", "sliding"):
        _, out = extract(runner, tiny_model_dir, tmp_path, texts, f"x_{strategy}", "--strategy", strategy,
                         "--overlap", 4, "--pooling", "max", "--layers=-2", "--cache", store)
        assert counts(out) == (0, len(unique_windows(tiny_model_dir, texts, strategy, overlap=4))), strategy

