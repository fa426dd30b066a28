"""The progress bar moves with every forward batch (not once per block), and the model load is announced."""
from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import invoke, words, write_csv
from tqdm import tqdm

from pipeline.engine.progress import PlainProgress, progress_bar
from pipeline.engine.run import BatchProgress


def test_bar_advances_by_whole_documents_of_the_tokens_done_and_waits_for_the_write():
    bar = tqdm(total=10, file=io.StringIO())
    progress = BatchProgress(bar)
    progress.start_block(4, 100)             # 4 documents whose windows hold 100 tokens
    progress.batch(3, 60)
    assert bar.n == 2                        # floor(4 x 60/100 = 2.4): whole documents only
    progress.batch(1, 40)
    assert bar.n == 3                        # every token done, but the block is not written yet
    progress.end_block()
    assert bar.n == 4
    progress.start_block(6, 0)               # a block of empty documents: no windows, no batches
    progress.end_block()
    assert bar.n == 10
    assert progress.windows_done == 4 and progress.tokens_done == 100


def test_the_count_never_runs_ahead_of_the_documents_written(runner, tiny_model_dir, tmp_path):
    """Blocks of 3 documents, batches of 1 window: at every batch the bar is below the documents written
    before the block plus the block's own, and a whole number; it reaches 7 when the last block is written."""
    src = write_csv(tmp_path / "in.csv", [{"text": words(5 + i)} for i in range(7)])
    seen, written = [], [0]
    batch, end = BatchProgress.batch, BatchProgress.end_block

    def spy_batch(self, windows, tokens):
        batch(self, windows, tokens)
        seen.append((self.bar.n, written[0] + self.docs))

    def spy_end(self):
        written[0] += self.docs               # the block's rows were written just before
        end(self)
        seen.append((self.bar.n, written[0] + 1))

    BatchProgress.batch, BatchProgress.end_block = spy_batch, spy_end
    try:
        result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "--batch-size", 1, "--block-rows", 3,
                                 "-o", tmp_path / "o.parquet"])
    finally:
        BatchProgress.batch, BatchProgress.end_block = batch, end
    assert result.exit_code == 0, result.output
    assert len(seen) == 7 + 3                                       # 7 one-window batches, 3 blocks
    assert all(n == int(n) and n < limit for n, limit in seen)
    assert seen[-1][0] == 7 and result.stderr.splitlines()[-1].startswith("progress: 7/7 documents in ")


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


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_off_a_terminal_one_plain_line_every_interval_and_a_last_line():
    clock, out = FakeClock(), io.StringIO()
    bar = PlainProgress(total=1000, initial=0, stream=out, interval=30.0, clock=clock)
    progress = BatchProgress(bar)
    progress.start_block(100, 1000)
    clock.now += 10
    bar.update(50)                                  # 10 s: under the interval, nothing printed
    assert out.getvalue() == ""
    bar.set_postfix(windows_s="3.0", tokens_s="5310")
    clock.now += 20
    bar.update(50)                                  # 30 s, 100 of 1000 documents: ETA 900 / (100 / 30 s)
    assert out.getvalue() == "progress: 100/1000 documents (10.0%), 5310 tokens/s, ETA 4:30\n"
    clock.now += 29
    bar.update(100)
    assert out.getvalue().count("\n") == 1          # 29 s since the last line
    clock.now += 1
    bar.update(0)                                   # 60 s: 200 done, ETA 800 / (200 / 60 s) = 240 s
    assert out.getvalue().splitlines()[-1] == "progress: 200/1000 documents (20.0%), 5310 tokens/s, ETA 4:00"
    bar.update(800)
    clock.now += 3600 + 62
    bar.close()
    bar.close()                                     # once only
    assert out.getvalue().splitlines()[-1] == "progress: 1000/1000 documents in 1:02:02, 5310 tokens/s"  # 3722 s
    assert out.getvalue().count("\n") == 3


def test_the_bar_on_a_terminal_plain_lines_elsewhere_nothing_with_no_progress():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    assert isinstance(progress_bar(10, 0, True, stream=Terminal()), tqdm)
    assert isinstance(progress_bar(10, 0, True, stream=io.StringIO()), PlainProgress)
    quiet = io.StringIO()
    bar = progress_bar(10, 0, False, stream=quiet)
    bar.update(10)
    bar.close()
    assert isinstance(bar, tqdm) and bar.disable and quiet.getvalue() == ""


def test_a_run_whose_stderr_is_a_file_prints_plain_lines_not_a_bar(runner, tiny_model_dir, tmp_path):
    src = write_csv(tmp_path / "in.csv", [{"text": words(5 + i)} for i in range(6)])
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert lines[0] == f"loading model {tiny_model_dir} ..."
    assert lines[-1].startswith("progress: 6/6 documents in 0:") and " tokens/s" in lines[-1]
    assert "\r" not in result.stderr and "|" not in result.stderr   # no bar redraws


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="Linux's /proc: elsewhere ru_maxrss is the figure")
def test_peak_memory_is_the_programs_own_not_its_parents_at_the_fork():
    """A run started by a large process (here one holding 1 GiB) reports its own peak: getrusage's
    ru_maxrss is kept across execve and would give the parent's 1 GiB; VmHWM is the new program's."""
    held = 1024 * 1024 * 1024
    parent = ("import subprocess, sys\n"
              f"big = bytearray({held})\n"        # zero-filled pages: resident in the parent at the fork
              "out = subprocess.run([sys.executable, '-c', 'from pipeline.engine.run import peak_memory; "
              "import resource; print(peak_memory(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)'], "
              "capture_output=True, text=True, check=True).stdout\n"
              "print(out)\n")
    done = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[2])
    ours, maxrss = map(int, done.stdout.split())
    assert maxrss > held                      # the inherited figure the summary line used to show
    assert 0 < ours < held // 2               # the child's own: Python and its imports (under 0.3 GB here)
