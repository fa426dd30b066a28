"""Pipeline.for_run: a run's read and write options rebuild only the built-in stages they change; the
others are this pipeline's own objects (the encode stage with its loaded encoder and open store)."""
from __future__ import annotations

import pyarrow.parquet as pq
from conftest import words, write_csv

from pipeline.engine.params import with_io_options


def _for(pipe, **options):
    return pipe.for_run(with_io_options(pipe.cfg, **options))


def test_another_output_path_keeps_every_stage(pipe, tmp_path):
    moved = _for(pipe, output=str(tmp_path / "elsewhere.parquet"), progress=False, overwrite=True)
    assert moved.names == pipe.names
    assert [id(s) for s in moved] == [id(s) for s in pipe]
    again = _for(moved, output=str(tmp_path / "third.parquet"))
    assert [id(s) for s in again] == [id(s) for s in pipe]


def test_options_that_change_a_stage_rebuild_that_stage_only(pipe, tmp_path):
    half = _for(pipe, out_dtype="float16")
    rebuilt = {n for n in pipe.names if half[n] is not pipe[n]}
    assert rebuilt == {"rows"} and half["rows"].out_dtype == "float16"
    cached = _for(pipe, cache=str(tmp_path / "store"))
    assert {n for n in pipe.names if cached[n] is not pipe[n]} == {"encode"}
    assert cached["encode"].store == str(tmp_path / "store") and pipe["encode"].store is None
    assert cached["encode"].weights is pipe["encode"].weights   # rebuilt on the same loaded weights


def test_a_run_leaves_the_kept_encode_stage_without_its_progress_hook(pipe, tmp_path):
    src = write_csv(tmp_path / "in.csv", [{"id": f"d{i}", "text": words(5 + i)} for i in range(3)])
    out = tmp_path / "out.parquet"
    pipe.run(str(src), str(out), progress=True)
    assert pq.read_table(out).num_rows == 3
    assert pipe["encode"].encoder.on_batch is None
