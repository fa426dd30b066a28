"""The aggregate stage: longbert.aggregate on numpy; --aggregate lists, the parts concatenated in order, equal
to numpy on direct window vectors; names, metadata."""
from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from conftest import extract_cli, invoke, read_features, reference_vectors, words, write_csv

import longbert
from pipeline.options.config import PipelineConfig
from pipeline.errors import ConfigError

ML = 16   # C = 14 content tokens per window


def tiny_windows(tok, text: str, spans) -> list[list[int]]:
    """Independent window construction: tokenizer ids sliced by the window rules."""
    ids = tok(text, add_special_tokens=False)["input_ids"]
    return [[tok.cls_token_id] + [ids[p] for s, e in w for p in range(s, e)] + [tok.sep_token_id] for w in spans]


def run(runner, model_dir, tmp_path, texts, *extra, name="out.parquet"):
    """conftest.extract_cli on ``texts`` in in.csv with --max-length ML, without --overwrite (exit 0):
    (features, metadata, click's Result)."""
    result, out = extract_cli(tmp_path, texts, "--max-length", ML, *extra, model=model_dir, name=name,
                              src=tmp_path / "in.csv", runner=runner, overwrite=False)
    return read_features(out), json.loads(pq.read_schema(out).metadata[b"longbert"]), result


def reference_parts(vecs: np.ndarray, weights: np.ndarray, hows) -> np.ndarray:
    """numpy on the (n_windows, D) window vectors: each aggregate, concatenated in order."""
    one = {"first": vecs[0], "last": vecs[-1], "mean": vecs.mean(0), "max": vecs.max(0),
           "weighted": (vecs * weights[:, None]).sum(0) / weights.sum()}
    return np.concatenate([one[h] for h in hows])


@pytest.mark.parametrize("spec", ["first,last,mean,max", "max,first", "weighted,last", "last"])
def test_parts_equal_numpy_on_direct_window_vectors(runner, tiny_model_dir, tiny_bert, tmp_path, spec):
    model, tok = tiny_bert
    text = words(31)                                     # chunk: [0, 14), [14, 28), [28, 31)
    spans = [((0, 14),), ((14, 28),), ((28, 31),)]
    ref = reference_vectors(model, tok, tiny_windows(tok, text, spans), "mean")   # (3, 32)
    df, meta, _ = run(runner, tiny_model_dir, tmp_path, [text, words(5, 2)], "--strategy", "chunk",
                      "--pooling", "mean", "--aggregate", spec)
    hows = spec.split(",")
    np.testing.assert_allclose(df["features"][0], reference_parts(ref, np.array([14., 14., 3.]), hows), atol=1e-5)
    one = reference_vectors(model, tok, tiny_windows(tok, words(5, 2), [((0, 5),)]), "mean")
    np.testing.assert_allclose(df["features"][1], np.tile(one[0], len(hows)), atol=1e-5)  # one window: all equal
    assert meta["feature_dim"] == 32 * len(hows)
    assert meta["aggregate"] == (hows if len(hows) > 1 else spec)
    assert ("window_dim" in meta) == (len(hows) > 1) and meta.get("window_dim", 32) == 32
    assert meta["features"][0]["aggregate"] == meta["aggregate"]


def test_normalize_scales_the_whole_concatenated_vector(runner, tiny_model_dir, tiny_bert, tmp_path):
    model, tok = tiny_bert
    text = words(20)
    ref = reference_vectors(model, tok, tiny_windows(tok, text, [((0, 14),), ((14, 20),)]), "cls")
    df, _, _ = run(runner, tiny_model_dir, tmp_path, [text], "--strategy", "chunk", "--pooling", "cls",
                   "--aggregate", "first,max", "--normalize")
    whole = np.concatenate([ref[0], ref.max(0)])
    np.testing.assert_allclose(df["features"][0], whole / np.linalg.norm(whole), atol=1e-5)


