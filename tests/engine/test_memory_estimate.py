"""stats estimates a run's peak memory: the model part measured, the blocks in flight and, at --level token, the
token vectors of the largest piece (a piece is bounded by --block-tokens, a longer document is one alone)."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import invoke, words, write_csv
from pipeline.engine.memory_estimate import (BYTES_PER_BLOCK_TOKEN, TOKEN_COPIES, largest_blocks, largest_pieces,
                                             peak_estimate)


@pytest.mark.parametrize("n_kept, rows, want", [
    ([5, 1, 1, 9, 2], 2, 16),      # blocks of 6, 10, 2 tokens: the first two together
    ([5, 1, 1, 9, 2], 1, 11),      # 9 + 2
    ([5, 1], 4, 6),                # one block
    ([], 4, 0),
])
def test_largest_blocks_sums_the_two_largest_consecutive_blocks(n_kept, rows, want):
    assert largest_blocks(np.asarray(n_kept, dtype=np.int64), rows) == want


def test_the_two_largest_pieces_are_the_budget_or_longer_documents():
    assert largest_pieces(np.array([300, 80_000, 50_000]), 32_768, 510) == 130_000          # each alone
    assert largest_pieces(np.array([300] * 1000), 32_768, 510) == 2 * (32_768 * 510 // 512)  # 2 x 32,640
    assert largest_pieces(np.array([300, 200]), 32_768, 510) == 500                         # one piece: all
    assert largest_pieces(np.array([80_000] + [300] * 200), 32_768, 510) == 80_000 + 32_640
    assert largest_pieces(np.zeros(0, dtype=np.int64), 32_768, 510) == 0


def test_peak_estimate_adds_its_parts():
    n_kept = np.array([77_508, 10, 20])
    est = peak_estimate(900_000_000, n_kept, True, 384, 256, 32_768, 510)
    assert est["piece_tokens"] == 77_508 + 30                     # the long document, then the other two
    assert est["tokens"] == int(TOKEN_COPIES * 77_538 * 384 * 4)
    assert est["blocks"] == BYTES_PER_BLOCK_TOKEN * 77_538
    assert est["bytes"] == 900_000_000 + est["blocks"] + est["tokens"]
    doc = peak_estimate(900_000_000, n_kept, False, 384, 256, 32_768, 510)
    assert doc["tokens"] == 0 and doc["bytes"] == 900_000_000 + est["blocks"]


def test_stats_prints_the_estimate_for_the_level(runner, tiny_model_dir, tmp_path):
    src = write_csv(tmp_path / "in.csv", [{"text": words(n, n)} for n in (700, 20, 50)])
    line = ["stats", src, "--model", tiny_model_dir, "--max-length", 16, "--strategy", "chunk", "--block-tokens", 512]
    token = invoke(runner, [*line, "--level", "token"])
    assert token.exit_code == 0, token.output
    memory = next(x for x in token.output.splitlines() if x.startswith("memory"))
    # the 700-token document is longer than 512 window tokens (448 content tokens): a piece of its own, the
    # other two (70 tokens) one piece; the tiny model's token vectors have 32 values
    assert f"token vectors of the two largest pieces {TOKEN_COPIES * 770 * 32 * 4 / 1e9:.2f} GB: 770 tokens" in memory
    assert memory.startswith("memory       about ") and "--level token: model and one forward batch" in memory
    given = invoke(runner, [*line, "--windows-per-second", 10])
    assert "memory       not estimated: the model was not run" in given.output
