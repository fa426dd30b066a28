"""Tokenize stage: the model's fast tokenizer on whole documents (no truncation, no special tokens).

Document text is data: a special-token string inside it ("[CLS]", "[SEP]", "[MASK]", "<s>", "</s>",
"<pad>"...) is tokenized as the characters it is (``split_special_tokens=True``), never matched to the
model's control token; the window's own special tokens are added by id in pipeline.text.segment.
Tokens the user added to the tokenizer (``add_special_tokens({"additional_special_tokens": ["[E1]"]})``, as
relation-extraction and marker models are saved) are another matter: they stay one token each, as
``AutoTokenizer`` gives them (``text_tokenizer``).
"""
from __future__ import annotations

import json
import weakref
from collections.abc import Sequence

import numpy as np

from ..batch import Batch
from ..read.specs import ROW_ERROR
from ..stage import Stage
from ..types import TokenizedDoc
from .cut import CALL_CHARS, calls, cut_margin, first_tokens

EMPTY_TEXT = "empty text"
NO_TOKENS = "no tokens after normalisation"
ONLY_UNKNOWN = "only unknown tokens"
UNKNOWN_WARN_SHARE = 0.05  # a run or corpus with this share of unknown tokens or more gets a warning


def unknown_warning(unknown: int, tokens: int) -> str:
    """The warning the run summary and ``longbert stats`` print when unknown tokens reach 5%.

    Example: (3817, 4828) -> "warning: 79.1% of tokens (3,817 of 4,828) are unknown to the model's
    vocabulary, which does not cover this text; pass --model with one that does (docs/models.md)".
    """
    return (f"warning: {100 * unknown / tokens:.1f}% of tokens ({unknown:,} of {tokens:,}) are unknown to the "
            "model's vocabulary, which does not cover this text; pass --model with one that does (docs/models.md)")

def tokenizer_failure(tokenizer, err: BaseException) -> str:
    """The row error of a text the tokenizer fails on, with the fix when the cause is known.

    Example: a WordPiece vocabulary without "[UNK]" and a word it lacks -> "the tokenizer failed on this
    text (WordPiece error: Missing [UNK] token from the vocabulary): its vocabulary has no entry for the
    unknown token '[UNK]', so a word it lacks cannot be tokenized; add the entry to the vocabulary, or
    use a tokenizer that has it".
    """
    lines = str(err).strip().splitlines()
    text = f"the tokenizer failed on this text ({lines[0] if lines else type(err).__name__})"
    backend = getattr(tokenizer, "backend_tokenizer", None)
    model = getattr(backend, "model", None)
    unk = getattr(model, "unk_token", None)
    if unk and unk not in backend.get_vocab(with_added_tokens=False):
        text += (f": its vocabulary has no entry for the unknown token {unk!r}, so a word it lacks cannot be "
                 "tokenized; add the entry to the vocabulary, or use a tokenizer that has it")
    return text


def beyond_table(tokenizer, token_id: int, rows: int) -> str:
    """The row error of a document using a token id the model's embedding table lacks.

    Example: (the default tokenizer plus "covid19" as id 30522, 30522) -> "token 'covid19' (id 30522) is
    beyond the model's embedding table of 30,522 rows: the tokenizer has tokens the model was not saved
    with; resize the model's embeddings (resize_token_embeddings), or remove the token from the tokenizer".
    """
    return (f"token {tokenizer.convert_ids_to_tokens(token_id)!r} (id {token_id}) is beyond the model's "
            f"embedding table of {rows:,} rows: the tokenizer has tokens the model was not saved with; resize the "
            "model's embeddings (resize_token_embeddings), or remove the token from the tokenizer")


_TEXT_TOKENIZERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # tokenizer -> text_tokenizer's


