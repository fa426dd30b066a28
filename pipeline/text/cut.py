"""--max-tokens-per-doc: a long text tokenized as a leading part that provably holds its first tokens, so a
2,000,000-character document costs the tokenizer about the cap, with or without whitespace. Called by
pipeline.text.tokenize.tokenize_block; no torch.
"""
from __future__ import annotations

from collections.abc import Sequence

# --max-tokens-per-doc N: a text longer than N * CUT_CHARS_PER_TOKEN + CUT_MIN_CHARS characters is
# tokenized as a leading part first, grown CUT_GROWTH times while the part proves fewer than N + 1 tokens
# (first_tokens); English BERT averages ~4.5 characters per token, CJK 1, so the first part mostly holds them.
CUT_CHARS_PER_TOKEN = 8
CUT_MIN_CHARS = 256
CUT_GROWTH = 4


CALL_CHARS = 1 << 18   # characters of text per tokenizer call, at most (a longer text is a call of its own)


def calls(texts: list[str] | list[int], limit: int = CALL_CHARS) -> list[tuple[int, int]]:
    """[start, stop) ranges of consecutive texts (or their lengths in characters) of at most ``limit``
    characters together, each text in one range (a longer one alone), covering every text once; [] for none.

    Why: a call returns Python lists of every token's id and offsets (about 150 bytes a token) before
    they become arrays; one call per block made a block of long documents hold them all at once.
    Example: lengths [100, 200, 300], limit 300 -> [(0, 2), (2, 3)].
    """
    bounds, start, held = [], 0, 0
    for i, text in enumerate(texts):
        size = text if isinstance(text, int) else len(text)
        if i > start and held + size > limit:
            bounds.append((start, i))
            start, held = i, 0
        held += size
    if texts:
        bounds.append((start, len(texts)))
    return bounds


def known_tokens(word_ids: Sequence[int | None], offsets: Sequence[Sequence[int]], end: int, margin: int) -> int:
    """How many leading tokens of the part ``text[:end]`` are, provably, the first tokens of the whole text.

    A fast tokenizer splits the normalised text into words (its pre-tokenizer: at whitespace and punctuation;
    each CJK character a word of its own) and tokenizes each word alone, so only the part's last word can
    change when the text goes on (a word cut in two, "unquestion|ably"; a run of 2,000,000 characters that
    WordPiece makes one [UNK]): the tokens before it are the whole text's. The tokens within ``margin``
    characters of the cut are left out too (a token the user added, e.g. "[E1]", cut in two, or a combining
    accent after the cut). Example: "hello wonder" cut from "hello wonderful", margin 4 -> 1 (the tokens
    of "wonder" need not be those of "wonderful").

    Args:
        word_ids: per token of the part, its word's index (None: a token the user added). offsets: per token,
            its [start, end) characters in the part. end: the part's length. margin: see above.
    """
    last = word_ids[-1] if len(word_ids) else None
    n = 0
    for word, (_, stop) in zip(word_ids, offsets):
        if (word is not None and word == last) or stop > end - margin:
            break
        n += 1
    return n


def first_tokens(tokenizer, texts: Sequence[str], max_tokens: int, margin: int) -> dict[int, tuple]:
    """The texts longer than the cut's budget whose first ``max_tokens + 1`` tokens a leading part proves
    (known_tokens), each tokenized as that part only: {index: (ids, offsets, known)}, ``known`` > max_tokens
    the part's leading tokens that are the whole text's (ids[:known] are exactly the whole text's first ids).

    The part starts at ``max_tokens * 8 + 256`` characters and grows 4x while it proves too few, in
    tokenizer calls of at most CALL_CHARS characters of parts per round for the texts still short; a text the part never covers before its end (a
    word of 2,000,000 characters; fewer tokens than the cap) is left out and tokenized whole, as is every
    text of a round the tokenizer fails on (tokenize_block names the failing text). So a 2,000,000-character
    text of CJK characters without whitespace costs the tokenizer 768 characters at a cap of 64, not 2,000,000.
    """
    budget = max_tokens * CUT_CHARS_PER_TOKEN + CUT_MIN_CHARS
    todo, found = [i for i, t in enumerate(texts) if len(t) > budget], {}
    while todo:
        again = []
        for lo, hi in calls([budget] * len(todo)):   # CALL_CHARS of parts a call, as the texts go
            enc = _with_words(tokenizer, [texts[i][:budget] for i in todo[lo:hi]])
            if enc is None:   # the tokenizer fails on one, or gives no word ids: those texts are tokenized whole
                continue
            for j, i in enumerate(todo[lo:hi]):
                offsets = enc["offset_mapping"][j]
                known = known_tokens(enc.word_ids(j), offsets, budget, margin)
                if known > max_tokens:
                    found[i] = (enc["input_ids"][j], offsets, known)
                elif len(texts[i]) > budget * CUT_GROWTH:
                    again.append(i)
        todo, budget = again, budget * CUT_GROWTH
    return found


def _with_words(tokenizer, parts: list[str]):
    """The tokenizer's BatchEncoding of ``parts`` with offsets and word ids (tokenize_block's settings), or
    None when it fails on one of them or gives no word ids."""
    try:
        enc = tokenizer(parts, add_special_tokens=False, split_special_tokens=True, truncation=False,
                        return_offsets_mapping=True, return_attention_mask=False, return_token_type_ids=False,
                        verbose=False)
        enc.word_ids(0)   # a tokenizer without a Rust backend has none (ValueError)
        return enc
    except Exception:  # noqa: BLE001 - `tokenizers` raises a bare Exception; tokenize_block names it per text
        return None


def cut_margin(tokenizer) -> int:
    """Characters before a cut whose tokens first_tokens does not trust: the longest token the tokenizer
    has added (its special and user tokens, e.g. "[MASK]": 6), at least 4."""
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    return max([4, *(len(str(t)) for t in added.values())])
