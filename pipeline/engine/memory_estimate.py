"""The peak memory of an ``extract`` run, estimated before it runs (``longbert stats``).

A run holds, at its peak, three things (docs/performance.md, "Memory"):

1. **the model part**: the Python and torch runtime, the weights and one forward batch of the run's
   batch budget. ``stats`` measures this: the process's peak resident memory after it has loaded the
   model and run one batch of that size (``measure_speed``), before it tokenizes the corpus (whose
   whole documents it tokenizes for their exact lengths: a run with --max-tokens-per-doc does not).
2. **the blocks in flight**: the block whose model part runs and the one prepared ahead of it, each
   holding its texts, token ids, character offsets and windows: about ``BYTES_PER_BLOCK_TOKEN`` per
   token of the two largest consecutive blocks.
3. **at --level token, the token vectors of the two largest pieces**: a piece is at most --block-tokens
   window tokens, or one document alone when it is longer. A piece's vectors (token dim x 4 bytes per
   token) are held more than once at the peak: the windows' vectors and the documents' while they are
   made, then the documents' and the Parquet writer's levels of the row (4 bytes per value). The piece
   before is counted too: the allocator keeps freed blocks for reuse (pipeline.model.host_memory), and
   on a corpus they are not all reused by the next piece. ``TOKEN_COPIES`` of the two pieces in all.
4. **the largest tokenizer call**: while the fast tokenizer works it holds each token's id, piece text,
   offsets and word, and transformers' Python lists of them: about ``TOKENIZE_BYTES_PER_TOKEN`` a token
   (``TOKENIZE_OFFSETS_BYTES_PER_TOKEN`` with the character offsets --level token asks for). A call takes
   at most 256 Ki characters of texts (pipeline.text.tokenize.CALL_CHARS), a longer text alone, and
   under --max-tokens-per-doc only a long text's leading part (pipeline.text.cut): so this matters for
   one huge document, tokenized whole.

The constants were fitted to runs of the default model on man pages (docs/performance.md gives the
runs and how far the estimate was from each); the estimate is a sizing figure, not a bound.
"""
from __future__ import annotations

import numpy as np

TOKEN_COPIES = 4.5            # float32 copies of the two largest pieces' token vectors at the peak (--level token)
BYTES_PER_BLOCK_TOKEN = 150   # what a prepared block holds per token: text, ids, offsets, windows
BLOCKS_IN_FLIGHT = 2          # the block being encoded and the one prepared ahead (one feed thread)
TOKENIZE_BYTES_PER_TOKEN = 380          # the tokenizer's peak per token of one call, ids only
TOKENIZE_OFFSETS_BYTES_PER_TOKEN = 560  # ... with character offsets (--level token)


def model_part(measured: tuple[int, int, int], windows: int, positions: int, max_length: int) -> int:
    """The model part's peak bytes for a run whose forward batches hold at most ``windows`` windows of at most
    ``positions`` positions, from measure_speed's (peak after one window of ``max_length`` positions, peak
    after a full batch of them, that batch's windows): linear in the batch's positions between the two
    (activations grow with them), never beyond the full batch's. 0 where memory is not reported.

    Example: (0.58 GB, 0.80 GB, 16), 16 windows of 42 positions, max_length 512 -> 16 x 42 = 672 positions,
    (672 - 512) / (8,192 - 512) of the 0.22 GB between: 0.585 GB. A corpus of short documents never makes a
    batch of 16 full windows, nor one of 2 documents a batch of 16.
    """
    base, peak, per_batch = measured
    if not peak:
        return 0
    full = per_batch * max_length
    held = min(max(windows, 1), per_batch) * min(max(positions, 1), max_length)
    share = 1.0 if full <= max_length else min(max((held - max_length) / (full - max_length), 0.0), 1.0)
    return int(base + max(peak - base, 0) * share)


def largest_call(n_tokens: np.ndarray, n_chars: np.ndarray, max_tokens_per_doc: int | None = None) -> int:
    """The most tokens one tokenizer call of a run makes: texts grouped as tokenize_block groups them
    (pipeline.text.cut.calls, by characters); under --max-tokens-per-doc a text longer than the cut's budget
    counted as its leading part (at most ``8 N + 256`` tokens, one a character; such parts go in calls of
    their own, pipeline.text.cut.first_tokens), the others whole.

    Args:
        n_tokens: (N,) int the whole documents' tokens. n_chars: (N,) int their characters.
        max_tokens_per_doc: the run's --max-tokens-per-doc, or None.

    Example: tokens [2_000_000, 5], chars [2_000_000, 5], None -> 2,000,000; with 64 -> 768.
    """
    from ..text.cut import CUT_CHARS_PER_TOKEN, CUT_MIN_CHARS, calls

    n_tokens = np.asarray(n_tokens, dtype=np.int64)
    n_chars = np.asarray(n_chars, dtype=np.int64)
    cut = np.zeros(len(n_tokens), dtype=bool)
    groups = []
    if max_tokens_per_doc is not None:
        budget = max_tokens_per_doc * CUT_CHARS_PER_TOKEN + CUT_MIN_CHARS
        cut = n_chars > budget
        groups.append((np.minimum(n_tokens[cut], budget), np.full(int(cut.sum()), budget)))   # the parts
    groups.append((n_tokens[~cut], n_chars[~cut]))
    return max([int(tokens[lo:hi].sum()) for tokens, chars in groups for lo, hi in calls(chars.tolist())] or [0])


