"""One writer per output (pipeline.output.lock): the lock, its refusal before any model file is read, a dead
run's lock taken over, the output location checked first, and write failures named by their cause."""
from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import invoke, words, write_csv

import pipeline.engine.resolved as block
import pipeline.engine.run as run_module
from pipeline.model.encode_stage import Encode
from pipeline.output.durable import os_cause
from pipeline.errors import RunError
from pipeline.output.lock import acquire, lock_path
from pipeline.output.write import FileSink

REPO = Path(__file__).resolve().parents[2]


def no_model_reads(monkeypatch):
    """Fail the test if the run reads the model's config, tokenizer or weights."""
    monkeypatch.setattr(block, "model_facts", lambda *a, **k: pytest.fail("a model file was read"))
    monkeypatch.setattr(run_module, "resolve_config", lambda *a, **k: pytest.fail("a model file was read"))


def holder_of(out: Path) -> dict:
    try:
        text = lock_path(out).read_text()
        return json.loads(text) if text else {}
    except (OSError, ValueError):
        return {}


def test_two_concurrent_runs_one_proceeds_the_other_exits_2_naming_it(runner, tiny_model_dir, tmp_path, monkeypatch):
    src = write_csv(tmp_path / "in.csv", [{"id": f"d{i}", "text": words(30, i)} for i in range(300)])
    out = tmp_path / "o.parquet"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    first = subprocess.Popen([sys.executable, str(REPO / "cli.py"), "extract", str(src), "--model", str(tiny_model_dir),
                              "--block-rows", "10", "--no-progress", "-o", str(out)],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while holder_of(out).get("pid") != first.pid and time.time() < deadline and first.poll() is None:
        time.sleep(0.01)
    first.send_signal(signal.SIGSTOP)  # hold it inside its run, so the second surely meets it
    try:
        assert holder_of(out).get("pid") == first.pid, first.stderr.read() if first.poll() is not None else ""
        no_model_reads(monkeypatch)
        started = time.monotonic()
        result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "--no-progress", "-o", out])
        seconds = time.monotonic() - started
    finally:
        first.send_signal(signal.SIGCONT)
    assert result.exit_code == 2
    assert f"is being written by another run (process {first.pid} on host {socket.gethostname()}, started 20" \
        in result.output
    assert "loading model" not in result.output
    assert seconds < 5, seconds
    assert first.wait(timeout=300) == 0, first.stderr.read()
    expected = [f"d{i}" for i in range(300)]
    assert pq.read_table(out).column("id").to_pylist() == expected
    assert pd.read_parquet(out)["id"].tolist() == expected
    assert pl.read_parquet(out)["id"].to_list() == expected
    assert [r[0] for r in duckdb.sql(f"select id from read_parquet('{out}')").fetchall()] == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv", "o.parquet"]  # lock file removed


def test_resume_while_another_run_writes_the_directory_is_refused(runner, tiny_model_dir, tmp_path, monkeypatch):
    src = write_csv(tmp_path / "in.csv", [{"text": words(5, i)} for i in range(6)])
    out = tmp_path / "parts"
    assert invoke(runner, ["extract", src, "--model", tiny_model_dir, "--block-rows", "2", "--no-progress",
                           "-o", f"{out}/"]).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    held = acquire(out)  # another run, as far as the lock can tell (a second open file description)
    try:
        no_model_reads(monkeypatch)
        result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "--no-progress", "--resume", "-o", f"{out}/"])
    finally:
        held.release()
    assert result.exit_code == 2
    assert f"is being written by another run (process {os.getpid()} on host {socket.gethostname()}" in result.output
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_dead_runs_lock_is_taken_over_and_the_summary_says_so(runner, tiny_model_dir, tmp_path):
    src = write_csv(tmp_path / "in.csv", [{"text": "a b c"}])
    out = tmp_path / "o.parquet"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()                                 # a process id that is surely gone
    lock_path(out).write_text(json.dumps({"pid": dead.pid, "host": "node7", "started": 1764584400.0}))
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "--no-progress", "-o", out])
    assert result.exit_code == 0, result.output
    note = (f"took over the lock of a run that ended without releasing it (process {dead.pid} on host node7, "
            "started 2025-12-01 10:20:00 UTC)")
    assert f"note: {note}" in result.output
    assert result.stdout.strip().endswith(note + ")")
    assert not lock_path(out).exists() and pq.read_table(out).num_rows == 1


def test_already_holds_a_run_is_said_before_the_model_loads(runner, tiny_model_dir, tmp_path, monkeypatch):
    src = write_csv(tmp_path / "in.csv", [{"text": "a b c"}])
    out = f"{tmp_path / 'parts'}/"
    assert invoke(runner, ["extract", src, "--model", tiny_model_dir, "--no-progress", "-o", out]).exit_code == 0
    no_model_reads(monkeypatch)
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "-o", out])
    assert result.exit_code == 2
    assert f"--output {str(tmp_path / 'parts')!r} already holds a run; pass --resume" in result.output
    assert "loading model" not in result.output


