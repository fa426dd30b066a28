"""The ids the tokenize stage takes from the Rust backend without offsets (encode_batch_fast) are the
ids of transformers' own call, ``tokenizer(texts, add_special_tokens=False, split_special_tokens=True)``,
for WordPiece, byte-level BPE and Unigram tokenizers, special-token strings and added tokens included."""
from __future__ import annotations

import functools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

import longbert
from pipeline.text.tokenize import ids_backend, tokenize_block

CORPUS = ["The window holds 510 content tokens.", "Überprüfung der Länge: 長い文書の分割", "tab\tand  spaces",
          "[CLS] <s> </s> [SEP] <mask> [E1] markers", "emoji 🙂 and ünïcödé"] * 20
PIECES = ["[CLS]", "[SEP]", "[MASK]", "<s>", "</s>", "<mask>", "[E1]", "[/E1]", " ", "\t", "\n", "é", "長", "🙂",
          "token", "window", "510", "-", "İ", "ß"]


@functools.cache
def tokenizers_under_test() -> dict[str, PreTrainedTokenizerFast]:
    """The default model's WordPiece (with user-added special tokens [E1], [/E1]), a byte-level BPE and a
    Unigram tokenizer trained here on CORPUS."""
    bert = AutoTokenizer.from_pretrained(str(longbert.model_path()))
    bert.add_special_tokens({"additional_special_tokens": ["[E1]", "[/E1]"]})
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer, bpe.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    bpe.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>", "<pad>", "<unk>", "<mask>"],
                                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    uni = Tokenizer(models.Unigram())
    uni.pre_tokenizer = pre_tokenizers.Metaspace()
    uni.train_from_iterator(CORPUS, trainers.UnigramTrainer(vocab_size=120, unk_token="<unk>",
                                                            special_tokens=["<s>", "</s>", "<pad>", "<unk>", "<mask>"]))
    specials = dict(bos_token="<s>", eos_token="</s>", cls_token="<s>", sep_token="</s>", pad_token="<pad>",
                    unk_token="<unk>", mask_token="<mask>")
    return {"wordpiece": bert, "bpe": PreTrainedTokenizerFast(tokenizer_object=bpe, **specials),
            "unigram": PreTrainedTokenizerFast(tokenizer_object=uni, **specials)}


texts = st.lists(st.lists(st.sampled_from(PIECES) | st.text(max_size=6), max_size=30).map("".join),
                 min_size=1, max_size=6)


@pytest.mark.parametrize("name", ["wordpiece", "bpe", "unigram"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=texts)
def test_fast_ids_equal_the_transformers_call(name, batch):
    tok = tokenizers_under_test()[name]
    docs = tokenize_block(batch, tok, with_offsets=False)
    with_offsets = tokenize_block(batch, tok, with_offsets=True)
    for doc, offsets_doc, text in zip(docs, with_offsets, batch):
        if doc.error not in (None, "only unknown tokens"):
            continue
        assert doc.ids.tolist() == offsets_doc.ids.tolist(), text   # transformers' call, with offsets
        if name == "wordpiece" and ("[E1]" in text or "[/E1]" in text):
            continue   # a special token the user added stays one token (text_tokenizer; test_added_tokens)
        expected = tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        assert doc.ids.tolist() == expected, text


def test_the_backend_copy_leaves_the_tokenizer_as_it_was():
    tok = tokenizers_under_test()["bpe"]
    before = tok.backend_tokenizer.to_str()
    backend = ids_backend(tok)
    assert backend is not tok.backend_tokenizer and backend.encode_special_tokens
    assert tok.backend_tokenizer.to_str() == before
    assert ids_backend(tok) is backend   # built once


def test_a_backend_that_cannot_be_copied_falls_back_to_the_transformers_call():
    """A custom Python pre-tokenizer cannot be serialized: no copy, and the stage's ids are still the call's."""
    from tokenizers.pre_tokenizers import PreTokenizer

    class Words:
        def pre_tokenize(self, pretok):
            pretok.split(lambda i, s: s.split(" ", "removed"))

    tok = AutoTokenizer.from_pretrained(str(longbert.model_path()))
    tok.backend_tokenizer.pre_tokenizer = PreTokenizer.custom(Words())
    assert ids_backend(tok) is None
    (doc,) = tokenize_block(["two words"], tok, with_offsets=False)
    assert doc.ids.tolist() == tok("two words", add_special_tokens=False, split_special_tokens=True)["input_ids"]