def control_tokens(tokenizer) -> set[str]:
    """The family's control tokens: the tokenizer's named special tokens ([CLS], [SEP], [PAD], [MASK],
    [UNK]; <s>, </s>... for other families). Example: the default model -> {"[CLS]", "[SEP]", "[PAD]",
    "[MASK]", "[UNK]"}."""
    names = ("cls_token", "sep_token", "pad_token", "mask_token", "unk_token", "bos_token", "eos_token")
    return {str(t) for t in (getattr(tokenizer, n, None) for n in names) if t is not None}


def text_tokenizer(tokenizer):
    """The tokenizer that document text goes through: ``tokenizer`` itself, or, where the user added special
    tokens of their own (any added special token that is not a control token, e.g. "[E1]"), a copy whose
    backend matches those as single tokens while ``split_special_tokens=True`` still splits the control
    tokens into their characters' pieces. Built once per tokenizer (the original is never changed).

    Example: the default model plus "[E1]": "[E1] Bob [SEP]" -> "[E1]", "bob", "[", "sep", "]"
    (AutoTokenizer: "[E1]", "bob", "[SEP]"; with split_special_tokens=True: "[", "e", "##1", "]", ...).
    """
    try:
        return _TEXT_TOKENIZERS[tokenizer]
    except (KeyError, TypeError):
        pass
    backend = getattr(tokenizer, "backend_tokenizer", None)
    control = control_tokens(tokenizer)
    added = getattr(tokenizer, "added_tokens_decoder", {})
    if backend is None or not any(t.special and str(t) not in control for t in added.values()):
        out = tokenizer
    else:
        from tokenizers import Tokenizer

        state = json.loads(backend.to_str())
        for entry in state["added_tokens"]:
            if entry["special"] and entry["content"] not in control:
                entry["special"] = False   # matched as a token, never split by split_special_tokens
        # the tokenizer's own class on the changed backend, through its public constructor; the settings
        # that would mark the added tokens special again are left out (the backend holds the added tokens)
        again = ("additional_special_tokens", "extra_special_tokens", "added_tokens_decoder")
        settings = {k: v for k, v in tokenizer.init_kwargs.items() if k not in again}
        out = type(tokenizer)(tokenizer_object=Tokenizer.from_str(json.dumps(state)), **settings)
    try:
        _TEXT_TOKENIZERS[tokenizer] = out
    except TypeError:   # a tokenizer that takes no weak reference: built again next time
        pass
    return out


_IDS_BACKENDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # tokenizer -> ids_backend's


def ids_backend(tokenizer):
    """A private copy of a fast tokenizer's Rust backend (``tokenizers.Tokenizer``) for ids without
    offsets: special-token strings in the text split into pieces (``encode_special_tokens``, what
    ``split_special_tokens=True`` sets), no truncation and no padding. Its ``encode_batch_fast`` gives
    the ids of the transformers call ``tokenizer(batch, add_special_tokens=False,
    split_special_tokens=True)`` without tracking character offsets: 14% fewer CPU seconds than
    that call on 2,000 texts of examples/*.csv with the default tokenizer (4.24 against 4.93, one
    thread, AMD EPYC). Built once per tokenizer; the
    tokenizer itself is never changed. None for a tokenizer without a backend, or whose backend
    cannot be copied (a custom Python pre-tokenizer): transformers' call then serves."""
    try:
        return _IDS_BACKENDS[tokenizer]
    except (KeyError, TypeError):
        pass
    backend = getattr(tokenizer, "backend_tokenizer", None)
    out = None
    if backend is not None and hasattr(backend, "encode_batch_fast"):
        from tokenizers import Tokenizer

        try:
            out = Tokenizer.from_str(backend.to_str())
        except Exception:  # noqa: BLE001 - a custom (Python) component cannot be serialized: transformers' call
            out = None
    if out is not None:
        out.no_truncation()
        out.no_padding()
        out.encode_special_tokens = True
    try:
        _IDS_BACKENDS[tokenizer] = out
    except TypeError:   # a tokenizer that takes no weak reference: built again next time
        pass
    return out


