"""The seams a worker-written output rests on, without Ray: a part written by PartWriter (the worker side) is
part of a DIR/ output only once PartsSink.commit_part (the driver side) lists it; FileSink.commit_part
streams such parts into one file equal to the one FileSink.write makes; engines come from one table with an
install hint."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.errors import ConfigError, RunError
from pipeline.output.file_sink import FileSink
from pipeline.output.parts import PartWriter
from pipeline.output.write import PartsSink, read_manifest
from pipeline.read import BlockSpec, Columns

SCHEMA = pa.schema([("id", pa.string()), ("features", pa.list_(pa.float32(), 2))],
                   metadata={b"longbert": json.dumps({"run": 1}).encode()})
SPECS = [BlockSpec(i, "x.csv", "csv", 3 * i, 3, Columns()) for i in range(3)]


def block(i: int) -> pa.Table:
    ids = [f"d{3 * i + k}" for k in range(3)]
    return pa.table({"id": ids, "features": pa.array([[float(3 * i + k), -1.0] for k in range(3)],
                                                     pa.list_(pa.float32(), 2))})


def test_a_written_part_is_output_only_once_committed(tmp_path):
    sink = PartsSink(tmp_path / "out", SCHEMA, {"config": "x", "inputs": []})
    assert sink.open(SPECS) == set()
    records = []
    for spec in SPECS:   # the worker side: pieces in, a complete part under its pending name out
        writer = PartWriter(sink.parts_folder(), SCHEMA, spec)
        assert writer.write(block(spec.index).slice(0, 2), last=False) is None
        assert not (tmp_path / "out" / f"_part-{spec.index:05d}.parquet.pending").exists()   # half-written: hidden
        assert len(list((tmp_path / "out").glob(f".part-{spec.index:05d}.*.partial"))) == 1
        records.append(writer.write(block(spec.index).slice(2), last=True))
    assert records[1] == {"file": "_part-00001.parquet.pending", "block": 1, "first_row": 3, "rows": 3, "documents": 3,
                          "bytes": (tmp_path / "out" / "_part-00001.parquet.pending").stat().st_size}
    assert read_manifest(tmp_path / "out")["parts"] == []            # written, not committed: not output
    for record in records[:2]:
        sink.commit_part(record)                                     # the driver side
    assert [p["block"] for p in read_manifest(tmp_path / "out")["parts"]] == [0, 1]
    with pytest.raises(AssertionError):
        sink.commit()                                                # block 2 is not committed
    resumed = PartsSink(tmp_path / "out", SCHEMA, {"config": "x", "inputs": []}, resume=True)
    assert resumed.open(SPECS) == {0, 1}
    assert not (tmp_path / "out" / "_part-00002.parquet.pending").exists()   # unlisted: deleted, redone
    resumed.write(SPECS[2], block(2))
    resumed.commit()
    got = pq.read_table(tmp_path / "out")
    assert got.column("id").to_pylist() == [f"d{k}" for k in range(9)]
    assert got.schema.metadata[b"longbert"] == SCHEMA.metadata[b"longbert"]


def test_a_record_whose_part_is_missing_is_refused(tmp_path):
    sink = PartsSink(tmp_path / "out", SCHEMA, {"config": "x", "inputs": []})
    sink.open(SPECS)
    record = PartWriter(tmp_path / "out", SCHEMA, SPECS[0]).write(block(0))
    (tmp_path / "out" / record["file"]).unlink()
    with pytest.raises(RunError, match="the part of block 0 is missing or not .* bytes"):
        sink.commit_part(record)


def test_parts_streamed_into_a_file_equal_the_file_written_whole(tmp_path):
    direct = FileSink(tmp_path / "direct.parquet", SCHEMA)
    direct.open(SPECS)
    for spec in SPECS:
        direct.write(spec, block(spec.index))
    direct.commit()
    staged = FileSink(tmp_path / "staged.parquet", SCHEMA)
    staged.open(SPECS)
    folder = staged.parts_folder()
    records = [PartWriter(folder, SCHEMA, spec).write(block(spec.index)) for spec in reversed(SPECS)]  # any order
    with pytest.raises(RunError, match="the sink got block 2 but expects block 0"):
        staged.commit_part(records[0])
    for record in reversed(records):                                # committed in plan order
        staged.commit_part(record)
    staged.commit()
    assert not folder.exists()
    a, b = (pq.ParquetFile(tmp_path / f"{name}.parquet") for name in ("direct", "staged"))
    assert b.read().equals(a.read()) and b.schema_arrow.equals(a.schema_arrow, check_metadata=True)
    assert b.metadata.num_row_groups == a.metadata.num_row_groups == 3


def test_engines_come_from_one_table_with_an_install_hint(monkeypatch):
    import pipeline.engine.engines as engines
    from pipeline.options.config import PipelineConfig
    from pipeline.options.ray_config import ENGINES

    assert tuple(engines.ENGINES) == ENGINES
    cfg = PipelineConfig.from_options(inputs=("in.csv",), engine="ray")
    monkeypatch.setitem(engines.ENGINES, "ray", engines.EngineEntry("ray_engine", "RayEngine", library="no_such_lib_x",
                                                                     extra="ray"))
    with pytest.raises(ConfigError, match=r"--engine ray needs the no_such_lib_x library, which is not installed: "
                                          r"pip install -e '.\[ray\]' in a clone of longbert, or use --engine local"):
        engines.open_engine(cfg)
    local = engines.open_engine(PipelineConfig.from_options(inputs=("in.csv",)))
    assert type(local).__name__ == "LocalEngine"


@pytest.mark.parametrize("harm", ["missing", "cut short"])
def test_a_committed_part_missing_or_damaged_at_resume_is_redone(tmp_path, harm):
    sink = PartsSink(tmp_path / "out", SCHEMA, {"config": "x", "inputs": []})
    sink.open(SPECS)
    for spec in SPECS[:2]:
        sink.commit_part(PartWriter(tmp_path / "out", SCHEMA, spec).write(block(spec.index)))
    part = tmp_path / "out" / "_part-00001.parquet.pending"
    if harm == "missing":
        part.unlink()
    else:
        part.write_bytes(part.read_bytes()[:-8])
    resumed = PartsSink(tmp_path / "out", SCHEMA, {"config": "x", "inputs": []}, resume=True)
    assert resumed.open(SPECS) == {0} and resumed.redone == 1 and not part.exists()


def test_a_pipeline_that_does_not_pickle_is_refused_before_ray_starts(pipe, tmp_path, monkeypatch):
    import threading

    import pipeline.engine.ray_engine as ray_engine

    def no_ray(*_a, **_k):
        raise AssertionError("Ray was started")

    monkeypatch.setattr(ray_engine, "_start_ray", no_ray)

    class Locked:
        """A stage holding a lock: pickle refuses it."""
        def __init__(self):
            self.lock = threading.Lock()

        def __call__(self, batch):
            return batch

    src = tmp_path / "in.csv"
    src.write_text("id,text\nd0,w1 w2\n")
    with pytest.raises(ConfigError, match=r"the Ray workers each get the pipeline, but it does not pickle \(.*lock"):
        pipe.insert(Locked(), after="tokenize", name="locked").run(str(src), f"{tmp_path}/out/", engine="ray")
    assert not (tmp_path / "out").exists()
