"""--engine ray: the local engine's plan of blocks on Ray actors, so the same rows, order and vectors as
--engine local (every shared case, a 3 MiB field, skipped bad lines, every input format); kill and
resume without --id-col; bad options fail before Ray starts.

The session's local Ray (tests/conftest.py's ray_address: 2 logical CPUs) serves every test; runs in this process
use it and the killed subprocess joins it by address.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import CASES, invoke, words, write_csv
from test_formats import INPUTS, corpus  # noqa: F401 - the corpus fixture, written in every format

os.environ["RAY_AUTH_MODE"] = "disabled"
import ray  # noqa: E402 - make test installs the ray extra; a missing one fails here, not silently skips
from pipeline.output.write import read_manifest

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "corpus.csv"


def read_output(path: Path) -> pa.Table:
    """A .parquet file, or a DIR/ whose manifest says complete, in manifest order."""
    if path.is_file():
        return pq.read_table(path)
    manifest = read_manifest(path)
    assert manifest["complete"] is True
    return pa.concat_tables([pq.read_table(path / p["file"]) for p in manifest["parts"]])


def assert_same_output(local: pa.Table, other: pa.Table) -> None:
    """Same schema (with metadata), same rows in the same order; vectors within 1e-5."""
    assert other.schema.equals(local.schema, check_metadata=True)
    assert other.num_rows == local.num_rows
    for name in local.column_names:
        a, b = local.column(name).to_pylist(), other.column(name).to_pylist()
        if name in ("features", "token_features"):
            assert [x is None for x in a] == [x is None for x in b], name
            for x, y in zip(a, b):
                if x is not None:
                    assert np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)).max() < 1e-5, name
        else:
            assert a == b, name


@pytest.fixture(scope="module")
def tricky_csv(tmp_path_factory) -> tuple[Path, list[dict]]:
    """Empty and whitespace texts, ids with leading zeros, texts that look like numbers, embedded
    newlines, quotes and commas, documents over 512 tokens (tiny vocabulary: one word = one token)."""
    rows = [
        {"doc": "000123", "text": words(1200), "tag": "long"},
        {"doc": "007", "text": "42", "tag": "0042"},
        {"doc": "0", "text": "", "tag": ""},
        {"doc": "1e5", "text": "3.50", "tag": "NA"},
        {"doc": "00", "text": "   ", "tag": "null"},
        {"doc": "x1", "text": f'{words(30)}\n"{words(5)}", with, commas\n\n{words(700, 3)}', "tag": "nl"},
        {"doc": "x2", "text": words(511), "tag": ""},
        {"doc": "x3", "text": "NA", "tag": "-0"},
        {"doc": "x4", "text": words(2000, 7), "tag": "2000"},
        {"doc": "x5", "text": "a b c", "tag": "TRUE"},
    ]
    path = tmp_path_factory.mktemp("ray_csv") / "tricky.csv"
    write_csv(path, rows)
    return path, rows


@pytest.mark.parametrize("options", [
    ["--strategy", "head_tail", "--id-col", "doc", "--keep-col", "tag"],
    ["--strategy", "chunk", "--keep-col", "tag", "--block-rows", "3"],
    ["--strategy", "sliding", "--overlap", "100", "--level", "token", "--id-col", "doc", "--block-rows", "4"],
], ids=["head_tail", "chunk-row-ids", "sliding-token"])
def test_ray_equals_local(ray_address, tiny_model_dir, tricky_csv, tmp_path, runner, options):
    path, rows = tricky_csv
    common = [path, "--model", tiny_model_dir, "--no-progress", *options]
    local = invoke(runner, ["extract", *common, "-o", tmp_path / "local.parquet"])
    assert local.exit_code == 0, local.output
    ray_run = invoke(runner, ["extract", *common, "--engine", "ray", "-o", f"{tmp_path}/ray/"])
    assert ray_run.exit_code == 0, ray_run.output
    ours, theirs = read_output(tmp_path / "local.parquet"), read_output(tmp_path / "ray")
    assert_same_output(ours, theirs)
    if "--id-col" in options:
        assert theirs.column("id").to_pylist() == [r["doc"] for r in rows]   # "000123" keeps its zeros
    else:
        assert theirs.column("row").to_pylist() == list(range(len(rows)))
    if "--keep-col" in options:
        assert theirs.column("tag").to_pylist() == [r["tag"] for r in rows]   # "0042", "NA", "" stay text
    assert theirs.column("n_tokens").to_pylist()[8] == 2000          # 2,000 one-token words
    assert theirs.column("error").to_pylist()[2] == "empty text"
    assert ray_run.output.splitlines()[-1].startswith("10 documents,")


def test_ray_reads_every_shared_case_like_local(ray_address, tiny_model_dir, tmp_path, runner):
    """Every CSV of ../shared/cases in one run (BOM + CRLF, quotes, newlines, numeric-looking and empty
    texts, B14's stray quote skipped by --on-bad-lines skip); B31 (cp1252, CR-only lines) on its own;
    B27 (a header naming 'text' twice) refused by both engines with the same message."""
    inputs = sorted(p for p in CASES.glob("*.csv") if p.name not in ("B27.csv", "B31_cp1252.csv"))
    assert len(inputs) >= 13
    for extra, files in ((["--on-bad-lines", "skip"], inputs), (["--encoding", "cp1252"], [CASES / "B31_cp1252.csv"])):
        common = [*files, "--id-col", "id", "--model", tiny_model_dir, "--no-progress", "--block-rows", "5", *extra]
        local = invoke(runner, ["extract", *common, "-o", tmp_path / "local.parquet", "--overwrite"])
        assert local.exit_code == 0, local.output
        result = invoke(runner, ["extract", *common, "--engine", "ray", "-o", tmp_path / "ray.parquet", "--overwrite"])
        assert result.exit_code == 0, result.output
        assert_same_output(read_output(tmp_path / "local.parquet"), read_output(tmp_path / "ray.parquet"))
        assert result.output.splitlines()[-1].split(",")[0] == local.output.splitlines()[-1].split(",")[0]
    twice = [invoke(runner, ["extract", CASES / "B27.csv", "--model", tiny_model_dir, *engine, "-o", tmp_path / "b27.parquet"])
             for engine in ([], ["--engine", "ray"])]
    assert [r.exit_code for r in twice] == [2, 2] and twice[0].output == twice[1].output
    assert "B27.csv: the header names column 'text' 2 times" in twice[0].output


def test_ray_reads_every_format_like_local(ray_address, tiny_model_dir, corpus, tmp_path, runner):
    """One run over the same corpus as CSV, ;-CSV, TSV, JSON Lines, .jsonl.gz, .csv.zst, parquet (row
    groups of 3) and a folder of .txt files: both engines give the same output."""
    root, rows = corpus
    inputs = [root / INPUTS[f] for f in INPUTS if f != "semicolon"]
    common = [*inputs, "--model", tiny_model_dir, "--no-progress", "--strategy", "chunk", "--block-rows", "4",
              "--with-source"]
    local = invoke(runner, ["extract", *common, "-o", tmp_path / "local.parquet"])
    ray_run = invoke(runner, ["extract", *common, "--engine", "ray", "-o", f"{tmp_path}/ray/"])
    assert local.exit_code == 0 and ray_run.exit_code == 0, (local.output, ray_run.output)
    ours, theirs = read_output(tmp_path / "local.parquet"), read_output(tmp_path / "ray")
    assert_same_output(ours, theirs)
    assert theirs.num_rows == len(rows) * len(inputs)
    assert sorted(set(theirs.column("source").to_pylist()))[:2] == ["csv/c.csv", "gz/c.jsonl.gz"]


def test_ray_three_mib_field_and_skipped_lines_equal_local(ray_address, tiny_model_dir, tmp_path, runner):
    """A 3 MiB field (over pyarrow's CSV block size, which broke the old Ray reader) and lines that
    --on-bad-lines skip drops: same output on both engines."""
    path = tmp_path / "big.csv"
    big = words(900_000)                                   # ~3.4 MB of one-token words
    path.write_text(f'id,text\n1,"{big}"\n2,w1 w2,extra\n3,"w3\nw4"\n4,"unclosed\n5,w5\n')
    assert path.stat().st_size > 3 * 1024 * 1024
    common = [path, "--id-col", "id", "--model", tiny_model_dir, "--no-progress", "--on-bad-lines", "skip",
              "--strategy", "head", "--block-rows", "2"]
    local = invoke(runner, ["extract", *common, "-o", tmp_path / "local.parquet"])
    ray_run = invoke(runner, ["extract", *common, "--engine", "ray", "-o", f"{tmp_path}/ray/"])
    assert local.exit_code == 0 and ray_run.exit_code == 0, (local.output, ray_run.output)
    ours, theirs = read_output(tmp_path / "local.parquet"), read_output(tmp_path / "ray")
    assert_same_output(ours, theirs)
    assert theirs.column("id").to_pylist() == ["1", "3", "5"] and theirs.column("n_tokens").to_pylist() == [900_000, 2, 1]
    assert "2 bad lines skipped" in ray_run.output


@pytest.mark.parametrize("args, message", [
    (["--workers", "0"], "--workers=0"),
    (["--gpus-per-worker", "-1"], "--gpus-per-worker=-1"),
    (["--text-col", "body"], "column 'body' not found"),
    (["--overlap", "600", "--strategy", "sliding"], "overlap"),
    (["--format", "parquet"], "not a parquet file"),
], ids=["workers", "gpus", "column", "overlap", "format"])
def test_bad_option_fails_before_ray_starts(tiny_model_dir, tmp_path, runner, monkeypatch, args, message):
    import pipeline.engine.ray_engine as engine

    def no_ray(*_a, **_k):
        raise AssertionError("Ray was started")

    monkeypatch.setattr(engine, "_start_ray", no_ray)
    monkeypatch.setattr(engine, "import_ray", no_ray)
    path = write_csv(tmp_path / "in.csv", [{"dup": "a", "text": "w1 w2"}, {"dup": "a", "text": "w3"}])
    result = invoke(runner, ["extract", path, "--model", tiny_model_dir, "--engine", "ray",
                             "-o", f"{tmp_path}/out/", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_unreachable_address_and_missing_resources_exit_2(ray_address, tiny_model_dir, tmp_path, runner):
    """Ray would retry a dead address for minutes and wait forever for a GPU no node has."""
    from pipeline.errors import ConfigError
    from pipeline.engine.ray_engine import check_address

    with pytest.raises(ConfigError, match="nothing answers there"):
        check_address("127.0.0.1:1")
    with pytest.raises(ConfigError, match="is not HOST:PORT"):
        check_address("my-cluster")
    check_address(ray_address)                                       # the live one answers
    path = write_csv(tmp_path / "in.csv", [{"text": "w1 w2"}])
    result = invoke(runner, ["extract", path, "--model", tiny_model_dir, "--engine", "ray", "--gpus-per-worker", "1",
                             "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 2, result.output
    assert "no Ray node has the 2 CPUs and 1 GPUs one worker asks for (nodes: 2 CPU / 0 GPU)" in result.output
    assert list(tmp_path.iterdir()) == [path]


def test_ray_strict_row_error_leaves_no_output(ray_address, tiny_model_dir, tmp_path, runner):
    path = write_csv(tmp_path / "in.csv", [{"text": "w1 w2"}, {"text": ""}, {"text": "w3"}])
    result = invoke(runner, ["extract", path, "--model", tiny_model_dir, "--engine", "ray", "--strict",
                             "--no-progress", "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 1 and f"row 1 ({path} line 3): empty text" in result.output
    assert list(tmp_path.iterdir()) == [path]


def _listed_parts(path: Path) -> int:
    try:
        return len(read_manifest(path)["parts"])
    except (OSError, ValueError, KeyError, TypeError):  # TypeError: no manifest yet
        return 0


def test_kill_and_resume_equals_uninterrupted(ray_address, tmp_path, runner):
    """SIGKILL a run (the real default model, 4 rows per block, no --id-col) once parts exist; --resume
    then runs only the missing blocks, and the output equals the local engine's uninterrupted run."""
    out = tmp_path / "parts"
    common = [EXAMPLE, "--keep-col", "title", "--block-rows", "4", "--no-progress", "--strategy", "head"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, str(REPO / "cli.py"), "extract", *map(str, common), "--engine", "ray",
                             "--ray-address", ray_address, "-o", f"{out}/"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while _listed_parts(out) < 3 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, f"the run ended before it could be killed: {proc.communicate()[1][-2000:]}"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    manifest = read_manifest(out)
    assert manifest["complete"] is False and 3 <= len(manifest["parts"]) < 14   # 56 rows / 4 = 14 blocks
    assert not list(out.glob("part-*.parquet"))                  # parts stay hidden until the run completes

    resumed = invoke(runner, ["extract", *common, "--engine", "ray", "--resume", "-o", f"{out}/"])
    assert resumed.exit_code == 0, resumed.output
    assert f"resuming {out}/: {len(manifest['parts'])} of 14 blocks" in resumed.output
    local = invoke(runner, ["extract", *common, "-o", tmp_path / "local.parquet"])
    assert local.exit_code == 0, local.output
    assert_same_output(read_output(tmp_path / "local.parquet"), read_output(out))
    again = invoke(runner, ["extract", *common, "--engine", "ray", "--resume", "-o", f"{out}/"])
    assert again.exit_code == 0 and "already complete" in again.output
    other = invoke(runner, ["extract", *common, "--engine", "ray", "--resume", "--strategy", "tail", "-o", f"{out}/"])
    assert other.exit_code == 2 and "--resume: the options differ" in other.output   # never replaced silently
    assert_same_output(read_output(tmp_path / "local.parquet"), read_output(out))


def test_more_cpus_per_worker_than_cores_exits_2_before_a_local_ray_starts(tiny_model_dir, tmp_path):
    """A local Ray is sized to fit the workers, so a CPU count this machine lacks is refused up front
    (in a fresh process: this module's Ray is already running here)."""
    path = write_csv(tmp_path / "in.csv", [{"text": "w1 w2"}])
    cores = os.cpu_count()
    out = subprocess.run([sys.executable, str(REPO / "cli.py"), "extract", str(path), "--model", str(tiny_model_dir),
                          "--engine", "ray", "--cpus-per-worker", str(cores + 1), "-o", str(tmp_path / "o.parquet")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr
    assert f"--cpus-per-worker={cores + 1}, but this machine has {cores} cores" in out.stderr
    assert "Traceback" not in out.stderr and sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def _summary_counts(line: str) -> dict[str, str]:
    """The summary line's counts by name, without the seconds, the peak memory and the output path."""
    head, _, extra = line.partition(" -> ")
    parts = [p.strip() for p in head.split(",") if not p.strip().endswith(" s")] + [p.strip() for p in extra.split("(", 1)[-1].rstrip(")").split(";")]
    return {" ".join(p.split()[1:]): p.split()[0] for p in parts if p and p[0].isdigit()}


def test_ray_summary_equals_local(ray_address, tiny_model_dir, tricky_csv, tmp_path, runner):
    """Several features share windows (head's window is head_tail's for short documents): both engines
    count the same windows encoded and saved by de-duplication, from the block function's counts."""
    path, rows = tricky_csv
    common = [path, "--model", tiny_model_dir, "--no-progress", "--max-length", 16, "--block-rows", 3,
              "--feature", "head:cls", "--feature", "head_tail:mean", "--feature", "chunk:mean"]
    local = invoke(runner, ["extract", *common, "-o", tmp_path / "local.parquet"])
    assert local.exit_code == 0, local.output
    ray_run = invoke(runner, ["extract", *common, "--engine", "ray", "-o", tmp_path / "ray.parquet"])
    assert ray_run.exit_code == 0, ray_run.output
    ours, theirs = _summary_counts(local.output.splitlines()[-1]), _summary_counts(ray_run.output.splitlines()[-1])
    assert int(ours["windows saved by de-duplication"]) > 0
    assert theirs == ours
    assert ours["documents"] == str(len(rows)) and "windows encoded" in ours


def test_ray_workers_share_the_store_and_summary_equals_local(ray_address, tiny_model_dir, tricky_csv, tmp_path,
                                                               runner):
    path, _ = tricky_csv
    common = [path, "--model", tiny_model_dir, "--no-progress", "--strategy", "chunk", "--block-rows", "3"]

    def line(result) -> str:  # the summary without its seconds and output path
        assert result.exit_code == 0, result.output
        text = result.output.splitlines()[-1]
        return text.split(" rows with errors, ")[0] + " | " + text.split(" -> ")[1].partition(" (")[2]

    def windows(text: str) -> int:  # encoded + from the cache
        return sum(int(text.split(what)[0].split()[-1]) for what in (" windows encoded", " from the cache"))

    local = [line(invoke(runner, ["extract", *common, "--cache", tmp_path / "local", "-o",
                                  tmp_path / f"local{i}.parquet"])) for i in range(2)]
    ray_args = ["extract", *common, "--engine", "ray", "--workers", "2", "--cpus-per-worker", "1",
                "--cache", tmp_path / "ray"]
    rays = [line(invoke(runner, [*ray_args, "-o", f"{tmp_path}/ray{i}/"])) for i in range(2)]
    # a cold run: two workers may both miss a window that two of their blocks share, so only the sum is fixed
    assert windows(rays[0]) == windows(local[0])
    assert rays[1] == local[1] and " 0 windows encoded, " in local[1]
    copy = tmp_path / "ray_copy"   # the actors' windows are in the store file itself once the run ends
    copy.mkdir()
    shutil.copy(tmp_path / "ray" / "windows.sqlite3", copy)
    conn = sqlite3.connect(copy / "windows.sqlite3")
    stored = conn.execute("SELECT count(*) FROM windows").fetchone()[0]
    conn.close()
    assert stored == int(local[0].split(" windows encoded")[0].split()[-1])   # the cold local run's distinct windows
    for i in range(2):
        assert_same_output(read_output(tmp_path / "local0.parquet"), read_output(tmp_path / f"ray{i}"))


def test_ray_int8_token_output_equals_local(ray_address, tiny_model_dir, tricky_csv, tmp_path, runner):
    """--out-dtype int8 at --level token: Ray's parts hold the local run's q (each vector quantized
    alone: at most one level apart where the float32 vectors differ in the last bits) and scales."""
    path, _ = tricky_csv
    common = [path, "--model", tiny_model_dir, "--no-progress", "--strategy", "chunk", "--level", "token",
              "--out-dtype", "int8", "--block-rows", "4"]
    local = invoke(runner, ["extract", *common, "-o", tmp_path / "local.parquet"])
    assert local.exit_code == 0, local.output
    ray_run = invoke(runner, ["extract", *common, "--engine", "ray", "-o", f"{tmp_path}/ray/"])
    assert ray_run.exit_code == 0, ray_run.output
    ours, theirs = read_output(tmp_path / "local.parquet"), read_output(tmp_path / "ray")
    assert theirs.schema.equals(ours.schema, check_metadata=True)
    assert theirs.schema.field("token_features").type == pa.list_(pa.list_(pa.int8(), 32))
    for name in ours.column_names:
        a, b = ours.column(name).to_pylist(), theirs.column(name).to_pylist()
        if name in ("features", "token_features", "features_scale", "token_features_scale"):
            assert [x is None for x in a] == [x is None for x in b], name
            for x, y in zip(a, b):
                if x is not None:
                    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
                    tol = 1 if name in ("features", "token_features") else 1e-5 * np.abs(x).max()
                    assert np.abs(x - y).max() <= tol, name
        else:
            assert a == b, name


@pytest.mark.parametrize("form,level", [("int8", "document"), ("binary", "document"), ("binary", "token")])
def test_ray_compact_output_loads_like_local(ray_address, tiny_model_dir, tricky_csv, tmp_path, runner, form, level):
    """--out-dtype int8 / binary under Ray: the stored bytes and load_features' vectors equal the local
    engine's, but where the float32 vectors (equal within 1e-5) sit on a quantization boundary: one int8
    level apart, or a sign bit of a value within 1e-5 of the binary centre."""
    from pipeline.classify.features import load_features

    path, _ = tricky_csv
    common = [path, "--model", tiny_model_dir, "--no-progress", "--strategy", "chunk", "--level", level,
              "--block-rows", "4"]
    assert invoke(runner, ["extract", *common, "-o", tmp_path / "f32.parquet"]).exit_code == 0
    for engine in ("local", "ray"):
        out = tmp_path / f"{engine}.parquet" if engine == "local" else f"{tmp_path}/ray/"
        done = invoke(runner, ["extract", *common, "--out-dtype", form, "--engine", engine, "-o", out])
        assert done.exit_code == 0, done.output
    ours, theirs = read_output(tmp_path / "local.parquet"), read_output(tmp_path / "ray")
    assert theirs.schema.equals(ours.schema, check_metadata=True)
    ids, X, _ = load_features(tmp_path / "local.parquet")
    ray_ids, ray_X, _ = load_features(tmp_path / "ray")
    _, raw, _ = load_features(tmp_path / "local.parquet", raw=True)
    _, ray_raw, _ = load_features(tmp_path / "ray", raw=True)
    _, f32, _ = load_features(tmp_path / "f32.parquet")
    assert list(ray_ids) == list(ids) and ray_X.shape == X.shape == f32.shape and ray_raw.dtype == raw.dtype
    if form == "binary":   # the centre is found once, on the driver: the same in both files' metadata
        compact = json.loads(ours.schema.metadata[b"longbert"])["compact"]
        center = np.asarray(compact["columns"][0]["center"], np.float32)
        sure = np.abs(f32 - center) > 1e-5                                  # (N, D): signs no rounding can flip
        np.testing.assert_array_equal(X[sure], np.where(f32 > center, 1.0, -1.0)[sure])
        np.testing.assert_array_equal(ray_X[sure], X[sure])
        np.testing.assert_array_equal(np.packbits(ray_X > 0, axis=1), ray_raw)   # raw: the packed signs
    else:
        scale = np.abs(f32).max(axis=1, keepdims=True) / 127                # (N, 1): one int8 level
        assert np.abs(ray_raw.astype(np.int16) - raw.astype(np.int16)).max() <= 1
        assert (np.abs(ray_X - X) <= scale * (1 + 1e-5) + 1e-7).all()
        assert (np.abs(X - f32) <= scale / 2 + 1e-6).all()
    assert (ray_raw == raw).mean() > 0.99                                   # boundary cases are rare
