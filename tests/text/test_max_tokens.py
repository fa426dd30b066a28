"""--max-tokens-per-doc tokenizes a leading part of a long text, with or without whitespace: exactly the first N
ids and offsets of the whole text's tokenization, at a fraction of the work."""
from __future__ import annotations

import random

import numpy as np
import pytest
from conftest import WORDS
from transformers import AutoTokenizer, BertTokenizerFast

from pipeline.text.cut import CUT_CHARS_PER_TOKEN, CUT_GROWTH, CUT_MIN_CHARS, cut_margin, known_tokens
from pipeline.text.tokenize import tokenize_block

rng = np.random.default_rng(7)
# Tiny vocabulary: "w1" and "w12" are both words, so a character cut inside "w12" changes the last token.
TINY_TEXT = " ".join(rng.choice(WORDS + list("abcdefgh"), size=3000).tolist())
# Real WordPiece: words of several pieces, accents, CJK (one token per character), runs of spaces and
# newlines, punctuation glued to words.
REAL_TEXT = ("Internationalization   of café résumés, naïvely—unquestionably! 数据处理与分析\n\n"
             "Pneumonoultramicroscopicsilicovolcanoconiosis (e.g. 3.14159) isn't tokenized trivially; ") * 120
random.seed(0)
_CJK = "天气很好我们去公园散步吧今天下雨了记得带伞出门股票市场大幅上涨投资者高兴银行利率下降房价可能上升"
CJK_TEXT = "".join(random.choice(_CJK) for _ in range(60_000))   # no whitespace at all, as B111's document
# no whitespace, no CJK: words of letters and digits glued by punctuation, and base64-like runs
GLUED_TEXT = "".join(f"{WORDS[i % 40]}.{'Ab9+' * (i % 7)}/{i}," for i in range(4000))


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
        self.added_tokens_decoder = tok.added_tokens_decoder

    def __call__(self, batch, **kwargs):
        self.lengths.extend(len(t) for t in batch)
        return self.tok(batch, **kwargs)


def full(tok, text):
    """The whole text's ids and offsets, as transformers gives them (the independent reference)."""
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    return np.array(enc["input_ids"]), np.array(enc["offset_mapping"]).reshape(-1, 2)


@pytest.mark.parametrize("which", ["tiny", "real", "cjk", "glued"])
def test_cut_keeps_exactly_the_first_ids_and_tokenizes_less(which, tiny_tok, real_tok):
    tok, text = {"tiny": (tiny_tok, TINY_TEXT), "real": (real_tok, REAL_TEXT), "cjk": (real_tok, CJK_TEXT),
                 "glued": (real_tok, GLUED_TEXT)}[which]
    ids_all, offsets_all = full(tok, text)
    split_words = 0
    for n in (1, 2, 3, 7, 50, 64, 100, 129, 255):
        budget = n * CUT_CHARS_PER_TOKEN + CUT_MIN_CHARS
        assert len(text) > budget * CUT_GROWTH and len(ids_all) > n
        # the test text is one where a plain character cut at the budget would split a word
        naive = tok(text[:budget], add_special_tokens=False)["input_ids"]
        split_words += naive != ids_all[:len(naive)].tolist()
        recording = Recording(tok)
        for with_offsets in (True, False):
            (doc,) = tokenize_block([text], recording, max_tokens_per_doc=n, with_offsets=with_offsets)
            np.testing.assert_array_equal(doc.ids, ids_all[:n])
            if with_offsets:
                np.testing.assert_array_equal(doc.offsets, offsets_all[:n])
            assert n < doc.n_tokens < len(ids_all)        # a lower bound, still more than the cap
            assert doc.n_unknown == int((ids_all[:doc.n_tokens] == tok.unk_token_id).sum())
        assert max(recording.lengths) <= budget * CUT_GROWTH   # never the whole text
    assert split_words >= 3 if which != "cjk" else split_words == 0   # each CJK character is a word


def test_a_text_without_whitespace_is_cut_at_the_first_budget(real_tok):
    """B111's kind: 60,000 CJK characters, no whitespace, cap 64: one part of 768 characters, one call."""
    recording = Recording(real_tok)
    (doc,) = tokenize_block([CJK_TEXT], recording, max_tokens_per_doc=64, with_offsets=False)
    assert recording.lengths == [64 * CUT_CHARS_PER_TOKEN + CUT_MIN_CHARS, 0]   # the part, then "" for the text
    ids_all, _ = full(real_tok, CJK_TEXT)
    np.testing.assert_array_equal(doc.ids, ids_all[:64])
    assert cut_margin(real_tok) == len("[MASK]")
    assert doc.n_tokens == 768 - 6   # every character a token; those within the margin of the cut left out


def test_short_texts_and_unusual_ones_are_tokenized_whole(tiny_tok):
    long_words = " ".join(["abcdefgh" * 8] * 200)    # each 64-letter word is one [UNK]: 200 tokens in 13,000 chars
    one_word = "w1 w2 " + "a" * 5000                  # a 5,000-letter word: one [UNK], the text 3 tokens
    texts = ["w1 w2 w3", long_words, one_word, "", TINY_TEXT[:200]]
    recording = Recording(tiny_tok)
    docs = tokenize_block(texts, recording, max_tokens_per_doc=4, with_offsets=False)
    for text, doc in zip(texts, docs):
        ids_all, _ = full(tiny_tok, text)
        assert doc.n_tokens == len(ids_all) or (doc.n_tokens > 4 and len(ids_all) > 4)
        np.testing.assert_array_equal(doc.ids, ids_all[:4])
        assert doc.offsets.shape == (0, 2)
    assert docs[3].error == "empty text" and docs[2].n_tokens == 3   # the one-word text: tokenized whole
    # parts of 288 characters (4 x 8 + 256), then 1,152 (x 4): long_words proves 5 tokens in the second
    # (17 words of 65 characters); one_word never does: after a part of 4,608 it is tokenized whole
    assert recording.lengths == [288, 288, 1152, 1152, 4608, 8, 0, len(one_word), 0, 200]


@pytest.mark.parametrize("words, offsets, end, margin, known", [
    ([0, 1, 2], [(0, 5), (6, 10), (11, 14)], 14, 0, 2),          # the last word may go on
    ([0, 1, 1], [(0, 5), (6, 8), (8, 10)], 10, 0, 1),             # both pieces of the last word left out
    ([0, 1, 2], [(0, 5), (6, 10), (11, 14)], 16, 4, 2),           # margin: ends by 12 -> "(6, 10)" kept
    ([0, 1, 2], [(0, 5), (6, 10), (11, 14)], 13, 4, 1),           # margin: ends by 9 -> only the first
    ([0, None, 2], [(0, 5), (5, 9), (9, 12)], 20, 4, 2),          # an added token ("[E1]") is a word alone
    ([], [], 10, 4, 0),
    ([0], [(0, 100)], 100, 4, 0),                                 # one long word: nothing proved
])
def test_known_tokens(words, offsets, end, margin, known):
    assert known_tokens(words, offsets, end, margin) == known
