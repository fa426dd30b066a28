"""The Python writers follow the CLI's output rules: ``save_features`` and ``Pipeline.run`` refuse an
existing output without ``overwrite=True``, a name that is not .parquet (or DIR/ for Pipeline.run), and
never turn a folder into a file."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import STAGE_ML as ML
from conftest import words, write_csv

import longbert
from pipeline.errors import ConfigError

IDS = ["a", "b"]
X = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)


def features(path) -> list[list[float]]:
    return [list(v) for v in pd.read_parquet(path)["features"]]


def test_save_features_refuses_an_existing_file_without_overwrite(tmp_path):
    path = longbert.save_features(tmp_path / "f.parquet", [f"d{i}" for i in range(200)], np.ones((200, 2)))
    before = path.read_bytes()
    with pytest.raises(ConfigError) as err:
        longbert.save_features(path, IDS, X)
    assert str(err.value) == f"path {str(path)!r} exists; pass overwrite=True to replace it or choose another path"
    assert path.read_bytes() == before and len(pd.read_parquet(path)) == 200
    assert longbert.save_features(path, IDS, X, overwrite=True) == path
    assert features(path) == [[1.0, 2.0], [3.0, 4.0]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.parquet"]   # no temporary file left


@pytest.mark.parametrize("name, message", [
    ("f.csv", "path '{d}/f.csv' is not a .parquet file; save_features writes parquet: use e.g. {d}/f.parquet"),
    ("out/", "path '{d}/out/' names a folder; save_features writes one .parquet file: use e.g. "
             "{d}/out/features.parquet"),
])
def test_save_features_refuses_other_suffixes_and_folder_names(tmp_path, name, message):
    with pytest.raises(ConfigError) as err:
        longbert.save_features(f"{tmp_path}/{name}", IDS, X, overwrite=True)
    assert str(err.value) == message.format(d=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_save_features_never_turns_a_folder_into_a_file(tmp_path):
    (tmp_path / "x.parquet").mkdir()
    (tmp_path / "x.parquet" / "mine.txt").write_text("kept\n")
    with pytest.raises(ConfigError) as err:
        longbert.save_features(tmp_path / "x.parquet", IDS, X, overwrite=True)
    assert str(err.value) == (f"path '{tmp_path}/x.parquet' is a folder; save_features writes a file and never "
                              f"replaces a folder: use e.g. {tmp_path}/x.parquet/features.parquet")
    assert (tmp_path / "x.parquet").is_dir() and (tmp_path / "x.parquet" / "mine.txt").read_text() == "kept\n"


@pytest.fixture
def pipe(tiny_model_dir):
    return longbert.Pipeline.from_options(model=str(tiny_model_dir), max_length=ML, strategy="chunk")


@pytest.fixture
def corpus(tmp_path):
    return str(write_csv(tmp_path / "in.csv", [{"id": f"d{i}", "text": words(5 + 9 * i, i)} for i in range(4)]))


def test_pipeline_run_refuses_an_existing_file_without_overwrite(pipe, corpus, tmp_path, tiny_model_dir):
    out = tmp_path / "o.parquet"
    out.write_bytes(b"an earlier file")
    with pytest.raises(ConfigError) as err:
        pipe.run(corpus, str(out))
    assert str(err.value) == f"output {str(out)!r} exists; pass overwrite=True to replace it or choose another path"
    assert out.read_bytes() == b"an earlier file"
    summary = pipe.run(corpus, str(out), overwrite=True)
    assert summary.documents == 4 and pd.read_parquet(out)["id"].tolist() == ["d0", "d1", "d2", "d3"]
    with pytest.raises(ConfigError) as err:  # a pipeline's own overwrite does not carry over to a later run
        longbert.Pipeline.from_options(model=str(tiny_model_dir), max_length=ML, overwrite=True).run(corpus, str(out))
    assert "exists; pass overwrite=True" in str(err.value)


def test_pipeline_run_checks_the_suffix_and_dir_outputs(pipe, corpus, tmp_path):
    with pytest.raises(ConfigError, match=r"^output='.*/o\.csv' is neither a \.parquet file nor a directory"):
        pipe.run(corpus, str(tmp_path / "o.csv"), overwrite=True)
    parts = f"{tmp_path / 'parts'}/"
    first = pipe.run(corpus, parts, block_rows=2)
    with pytest.raises(ConfigError) as err:
        pipe.run(corpus, parts, block_rows=2)
    assert str(err.value) == (f"output '{tmp_path / 'parts'}' already holds a run; pass resume=True to continue it "
                              "or overwrite=True to replace it")
    resumed = pipe.run(corpus, parts, block_rows=2, resume=True)   # finished: nothing is redone
    assert (resumed.documents, resumed.resumed_from) == (0, first.documents)
    assert pipe.run(corpus, parts, block_rows=2, overwrite=True).documents == 4
    (tmp_path / "x.parquet").mkdir()          # an existing folder stays one: it gets parts
    pipe.run(corpus, str(tmp_path / "x.parquet"))
    assert (tmp_path / "x.parquet").is_dir() and pd.read_parquet(tmp_path / "x.parquet")["id"].tolist() == \
        ["d0", "d1", "d2", "d3"]
