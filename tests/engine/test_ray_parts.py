"""Ray workers write their own parts and the driver commits them: at every level a DIR/ output from Ray equals
the local engine's (ids in order, every row once, vectors within 1e-5, the same manifest) while the driver
gets records only; a Python pipeline with an inserted stage runs on Ray; a worker killed mid-block is
restarted and every row lands once; a driver killed mid-run is resumed, redoing only the blocks without a
committed part (and a part damaged meanwhile).

Every test uses the session's local Ray (tests/conftest.py's ray_address); the killed driver joins it.
"""
from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import STAGE_ML, invoke, words, write_csv
from test_ray import assert_same_output as assert_same

from pipeline.output.write import read_manifest

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]
REPO = Path(__file__).resolve().parents[2]
N_DOCS = 12


@pytest.fixture(scope="module")
def docs_csv(tmp_path_factory) -> Path:
    """12 documents of 0 to 60 tiny-vocabulary tokens (one empty), ids d0..d11."""
    rows = [{"id": f"d{i}", "text": words((i * 13) % 61, i)} for i in range(N_DOCS)]
    return write_csv(tmp_path_factory.mktemp("ray_parts") / "docs.csv", rows)


def read_dir(path: Path) -> pa.Table:
    """A finished DIR/ output's rows, in manifest order; only listed parts are in the folder."""
    manifest = read_manifest(path)
    assert manifest["complete"] is True
    listed = [p["file"] for p in manifest["parts"]]
    assert sorted(p.name for p in path.iterdir() if p.name.startswith(("part-", "_part-", ".part-"))) == sorted(listed)
    return pa.concat_tables([pq.read_table(path / f) for f in listed])


@pytest.fixture
def driver_items(monkeypatch) -> list[tuple[str, int]]:
    """(type name, pickled bytes) of every item an engine hands the driver during the test."""
    import pipeline.engine.driver as driver

    seen: list[tuple[str, int]] = []
    real = driver._write_all

    def spy(stream, *args):
        def watched():
            for item in stream:
                seen.append((type(item).__name__, len(pickle.dumps(item))))
                yield item
        return real(watched(), *args)

    monkeypatch.setattr(driver, "_write_all", spy)
    return seen


@pytest.mark.parametrize("level", ["document", "window", "token"])
def test_ray_parts_equal_local_and_the_driver_gets_records_only(ray_address, tiny_model_dir, docs_csv, tmp_path,
                                                                runner, driver_items, level):
    common = [docs_csv, "--model", tiny_model_dir, "--no-progress", "--strategy", "chunk", "--max-length", STAGE_ML,
              "--level", level, "--block-rows", 3]
    local = invoke(runner, ["extract", *common, "-o", f"{tmp_path}/local/"])
    assert local.exit_code == 0, local.output
    assert {name for name, _ in driver_items} == {"Piece"}
    driver_items.clear()
    ray_run = invoke(runner, ["extract", *common, "--engine", "ray", "--workers", 2, "-o", f"{tmp_path}/ray/"])
    assert ray_run.exit_code == 0, ray_run.output
    ours, theirs = read_dir(tmp_path / "local"), read_dir(tmp_path / "ray")
    assert_same(ours, theirs)
    ids = theirs.column("id").to_pylist()
    if level == "document":
        assert ids == [f"d{i}" for i in range(N_DOCS)]                 # every row once, in input order
    else:   # a row per window or per document: each document's rows together, documents in order
        assert list(dict.fromkeys(ids)) == [f"d{i}" for i in range(N_DOCS)]
    manifests = [read_manifest(tmp_path / name)["parts"] for name in ("local", "ray")]
    keys = ("file", "block", "first_row", "rows", "documents")
    assert [{k: p[k] for k in keys} for p in manifests[1]] == [{k: p[k] for k in keys} for p in manifests[0]]
    # the driver got one small record per block, never a row: a record's size does not grow with its part
    assert [name for name, _ in driver_items] == ["PartDone"] * 4
    assert max(size for _, size in driver_items) < 2048
    if level == "token":
        assert min(p["bytes"] for p in manifests[1]) > max(size for _, size in driver_items)
    assert ray_run.output.splitlines()[-1].split(" windows encoded")[0] == \
        local.output.splitlines()[-1].split(" windows encoded")[0]


