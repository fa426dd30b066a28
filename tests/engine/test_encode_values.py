"""The encode stage built from its own values (model options, features, batch limits, a store): window
vectors equal a direct AutoModel forward pooled by hand, its parameters hold no reading or writing
option, and it rebuilds, clones, pickles and deep-copies to an equal stage."""
from __future__ import annotations

import copy
import dataclasses
import pickle

import numpy as np
import pytest
import sklearn.base as sklearn_base
import torch
from conftest import STAGE_ML, words
from transformers import AutoModel, AutoTokenizer

import longbert
from pipeline.options.sections import ReadConfig, WriteConfig
from pipeline.stage import stage_label

FEATURES = (longbert.Feature("chunk", "mean"), longbert.Feature("chunk", "cls"))
TEXTS = [words(3), words(30, 1), words(14, 2), words(40, 3), words(3)]   # the last repeats the first


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def encode(tiny_model_dir):
    """Built from values alone; batches of 2 windows, so windows of several lengths share padded batches."""
    return longbert.Encode(longbert.ModelConfig(model=str(tiny_model_dir), device="cpu"), FEATURES,
                           encode=longbert.EncodeConfig(batch_size=2))


def _planned(tok) -> longbert.Batch:
    seg = longbert.Segment({"chunk": longbert.SegmentConfig(strategy="chunk", max_length=STAGE_ML)},
                           tok.cls_token_id, tok.sep_token_id)
    return longbert.Dedup()(seg(longbert.Tokenize(tok)(longbert.Batch.from_texts(TEXTS))))


def _reference(model_dir, windows) -> np.ndarray:
    """(n, 2h) float32: each window alone through AutoModel (no padding), mean of every position, then [CLS]."""
    model = AutoModel.from_pretrained(model_dir).eval()
    out = []
    with torch.no_grad():
        for w in windows:
            ids = torch.tensor([w.input_ids.tolist()])
            h = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state[0]   # (seq, h)
            out.append(np.concatenate([h.mean(0).numpy(), h[0].numpy()]))
    return np.stack(out).astype(np.float32)


def test_window_vectors_equal_a_direct_forward_pooled_by_hand(encode, tok, tiny_model_dir):
    batch = _planned(tok)
    unique = batch.plan.unique
    lengths = {len(w.input_ids) for w in unique}
    assert len(unique) < sum(len(v) for v in batch.windows.values()) and len(lengths) > 2   # shared, and padded
    got = encode(batch).encoded.vectors
    hidden = encode.facts.hidden_size
    assert got.shape == (len(unique), 2 * hidden) and got.dtype == np.float32
    np.testing.assert_allclose(got, _reference(tiny_model_dir, unique), atol=1e-5)


def test_params_hold_no_reading_or_writing_option(encode):
    params = encode.get_params()
    io_names = {f.name for f in dataclasses.fields(ReadConfig)} | {f.name for f in dataclasses.fields(WriteConfig)}
    assert not io_names & set(params), io_names & set(params)
    assert {"inputs", "output", "text_col", "block_rows", "cache", "keep_cols", "out_dtype"}.isdisjoint(params)
    held = {type(v).__name__ for v in params.values()}
    assert held.isdisjoint({"PipelineConfig", "ReadConfig", "WriteConfig"})
    assert params["features"] == FEATURES and params["encode"].batch_size == 2


def test_rebuild_clone_pickle_and_deepcopy_give_an_equal_stage_and_the_same_vectors(encode, tok):
    want = encode(_planned(tok)).encoded.vectors
    rebuilt = type(encode)(**encode.get_params())
    cloned = sklearn_base.clone(encode)
    shipped = pickle.loads(pickle.dumps(encode))
    copied = copy.deepcopy(encode)
    for other in (rebuilt, cloned, shipped, copied):
        assert other == encode and other.get_params().keys() == encode.get_params().keys()
        np.testing.assert_array_equal(other(_planned(tok)).encoded.vectors, want)
    assert copied.weights is encode.weights and cloned.weights is encode.weights   # shared, not loaded again
    assert shipped.weights is not encode.weights


def test_the_built_in_pipelines_encode_is_the_one_built_from_values(tiny_model_dir):
    pipe = longbert.Pipeline.from_options(model=str(tiny_model_dir), strategy="chunk", pooling="mean",
                                          max_length=STAGE_ML, device="cpu")
    mine = longbert.Encode(longbert.ModelConfig(model=str(tiny_model_dir), device="cpu"),
                           [longbert.Feature("chunk", "mean")])
    assert mine == pipe["encode"]
    assert stage_label("encode", mine, pipe["encode"]) == "encode"   # the --resume label: the plain name
    other = type(mine)(**{**mine.get_params(), "features": FEATURES})
    assert stage_label("encode", other, pipe["encode"]).startswith("encode=Encode#")


def test_a_store_folder_serves_the_second_stage_its_vectors(tiny_model_dir, tok, tmp_path):
    calls = []
    values = dict(model=longbert.ModelConfig(model=str(tiny_model_dir), device="cpu"), features=FEATURES,
                  store=tmp_path / "store", on_batch=lambda n, tokens: calls.append(n))
    first = longbert.Encode(**values)(_planned(tok))
    n = len(first.plan.unique)
    assert first.cached == 0 and sum(calls) == n   # every window through the model, counted by the callback
    again = longbert.Encode(**values)(_planned(tok))
    assert again.cached == n and sum(calls) == n   # all from the store: no forward pass
    np.testing.assert_array_equal(again.encoded.vectors, first.encoded.vectors)


def test_an_encode_without_features_is_refused(tiny_model_dir):
    with pytest.raises(longbert.ConfigError, match="Encode needs one or more longbert.Feature values"):
        longbert.Encode(longbert.ModelConfig(model=str(tiny_model_dir)), [])
