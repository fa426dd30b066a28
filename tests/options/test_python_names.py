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
