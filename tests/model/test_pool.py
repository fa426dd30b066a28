"""longbert.pool, the pooling stage alone: numpy or torch hidden states in, numpy float32 out."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import STAGE_ML as ML
from conftest import words

import longbert
from pipeline.errors import ConfigError


def test_pool_on_my_own_model_output_equals_the_products_window_vector(tiny_model_dir, tiny_bert):
    """(d) longbert.pool on a user's own AutoModel output (numpy, padded batch) = the product's vectors."""
    model, tok = tiny_bert
    texts = [words(9), words(4, 3)]
    enc = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_hidden_states=True)
    mask = enc["attention_mask"].numpy()
    for pooling, layers, agg in (("mean", (-1,), "mean"), ("max", (-1,), "mean"), ("cls", (-2, -1), "concat")):
        states = tuple(h.numpy() for h in out.hidden_states)
        mine = longbert.pool(states if layers != (-1,) else out.last_hidden_state.numpy(), mask, pooling=pooling,
                             layers=layers, layer_agg=agg)
        p = longbert.Pipeline.from_options(model=str(tiny_model_dir), strategy="head", pooling=pooling,
                                           layers=layers, layer_agg=agg, max_length=ML)
        product = p["encode"](p.prepare(longbert.Batch.from_texts(texts))).encoded.vectors
        assert mine.dtype == np.float32
        np.testing.assert_allclose(mine, product, atol=1e-5)
    with pytest.raises(ConfigError, match="needs every layer"):
        longbert.pool(out.last_hidden_state.numpy(), mask, layers=(-2,))


def _expected_pool(hidden: np.ndarray, mask: np.ndarray, pooling: str) -> np.ndarray:
    """Each row's pooled vector, computed row by row from the real (mask 1) positions alone."""
    rows = []
    for h, m in zip(hidden, mask):
        real = h[np.flatnonzero(m)]                                   # (n_real, h)
        rows.append(real[0] if pooling == "cls" else real.mean(axis=0) if pooling == "mean" else real.max(axis=0))
    return np.stack(rows).astype(np.float32)


@pytest.mark.parametrize("pooling", ["cls", "mean", "max"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_pool_reads_only_the_masked_positions_with_left_or_right_padding(pooling, side):
    """Hidden value = position: cls is the first position whose mask is 1 (2 for a left-padded row, not 0)."""
    hidden = np.tile(np.arange(5, dtype=np.float32)[None, :, None], (2, 1, 3))       # (2, 5, 3)
    hidden[1] *= 10
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]) if side == "right" else np.array([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    got = longbert.pool(hidden, mask, pooling=pooling)
    np.testing.assert_array_equal(got, _expected_pool(hidden, mask, pooling))
    if side == "left":
        assert got[0, 0] == {"cls": 2.0, "mean": 3.0, "max": 4.0}[pooling]


@pytest.mark.parametrize("side", ["right", "left"])
def test_pool_of_a_left_padding_tokenizers_batch_is_each_rows_cls(tiny_bert, side):
    """A tokenizer padding on the left (as tokenizer_config.json may set it): cls is the [CLS] state,
    mean and max ignore the pads, for the last layer and for concatenated layers alike."""
    model, tok = tiny_bert
    before, tok.padding_side = tok.padding_side, side   # a session fixture: set back below
    try:
        enc = tok([words(3), words(12, 2)], padding=True, return_tensors="pt")
    finally:
        tok.padding_side = before
    with torch.no_grad():
        out = model(**enc, output_hidden_states=True)
    mask = enc["attention_mask"].numpy()
    first = mask.argmax(axis=1)
    ids = enc["input_ids"].numpy()
    assert (ids[np.arange(2), first] == tok.cls_token_id).all()
    assert (first[0] > 0) == (side == "left")
    for pooling in ("cls", "mean", "max"):
        np.testing.assert_allclose(longbert.pool(out.last_hidden_state, enc["attention_mask"], pooling=pooling),
                                   _expected_pool(out.last_hidden_state.numpy(), mask, pooling), atol=1e-6)
        states = tuple(h.numpy() for h in out.hidden_states)
        both = longbert.pool(states, mask, pooling=pooling, layers=(-2, -1), layer_agg="concat")
        want = np.concatenate([_expected_pool(states[i], mask, pooling) for i in (-2, -1)], axis=1)
        np.testing.assert_allclose(both, want, atol=1e-6)
