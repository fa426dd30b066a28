"""--resume and the stages that ran: each built-in stage is fingerprinted by its parameters, so a
pipeline with its own Segment cannot resume a DIR/ begun with the options' windows, and the same
stages resume it."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import words, write_csv

import longbert
from pipeline.errors import ConfigError, RunError
from pipeline.output.write import PartsSink, read_manifest
from pipeline.stage import stage_label

sklearn_base = pytest.importorskip("sklearn.base")


def _segment8(pipe):
    seg = pipe["segment"]
    strategies = {k: dataclasses.replace(v, max_length=8) for k, v in seg.strategies.items()}
    return longbert.Segment(strategies, seg.cls_id, seg.sep_id)


def _interrupted(pipe, src, out, monkeypatch) -> None:
    """Run ``pipe`` into ``out`` and fail after two of its three parts are written."""
    write = PartsSink.write
    calls = []

    def failing(self, spec, table, last=True):
        if len(calls) == 2:
            raise RunError("interrupted by the test")
        calls.append(spec)
        return write(self, spec, table, last)

    with monkeypatch.context() as m:
        m.setattr(PartsSink, "write", failing)
        with pytest.raises(RunError, match="interrupted"):
            pipe.run(str(src), f"{out}/", block_rows=2)
    manifest = read_manifest(out)
    assert manifest["complete"] is False and len(manifest["parts"]) == 2


def _features(path) -> np.ndarray:
    return np.asarray(pq.read_table(path).sort_by("id").column("features").to_pylist(), dtype=np.float32)


def _close(a, b) -> bool:
    return a.shape == b.shape and np.allclose(a, b, atol=1e-5)   # blocks of 2 rows, or one block: other batches


@pytest.fixture
def src(tmp_path):
    return write_csv(tmp_path / "in.csv", [{"id": f"d{i}", "text": words(9 + 3 * i)} for i in range(6)])


def test_a_pipeline_with_its_own_segment_cannot_resume_a_dir_begun_with_the_options_windows(pipe, src, tmp_path,
                                                                                                monkeypatch):
    full = tmp_path / "full.parquet"
    pipe.run(str(src), str(full))
    out = tmp_path / "parts"
    _interrupted(pipe, src, out, monkeypatch)
    eight = pipe.replace("segment", _segment8(pipe))
    with pytest.raises(ConfigError, match=r"resume=True: the pipeline's stages differ from the run that wrote"):
        eight.run(str(src), f"{out}/", block_rows=2, resume=True)
    same = pipe.replace("segment", sklearn_base.clone(pipe["segment"]))   # an equal Segment, another object
    same.run(str(src), f"{out}/", block_rows=2, resume=True)
    assert read_manifest(out)["complete"] is True
    assert _close(_features(out), _features(full))
    assert "stages" not in json.loads(pq.read_schema(full).metadata[b"longbert"])   # the options' stages: unnamed


def test_a_dir_begun_with_its_own_segment_resumes_with_an_equal_one_only(pipe, src, tmp_path, monkeypatch):
    out = tmp_path / "parts"
    eight = pipe.replace("segment", _segment8(pipe))
    _interrupted(eight, src, out, monkeypatch)
    stages = json.loads(pq.read_schema(next(out.glob("*.pending"))).metadata[b"longbert"])["stages"]
    assert stages[1].startswith("segment=Segment#") and stages[0] == "tokenize"
    with pytest.raises(ConfigError, match="the pipeline's stages differ"):
        pipe.run(str(src), f"{out}/", block_rows=2, resume=True)
    again = pipe.replace("segment", _segment8(pipe))
    again.run(str(src), f"{out}/", block_rows=2, resume=True)
    full = tmp_path / "full.parquet"
    eight.run(str(src), str(full))
    assert _close(_features(out), _features(full))
    pipe.run(str(src), str(tmp_path / "defaults.parquet"))
    assert not _close(_features(full), _features(tmp_path / "defaults.parquet"))   # windows of 8 are other vectors


def test_a_built_in_stage_is_labelled_by_its_parameters_not_by_their_repr(pipe):
    seg = pipe["segment"]
    assert stage_label("segment", seg, sklearn_base.clone(seg)) == "segment"
    label = stage_label("segment", _segment8(pipe), seg)
    assert label == stage_label("segment", _segment8(pipe), seg) and label.startswith("segment=Segment#")
    assert stage_label("tokenize", pipe["tokenize"], sklearn_base.clone(pipe["tokenize"])) == "tokenize"
