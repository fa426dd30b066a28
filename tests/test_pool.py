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
