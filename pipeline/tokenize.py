"""Tokenize stage: the model's fast tokenizer on whole documents (no truncation, no special tokens).

Called by pipeline.block once per block, and by ``longbert stats`` (which needs no model).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .types import TokenizedDoc

EMPTY_TEXT = "empty text"
NO_TOKENS = "no tokens after normalisation"
ONLY_UNKNOWN = "only unknown tokens"
UNKNOWN_WARN_SHARE = 0.05  # a run or corpus with this share of unknown tokens or more gets a warning


def unknown_warning(unknown: int, tokens: int) -> str:
    """The warning the run summary and ``longbert stats`` print when unknown tokens reach 5%.

    Example: (3817, 4828) -> "warning: 79.1% of tokens (3,817 of 4,828) are unknown to the model's
    vocabulary, which does not cover this text; pass --model with one that does (README, Models)".
    """
    return (f"warning: {100 * unknown / tokens:.1f}% of tokens ({unknown:,} of {tokens:,}) are unknown to the "
            "model's vocabulary, which does not cover this text; pass --model with one that does (README, Models)")


def tokenize_block(texts: Sequence[str], tokenizer, max_tokens_per_doc: int | None = None,
                   with_offsets: bool = True) -> list[TokenizedDoc]:
    """Tokenize a block of documents in one call of the fast (Rust) tokenizer.

    Args:
        texts: the documents, exactly as read (str; never None).
        tokenizer: a transformers *fast* tokenizer (``tokenizer.is_fast``), e.g. BertTokenizerFast;
            its character offsets are kept.
        max_tokens_per_doc: keep at most this many leading tokens of each document (None: all).
        with_offsets: ask the tokenizer for character offsets (only --level token writes them;
            without, each doc's offsets are an empty (0, 2) array).

    Returns:
        One TokenizedDoc per text, in order, with n_unknown = how many of its n_tokens are the
        tokenizer's unknown token (``tokenizer.unk_token_id``; 0 for a tokenizer without one). A text
        that is empty or whitespace-only gets error "empty text"; one whose characters all vanish in
        the tokenizer's normalisation (control or zero-width characters) gets "no tokens after
        normalisation" (both have 0 tokens); one whose tokens are all unknown (e.g. emoji only, with
        an English WordPiece vocabulary) gets "only unknown tokens".
    """
    unk = tokenizer.unk_token_id
    enc = tokenizer(list(texts), add_special_tokens=False, truncation=False, return_offsets_mapping=with_offsets,
                    return_attention_mask=False, return_token_type_ids=False, verbose=False)
    docs = []
    no_offsets = np.zeros((0, 2), dtype=np.int32)
    all_offsets = enc["offset_mapping"] if with_offsets else [None] * len(texts)
    for row, (text, ids, offsets) in enumerate(zip(texts, enc["input_ids"], all_offsets)):
        n = len(ids)
        ids_arr = np.asarray(ids, dtype=np.int32)
        n_unknown = int(np.count_nonzero(ids_arr == unk)) if unk is not None else 0
        off_arr = no_offsets if offsets is None else np.asarray(offsets, dtype=np.int32).reshape(n, 2)
        if max_tokens_per_doc is not None and n > max_tokens_per_doc:
            ids_arr, off_arr = ids_arr[:max_tokens_per_doc], off_arr[:max_tokens_per_doc]
        error = None
        if n == 0:
            error = EMPTY_TEXT if not text.strip() else NO_TOKENS
        elif n_unknown == n:
            error = ONLY_UNKNOWN
        docs.append(TokenizedDoc(row=row, ids=ids_arr, offsets=off_arr, n_tokens=n, error=error,
                                 n_unknown=n_unknown))
    return docs
