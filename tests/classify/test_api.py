"""The Python API: `import longbert`, longbert.encode and the vectorizer's per-process model cache (tiny BERT)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from conftest import extract_cli, words
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_score
from sklearn.pipeline import make_pipeline

import longbert
import pipeline.model.encode as encode_mod
import pipeline.classify.loaded as loaded_mod

ROOT = Path(__file__).resolve().parents[2]
ML = 16          # --max-length: C = 14 content tokens
TEXTS = [words(5), words(40, 2), words(100, 7), words(14), words(15, 5), words(1)]
LABELS = ["x", "y", "y", "x", "y", "x"]


@pytest.fixture
def loads(monkeypatch):
    """Counts model loads (pipeline.model.encode.load_model calls), starting from an empty per-process cache."""
    calls = []
    real = encode_mod.load_model

    def counting(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(encode_mod, "load_model", counting)
    loaded_mod._LOADED.clear()
    threads = torch.get_num_threads()
    yield calls
    loaded_mod._LOADED.clear()
    torch.set_num_threads(threads)  # a threads= option must not leak into later tests


def extract_rows(runner, model_dir, tmp_path, texts, *extra, name="out.parquet"):
    _, out = extract_cli(tmp_path, texts, "--max-length", ML, *extra, model=model_dir, name=name)
    return pq.read_table(out).to_pylist()


def test_public_names_are_the_stages_objects():
    import pipeline
    from pipeline.classify.features import load_features
    from pipeline.classify.vectorizer import LongBertVectorizer, encode

    assert longbert.stages is pipeline  # not shadowed here: one copy of every class
    assert longbert.load_features is load_features and longbert.LongBertVectorizer is LongBertVectorizer
    assert longbert.encode is encode and longbert.PipelineConfig is pipeline.PipelineConfig
    assert longbert.ConfigError is pipeline.ConfigError
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        longbert.nope


def test_encode_equals_extract_nan_rows_and_reasons(runner, tiny_model_dir, tmp_path, loads):
    texts = [TEXTS[0], "", TEXTS[1], None, "\u200b", TEXTS[2]]
    X, errors = longbert.encode(texts, model=str(tiny_model_dir), max_length=ML, strategy="chunk",
                                return_errors=True, show_progress_bar=False)
    # the model stays loaded between calls
    one = longbert.encode([TEXTS[1]], model=str(tiny_model_dir), max_length=ML, strategy="chunk")
    np.testing.assert_array_equal(one, X[[2]])
    assert len(loads) == 1
    rows = extract_rows(runner, tiny_model_dir, tmp_path, [TEXTS[0], "", TEXTS[1], "\u200b", TEXTS[2]],
                        "--strategy", "chunk")
    assert X.dtype == np.float32 and X.shape == (6, 32)
    assert errors == [None, "empty text", None, "not a string (NoneType)", "no tokens after normalisation", None]
    assert [r["error"] for r in rows] == [None, "empty text", None, "no tokens after normalisation", None]
    assert np.isnan(X[[1, 3, 4]]).all() and np.isfinite(X[[0, 2, 5]]).all()
    np.testing.assert_allclose(X[[0, 2, 5]], np.array([rows[i]["features"] for i in (0, 2, 4)]), atol=1e-6)


def test_encode_normalize_gives_unit_rows(tiny_model_dir, loads):
    opts = dict(model=str(tiny_model_dir), max_length=ML, pooling="cls", layers="-2,-1", layer_agg="concat")
    raw = longbert.encode(TEXTS, **opts)
    unit = longbert.encode(TEXTS, normalize=True, **opts)
    assert raw.shape == unit.shape == (len(TEXTS), 64)
    np.testing.assert_allclose(unit, raw / np.sqrt((raw.astype(np.float64) ** 2).sum(axis=1, keepdims=True)),
                               atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, atol=1e-6)
    vec = longbert.LongBertVectorizer(normalize=True, **{k: v for k, v in opts.items() if k != "layers"},
                                      layers=(-2, -1))
    np.testing.assert_array_equal(vec.transform(TEXTS), unit)
    assert len(loads) == 1


def test_vectorizer_clones_and_folds_reuse_one_loaded_model(tiny_model_dir, loads):
    vec = longbert.LongBertVectorizer(model=str(tiny_model_dir), max_length=ML, strategy="chunk")
    first = vec.transform(TEXTS)
    scores = cross_val_score(make_pipeline(vec, LogisticRegression(max_iter=200)), TEXTS * 2, LABELS * 2, cv=3)
    assert scores.shape == (3,)
    np.testing.assert_array_equal(clone(vec).transform(TEXTS), first)
    vec.set_params(strategy="head_tail", head_tokens=4)       # window options: same model
    assert vec.transform(TEXTS).shape == first.shape
    assert longbert.encode(TEXTS, model=str(tiny_model_dir), max_length=ML, strategy="chunk").shape == first.shape
    assert len(loads) == 1
    vec.set_params(dtype="bfloat16")                           # a model option: loaded again, once
    vec.transform(TEXTS)
    clone(vec).transform(TEXTS)
    assert len(loads) == 2 and loads[1].dtype == "bfloat16"
    assert set(loaded_mod._LOADED) == {"key", "tokenizer", "model", "pipeline"}  # one model held


def test_vectorizer_extract_options_equal_extract(runner, tiny_model_dir, tmp_path, loads):
    vec = longbert.LongBertVectorizer(model=str(tiny_model_dir), max_length=ML, strategy="chunk",
                                      max_tokens_per_doc=20, dtype="bfloat16", threads=1)
    assert (vec.config().segment.max_tokens_per_doc, vec.config().model.dtype, vec.config().model.threads) == \
        (20, "bfloat16", 1)
    got = vec.transform(TEXTS)
    assert torch.get_num_threads() == 1
    rows = extract_rows(runner, tiny_model_dir, tmp_path, TEXTS, "--strategy", "chunk", "--max-tokens-per-doc", 20,
                        "--dtype", "bfloat16", "--threads", 1)
    np.testing.assert_array_equal(got, np.array([r["features"] for r in rows], dtype=np.float32))
    assert [r["n_windows"] for r in rows] == [1, 2, 2, 1, 2, 1]   # 20 tokens kept: windows of 14 + 6


USER_PIPELINE = "USER = 'mine'\ndef load_features(*a):\n    raise RuntimeError('the user pipeline.py was called')\n"


def _run_python(code: str, cwd: Path) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_import_longbert_beside_a_users_pipeline_py(tiny_model_dir, tmp_path, loads):
    """A user's pipeline.py in the working directory (first on sys.path) shadows the name `pipeline`:
    longbert loads its stages from its own folder instead, and the user's module stays theirs."""
    (tmp_path / "pipeline.py").write_text(USER_PIPELINE)
    # 1) the user's module imported first, then longbert; encode works through the private stages
    code = (f"import pipeline, longbert, json\n"
            f"X, errors = longbert.encode({TEXTS[:3] + ['']!r}, model={str(tiny_model_dir)!r}, max_length={ML},"
            f" return_errors=True)\n"
            f"print(json.dumps([pipeline.USER, longbert.stages.__name__, X.tolist(), errors]))\n")
    user, name, X, errors = json.loads(_run_python(code, tmp_path))
    expected = longbert.encode(TEXTS[:3], model=str(tiny_model_dir), max_length=ML)
    assert (user, name, errors) == ("mine", "_longbert_pipeline", [None, None, None, "empty text"])
    np.testing.assert_allclose(np.array(X[:3], dtype=np.float32), expected, atol=1e-6)
    # 2) longbert first (the name `pipeline` not yet imported), then the user's own import
    code = ("import longbert, json\nimport pipeline\n"
            "print(json.dumps([pipeline.USER, longbert.stages.__name__, longbert.load_features.__module__, "
            "longbert.LongBertVectorizer.__module__]))\n")
    assert json.loads(_run_python(code, tmp_path)) == [
        "mine", "_longbert_pipeline", "_longbert_pipeline.classify.features", "_longbert_pipeline.classify.vectorizer"]


def test_encode_routes_its_options_as_pipeline_from_options(tiny_model_dir):
    """encode's options go through the one router Pipeline.from_options uses: a Path model, feature=,
    an integral float; an unknown name and a writing option are ConfigErrors naming them."""
    from pathlib import Path

    import longbert
    from pipeline.errors import ConfigError

    texts = [words(20), words(3)]
    got = longbert.encode(texts, model=Path(tiny_model_dir), feature="chunk:cls", max_length=16.0)
    table = longbert.Pipeline.from_options(model=str(tiny_model_dir), feature="chunk:cls", max_length=16)(
        longbert.Batch.from_texts(texts))
    np.testing.assert_allclose(got, np.array(table.column("features").to_pylist(), dtype=np.float32), atol=1e-6)
    with pytest.raises(ConfigError, match="unknown option 'stratgy'"):
        longbert.encode(texts, model=str(tiny_model_dir), stratgy="chunk")
    with pytest.raises(ConfigError, match="encode\\(\\) takes no output="):
        longbert.encode(texts, model=str(tiny_model_dir), output="x.parquet")
