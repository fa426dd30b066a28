"""--max-tokens-per-doc cuts the text before tokenizing: exactly the first N ids, at a fraction of the work."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import WORDS
from transformers import AutoTokenizer, BertTokenizerFast

from pipeline.text.tokenize import CUT_CHARS_PER_TOKEN, CUT_MIN_CHARS, cut_before_tokenizing, tokenize_block

rng = np.random.default_rng(7)
# Tiny vocabulary: "w1" and "w12" are both words, so a character cut inside "w12" changes the last token.
TINY_TEXT = " ".join(rng.choice(WORDS + list("abcdefgh"), size=3000).tolist())
# Real WordPiece: words of several pieces, accents, CJK (one token per character), runs of spaces and
# newlines, punctuation glued to words.
REAL_TEXT = ("Internationalization   of café résumés, naïvely—unquestionably! 数据处理与分析\n\n"
             "Pneumonoultramicroscopicsilicovolcanoconiosis (e.g. 3.14159) isn't tokenized trivially; ") * 120


@pytest.fixture(scope="module")
def tiny_tok(tiny_model_dir):
    return BertTokenizerFast.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def real_tok(default_model_dir):
    return AutoTokenizer.from_pretrained(default_model_dir)


class Recording:
    """The tokenizer, recording the length of every text it is given."""

    def __init__(self, tok):
        self.tok, self.lengths = tok, []
        self.unk_token_id = tok.unk_token_id

    def __call__(self, batch, **kwargs):
        self.lengths.extend(len(t) for t in batch)
        return self.tok(batch, **kwargs)


def full(tok, text):
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    return np.array(enc["input_ids"]), np.array(enc["offset_mapping"]).reshape(-1, 2)


@pytest.mark.parametrize("which", ["tiny", "real"])
def test_cut_keeps_exactly_the_first_ids_and_tokenizes_less(which, tiny_tok, real_tok):
    tok, text = (tiny_tok, TINY_TEXT) if which == "tiny" else (real_tok, REAL_TEXT)
    ids_all, offsets_all = full(tok, text)
    split_words = 0
    for n in (1, 2, 3, 7, 50, 64, 100, 129, 255):
        budget = n * CUT_CHARS_PER_TOKEN + CUT_MIN_CHARS
        assert len(text) > budget and len(ids_all) > n
        # the test text is one where a plain character cut at the budget would split a word
        naive = tok(text[:budget], add_special_tokens=False)["input_ids"]
        split_words += naive != ids_all[:len(naive)].tolist()
        recording = Recording(tok)
        (doc,) = tokenize_block([text], recording, max_tokens_per_doc=n)
        np.testing.assert_array_equal(doc.ids, ids_all[:n])
        np.testing.assert_array_equal(doc.offsets, offsets_all[:n])
        assert recording.lengths == [len(cut_before_tokenizing(text, n))] and recording.lengths[0] <= budget
        assert n < doc.n_tokens < len(ids_all)        # a lower bound, still more than the cap
    assert split_words >= 3


def test_short_texts_and_unusual_ones_are_tokenized_whole(tiny_tok):
    long_words = " ".join(["abcdefgh" * 8] * 200)    # each 64-letter word is one [UNK]: too few tokens in the part
    no_space = "w1 w2 " + "a" * 5000                  # no whitespace in the second half of the budget
    texts = ["w1 w2 w3", long_words, no_space, "", TINY_TEXT[:200]]
    assert cut_before_tokenizing(no_space, 4) is None and cut_before_tokenizing(long_words, 4) is not None
    recording = Recording(tiny_tok)
    docs = tokenize_block(texts, recording, max_tokens_per_doc=4, with_offsets=False)
    for text, doc in zip(texts, docs):
        ids_all, _ = full(tiny_tok, text)
        assert doc.n_tokens == len(ids_all)          # tokenized whole: the exact count
        np.testing.assert_array_equal(doc.ids, ids_all[:4])
        assert doc.offsets.shape == (0, 2)
    assert docs[3].error == "empty text" and docs[1].n_tokens == 200
    # the long-words text was tried cut, then again whole
    assert recording.lengths == [8, len(cut_before_tokenizing(long_words, 4)), len(no_space), 0, 200, len(long_words)]
