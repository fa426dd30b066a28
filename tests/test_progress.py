"""The progress bar moves with every forward batch (not once per block), and the model load is announced."""
from __future__ import annotations

import io

import pytest
from conftest import invoke, words, write_csv
from tqdm import tqdm

from pipeline.run import BatchProgress


def test_bar_advances_by_the_share_of_tokens_each_batch_did():
    bar = tqdm(total=10, file=io.StringIO())
    progress = BatchProgress(bar)
    progress.start_block(4, 100)             # 4 documents whose windows hold 100 tokens
    progress.batch(3, 60)
    assert bar.n == pytest.approx(2.4)       # 4 x 60/100
    progress.batch(1, 40)
    assert bar.n == pytest.approx(4.0)
    progress.end_block()
    progress.start_block(6, 0)               # a block of empty documents: no windows, no batches
    progress.end_block()
    assert bar.n == pytest.approx(10.0)
    assert progress.windows_done == 4 and progress.tokens_done == 100


def test_run_reports_batches_and_announces_the_model(runner, tiny_model_dir, tmp_path):
    """A single block of 6 documents in batches of 2 windows: the bar is updated 3 times inside the block."""
    src = write_csv(tmp_path / "in.csv", [{"text": words(5 + i)} for i in range(6)])
    calls = []
    original = BatchProgress.batch

    def spy(self, windows, tokens):
        calls.append((windows, tokens, self.bar.n))
        original(self, windows, tokens)

    BatchProgress.batch = spy
    try:
        result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "--batch-size", "2", "-o", tmp_path / "o.parquet"])
    finally:
        BatchProgress.batch = original
    assert result.exit_code == 0, result.output
    assert f"loading model {tiny_model_dir} ..." in result.output
    assert [c[0] for c in calls] == [2, 2, 2]                        # windows per batch
    assert sum(c[1] for c in calls) == sum(5 + i + 2 for i in range(6))   # every window's tokens, [CLS]/[SEP] too
    assert calls[1][2] > 0 and calls[2][2] > calls[1][2]             # the bar moved inside the one block
