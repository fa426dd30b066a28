"""Durable, verified parts (pipeline.output.durable, pipeline.output.write): fsync before each rename and of the folder
after it, rows and bytes in the manifest, --resume redoing damaged parts and refusing an unreadable
manifest; shared cases B45 (zero-length part and manifest) and B43 (float16 overflow of token vectors)."""
from __future__ import annotations

import json
import os
import runpy
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import CASES, invoke, words, write_csv

import pipeline.output.durable as durable
from pipeline.output.rows import FP16_TOKEN_OVERFLOW
from pipeline.output.write import DONE_MANIFEST, MANIFEST, read_manifest

REPO = Path(__file__).resolve().parents[2]


def parts_table(path: Path) -> pa.Table:
    manifest = read_manifest(path)
    assert manifest["complete"] is True
    return pa.concat_tables([pq.read_table(path / p["file"]) for p in manifest["parts"]])


@pytest.fixture
def finished(runner, tiny_model_dir, tmp_path):
    """A finished DIR/ run of 12 rows in 4 parts; returns (args without -o, its folder)."""
    src = write_csv(tmp_path / "in.csv", [{"id": f"d{i}", "text": words(20, i)} for i in range(12)])
    args = ["extract", src, "--model", tiny_model_dir, "--block-rows", "3", "--no-progress"]
    out = tmp_path / "parts"
    result = invoke(runner, [*args, "-o", f"{out}/"])
    assert result.exit_code == 0, result.output
    return args, out


def test_the_manifest_records_each_parts_rows_and_bytes(finished):
    _, out = finished
    parts = read_manifest(out)["parts"]
    assert [p["rows"] for p in parts] == [3, 3, 3, 3]
    assert [p["bytes"] for p in parts] == [(out / p["file"]).stat().st_size for p in parts]
    assert [pq.read_metadata(out / p["file"]).num_rows for p in parts] == [3, 3, 3, 3]


def test_each_file_is_fsynced_before_its_rename_and_the_folder_after(runner, tiny_model_dir, tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}") if os.path.exists("/proc/self/fd") else fd))
        real_fsync(fd)

    def replace(a, b):
        events.append(("rename", str(a), str(b)))
        real_replace(a, b)

    monkeypatch.setattr(durable.os, "fsync", fsync)
    monkeypatch.setattr(durable.os, "replace", replace)
    src = write_csv(tmp_path / "in.csv", [{"text": words(5, i)} for i in range(4)])
    out = tmp_path / "parts"
    assert invoke(runner, ["extract", src, "--model", tiny_model_dir, "--block-rows", "2", "--no-progress",
                           "-o", f"{out}/"]).exit_code == 0
    renames = [i for i, e in enumerate(events) if e[0] == "rename"]
    targets = [Path(events[i][2]).name for i in renames]
    assert targets == [MANIFEST, "_part-00000.parquet.pending", MANIFEST, "_part-00001.parquet.pending", MANIFEST,
                       "part-00000.parquet", "part-00001.parquet", DONE_MANIFEST]
    for i, target in zip(renames, targets):
        if target.startswith("part-"):            # commit's final names: the bytes were fsynced already
            continue
        # fsync(the file) just before its rename, fsync(the folder) just after
        assert events[i - 1] == ("fsync", events[i][1]) and events[i + 1] == ("fsync", str(out)), events[i - 1:i + 2]
    assert events[renames[6] + 1] == ("fsync", str(out))   # after the final names
    assert events[-1] == ("fsync", str(out))                # after the running manifest is removed