def test_feature_columns_name_the_parts(runner, tiny_model_dir, tiny_bert, tmp_path):
    model, tok = tiny_bert
    text = words(20)
    df, meta, _ = run(runner, tiny_model_dir, tmp_path, [text], "--feature", "chunk:cls", "--feature",
                      "head:mean:-2", "--aggregate", "mean,max")
    assert [c for c in df.columns if c.startswith("f_")] == ["f_chunk_cls_agg-mean-max", "f_head_mean_L-2_agg-mean-max"]
    assert [(f["column"], f["aggregate"], f["feature_dim"], f["window_dim"]) for f in meta["features"]] == [
        ("f_chunk_cls_agg-mean-max", ["mean", "max"], 64, 32), ("f_head_mean_L-2_agg-mean-max", ["mean", "max"], 64, 32)]
    ref = reference_vectors(model, tok, tiny_windows(tok, text, [((0, 14),), ((14, 20),)]), "cls")
    np.testing.assert_allclose(df["f_chunk_cls_agg-mean-max"][0], np.concatenate([ref.mean(0), ref.max(0)]),
                               atol=1e-5)
    # one part adds nothing to the names
    df, _, _ = run(runner, tiny_model_dir, tmp_path, [text], "--feature", "chunk:cls", "--feature", "head:mean",
                   "--aggregate", "max", name="one.parquet")
    assert [c for c in df.columns if c.startswith("f_")] == ["f_chunk_cls", "f_head_mean"]


def test_one_value_keeps_the_metadata_as_before(runner, tiny_model_dir, tmp_path):
    _, meta, _ = run(runner, tiny_model_dir, tmp_path, [words(20)], "--strategy", "chunk", "--aggregate", "max")
    assert meta["aggregate"] == "max" and meta["feature_dim"] == 32 and "window_dim" not in meta
    _, default, _ = run(runner, tiny_model_dir, tmp_path, [words(20)], "--strategy", "chunk", name="d.parquet")
    assert default["aggregate"] == "mean" and set(default) == set(meta)


@pytest.mark.parametrize("value, canonical", [("first,last,mean,max", "first,last,mean,max"),
                                              (" mean , max", "mean,max"), (["first", "max"], "first,max"),
                                              ("weighted", "weighted")])
def test_config_takes_a_list_or_the_comma_string(value, canonical, tmp_path):
    cfg = PipelineConfig.from_options(aggregate=value)
    assert cfg.pool.aggregate == canonical and cfg.pool.aggregates == tuple(canonical.split(","))
    (tmp_path / "c.yaml").write_text("aggregate: [first, last, mean, max]\n")
    assert PipelineConfig.from_options(config_file=tmp_path / "c.yaml").pool.aggregates == ("first", "last", "mean",
                                                                                             "max")


@pytest.mark.parametrize("value, message", [
    ("mean,mean", "--aggregate='mean,mean' repeats mean; name each part once, e.g. first,last,mean,max"),
    ("first,max,first,max", "--aggregate='first,max,first,max' repeats first, max; name each part once, "
                            "e.g. first,last,mean,max"),
    ("median", "--aggregate='median'; choose one of first, last, mean, max, weighted"),
    ("mean,", "--aggregate=''; choose one of first, last, mean, max, weighted"),
    ("", "--aggregate='' is empty; give one or more of first, last, mean, max, weighted, e.g. mean or "
         "first,last,mean,max")])
def test_bad_lists_are_refused_naming_the_flag(value, message, runner, tmp_path):
    with pytest.raises(ConfigError) as err:
        PipelineConfig.from_options(aggregate=value)
    assert str(err.value) == message
    src = write_csv(tmp_path / "in.csv", [{"text": "a"}])
    result = invoke(runner, ["extract", src, "--aggregate", value, "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 2 and f"Error: {message}" in result.output


def test_aggregate_on_numpy():
    """longbert.aggregate: per document, the windows' mean / max / weighted / lists, computed by hand."""
    v = np.array([[0, 2], [2, 4], [10, 10]], dtype=np.float32)
    doc = [0, 0, 1]
    np.testing.assert_allclose(longbert.aggregate(v, doc), [[1, 3], [10, 10]])
    np.testing.assert_allclose(longbert.aggregate(v, doc, weights=[1, 3, 5], how="weighted"), [[1.5, 3.5], [10, 10]])
    np.testing.assert_allclose(longbert.aggregate(torch.tensor(v), doc, how=["first", "max"]),
                               [[0, 2, 2, 4], [10, 10, 10, 10]])
    with pytest.raises(ConfigError, match="how='median'"):
        longbert.aggregate(v, doc, how="median")
    with pytest.raises(ConfigError, match="ascending"):
        longbert.aggregate(v, [1, 0, 0])