def test_resume_refusal_names_the_option_that_differs_before_the_model_loads(runner, tiny_model_dir, tmp_path,
                                                                            monkeypatch):
    src = write_csv(tmp_path / "in.csv", [{"text": "a b c"}])
    out = f"{tmp_path / 'parts'}/"
    assert invoke(runner, ["extract", src, "--model", tiny_model_dir, "--no-progress", "--strategy", "head",
                           "-o", out]).exit_code == 0
    monkeypatch.setattr(Encode, "load", lambda self: pytest.fail("the model was loaded"))
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "--strategy", "chunk", "--resume", "-o", out])
    assert result.exit_code == 2
    assert (f"--resume: the options differ from the run that wrote {tmp_path / 'parts'} (--strategy: 'head' then, "
            "'chunk' now); run with the same options and inputs, or pass --overwrite to start again") in result.output
    assert "loading model" not in result.output


@pytest.mark.skipif(not os.path.isdir("/sys"), reason="needs /sys (no new files there, even for root)")
def test_a_location_that_cannot_be_written_is_exit_2_before_the_model_loads(runner, tmp_path, monkeypatch):
    src = write_csv(tmp_path / "in.csv", [{"text": "a b c"}])
    no_model_reads(monkeypatch)
    result = invoke(runner, ["extract", src, "-o", "/sys/longbert-test.parquet"])
    assert result.exit_code == 2
    assert ("Error: --output '/sys/longbert-test.parquet': cannot write in /sys: Permission denied: no permission "
            "to write there; make the folder writable or pick another --output\n") in result.output
    (tmp_path / "file").write_text("x")
    result = invoke(runner, ["extract", src, "-o", tmp_path / "file" / "o.parquet"])
    assert result.exit_code == 2
    assert f"Error: --output '{tmp_path / 'file' / 'o.parquet'}': cannot create the folder {tmp_path / 'file'}" \
        in result.output


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc (no new files there, even for root)")
def test_a_location_that_takes_no_file_is_not_called_gone(runner, tmp_path, monkeypatch):
    """/proc exists but takes no new file (ENOENT): before the run that is not "the folder is gone"."""
    src = write_csv(tmp_path / "in.csv", [{"text": "a b c"}])
    no_model_reads(monkeypatch)
    result = invoke(runner, ["extract", src, "-o", "/proc/longbert-test.parquet"])
    assert result.exit_code == 2
    assert result.output.endswith("Error: --output '/proc/longbert-test.parquet': cannot write in /proc: No such file "
                                  "or directory: files cannot be created there; pick another --output\n"), result.output


def test_a_missing_parent_folder_is_created(runner, tiny_model_dir, tmp_path):
    src = write_csv(tmp_path / "in.csv", [{"text": "a b c"}])
    out = tmp_path / "new" / "deeper" / "o.parquet"
    assert invoke(runner, ["extract", src, "--model", tiny_model_dir, "--no-progress", "-o", out]).exit_code == 0
    assert pq.read_table(out).num_rows == 1 and sorted(p.name for p in out.parent.iterdir()) == ["o.parquet"]


@pytest.mark.parametrize("code, says", [
    (errno.ENOSPC, "No space left on device: no space left on the device; free space or pick another --output"),
    (errno.ENOENT, "No such file or directory: the folder is gone (removed or unmounted while the run went on)"),
    (errno.EACCES, "Permission denied: no permission to write there; make the folder writable"),
    (errno.EROFS, "Read-only file system: the file system is read-only; pick another --output"),
])
def test_write_failures_name_their_cause(code, says):
    assert os_cause(OSError(code, os.strerror(code))).startswith(says)


def test_a_folder_removed_part_way_is_named_not_disk_space(runner, tiny_model_dir, tmp_path, monkeypatch):
    import pipeline.output.write as write

    src = write_csv(tmp_path / "in.csv", [{"text": words(5, i)} for i in range(6)])
    real = write.pq.ParquetWriter
    calls = []

    def gone(where, *a, **k):   # each part is opened as a ParquetWriter, its pieces written to it
        calls.append(where)
        if len(calls) == 2:   # the second part: its folder is gone
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(where))
        return real(where, *a, **k)

    monkeypatch.setattr(write.pq, "ParquetWriter", gone)
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "--block-rows", "2", "--no-progress",
                             "-o", f"{tmp_path / 'parts'}/"])
    assert result.exit_code == 1
    assert (f"Error: writing {tmp_path / 'parts'}/ failed ({calls[1]}): No such file or directory: the folder is gone "
            "(removed or unmounted while the run went on); restore it or pick another --output; its finished parts "
            "are kept for --resume") in result.output
    assert "free space" not in result.output


def test_file_output_created_by_another_program_meanwhile_is_kept(tmp_path):
    schema = pa.schema([pa.field("x", pa.int64())])
    out = tmp_path / "o.parquet"
    sink = FileSink(out, schema)
    sink.open()
    sink.write(type("Spec", (), {"index": 0})(), pa.table({"x": [1, 2]}, schema=schema))
    out.write_bytes(b"theirs")
    with pytest.raises(RunError, match="was created by another program while this run went on; it is kept"):
        sink.commit()
    sink.abort()
    assert out.read_bytes() == b"theirs" and sorted(p.name for p in tmp_path.iterdir()) == ["o.parquet"]
    again = FileSink(out, schema, overwrite=True)
    again.open()
    again.write(type("Spec", (), {"index": 0})(), pa.table({"x": [3]}, schema=schema))
    again.commit()
    assert pq.read_table(out).column("x").to_pylist() == [3]
