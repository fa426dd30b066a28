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


def test_the_model_part_scales_to_the_largest_batch_the_run_makes():
    from pipeline.engine.memory_estimate import model_part

    measured = (500_000_000, 800_000_000, 16)               # one window of 512, then 16 of them
    assert model_part(measured, 100, 512, 512) == 800_000_000   # full batches
    assert model_part(measured, 1, 512, 512) == 500_000_000     # one window: the first peak
    assert model_part(measured, 16, 42, 512) == int(500_000_000 + 300_000_000 * (16 * 42 - 512) / (16 * 512 - 512))
    assert model_part(measured, 2, 66, 512) == 500_000_000      # 132 positions: under one full window
    assert model_part((0, 0, 16), 16, 512, 512) == 0            # memory not reported


def test_the_largest_tokenizer_call_is_a_whole_document_or_a_cut_part():
    from pipeline.engine.memory_estimate import TOKENIZE_BYTES_PER_TOKEN, TOKENIZE_OFFSETS_BYTES_PER_TOKEN, largest_call

    tokens, chars = np.array([2_000_000, 5, 7]), np.array([2_000_000, 5, 7])
    assert largest_call(tokens, chars) == 2_000_000                   # tokenized whole, a call of its own
    assert largest_call(tokens, chars, 64) == 64 * 8 + 256            # its leading part only
    many = np.full(1000, 100)                                           # 1,000 texts of 1,000 characters
    assert largest_call(many, many * 10) == 100 * ((1 << 18) // 1000)  # 262 texts a call of 256 Ki characters
    assert largest_call(np.zeros(0, np.int64), np.zeros(0, np.int64)) == 0
    est = peak_estimate(500_000_000, np.array([64, 5]), False, 32, 256, 32_768, 510, call_tokens=768)
    assert est["tokenizer"] == 768 * TOKENIZE_BYTES_PER_TOKEN and est["bytes"] == 500_000_000 + est["blocks"] + est["tokenizer"]
    token = peak_estimate(500_000_000, np.array([64, 5]), True, 32, 256, 32_768, 510, call_tokens=768)
    assert token["tokenizer"] == 768 * TOKENIZE_OFFSETS_BYTES_PER_TOKEN


def test_the_largest_batch_counts_a_blocks_windows_and_the_longest_window(tiny_model_dir):
    from pipeline.engine.stats import largest_batch
    from pipeline.options.config import PipelineConfig

    cfg = PipelineConfig.from_options(model=str(tiny_model_dir), strategy="chunk", max_length=16, block_rows=2)
    # chunk windows of 14 content tokens: 30 tokens -> 3 windows, 5 -> 1, 14 -> 1; blocks (30, 5), (14,)
    assert largest_batch(np.array([30, 5, 14]), cfg) == (4, 16)
    assert largest_batch(np.array([5, 3]), cfg) == (2, 7)
    two = PipelineConfig.from_options(model=str(tiny_model_dir), features=("head:mean", "chunk:mean"), max_length=16)
    assert largest_batch(np.array([30]), two) == (4, 16)      # head's window and chunk's three


def test_stats_measures_the_model_before_it_tokenizes_whole_documents(runner, tiny_model_dir, tmp_path,
                                                                     monkeypatch):
    """Its own whole-document tokenizing is not the model part's: measure_speed runs first, while only
    leading parts (the sample's) were tokenized."""
    import pipeline.engine.measure as measure
    import pipeline.engine.stats as stats

    seen = []
    real_tokenize, real_measure = stats.tokenize_block, measure.measure_speed
    monkeypatch.setattr(stats, "tokenize_block", lambda *a, **k: seen.append("whole") or real_tokenize(*a, **k))
    monkeypatch.setattr(measure, "measure_speed", lambda *a, **k: seen.append("measure") or real_measure(*a, **k))
    src = write_csv(tmp_path / "in.csv", [{"text": words(n, n)} for n in (700, 20, 50)])
    result = invoke(runner, ["stats", src, "--model", tiny_model_dir, "--max-length", 16, "--strategy", "chunk"])
    assert result.exit_code == 0, result.output
    assert seen == ["measure", "whole"]