def test_dims_on_ray_equals_local(ray_address, tiny_model_dir, docs_csv,
                                   tmp_path, runner):
    """--dims on Ray: the driver fits the projection on the first documents and ships it in the pipeline; every
    worker's part holds the same projected vectors as the local engine's, and the metadata the same projection."""
    common = [docs_csv, "--model", tiny_model_dir, "--no-progress", "--strategy", "chunk", "--max-length", STAGE_ML,
              "--block-rows", 3, "--dims", 4]
    local = invoke(runner, ["extract", *common, "-o", f"{tmp_path}/local/"])
    assert local.exit_code == 0, local.output
    ray_run = invoke(runner, ["extract", *common, "--engine", "ray", "--workers", 2, "-o", f"{tmp_path}/ray/"])
    assert ray_run.exit_code == 0, ray_run.output
    ours, theirs = read_dir(tmp_path / "local"), read_dir(tmp_path / "ray")
    assert_same(ours, theirs)   # schema metadata (the projection) included
    assert theirs.schema.field("features").type.list_size == 4
    assert "dims: a PCA to 4 dimensions" in ray_run.output


def test_ray_single_file_equals_local(ray_address, tiny_model_dir, docs_csv, tmp_path, runner):
    """-o f.parquet on Ray: the workers' parts are streamed into the file, row group by row group, in plan
    order; the staging folder is gone at the end."""
    common = [docs_csv, "--model", tiny_model_dir, "--no-progress", "--strategy", "chunk", "--max-length", STAGE_ML,
              "--block-rows", 5]
    assert invoke(runner, ["extract", *common, "-o", tmp_path / "local.parquet"]).exit_code == 0
    ray_run = invoke(runner, ["extract", *common, "--engine", "ray", "--workers", 2, "-o", tmp_path / "ray.parquet"])
    assert ray_run.exit_code == 0, ray_run.output
    assert_same(pq.read_table(tmp_path / "local.parquet"), pq.read_table(tmp_path / "ray.parquet"))
    layout = [pq.ParquetFile(tmp_path / f).metadata for f in ("local.parquet", "ray.parquet")]
    assert [m.num_row_groups for m in layout] == [3, 3]   # a row group per block, as the local engine writes
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]   # no staging folder, no lock