def _call(tokenizer, batch: list[str], with_offsets: bool) -> tuple[list[list[int]], list]:
    """(ids, offsets or None) per text of ``batch`` in one call: the Rust backend's encode_batch_fast
    without offsets (ids_backend), transformers' call with them."""
    backend = None if with_offsets else ids_backend(tokenizer)
    if backend is not None:
        return [e.ids for e in backend.encode_batch_fast(batch, add_special_tokens=False)], [None] * len(batch)
    enc = tokenizer(batch, add_special_tokens=False, split_special_tokens=True, truncation=False,
                    return_offsets_mapping=with_offsets, return_attention_mask=False,
                    return_token_type_ids=False, verbose=False)
    return enc["input_ids"], enc["offset_mapping"] if with_offsets else [None] * len(batch)


def _encode(tokenizer, batch: list[str], rows: list[int], with_offsets: bool, failed: dict[int, str]
            ) -> tuple[list[list[int]], list]:
    """(ids, offsets or None) per text of ``batch`` in one tokenizer call; if the call fails, text by text,
    recording each failing text's row error in ``failed`` (row -> error) and giving it no ids."""
    try:
        return _call(tokenizer, batch, with_offsets)
    except Exception as err:  # noqa: BLE001 - `tokenizers` raises a bare Exception (e.g. WordPiece, no [UNK])
        if len(batch) == 1:
            failed[rows[0]] = tokenizer_failure(tokenizer, err)
            return [[]], [[]] if with_offsets else [None]
        pairs = [_encode(tokenizer, [t], [r], with_offsets, failed) for t, r in zip(batch, rows)]
        return [p[0][0] for p in pairs], [p[1][0] for p in pairs]  # only the failing texts lose their ids


def lowercase_with_map(text: str) -> tuple[str, np.ndarray | None]:
    """(``text.lower()``, None) when lowercasing keeps every character's position, else (the lowered text,
    (len(lowered),) int32: the position in ``text`` of the character each lowered character comes from).

    Example: "İx" -> ("i̇x", [0, 0, 1]): "İ" lowers to 2 characters, both from position 0.
    """
    low = text.lower()
    if len(low) == len(text):
        return low, None
    sizes = [len(c.lower()) for c in text]   # str.lower() is per character in length (final sigma keeps it)
    return low, np.repeat(np.arange(len(text), dtype=np.int32), sizes)


def _offsets_as_read(offsets: np.ndarray, origin: np.ndarray) -> np.ndarray:
    """(n, 2) [start, end) offsets into a lowered text -> into the text as read, ``origin`` from
    lowercase_with_map: a start maps to its character's origin, an end to the origin of the character
    before it, plus 1."""
    out = np.empty_like(offsets)
    out[:, 0] = origin[np.minimum(offsets[:, 0], len(origin) - 1)]     # (n,)
    out[:, 1] = np.where(offsets[:, 1] > 0, origin[np.maximum(offsets[:, 1] - 1, 0)] + 1, 0)  # (n,)
    return out


