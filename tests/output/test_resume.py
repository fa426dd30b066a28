"""Interruptions: SIGKILL + --resume equals an uninterrupted run; SIGINT leaves no output; memory stays flat.

These run the real CLI in a subprocess with the real default model (a few seconds each).
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import words, write_csv
from pipeline.output.write import read_manifest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "corpus.csv"


def cli(*args, **popen) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, str(REPO / "cli.py"), "extract", *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def read_parts(path: Path) -> pa.Table:
    manifest = read_manifest(path)
    assert manifest["complete"] is True
    return pa.concat_tables([pq.read_table(path / p["file"]) for p in manifest["parts"]])


def _listed_parts(path: Path) -> int:
    """Parts the manifest lists as finished (0 before it exists or while it is being replaced)."""
    try:
        return len(read_manifest(path)["parts"])
    except (OSError, ValueError, KeyError, TypeError):  # TypeError: no manifest yet
        return 0


def wait_for(predicate, proc, seconds=120.0):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def test_sigkill_then_resume_equals_uninterrupted_run(tmp_path):
    args = [EXAMPLE, "--id-col", "id", "--keep-col", "title", "--strategy", "head", "--block-rows", "4",
            "--no-progress"]
    full = cli(*args, "-o", f"{tmp_path / 'full'}/")
    assert full.wait(timeout=600) == 0, full.stderr.read()
    reference = read_parts(tmp_path / "full")

    killed_dir = tmp_path / "killed"
    proc = cli(*args, "-o", f"{killed_dir}/")
    reached = wait_for(lambda: _listed_parts(killed_dir) >= 3, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert reached, "the run ended before it could be killed"
    manifest = read_manifest(killed_dir)
    assert manifest["complete"] is False and 3 <= len(manifest["parts"]) < len(read_manifest(tmp_path / "full")["parts"])

    resumed = cli(*args, "-o", f"{killed_dir}/", "--resume")
    assert resumed.wait(timeout=600) == 0, resumed.stderr.read()
    assert "resuming" in resumed.stderr.read()
    table = read_parts(killed_dir)
    again = cli(*args, "-o", f"{killed_dir}/", "--resume")   # resuming a finished run changes nothing
    assert again.wait(timeout=600) == 0, again.stderr.read()
    assert read_parts(killed_dir).equals(table)
    assert table.column("id").to_pylist() == reference.column("id").to_pylist()
    a = np.stack([x for x in table.column("features").to_pylist() if x is not None])
    b = np.stack([x for x in reference.column("features").to_pylist() if x is not None])
    np.testing.assert_allclose(a, b, atol=1e-5)


KILLS = 20  # SIGKILLs at random moments of one DIR/ run, each followed by --resume (issue 17; ~3 s each: the imports)


def test_sigkill_at_random_moments_each_then_resume_equals_uninterrupted_run(tmp_path, tiny_model_dir):
    rng = random.Random(17)
    src = write_csv(tmp_path / "in.csv", [{"id": f"d{i}", "text": words(40, i)} for i in range(120)])
    args = [src, "--id-col", "id", "--model", tiny_model_dir, "--block-rows", "4", "--batch-size", "2", "--no-progress"]
    full = cli(*args, "-o", f"{tmp_path / 'full'}/")
    assert full.wait(timeout=600) == 0, full.stderr.read()
    reference = read_parts(tmp_path / "full")
    n_parts = len(read_manifest(tmp_path / "full")["parts"])
    out = tmp_path / "killed"
    moments = []
    for _ in range(KILLS):
        before = _listed_parts(out) if out.is_dir() else 0
        target = before + rng.randint(0, max(0, n_parts - before - 1))   # kill once this many parts are listed,
        delay = rng.uniform(0.0, 0.05)                                    # then a few ms later
        proc = cli(*args, "-o", f"{out}/", *(["--resume"] if out.is_dir() else []))
        wait_for(lambda: _listed_parts(out) >= target if out.is_dir() else target == 0, proc)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        rc = proc.wait()
        assert rc in (0, -signal.SIGKILL), proc.stderr.read()
        moments.append((target, rc))
    resumed = cli(*args, "-o", f"{out}/", *(["--resume"] if out.is_dir() else []))
    assert resumed.wait(timeout=600) == 0, (moments, resumed.stderr.read())
    assert sum(rc == -signal.SIGKILL for _, rc in moments) >= KILLS // 2, moments   # most kills were part-way
    table = read_parts(out)
    assert table.column("id").to_pylist() == reference.column("id").to_pylist()
    np.testing.assert_allclose(np.array(table.column("features").to_pylist(), np.float32),
                               np.array(reference.column("features").to_pylist(), np.float32), atol=1e-5)
    assert sorted(p.name for p in out.iterdir()) == ["_manifest.parquet", *(f"part-{i:05d}.parquet" for i in range(n_parts))]


def test_resume_refuses_other_options(tmp_path):
    src = write_csv(tmp_path / "in.csv", [{"text": "a b c"}])
    out = f"{tmp_path / 'parts'}/"
    assert cli(src, "-o", out, "--no-progress").wait(timeout=300) == 0
    proc = cli(src, "-o", out, "--resume", "--strategy", "chunk")
    assert proc.wait(timeout=300) == 2
    assert "--resume: the options differ from the run that wrote" in proc.stderr.read()
    write_csv(tmp_path / "in.csv", [{"text": "a b c d"}])
    proc = cli(src, "-o", out, "--resume")
    assert proc.wait(timeout=300) == 2
    assert "--resume: the input files differ" in proc.stderr.read()


def test_sigint_leaves_no_file_at_the_output_path(tmp_path):
    src = write_csv(tmp_path / "in.csv", [{"text": words(400, i)} for i in range(400)])
    out = tmp_path / "o.parquet"
    proc = cli(src, "-o", out, "--block-rows", "8", "--strategy", "chunk")
    assert wait_for(lambda: any(tmp_path.glob(".o.parquet.*.partial")), proc), proc.stderr.read()
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=300) == 130
    assert "Interrupted" in proc.stderr.read()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def _peak_rss_kb(args) -> int:
    """Peak RSS (kB) of one `longbert extract ARGS` run in a fresh process: VmHWM of its own memory
    map. Not getrusage's ru_maxrss, which keeps the high-water mark of the forked copy of pytest
    (1.4 GB late in the suite) across exec."""
    code = ("import runpy, sys\n"
            f"sys.argv = ['cli.py', 'extract', *sys.argv[1:]]\n"
            "try:\n"
            f"    runpy.run_path({str(REPO / 'cli.py')!r}, run_name='__main__')\n"
            "except SystemExit as e:\n"
            "    assert not e.code, e.code\n"
            "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]\n"
            "print('RSS', hwm.split()[1])")
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                         timeout=600, cwd=REPO)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split("RSS")[-1])


def test_peak_memory_does_not_grow_with_corpus_size(tmp_path, tiny_model_dir):
    """10x more rows (per-token output, ~38 kB of vectors a row) peaks within 20% of the smaller run."""
    rows = [{"text": words(150, i)} for i in range(800)]
    small = write_csv(tmp_path / "small.csv", rows)
    large = write_csv(tmp_path / "large.csv", rows * 10)
    common = ["--model", tiny_model_dir, "--level", "token", "--layers=-2,-1", "--layer-agg", "concat",
              "--no-progress", "--block-rows", "64"]
    rss_small = _peak_rss_kb([small, "-o", tmp_path / "s.parquet", *common])
    rss_large = _peak_rss_kb([large, "-o", tmp_path / "l.parquet", *common])
    held_if_buffered = 7200 * 150 * 64 * 4 / 1024  # kB the extra rows' token vectors would take if held
    print(f"peak RSS: {rss_small} kB for 800 rows, {rss_large} kB for 8000 rows")
    assert rss_large <= 1.2 * rss_small
    assert held_if_buffered > 0.2 * rss_small or pytest.fail("test corpus too small to show growth")