def test_a_python_pipeline_with_an_inserted_filter_runs_on_ray(ray_address, pipe, docs_csv, tmp_path):
    """The workers get the pipeline object itself: the inserted filter runs there, and the run equals the
    same pipeline run locally, rows, summary counts and all. (Defined here, not at the module's top: Ray
    pickles a test module's function by reference, and the workers cannot import a test module.)"""
    def drop_odd(batch):   # a filter: keeps the documents of even number (d0, d2, ...)
        return batch.take([i for i, row_id in enumerate(batch.ids) if int(row_id[1:]) % 2 == 0])

    filtered = pipe.insert(drop_odd, after="tokenize")
    local = filtered.run(str(docs_csv), f"{tmp_path}/local/", block_rows=4)
    ray_run = filtered.run(str(docs_csv), f"{tmp_path}/ray/", block_rows=4, engine="ray", workers=2)
    assert_same(read_dir(tmp_path / "local"), read_dir(tmp_path / "ray"))
    assert read_dir(tmp_path / "ray").column("id").to_pylist() == [f"d{i}" for i in range(0, N_DOCS, 2)]
    assert ray_run.dropped == local.dropped == {"drop_odd": N_DOCS // 2}
    assert ray_run.rows_read == local.rows_read == N_DOCS
    assert (ray_run.documents, ray_run.tokens, ray_run.windows) == (local.documents, local.tokens, local.windows)


def test_a_worker_killed_mid_block_is_restarted_and_every_row_lands_once(ray_address, pipe, docs_csv, tmp_path):
    """A stage that SIGKILLs its own worker process the first time it sees d5 (a marker file says it did):
    Ray starts the actor again and gives it the block again; every row is written once."""
    marker = str(tmp_path / "killed")
    driver = os.getpid()

    def kill_once(batch):
        if "d5" in batch.ids and not os.path.exists(marker) and os.getpid() != driver:
            open(marker, "w").write(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return batch

    killing = pipe.insert(kill_once, after="tokenize")
    ray_run = killing.run(str(docs_csv), f"{tmp_path}/ray/", block_rows=2, engine="ray", workers=2)
    assert os.path.exists(marker)                                   # a worker was killed
    local = pipe.run(str(docs_csv), f"{tmp_path}/local/", block_rows=2)
    theirs = read_dir(tmp_path / "ray")
    assert theirs.column("id").to_pylist() == [f"d{i}" for i in range(N_DOCS)]
    ours = read_dir(tmp_path / "local")
    for name in ("features", "n_tokens", "n_windows"):
        a, b = ours.column(name).to_pylist(), theirs.column(name).to_pylist()
        assert [x is None for x in a] == [x is None for x in b]
        assert all(x is None or np.abs(np.subtract(x, y)).max() < 1e-5 for x, y in zip(a, b)), name
    assert ray_run.documents == local.documents == N_DOCS


SCRIPT = '''
import os, sys, time
os.environ["RAY_AUTH_MODE"] = "disabled"
import longbert
DELAY = float(sys.argv[5])
def slow(batch):
    time.sleep(DELAY)
    return batch
pipe = longbert.Pipeline.from_options(model=sys.argv[1], strategy="chunk", max_length=16).insert(slow, after="tokenize")
summary = pipe.run(sys.argv[2], sys.argv[3], engine="ray", ray_address=sys.argv[4], block_rows=1,
                   resume=sys.argv[6] == "1")
print(summary.line())
'''


def _committed(path: Path) -> int:
    try:
        return len(read_manifest(path)["parts"])
    except (OSError, ValueError, KeyError, TypeError):   # no manifest yet, or one being replaced
        return 0


def test_a_killed_driver_is_resumed_redoing_only_blocks_without_a_committed_part(ray_address, tiny_model_dir,
                                                                                 docs_csv, tmp_path):
    """SIGKILL the driver once 3 parts are committed; damage one of them; --resume then encodes only the
    blocks without a good committed part and the output equals an uninterrupted local run."""
    script, out = tmp_path / "run.py", tmp_path / "out"
    script.write_text(SCRIPT)
    args = [sys.executable, str(script), str(tiny_model_dir), str(docs_csv), f"{out}/", ray_address]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([*args, "1.0", "0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while _committed(out) < 3 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None, f"the run ended before it could be killed: {proc.communicate()[1][-2000:]}"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    manifest = read_manifest(out)
    done = len(manifest["parts"])
    assert manifest["complete"] is False and 3 <= done < N_DOCS
    damaged = out / manifest["parts"][0]["file"]
    damaged.write_bytes(damaged.read_bytes()[:-20])                # a part cut short after it was committed
    time.sleep(2)   # the killed driver's actors die with it (Ray ends the actors of a dead job)
    resumed = subprocess.run([*args, "0", "1"], env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    line = resumed.stdout.splitlines()[-1]
    redo = N_DOCS - done + 1                                        # one document per block
    assert line.startswith(f"{redo} documents,"), line
    assert "1 parts redone" in line and f"resumed: {done - 1} rows were done" in line
    import longbert

    plain = longbert.Pipeline.from_options(model=str(tiny_model_dir), strategy="chunk", max_length=16)
    plain.run(str(docs_csv), f"{tmp_path}/local/", block_rows=1)
    ours, theirs = read_dir(tmp_path / "local"), read_dir(out)
    assert theirs.column("id").to_pylist() == [f"d{i}" for i in range(N_DOCS)]
    for x, y in zip(ours.column("features").to_pylist(), theirs.column("features").to_pylist()):
        assert (x is None) == (y is None) and (x is None or np.abs(np.subtract(x, y)).max() < 1e-5)


def test_columns_a_stage_adds_are_checked_on_ray_as_locally(ray_address, pipe, docs_csv, tmp_path):
    """A stage after 'rows' that declares its column writes it on Ray; one that does not is refused by the
    worker with the local engine's message (the workers check each piece as the driver does)."""
    from pipeline.errors import ConfigError

    def n_chars(batch):
        return batch.replace(table=batch.table.append_column("n_chars", pa.array([len(t) for t in batch.texts],
                                                                                   pa.int32())))

    def undeclared(batch):
        return batch.replace(table=batch.table.append_column("n_chars", pa.array([len(t) for t in batch.texts])))

    n_chars.adds_columns = (pa.field("n_chars", pa.int32()),)
    counted = pipe.insert(n_chars, after="rows")
    counted.run(str(docs_csv), f"{tmp_path}/ray/", block_rows=5, engine="ray", workers=2)
    counted.run(str(docs_csv), f"{tmp_path}/here/", block_rows=5)
    assert_same(read_dir(tmp_path / "here"), read_dir(tmp_path / "ray"))
    assert read_dir(tmp_path / "ray").column("n_chars").to_pylist()[:3] == [0, len(words(13, 1)), len(words(26, 2))]
    message = r"stage 'undeclared' added column\(s\) \['n_chars'\] to the output table without declaring them"
    with pytest.raises(ConfigError, match=message):
        pipe.insert(undeclared, after="rows").run(str(docs_csv), f"{tmp_path}/local/", block_rows=5)
    with pytest.raises(ConfigError, match=message):
        pipe.insert(undeclared, after="rows").run(str(docs_csv), f"{tmp_path}/bad/", block_rows=5, engine="ray")
