"""A block is tokenized in calls of at most CALL_CHARS characters (the tokenizer's Python lists of one call
at a time): the ranges by value, and the same ids and offsets as one call over the block."""
from __future__ import annotations

import numpy as np
import pytest

from pipeline.text import tokenize as tok_mod

from conftest import words


@pytest.mark.parametrize("lengths, limit, bounds", [
    ([100, 200, 300], 300, [(0, 2), (2, 3)]),
    ([500, 10, 10], 300, [(0, 1), (1, 3)]),     # a longer text is a call of its own
    ([1, 1, 1], 300, [(0, 3)]),
    ([], 300, []),
])
def test_calls_cover_every_text_once_within_the_limit(lengths, limit, bounds):
    assert tok_mod.calls(["x" * n for n in lengths], limit) == bounds


def test_a_block_in_several_calls_gives_the_ids_and_offsets_of_one_call(tiny_bert, monkeypatch):
    _, tokenizer = tiny_bert
    texts = [words(5 + 7 * i, i) for i in range(9)] + ["", words(3)]
    whole = tok_mod.tokenize_block(texts, tokenizer, max_tokens_per_doc=20)
    monkeypatch.setattr(tok_mod, "CALL_CHARS", 40)
    assert len(tok_mod.calls(texts, tok_mod.CALL_CHARS)) > 4
    cut = tok_mod.tokenize_block(texts, tokenizer, max_tokens_per_doc=20)
    assert [d.row for d in cut] == list(range(len(texts)))
    for a, b in zip(whole, cut):
        np.testing.assert_array_equal(a.ids, b.ids)
        np.testing.assert_array_equal(a.offsets, b.offsets)
        assert (a.n_tokens, a.n_kept, a.error) == (b.n_tokens, b.n_kept, b.error)