def tokenize_block(texts: Sequence[str], tokenizer, max_tokens_per_doc: int | None = None,
                   with_offsets: bool = True, vocab_rows: int | None = None,
                   read_errors: Sequence[str | None] | None = None, lowercase: bool = False) -> list[TokenizedDoc]:
    """Tokenize a block of documents in one call of the fast (Rust) tokenizer.

    Args:
        texts: the documents, exactly as read (str; never None).
        tokenizer: a transformers *fast* tokenizer (``tokenizer.is_fast``), e.g. BertTokenizerFast;
            its character offsets are kept.
        max_tokens_per_doc: keep at most this many leading tokens of each document (None: all). A
            text longer than 8 characters per kept token (+ 256) is tokenized as a leading part that
            proves its first tokens (``first_tokens``), with or without whitespace, so a huge document
            costs about the cap, not its length; the kept ids and offsets are exactly the first
            ``max_tokens_per_doc`` of the whole text's.
        with_offsets: ask the tokenizer for character offsets (only --level token writes them;
            without, each doc's offsets are an empty (0, 2) array).
        vocab_rows: the model's embedding rows when the tokenizer has ids beyond them
            (ModelFacts.vocab_rows): a document whose kept ids use one gets a row error naming the token
            (beyond_table); None: every id fits, nothing is checked.
        read_errors: per text, the reader's row error (pipeline.read.specs.ROW_ERROR: a JSON text that
            is not a string, read as ""), or None; a row with one gets it as its error, before any other.
        lowercase: tokenize ``text.lower()`` instead of the text, as sentence-transformers' Transformer module
            does for a folder whose sentence_bert_config.json declares ``do_lower_case``; offsets still
            index the text as read (``lowercase_with_map``).

    Special-token strings in a text are text: ``split_special_tokens=True`` tokenizes "[SEP]" as
    the pieces of its characters (the default model: "[", "sep", "]"), so no content id is a control
    token of the model (transformers' fast tokenizers, ``encode_special_tokens`` of ``tokenizers``).
    Special tokens the user added to the tokenizer ("[E1]") stay one token each (``text_tokenizer``).

    Returns:
        One TokenizedDoc per text, in order, with n_unknown = how many of its n_tokens are the
        tokenizer's unknown token (``tokenizer.unk_token_id``; 0 for a tokenizer without one): pieces
        the vocabulary lacks. A literal "[UNK]" in the text is text too, counted only where its own
        pieces are unknown (the default model: "[", "un", "##k", "]", none unknown).
        ``n_tokens`` counts the whole text's tokens, except for a text cut before tokenizing: there
        it counts the part's tokens known to be the whole text's, a lower bound of the whole that is
        always > max_tokens_per_doc (so the row still reads as truncated), and n_unknown counts within
        those. A text that is empty or whitespace-only gets error "empty text"; one whose
        characters all vanish in the tokenizer's normalisation (control or zero-width characters)
        gets "no tokens after normalisation" (both have 0 tokens); one whose tokens are all unknown
        (e.g. emoji only, with an English WordPiece vocabulary) gets "only unknown tokens". A text
        the tokenizer fails on (a WordPiece vocabulary without its unknown token meeting a word it
        lacks) gets that failure as its error (tokenizer_failure), and the other texts are tokenized.
    """
    unk = tokenizer.unk_token_id
    failed: dict[int, str] = {}
    encoder = text_tokenizer(tokenizer)

    def call(batch: list[str], rows: list[int]) -> tuple[list[list[int]], list]:
        return _encode(encoder, batch, rows, with_offsets, failed)

    texts, maps = list(texts), [None] * len(texts)
    if lowercase:
        texts, maps = map(list, zip(*(lowercase_with_map(t) for t in texts))) if texts else ([], [])
    cut = {} if max_tokens_per_doc is None else \
        first_tokens(encoder, texts, max_tokens_per_doc, cut_margin(encoder))
    sent = ["" if i in cut else t for i, t in enumerate(texts)]   # a cut text's tokens are known already
    docs: list[TokenizedDoc] = []
    for lo, hi in calls(sent, CALL_CHARS):   # the tokenizer's Python lists of ids and offsets: one call's texts at a time
        all_ids, all_offsets = call(sent[lo:hi], list(range(lo, hi)))
        known = [None] * (hi - lo)
        for i in range(lo, hi):
            if i in cut:
                all_ids[i - lo], offsets, known[i - lo] = cut.pop(i)
                all_offsets[i - lo] = offsets if with_offsets else None
        docs += [_doc(row, texts[row], ids, offsets, maps[row], tokenizer, unk, max_tokens_per_doc, vocab_rows,
                      (read_errors[row] if read_errors is not None else None) or failed.get(row), n_known)
                 for row, ids, offsets, n_known in zip(range(lo, hi), all_ids, all_offsets, known)]
        del all_ids, all_offsets
    return docs


_NO_OFFSETS = np.zeros((0, 2), dtype=np.int32)