def test_resume_redoes_parts_that_are_truncated_or_empty_and_says_so(runner, finished):
    args, out = finished
    reference = parts_table(out)
    parts = read_manifest(out)["parts"]
    first, second = out / parts[1]["file"], out / parts[2]["file"]
    first.write_bytes(first.read_bytes()[: first.stat().st_size // 2])
    second.write_bytes(b"")
    result = invoke(runner, [*args, "--resume", "-o", f"{out}/"])
    assert result.exit_code == 0, result.output
    assert "resuming" in result.output and "2 of 4 blocks (6 of 12 rows) are done" in result.output
    assert "2 parts redone (a kept part failed the check of size, footer or rows)" in result.stdout
    table = parts_table(out)
    assert table.column("id").to_pylist() == reference.column("id").to_pylist()
    np.testing.assert_allclose(np.array(table.column("features").to_pylist(), np.float32),
                               np.array(reference.column("features").to_pylist(), np.float32), atol=1e-5)


@pytest.mark.parametrize("content", [b"", b'{"format": "longbert-par'])
def test_an_empty_or_unreadable_manifest_is_exit_2_naming_the_file_and_the_fix(runner, finished, content):
    args, out = finished
    (out / DONE_MANIFEST).unlink()
    (out / MANIFEST).write_bytes(content)
    result = invoke(runner, [*args, "--resume", "-o", f"{out}/"])
    assert result.exit_code == 2
    why = "is empty (0 bytes: the run that wrote it was cut off before it reached the disk)" if not content else \
        "cannot be read ("
    assert f"Error: --resume: {out / MANIFEST} {why}" in result.output
    assert ("so the finished parts cannot be told from unfinished ones; pass --overwrite instead of --resume to "
            "start the run again") in result.output
    assert "loading model" not in result.output
    result = invoke(runner, [*args, "--overwrite", "-o", f"{out}/"])
    assert result.exit_code == 0 and read_manifest(out)["complete"] is True


def test_zero_length_part_is_redone_and_zero_length_manifest_refused(runner, tiny_model_dir, tmp_path):
    """Case B45 through its own script: a run of 8 blocks SIGKILLed after 3 parts, then one copy with a
    zero-length part and one with a zero-length manifest."""
    launcher = tmp_path / "longbert"
    launcher.write_text(f"#!/bin/sh\nexec {sys.executable} {REPO / 'cli.py'} \"$@\"\n")
    launcher.chmod(0o755)
    argv = sys.argv
    sys.argv = ["B45.make_state.py", str(launcher), str(tiny_model_dir), str(tmp_path)]
    try:
        runpy.run_path(str(CASES / "B45.make_state.py"), run_name="__main__")
    finally:
        sys.argv = argv
    args = ["extract", CASES / "B45.csv", "--id-col", "id", "--model", tiny_model_dir, "--block-rows", "5",
            "--threads", "1", "--no-progress"]
    assert invoke(runner, [*args, "-o", f"{tmp_path / 'whole'}/"]).exit_code == 0
    reference = parts_table(tmp_path / "whole")

    zero_part = tmp_path / "B45_zero_part"
    result = invoke(runner, [*args, "--resume", "-o", f"{zero_part}/"])
    assert result.exit_code == 0, result.output
    assert "1 parts redone (a kept part failed the check of size, footer or rows)" in result.stdout
    table = parts_table(zero_part)
    assert table.column("id").to_pylist() == reference.column("id").to_pylist() == [f"d{i:02d}" for i in range(40)]
    np.testing.assert_allclose(np.array(table.column("features").to_pylist(), np.float32),
                               np.array(reference.column("features").to_pylist(), np.float32), atol=1e-5)

    zero_manifest = tmp_path / "B45_zero_manifest"
    result = invoke(runner, [*args, "--resume", "-o", f"{zero_manifest}/"])
    assert result.exit_code == 2
    assert (f"Error: --resume: {zero_manifest / MANIFEST} is empty (0 bytes: the run that wrote it was cut off "
            "before it reached the disk)") in result.output


def test_float16_overflow_of_token_vectors_is_a_row_error(runner, tmp_path):
    argv = sys.argv
    sys.argv = ["B43.make_model.py", str(tmp_path)]
    try:
        runpy.run_path(str(CASES / "B43.make_model.py"), run_name="__main__")
    finally:
        sys.argv = argv
    model = tmp_path / "bert_f16_tokens"
    base = ["extract", CASES / "B43.csv", "--id-col", "id", "--model", model, "--out-dtype", "float16",
            "--pooling", "mean", "--no-progress"]
    result = invoke(runner, [*base, "--level", "token", "-o", tmp_path / "t.parquet"])
    assert result.exit_code == 0, result.output
    table = pq.read_table(tmp_path / "t.parquet")
    assert table.column("error").to_pylist() == [FP16_TOKEN_OVERFLOW]
    assert table.column("token_features").to_pylist() == [None] and table.column("features").to_pylist() == [None]
    assert "1 rows with errors" in result.stdout
    result = invoke(runner, [*base, "-o", tmp_path / "d.parquet"])     # the mean fits in float16
    assert result.exit_code == 0, result.output
    vec = np.array(pq.read_table(tmp_path / "d.parquet").column("features").to_pylist()[0], np.float32)
    assert np.isfinite(vec).all() and pq.read_table(tmp_path / "d.parquet").column("error").to_pylist() == [None]
    meta = json.loads(pq.read_schema(tmp_path / "t.parquet").metadata[b"longbert"])
    assert meta["out_dtype"] == "float16" and meta["level"] == "token"
