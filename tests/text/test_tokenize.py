"""The tokenize stage: each text's content ids are the tokenizer's own, without specials or truncation."""
from __future__ import annotations

from conftest import words

import longbert


def test_tokenize_stage_gives_the_tokenizers_content_ids(pipe, tiny_bert):
    """Ids equal the tokenizer called directly; "[SEP]" inside a text is text; a blank text gets its error."""
    _, tok = tiny_bert
    texts = [words(37), "w1 [SEP] w2", "   "]
    batch = pipe["tokenize"](longbert.Batch.from_texts(texts))
    assert not pipe["encode"].loaded   # no weights for the stages before encode
    for doc, text in zip(batch.docs[:2], texts):
        expected = tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        assert doc.ids.tolist() == expected and doc.n_tokens == len(expected) and doc.error is None
        assert doc.n_unknown == expected.count(tok.unk_token_id)
    assert len(batch.docs[0].ids) == 37                      # longer than a window: never truncated here
    assert tok.sep_token_id not in batch.docs[1].ids.tolist()
    assert batch.docs[2].error == "empty text" and batch.docs[2].n_tokens == 0
