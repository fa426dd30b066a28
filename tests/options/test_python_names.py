"""Python calls name their arguments, not extract's flags, in their messages."""
from __future__ import annotations

import re

import pytest
from conftest import words, write_csv

import longbert
from pipeline.errors import ConfigError
from pipeline.options.python_api import python_message


def test_python_message_turns_flags_into_arguments():
    assert python_message("--pooling='avg'; choose one of cls") == "pooling='avg'; choose one of cls"
    assert python_message("--resume: x; pass --overwrite to start again") == \
        "resume=True: x; pass overwrite=True to start again"
    assert python_message("--output 'o.csv' is neither; use e.g. -o o.parquet or -o DIR/") == \
        "output='o.csv' is neither; use e.g. output='o.parquet' or output='DIR/'"
    assert python_message("--max-length 600, --no-progress, pass --keep-col with one of them") == \
        "max_length=600, progress=False, pass keep_cols with one of them"


@pytest.mark.parametrize("call", [lambda: longbert.encode(["a b"], pooling="avg"),
                                  lambda: longbert.Pipeline.from_options(pooling="avg"),
                                  lambda: longbert.LongBertVectorizer(pooling="avg").fit(["a b"])])
def test_a_bad_pooling_names_the_argument(call):
    with pytest.raises(ConfigError, match=re.escape("pooling='avg'; choose one of cls, pooler, mean, max")) as err:
        call()
    assert "--" not in str(err.value)


def test_a_bad_strategy_names_the_argument():
    with pytest.raises(ConfigError) as err:
        longbert.Pipeline.from_options(strategy="x")
    assert str(err.value) == "strategy='x'; choose one of head, tail, head_tail, chunk, sliding, late"


def test_a_refused_resume_names_overwrite_true(pipe, tmp_path):
    corpus = str(write_csv(tmp_path / "c.csv", [{"id": f"d{i}", "text": words(5 + i, i)} for i in range(4)]))
    parts = f"{tmp_path / 'parts'}/"
    pipe.run(corpus, parts, block_rows=2)
    with pytest.raises(ConfigError) as err:
        pipe.run(corpus, parts, block_rows=3, resume=True)
    assert str(err.value).startswith("resume=True: ")
    assert str(err.value).endswith("run with the same options and inputs, or pass overwrite=True to start again")
    assert "--" not in str(err.value)



def _pool(**options):
    import numpy as np

    return longbert.pool(np.zeros((1, 3, 4), np.float32), np.ones((1, 3)), **options)


@pytest.mark.parametrize("call,message", [
    (lambda csv: _pool(pooling="avg"), "pooling='avg'; choose one of cls, pooler, mean, max"),
    (lambda csv: _pool(layer_agg="avg"), "layer_agg='avg'; choose one of mean, sum, concat"),
    (lambda csv: list(longbert.read(csv, block_rows=0)), "block_rows=0 must be >= 1"),
    (lambda csv: list(longbert.read(csv, on_bad_lines="x")), "on_bad_lines='x'; choose one of error, skip"),
    (lambda csv: list(longbert.read(csv, encoding="nope")),
     "encoding='nope' is not a known text encoding; try utf-8, cp1252, cp1251 or gb18030"),
    (lambda csv: list(longbert.read(csv, text_col="body")),
     "{csv}: column 'body' not found; columns are ['id', 'text']; pass text_col with one of them"),
    (lambda csv: longbert.Pipeline.from_options(strategy="sliding", overlap=600),
     "overlap=600 must be in [0, 510) for windows of 510 content tokens (max_length 512 - [CLS] - [SEP]); lower overlap"),
    (lambda csv: longbert.Pipeline.from_options(max_length=5000),
     "max_length=5000 exceeds the model's 512 positions; use max_length=512 or less"),
    (lambda csv: longbert.model_path("/nonexistent/folder"),
     "model='/nonexistent/folder' is not a directory; pass the folder that holds config.json"),
], ids=["pool-pooling", "pool-layer_agg", "read-block_rows", "read-on_bad_lines", "read-encoding", "read-text_col",
        "from_options-overlap", "from_options-max_length", "model_path"])
def test_every_python_entry_point_names_its_argument(call, message, tmp_path):
    csv = tmp_path / "s.csv"
    csv.write_text("id,text\n1,a b\n")
    with pytest.raises(longbert.PipelineError) as err:
        call(str(csv))
    assert str(err.value) == message.format(csv=csv)
