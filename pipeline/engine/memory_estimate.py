"""The peak memory of an ``extract`` run, estimated before it runs (``longbert stats``).

A run holds, at its peak, three things (docs/performance.md, "Memory"):

1. **the model part**: the Python and torch runtime, the weights and one forward batch of the run's
   batch budget. ``stats`` measures this: the process's peak resident memory after it has loaded the
   model and run one batch of that size (``measure_speed``), the corpus already tokenized.
2. **the blocks in flight**: the block whose model part runs and the one prepared ahead of it, each
   holding its texts, token ids, character offsets and windows: about ``BYTES_PER_BLOCK_TOKEN`` per
   token of the two largest consecutive blocks.
3. **at --level token, the token vectors of the two largest pieces**: a piece is at most --block-tokens
   window tokens, or one document alone when it is longer. A piece's vectors (token dim x 4 bytes per
   token) are held more than once at the peak: the windows' vectors and the documents' while they are
   made, then the documents' and the Parquet writer's levels of the row (4 bytes per value). The piece
   before is counted too: the allocator keeps freed blocks for reuse (pipeline.model.host_memory), and
   on a corpus they are not all reused by the next piece. ``TOKEN_COPIES`` of the two pieces in all.

The constants were fitted to runs of the default model on man pages (docs/performance.md gives the
runs and how far the estimate was from each); the estimate is a sizing figure, not a bound.
"""
from __future__ import annotations

import numpy as np

TOKEN_COPIES = 4.5            # float32 copies of the two largest pieces' token vectors at the peak (--level token)
BYTES_PER_BLOCK_TOKEN = 150   # what a prepared block holds per token: text, ids, offsets, windows
BLOCKS_IN_FLIGHT = 2          # the block being encoded and the one prepared ahead (one feed thread)


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
                  block_tokens: int, content_tokens: int) -> dict:
    """The estimated peak resident memory of ``extract`` over a corpus, in bytes, and its parts.

    Args:
        model_bytes: measured peak of the runtime, the weights and one forward batch (``stats``).
        n_kept: (N,) int content tokens per document (after --max-tokens-per-doc), in input order.
        per_token: a --level token run. token_dim: values per token vector at --level token.
        block_rows, block_tokens: the run's --block-rows and --block-tokens. content_tokens: C.

    Returns:
        {"bytes": int total, "model": int, "blocks": int, "tokens": int (0 unless --level token),
        "piece_tokens": int content tokens of the two largest pieces (--level token)}. Example: 0.9 GB
        measured, one document of 77,508 tokens at --level token with token_dim 384 -> model 0.9 GB,
        blocks 11.6 MB, tokens 4.5 x 77,508 x 384 x 4 = 536 MB.
    """
    blocks = BYTES_PER_BLOCK_TOKEN * largest_blocks(n_kept, block_rows)
    piece = largest_pieces(n_kept, block_tokens, content_tokens) if per_token else 0
    tokens = int(TOKEN_COPIES * piece * token_dim * 4)
    return {"bytes": int(model_bytes) + blocks + tokens, "model": int(model_bytes), "blocks": blocks,
            "tokens": tokens, "piece_tokens": piece}


def format_estimate(estimate: dict, level: str, block_tokens: int) -> str:
    """The ``memory`` line of ``stats``: e.g. "about 1.41 GB at the peak (--level token: model and one forward
    batch 0.86 GB measured, blocks in flight 0.01 GB, token vectors of the two largest pieces 0.54 GB:
    77,508 tokens (--block-tokens 32768 bounds a piece; a longer document is a piece of its own))"."""
    gb = 1e9
    parts = [f"model and one forward batch {estimate['model'] / gb:.2f} GB measured",
             f"blocks in flight {estimate['blocks'] / gb:.2f} GB"]
    if estimate["piece_tokens"]:
        parts.append(f"token vectors of the two largest pieces {estimate['tokens'] / gb:.2f} GB: "
                     f"{estimate['piece_tokens']:,} tokens (--block-tokens {block_tokens} bounds a piece; "
                     "a longer document is a piece of its own)")
    return f"about {estimate['bytes'] / gb:.2f} GB at the peak (--level {level}: " + ", ".join(parts) + ")"
