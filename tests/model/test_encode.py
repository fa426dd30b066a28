"""The encode stage: window vectors equal transformers called directly on each window's ids."""
from __future__ import annotations

import numpy as np
from conftest import STAGE_ML as ML
from conftest import reference_vectors, words

import longbert


def test_encode_stage_equals_a_direct_model_call(pipe, tiny_bert):
    """(b) Window vectors from pipe['encode'] equal transformers on the window's ids (mean pooling)."""
    model, tok = tiny_bert
    p = longbert.Pipeline.from_options(model=str(pipe.cfg.model.model), strategy="chunk", pooling="mean",
                                       max_length=ML)
    batch = p["encode"](p.prepare(longbert.Batch.from_texts([words(30), words(3, 5)])))
    expected = reference_vectors(model, tok, [w.input_ids.tolist() for w in batch.unique], pooling="mean")
    np.testing.assert_allclose(batch.encoded.vectors, expected, atol=1e-5)
