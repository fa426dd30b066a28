"""Tiny random checkpoints of every encoder family longbert serves, built offline (no hub).

Each model comes from transformers' own config class; each tokenizer is a WordPiece vocabulary built
with the ``tokenizers`` library, with the family's own special tokens and template ([CLS] x [SEP], or
<s> x </s> for the RoBERTa-style families), saved as tokenizer.json. Used by tests/model/test_families.py.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

WORDS = [f"w{i}" for i in range(40)]
# the pieces of every family's special-token strings split as text ("[CLS]" -> "[", "cls", "]";
# "</s>" -> "<", "/", "s", ">"), so a document that holds them tokenizes with no unknown token
MARKUP = ["[", "]", "<", ">", "/", "cls", "sep", "mask", "pad", "unk", "s"]
POSITIONS = 64  # what the BERT-style tiny models serve (windows of 62 content tokens)

BERT_SPECIALS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
ROBERTA_SPECIALS = {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>", "mask": "<mask>"}

_SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)


def _configs(vocab: int, ids: dict[str, int]) -> dict:
    """family -> (config class name, kwargs, specials style). RoBERTa-style tables hold 2 rows more."""
    pad = ids["pad"]
    specials = dict(pad_token_id=pad, bos_token_id=ids["cls"], eos_token_id=ids["sep"])
    return {
        "bert": ("BertConfig", dict(**_SMALL, max_position_embeddings=POSITIONS, pad_token_id=pad)),
        "roberta": ("RobertaConfig", dict(**_SMALL, max_position_embeddings=POSITIONS + 2, type_vocab_size=1, **specials)),
        "xlm-roberta": ("XLMRobertaConfig", dict(**_SMALL, max_position_embeddings=POSITIONS + 2, type_vocab_size=1,
                                                 **specials)),
        "camembert": ("CamembertConfig", dict(**_SMALL, max_position_embeddings=POSITIONS + 2, type_vocab_size=1,
                                              **specials)),
        "distilbert": ("DistilBertConfig", dict(dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                                max_position_embeddings=POSITIONS, pad_token_id=pad)),
        "electra": ("ElectraConfig", dict(**_SMALL, embedding_size=16, max_position_embeddings=POSITIONS,
                                          pad_token_id=pad)),
        "albert": ("AlbertConfig", dict(**_SMALL, embedding_size=16, max_position_embeddings=POSITIONS,
                                        pad_token_id=pad, bos_token_id=ids["cls"], eos_token_id=ids["sep"])),
        "mpnet": ("MPNetConfig", dict(**_SMALL, max_position_embeddings=POSITIONS + 2,
                                      **specials)),
        "deberta": ("DebertaConfig", dict(**_SMALL, max_position_embeddings=POSITIONS, relative_attention=True,
                                          max_relative_positions=16, pos_att_type=["c2p", "p2c"], pad_token_id=pad)),
        "deberta-v2": ("DebertaV2Config", dict(**_SMALL, max_position_embeddings=POSITIONS, relative_attention=True,
                                               position_buckets=8, pos_att_type=["c2p", "p2c"], pad_token_id=pad)),
        "modernbert": ("ModernBertConfig", dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                                                intermediate_size=64, max_position_embeddings=8192,
                                                global_attn_every_n_layers=3, local_attention=16,
                                                pad_token_id=pad, cls_token_id=ids["cls"], sep_token_id=ids["sep"],
                                                bos_token_id=ids["cls"], eos_token_id=ids["sep"])),
    }


ROBERTA_STYLE = ("roberta", "xlm-roberta", "camembert", "mpnet")
FAMILY_NAMES = tuple(_configs(10, {"pad": 0, "cls": 2, "sep": 3}))


def build_tokenizer(specials: dict[str, str], roberta_style: bool, model_max_length: int | None):
    """A WordPiece tokenizer: specials, 'a'..'h', w0..w39 (one token each), digits 0-9, the pieces of
    the special-token strings (MARKUP); lower-cased."""
    order = ["cls", "pad", "sep", "unk", "mask"] if roberta_style else ["pad", "unk", "cls", "sep", "mask"]
    vocab = {specials[k]: i for i, k in enumerate(order)}
    for piece in list("abcdefgh") + WORDS + list("0123456789") + MARKUP:
        vocab[piece] = len(vocab)
    tok = Tokenizer(models.WordPiece(vocab, unk_token=specials["unk"]))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = specials["cls"], specials["sep"]
    if roberta_style:
        tok.post_processor = processors.RobertaProcessing((sep, vocab[sep]), (cls, vocab[cls]))
    else:
        tok.post_processor = processors.BertProcessing((sep, vocab[sep]), (cls, vocab[cls]))
    extra = {} if model_max_length is None else {"model_max_length": model_max_length}
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, cls_token=cls, sep_token=sep, pad_token=specials["pad"],
                                   unk_token=specials["unk"], mask_token=specials["mask"], **extra)
    return fast, {k: vocab[v] for k, v in specials.items()}


def build_family(family: str, folder: Path, pooler: bool = True) -> Path:
    """Save a tiny random ``family`` model and its tokenizer to ``folder``; returns folder.

    The tokenizer's model_max_length is what the model serves (as published checkpoints set it),
    except for ModernBERT (8,192) where it is left as the table's size too.
    """
    roberta_style = family in ROBERTA_STYLE
    specials = ROBERTA_SPECIALS if roberta_style else BERT_SPECIALS
    served = 8192 if family == "modernbert" else POSITIONS
    fast, ids = build_tokenizer(specials, roberta_style, served)
    cls_name, kwargs = _configs(len(fast), ids)[family]
    config = getattr(transformers, cls_name)(vocab_size=len(fast), **kwargs)
    torch.manual_seed(0)
    model_cls = transformers.AutoModel.from_config(config).__class__
    model = model_cls(config, add_pooling_layer=False) if not pooler else model_cls(config)
    folder.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def write_config(folder: Path, **config) -> Path:
    """A folder with only a config.json (for checks that must refuse before anything else loads)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder
