"""A pipeline from parts is described by its stages: the file's window and pooling metadata are the stages'
values, --resume compares every built-in stage's values, and stages that disagree are refused at build."""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import disk_full_at_part, run_cut_at_part, invoke, words, write_csv
from transformers import BertTokenizerFast

import longbert
from pipeline.errors import ConfigError
from pipeline.output.write import read_manifest
from pipeline.stage import stage_label


def _segment(pipe, **changes) -> longbert.Segment:
    seg = pipe["segment"]
    strategies = {k: dataclasses.replace(v, **changes) for k, v in seg.strategies.items()}
    return longbert.Segment(strategies, seg.cls_id, seg.sep_id)


def _parts(pipe, **stages) -> longbert.Pipeline:
    """``pipe``'s stages as a list, some replaced by name (a pipeline built from parts, no options record)."""
    return longbert.Pipeline([stages.get(name, stage) for name, stage in pipe.steps])


@pytest.fixture
def src(tmp_path):
    return write_csv(tmp_path / "in.csv", [{"id": f"d{i}", "text": words(9 + 5 * i)} for i in range(6)])


def test_the_metadata_of_a_pipeline_from_parts_holds_its_stages_values(pipe, src, tmp_path):
    seg = _segment(pipe, max_length=8)
    tok = longbert.Tokenize(pipe["tokenize"].tokenizer, max_tokens_per_doc=20)
    agg = type(pipe["aggregate"])(**{**pipe["aggregate"].get_params(), "normalize": True})
    parts = _parts(pipe, tokenize=tok, segment=seg, aggregate=agg)
    out = tmp_path / "parts.parquet"
    parts.run(str(src), str(out))
    meta = json.loads(pq.read_schema(out).metadata[b"longbert"])
    want = seg.get_params()["strategies"]["chunk"]
    assert meta["max_length"] == want.max_length and meta["max_length"] != pipe["segment"].strategies["chunk"].max_length
    assert meta["strategy"] == {"name": "chunk", "max_length": want.max_length, "content_tokens": want.max_length - 2,
                                "max_tokens_per_doc": tok.get_params()["max_tokens_per_doc"]}
    assert meta["features"][0]["strategy"] == meta["strategy"]
    assert meta["normalize"] is agg.get_params()["normalize"] is True
    assert meta["aggregate"] == ",".join(agg.get_params()["aggregates"])
    feature = agg.get_params()["features"][0]
    assert (meta["pooling"], meta["layers"], meta["layer_agg"]) == (feature.pooling, list(feature.layers),
                                                                   feature.layer_agg)
    table = pq.read_table(out)   # the rows are those stages' too: windows of 6 content tokens of <= 20 tokens
    n_tokens = [9 + 5 * i for i in range(6)]
    assert table.column("n_windows").to_pylist() == [math.ceil(min(n, 20) / (want.max_length - 2)) for n in n_tokens]
    norms = np.linalg.norm(np.asarray(table.column("features").to_pylist(), dtype=np.float64), axis=1)
    assert np.allclose(norms, 1.0, atol=1e-5)


def test_the_options_pipeline_keeps_the_options_metadata(pipe, src, tmp_path):
    out = tmp_path / "options.parquet"
    pipe.run(str(src), str(out))
    meta = json.loads(pq.read_schema(out).metadata[b"longbert"])
    assert meta["max_length"] == pipe.cfg.segment.max_length and "stages" not in meta


def test_resume_refuses_a_dir_begun_with_other_windows_from_a_pipeline_of_parts(pipe, src, tmp_path, monkeypatch):
    out = tmp_path / "parts"
    run_cut_at_part(monkeypatch, 2, pipe, src, out, block_rows=2)
    eight = _parts(pipe, segment=_segment(pipe, max_length=8))
    # a pipeline from parts runs with the options its stages describe: the Segment's windows are one of them
    with pytest.raises(ConfigError, match=r"resume=True: the options differ from the run that wrote") as err:
        eight.run(str(src), f"{out}/", block_rows=2, resume=True)
    assert f"max_length: {pipe.cfg.segment.max_length} then, 8 now" in str(err.value)
    same = _parts(pipe)   # the same stages from parts: the run is resumed
    same.run(str(src), f"{out}/", block_rows=2, resume=True)
    assert read_manifest(out)["complete"] is True
    assert pq.read_table(out).num_rows == 6


def _changed(pipe, name: str, **params):
    stage = pipe[name]
    return type(stage)(**{**stage.get_params(deep=False), **params})


@pytest.mark.parametrize("name, change", [
    ("tokenize", {"max_tokens_per_doc": 11}),
    ("tokenize", {"lowercase": True}),
    ("segment", {"cls_id": 3}),
    ("encode", {"with_tokens": True}),
    ("aggregate", {"normalize": True}),
    ("aggregate", {"aggregates": ("max",)}),
    ("rows", {"kept": ("label",)}),
])
def test_every_built_in_stages_values_enter_its_resume_label(pipe, name, change):
    stage = pipe[name]
    changed = _changed(pipe, name, **change)
    assert stage_label(name, stage, _changed(pipe, name)) == name   # equal values: the plain name
    label = stage_label(name, changed, stage)
    assert label.startswith(f"{name}={type(stage).__name__}#")


def test_the_encode_label_follows_its_model_options_but_not_its_store_or_callback(pipe, tmp_path):
    enc = pipe["encode"]
    half = _changed(pipe, "encode", model=dataclasses.replace(enc.model, dtype="float16"))
    assert stage_label("encode", half, enc) != "encode"
    io = _changed(pipe, "encode", store=str(tmp_path / "store"), on_batch=print)
    assert stage_label("encode", io, enc) == "encode"


def test_a_segment_longer_than_the_model_serves_is_refused_at_build(pipe):
    served = pipe["encode"].facts.positions or pipe["encode"].facts.max_length
    with pytest.raises(ConfigError) as err:
        _parts(pipe, segment=_segment(pipe, max_length=served + 1))
    text = str(err.value)
    assert f"stage 'segment' makes 'chunk' windows of max_length={served + 1}" in text
    assert "stage 'encode'" in text and f"serves {served}" in text
    _parts(pipe, segment=_segment(pipe, max_length=served))   # the model's own positions are fine


def test_aggregate_features_of_a_strategy_the_segment_does_not_make_are_refused(pipe):
    seg = pipe["segment"]
    head = longbert.Segment([longbert.Head(seg.strategies["chunk"].max_length)], seg.cls_id, seg.sep_id)
    with pytest.raises(ConfigError, match=r"stage 'aggregate' aggregates features \['chunk:mean'\], whose windows "
                                          r"stage 'segment' does not make \(its strategies are \['head'\]\)"):
        _parts(pipe, segment=head)
    with pytest.raises(ConfigError, match="stage 'aggregate' aggregates features"):
        pipe.replace("segment", head)   # replace builds a pipeline too


def test_a_tokenizer_of_another_vocabulary_is_refused(pipe, tmp_path):
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"xyz"]) + "\n")
    other = BertTokenizerFast.from_pretrained(tmp_path)
    assert len(other) == 8 != len(pipe["encode"].tokenizer)
    with pytest.raises(ConfigError) as err:
        _parts(pipe, tokenize=longbert.Tokenize(other))
    text = str(err.value)
    assert "stage 'tokenize'" in text and "stage 'encode'" in text
    assert f"{len(other)} tokens" in text and f"{len(pipe['encode'].tokenizer)} tokens" in text
    copy = BertTokenizerFast.from_pretrained(pipe["tokenize"].tokenizer.name_or_path)   # the same vocabulary
    _parts(pipe, tokenize=longbert.Tokenize(copy))


def test_other_special_ids_and_a_rows_stage_of_another_level_are_refused(pipe):
    seg = pipe["segment"]
    wrong = longbert.Segment(seg.strategies, cls_id=seg.sep_id, sep_id=seg.cls_id)
    with pytest.raises(ConfigError, match=rf"stage 'segment' wraps windows in ids cls_id={seg.sep_id}, "
                                          rf"sep_id={seg.cls_id}, but stage 'encode'"):
        _parts(pipe, segment=wrong)
    with pytest.raises(ConfigError, match=r"stage 'aggregate' is a Aggregate, whose output rows stage 'rows' "
                                          r"\(WindowRows\) does not write; use a Rows"):
        _parts(pipe, rows=longbert.WindowRows())


def test_set_params_that_make_stages_disagree_is_refused_and_changes_nothing(pipe):
    short = pipe.without("rows").insert(pipe["rows"], after="aggregate")
    served = pipe["encode"].facts.positions or pipe["encode"].facts.max_length
    long = {k: dataclasses.replace(v, max_length=served + 8) for k, v in pipe["segment"].strategies.items()}
    with pytest.raises(ConfigError, match="stage 'segment' makes 'chunk' windows"):
        short.set_params(segment__strategies=long)
    assert short["segment"] == pipe["segment"]


def test_resume_refuses_a_dir_begun_by_extract_with_the_options_windows(pipe, src, tmp_path, monkeypatch, runner,
                                                                         tiny_model_dir):
    out = tmp_path / "parts"
    disk_full_at_part(monkeypatch, 2)
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "--strategy", "chunk", "--max-length",
                             pipe.cfg.segment.max_length, "--block-rows", 2, "--no-progress", "-o", f"{out}/"])
    monkeypatch.undo()
    assert result.exit_code == 1 and read_manifest(out)["complete"] is False
    eight = _parts(pipe, segment=_segment(pipe, max_length=8))
    with pytest.raises(ConfigError, match=r"resume=True: the options differ from the run that wrote"):
        eight.run(str(src), f"{out}/", block_rows=2, resume=True)
    replaced = pipe.replace("segment", _segment(pipe, max_length=8))   # the options' record, another stage
    with pytest.raises(ConfigError, match=r"resume=True: the pipeline's stages differ from the run that wrote") as err:
        replaced.run(str(src), f"{out}/", block_rows=2, resume=True)
    assert "segment=Segment#" in str(err.value)
    assert read_manifest(out)["complete"] is False and len(read_manifest(out)["parts"]) == 1   # nothing was added
    pipe.run(str(src), f"{out}/", block_rows=2, resume=True)   # the options' stages finish what extract began
    assert read_manifest(out)["complete"] is True
    table = pq.read_table(out)
    assert table.column("n_windows").to_pylist() == [math.ceil((9 + 5 * i) / (pipe.cfg.segment.max_length - 2))
                                                     for i in range(6)]
