"""Special tokens a user added to the tokenizer stay one token each, as AutoTokenizer gives them; the
family's control tokens in the same text are split into their characters' pieces."""
from __future__ import annotations

import numpy as np
import pytest
from transformers import AutoTokenizer

from longbert import Batch, Tokenize
from pipeline.text.tokenize import control_tokens, text_tokenizer

TEXTS = ["Alice [E1] met [/E1] Bob [SEP] and [CLS] left", "[E1][E1] x [MASK]", "no markers at all"]


@pytest.fixture(scope="module")
def marked(default_model_dir, tmp_path_factory):
    """The bundled model's tokenizer (a real WordPiece vocabulary) saved with two added special tokens, loaded back by AutoTokenizer."""
    tok = AutoTokenizer.from_pretrained(default_model_dir)
    assert tok.add_special_tokens({"additional_special_tokens": ["[E1]", "[/E1]"]}) == 2
    folder = tmp_path_factory.mktemp("marked")
    tok.save_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder)


def test_added_special_tokens_are_one_token_and_control_tokens_are_split(marked):
    docs = Tokenize(marked, with_offsets=True)(Batch.from_texts(TEXTS)).docs
    e1, e1_end = marked.convert_tokens_to_ids(["[E1]", "[/E1]"])
    for text, doc in zip(TEXTS, docs):
        # the independent reference: AutoTokenizer's own encoding of each piece between the markers
        pieces = text.replace("[/E1]", "\0[/E1]\0").replace("[E1]", "\0[E1]\0").split("\0")
        expected = []
        for piece in pieces:
            if piece in ("[E1]", "[/E1]"):
                expected.append(e1 if piece == "[E1]" else e1_end)
            elif piece:
                expected += marked(piece, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        assert doc.ids.tolist() == expected
        assert not set(doc.ids.tolist()) & set(marked.convert_tokens_to_ids(sorted(control_tokens(marked))))
    assert marked.convert_ids_to_tokens(docs[0].ids.tolist()) == [
        "alice", "[E1]", "met", "[/E1]", "bob", "[", "sep", "]", "and", "[", "cl", "##s", "]", "left"]
    starts = docs[0].offsets[docs[0].ids == e1][:, 0]
    assert [TEXTS[0][s:s + 4] for s in starts] == ["[E1]"]


def test_a_tokenizer_without_added_special_tokens_is_used_as_it_is(default_model_dir, marked):
    plain = AutoTokenizer.from_pretrained(default_model_dir)
    assert text_tokenizer(plain) is plain
    assert text_tokenizer(marked) is not marked and text_tokenizer(marked) is text_tokenizer(marked)
    # the user's tokenizer is not changed: it still splits its added tokens under split_special_tokens
    ids = marked("[E1]", add_special_tokens=False, split_special_tokens=True)["input_ids"]
    assert ids != marked.convert_tokens_to_ids(["[E1]"])


def test_an_added_token_beyond_the_embedding_table_is_a_row_error(marked):
    rows = len(marked) - 2   # the model was not resized for the two markers
    docs = Tokenize(marked, vocab_rows=rows)(Batch.from_texts(["one [E1] two", "one two"])).docs
    assert docs[0].error.startswith("token '[E1]' (id ") and "beyond the model's embedding table" in docs[0].error
    assert docs[1].error is None
    assert np.array_equal(docs[1].ids, marked("one two", add_special_tokens=False)["input_ids"])