def largest_blocks(n_kept: np.ndarray, block_rows: int, blocks: int = BLOCKS_IN_FLIGHT) -> int:
    """The most tokens ``blocks`` consecutive blocks of ``block_rows`` documents hold together.

    Args:
        n_kept: (N,) int content tokens per document, in input order. block_rows: documents per block.

    Example: n_kept [5, 1, 1, 9, 2], block_rows 2 -> blocks of 6, 10 and 2 tokens -> 16 (the first two).
    """
    n = len(n_kept)
    if n == 0:
        return 0
    sums = np.add.reduceat(np.asarray(n_kept, dtype=np.int64), np.arange(0, n, block_rows))   # (n_blocks,)
    if len(sums) <= blocks:
        return int(sums.sum())
    return int(np.convolve(sums, np.ones(blocks, dtype=np.int64), mode="valid").max())


def largest_pieces(n_kept: np.ndarray, block_tokens: int, content_tokens: int, count: int = 2) -> int:
    """Content tokens of the ``count`` largest pieces a run makes, summed: a piece holds at most
    ``block_tokens`` window tokens, a document alone more (pipeline.pieces.piece_bounds). The pieces are
    the documents longer than the budget's content tokens (each window of C content tokens holds 2
    specials besides), each alone, and pieces of the budget (or of what the other documents hold, when
    less).

    Example: n_kept [300, 80_000, 50_000], block_tokens 32_768, C 510 -> 80_000 + 50_000;
    n_kept [300] * 1000 -> 2 x 32,640.
    """
    n_kept = np.asarray(n_kept, dtype=np.int64)
    budget = block_tokens * content_tokens // (content_tokens + 2)
    alone = np.sort(n_kept[n_kept > budget])[::-1].tolist()                  # each a piece of its own
    rest = int(n_kept[n_kept <= budget].sum())
    shared = [budget] * (rest // budget) + ([rest % budget] if rest % budget else [])
    return int(sum(sorted(alone + shared, reverse=True)[:count]))


def peak_estimate(model_bytes: int, n_kept: np.ndarray, per_token: bool, token_dim: int, block_rows: int,
                  block_tokens: int, content_tokens: int, call_tokens: int = 0) -> dict:
    """The estimated peak resident memory of ``extract`` over a corpus, in bytes, and its parts.

    Args:
        model_bytes: measured peak of the runtime, the weights and one forward batch (``stats``).
        n_kept: (N,) int content tokens per document (after --max-tokens-per-doc), in input order.
        per_token: a --level token run. token_dim: values per token vector at --level token.
        block_rows, block_tokens: the run's --block-rows and --block-tokens. content_tokens: C.
        call_tokens: the tokens of the run's largest tokenizer call (``largest_call``).

    Returns:
        {"bytes": int total, "model": int, "blocks": int, "tokens": int (0 unless --level token),
        "piece_tokens": int content tokens of the two largest pieces (--level token), "tokenizer": int
        the largest tokenizer call's}. Example: 0.9 GB
        measured, one document of 77,508 tokens at --level token with token_dim 384 -> model 0.9 GB,
        blocks 11.6 MB, tokens 4.5 x 77,508 x 384 x 4 = 536 MB.
    """
    blocks = BYTES_PER_BLOCK_TOKEN * largest_blocks(n_kept, block_rows)
    piece = largest_pieces(n_kept, block_tokens, content_tokens) if per_token else 0
    tokens = int(TOKEN_COPIES * piece * token_dim * 4)
    tokenizer = int(call_tokens) * (TOKENIZE_OFFSETS_BYTES_PER_TOKEN if per_token else TOKENIZE_BYTES_PER_TOKEN)
    return {"bytes": int(model_bytes) + blocks + tokens + tokenizer, "model": int(model_bytes), "blocks": blocks,
            "tokens": tokens, "piece_tokens": piece, "tokenizer": tokenizer}


def format_estimate(estimate: dict, level: str, block_tokens: int) -> str:
    """The ``memory`` line of ``stats``: e.g. "about 1.41 GB at the peak (--level token: model and one forward
    batch 0.86 GB (measured, scaled to the run's largest), blocks in flight 0.01 GB, token vectors of the two largest pieces 0.54 GB:
    77,508 tokens (--block-tokens 32768 bounds a piece; a longer document is a piece of its own))"."""
    gb = 1e9
    parts = [f"model and one forward batch {estimate['model'] / gb:.2f} GB (measured, scaled to the run's largest)",
             f"blocks in flight {estimate['blocks'] / gb:.2f} GB"]
    if estimate.get("tokenizer", 0) >= 0.01 * gb:   # one huge document tokenized whole
        parts.append(f"the largest tokenizer call {estimate['tokenizer'] / gb:.2f} GB")
    if estimate["piece_tokens"]:
        parts.append(f"token vectors of the two largest pieces {estimate['tokens'] / gb:.2f} GB: "
                     f"{estimate['piece_tokens']:,} tokens (--block-tokens {block_tokens} bounds a piece; "
                     "a longer document is a piece of its own)")
    return f"about {estimate['bytes'] / gb:.2f} GB at the peak (--level {level}: " + ", ".join(parts) + ")"