def _doc(row: int, text: str, ids: list[int], offsets, origin: np.ndarray | None, tokenizer, unk: int | None,
         max_tokens_per_doc: int | None, vocab_rows: int | None, error: str | None,
         known: int | None = None) -> TokenizedDoc:
    """One text's TokenizedDoc from the tokenizer's ids and offsets (tokenize_block's rules: the cap,
    then the row error, if any, in order: the reader's or tokenizer's, an id beyond the table, empty,
    only unknown). ``known``: a part's tokens that are the whole text's (first_tokens), None: all of them."""
    if known is not None:
        ids, offsets = ids[:known], offsets if offsets is None else offsets[:known]
    n = len(ids)
    ids_arr = np.asarray(ids, dtype=np.int32)
    n_unknown = int(np.count_nonzero(ids_arr == unk)) if unk is not None else 0
    off_arr = _NO_OFFSETS if offsets is None else np.asarray(offsets, dtype=np.int32).reshape(n, 2)
    if origin is not None and offsets is not None:
        off_arr = _offsets_as_read(off_arr, origin)   # (n, 2): into the text as read, not the lowered one
    if max_tokens_per_doc is not None and n > max_tokens_per_doc:
        ids_arr, off_arr = ids_arr[:max_tokens_per_doc], off_arr[:max_tokens_per_doc]
    if error is not None:
        pass
    elif vocab_rows is not None and ids_arr.size and int(ids_arr.max()) >= vocab_rows:
        error = beyond_table(tokenizer, int(ids_arr.max()), vocab_rows)
    elif n == 0:
        error = EMPTY_TEXT if not text.strip() else NO_TOKENS
    elif n_unknown == n:
        error = ONLY_UNKNOWN
    return TokenizedDoc(row=row, ids=ids_arr, offsets=off_arr, n_tokens=n, error=error, n_unknown=n_unknown)


class Tokenize(Stage):
    """Texts -> ``docs``: each row's content token ids, without specials and never truncated but by
    ``max_tokens_per_doc``; a text that makes no token gets its error (``tokenize_block``).

    Args:
        tokenizer: a transformers fast tokenizer (the model's own).
        max_tokens_per_doc: keep at most this many leading tokens per document (None: all).
        with_offsets: also keep each token's character [start, end) (per-token output needs them).
        vocab_rows: rows of the model's embedding table when the tokenizer has ids beyond them (a
            document using one gets a row error); None: every id fits.
        lowercase: lowercase each text before the tokenizer (a sentence-transformers folder's
            ``do_lower_case``); offsets still index the text as read.

    Example:
        >>> Tokenize(tok)(Batch.from_texts(["a long report"])).docs[0].ids   # int32 (n_tokens,)
    """

    name, requires, fills = "tokenize", ("rows",), ("docs",)

    def __init__(self, tokenizer, max_tokens_per_doc: int | None = None, with_offsets: bool = False,
                 vocab_rows: int | None = None, lowercase: bool = False):
        self.tokenizer = tokenizer
        self.lowercase = bool(lowercase)
        self.max_tokens_per_doc = max_tokens_per_doc
        self.with_offsets = with_offsets
        self.vocab_rows = vocab_rows

    def get_params(self, deep: bool = True) -> dict:
        return {"tokenizer": self.tokenizer, "max_tokens_per_doc": self.max_tokens_per_doc,
                "with_offsets": self.with_offsets, "vocab_rows": self.vocab_rows, "lowercase": self.lowercase}

    def __call__(self, batch: Batch) -> Batch:
        rows = batch.rows
        read_errors = rows.column(ROW_ERROR).to_pylist() if ROW_ERROR in rows.column_names else None  # the reader's
        docs = tokenize_block(batch.texts, self.tokenizer, self.max_tokens_per_doc, with_offsets=self.with_offsets,
                              vocab_rows=self.vocab_rows, read_errors=read_errors, lowercase=self.lowercase)
        return batch.replace(docs=docs)
