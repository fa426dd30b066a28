"""--engine ray (issue 6): same rows, order and vectors as --engine local; kill and resume; bad options
fail before Ray starts.

A local Ray (4 logical CPUs on 2 cores, so the read task is never starved by the actors, a 150 MB
object store and a temp dir of its own) is started once for the module; runs in this process use it
and the killed subprocess joins it by address.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import CASES, invoke, words, write_csv

os.environ["RAY_AUTH_MODE"] = "disabled"
import ray  # noqa: E402 - make test installs the ray extra; a missing one fails here, not silently skips

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]
REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "corpus.csv"


@pytest.fixture(scope="module")
def ray_address():
    """A local Ray for this module; yields its GCS address."""
    temp = tempfile.mkdtemp(prefix="lbray")  # short: Ray's socket paths must fit 107 bytes
    ctx = ray.init(num_cpus=4, object_store_memory=150 * 1024**2, include_dashboard=False,
                   log_to_driver=False, _temp_dir=temp)
    yield ctx.address_info["gcs_address"]
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)


def read_output(path: Path) -> pa.Table:
    """A .parquet file, or a DIR/ whose manifest says complete, in manifest order."""
    if path.is_file():
        return pq.read_table(path)
    manifest = json.loads((path / "_manifest.json").read_text())
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
    expected_ids = [r["doc"] for r in rows] if "--id-col" in options else list(range(len(rows)))
    assert theirs.column("id").to_pylist() == expected_ids          # "000123" keeps its zeros
    if "--keep-col" in options:
        assert theirs.column("tag").to_pylist() == [r["tag"] for r in rows]   # "0042", "NA", "" stay text
    assert theirs.column("n_tokens").to_pylist()[8] == 2000          # 2,000 one-token words
    assert theirs.column("error").to_pylist()[2] == "empty text"
    assert not (tmp_path / ".ray.ray").exists()                      # the work directory is gone
    assert ray_run.output.splitlines()[-1].startswith("10 documents,")


def test_ray_reads_every_shared_case_like_local(ray_address, tiny_model_dir, tmp_path, runner):
    """All of ../shared/cases' CSVs in one run (BOM + CRLF, quotes, newlines, numeric-looking and empty
    texts), except B14, whose stray quote both engines refuse with exit 2."""
    inputs = sorted(p for p in CASES.glob("*.csv") if p.name != "B14.csv")
    assert len(inputs) >= 10
    common = [*inputs, "--id-col", "id", "--model", tiny_model_dir, "--no-progress", "--block-rows", "5"]
    assert invoke(runner, ["extract", *common, "-o", tmp_path / "local.parquet"]).exit_code == 0
    result = invoke(runner, ["extract", *common, "--engine", "ray", "-o", tmp_path / "ray.parquet"])
    assert result.exit_code == 0, result.output
    assert_same_output(read_output(tmp_path / "local.parquet"), read_output(tmp_path / "ray.parquet"))
    stray = invoke(runner, ["extract", CASES / "B14.csv", "--model", tiny_model_dir, "--engine", "ray",
                            "-o", tmp_path / "b14.parquet"])
    assert stray.exit_code == 2 and "B14.csv: line 5: a quoted field" in stray.output


@pytest.mark.parametrize("args, message", [
    (["--resume"], "pass --id-col"),
    (["--resume", "--id-col", "dup"], "unique --id-col"),
    (["--workers", "0"], "--workers=0"),
    (["--gpus-per-worker", "-1"], "--gpus-per-worker=-1"),
    (["--text-col", "body"], "column 'body' not found"),
    (["--overlap", "600", "--strategy", "sliding"], "overlap"),
], ids=["resume-no-id", "resume-dup-ids", "workers", "gpus", "column", "overlap"])
def test_bad_option_fails_before_ray_starts(tiny_model_dir, tmp_path, runner, monkeypatch, args, message):
    import pipeline.ray_engine as engine

    def no_ray(*_a, **_k):
        raise AssertionError("Ray was started")

    monkeypatch.setattr(engine, "_start_ray", no_ray)
    monkeypatch.setattr(engine, "import_ray", no_ray)
    path = write_csv(tmp_path / "in.csv", [{"dup": "a", "text": "w1 w2"}, {"dup": "a", "text": "w3"}])
    result = invoke(runner, ["extract", path, "--model", tiny_model_dir, "--engine", "ray",
                             "-o", f"{tmp_path}/out/", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists() and not (tmp_path / ".out.ray").exists()


def test_unreachable_address_and_missing_resources_exit_2(ray_address, tiny_model_dir, tmp_path, runner):
    """Ray would retry a dead address for minutes and wait forever for a GPU no node has."""
    from pipeline.errors import ConfigError
    from pipeline.ray_engine import check_address

    with pytest.raises(ConfigError, match="nothing answers there"):
        check_address("127.0.0.1:1")
    with pytest.raises(ConfigError, match="is not HOST:PORT"):
        check_address("my-cluster")
    check_address(ray_address)                                       # the live one answers
    path = write_csv(tmp_path / "in.csv", [{"text": "w1 w2"}])
    result = invoke(runner, ["extract", path, "--model", tiny_model_dir, "--engine", "ray", "--gpus-per-worker", "1",
                             "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 2, result.output
    assert "no Ray node has the 2 CPUs and 1 GPUs one worker asks for (nodes: 4 CPU / 0 GPU)" in result.output
    assert list(tmp_path.iterdir()) == [path]


def test_ray_refuses_skipped_lines(tiny_model_dir, tmp_path, runner):
    path = tmp_path / "bad.csv"
    path.write_text("id,text\n1,w1 w2\n2,w3,extra\n3,w4\n")
    result = invoke(runner, ["extract", path, "--model", tiny_model_dir, "--engine", "ray",
                             "--on-bad-lines", "skip", "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 2 and "1 malformed CSV lines" in result.output
    strict = invoke(runner, ["extract", path, "--model", tiny_model_dir, "--engine", "ray", "-o", tmp_path / "o.parquet"])
    assert strict.exit_code == 2 and "or skip such lines with --engine local --on-bad-lines skip" in strict.output


def test_ray_strict_row_error_leaves_no_output(ray_address, tiny_model_dir, tmp_path, runner):
    path = write_csv(tmp_path / "in.csv", [{"text": "w1 w2"}, {"text": ""}, {"text": "w3"}])
    result = invoke(runner, ["extract", path, "--model", tiny_model_dir, "--engine", "ray", "--strict",
                             "--no-progress", "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 1 and "row with id 1: empty text" in result.output
    assert list(tmp_path.iterdir()) == [path]


def test_parts_out_of_order_are_put_back_in_input_order(tmp_path):
    """_in_input_order: rows of interleaved parts (a resumed run) come out by input row."""
    from pipeline.ray_engine import _in_input_order, _row_keys, text_crc

    texts = [f"t{i}" for i in range(7)]
    layout = [[0, 1, 4], [2, 3], [5, 6]]            # part 0 holds rows 0, 1 and 4 (a resumed run's gap)
    parts = []
    for k, rows in enumerate(layout):
        part = tmp_path / f"p{k}.parquet"
        pq.write_table(pa.table({"__longbert_row": pa.array(rows, pa.int64()), "v": [texts[r] for r in rows],
                                 "__longbert_crc": text_crc([texts[r] for r in rows])}), part)
        parts.append(part)
    crc = text_crc(texts).to_numpy()
    keys = _row_keys(parts, crc, None)
    out = pa.concat_tables(_in_input_order(parts, keys, 3, ["v"]))
    assert out.column("v").to_pylist() == texts
    from pipeline.errors import RunError
    with pytest.raises(RunError, match="differ from the input check"):
        _row_keys(parts, text_crc([*texts[:6], "changed"]).to_numpy(), None)
    with pytest.raises(RunError, match="5 rows for 7 input rows"):
        _row_keys([parts[0], parts[2]], crc, None)


def _ray_parts(work: Path) -> int:
    return len(list((work / "parts").glob("*.parquet"))) if (work / "parts").exists() else 0


def test_kill_and_resume_equals_uninterrupted(ray_address, tmp_path, runner):
    """SIGKILL a --resume run (the real default model, 4 rows per block) once parts exist; --resume
    then finishes it, and the output equals the local engine's uninterrupted run."""
    out = tmp_path / "parts"
    common = [EXAMPLE, "--id-col", "id", "--keep-col", "title", "--block-rows", "4", "--no-progress"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, str(REPO / "cli.py"), "extract", *map(str, common), "--engine", "ray",
                             "--ray-address", ray_address, "--resume", "-o", f"{out}/"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    work = tmp_path / ".parts.ray"
    deadline = time.time() + 300
    while _ray_parts(work) < 3 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, f"the run ended before it could be killed: {proc.communicate()[1][-2000:]}"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert not (out / "_manifest.json").exists()                 # nothing that looks complete
    done_before = _ray_parts(work)
    assert done_before >= 3

    resumed = invoke(runner, ["extract", *common, "--engine", "ray", "--resume", "-o", f"{out}/"])
    assert resumed.exit_code == 0, resumed.output
    assert "resuming:" in resumed.output
    local = invoke(runner, ["extract", *common, "-o", tmp_path / "local.parquet"])
    assert local.exit_code == 0, local.output
    assert_same_output(read_output(tmp_path / "local.parquet"), read_output(out))
    again = invoke(runner, ["extract", *common, "--engine", "ray", "--resume", "-o", f"{out}/"])
    assert again.exit_code == 0 and "already complete" in again.output
    other = invoke(runner, ["extract", *common, "--engine", "ray", "--resume", "--strategy", "head", "-o", f"{out}/"])
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
