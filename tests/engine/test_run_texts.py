"""Pipeline.run_texts: an iterable of texts (a generator too) or of (id, text) pairs, run in bounded memory
through the same block loop as a file: the same parquet as ``run`` over a CSV of the same texts."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import words, write_csv

import longbert
from pipeline.errors import ConfigError, InputError

TEXTS = [words(3 + 9 * i, i) for i in range(9)] + [" ", words(60, 5)]   # one blank: its row error too


@pytest.fixture(scope="module")
def pipe(tiny_model_dir):
    return longbert.Pipeline.from_options(model=str(tiny_model_dir), strategy="chunk", max_length=16)


def _same(a: Path, b: Path) -> None:
    left, right = pq.read_table(a), pq.read_table(b)
    assert left.equals(right) and left.schema.metadata == right.schema.metadata


@pytest.mark.parametrize("output", ["g.parquet", "parts/"])
def test_a_generator_of_texts_gives_the_parquet_of_a_csv_of_them(pipe, tmp_path, output):
    seen = []

    def generate():
        for t in TEXTS:
            seen.append(t)
            yield t

    summary = pipe.run_texts(generate(), f"{tmp_path}/{output}", block_rows=3)
    assert seen == TEXTS and summary.documents == len(TEXTS)
    src = write_csv(tmp_path / "t.csv", [{"text": t} for t in TEXTS])
    pipe.run(str(src), f"{tmp_path}/{'c/' if output.endswith('/') else 'c.parquet'}", block_rows=3)
    _same(tmp_path / output.rstrip("/"), tmp_path / ("c" if output.endswith("/") else "c.parquet"))
    assert pq.read_table(tmp_path / output.rstrip("/")).column("row").to_pylist() == list(range(len(TEXTS)))
    assert not list(Path(tempfile.gettempdir()).glob("longbert-texts-*"))   # the spooled file is gone


def test_id_text_pairs_give_the_parquet_of_a_csv_with_an_id_column(pipe, tmp_path):
    pairs = [(f"doc-{i}", t) for i, t in enumerate(TEXTS)]
    pipe.run_texts(iter(pairs), str(tmp_path / "p.parquet"), block_rows=4)
    src = write_csv(tmp_path / "t.csv", [{"id": i, "text": t} for i, t in pairs])
    pipe.run(str(src), str(tmp_path / "c.parquet"), block_rows=4)
    _same(tmp_path / "p.parquet", tmp_path / "c.parquet")
    assert pq.read_table(tmp_path / "p.parquet").column("id").to_pylist() == [i for i, _ in pairs]


def test_run_texts_refusals(pipe, tmp_path):
    with pytest.raises(TypeError) as err:
        pipe.run_texts(["a text", 3], str(tmp_path / "x.parquet"))
    assert str(err.value) == "texts[1] is int; give str texts, or (id, text) pairs with str texts"
    with pytest.raises(TypeError) as err:
        pipe.run_texts([("a", "text"), "b"], str(tmp_path / "x.parquet"))
    assert str(err.value) == ("texts[1] is a str, but texts[0] was an (id, text) pair; give all texts one way")
    with pytest.raises(ConfigError) as err:
        pipe.run_texts(["a"], str(tmp_path / "x.parquet"), text_col="body", resume=True)
    assert str(err.value) == ("run_texts takes the texts themselves, so resume, text_col cannot apply; drop them, "
                              "or write the texts to a file and call run")
    with pytest.raises(InputError, match="run_texts: texts is empty; give at least one text"):
        pipe.run_texts(iter(()), str(tmp_path / "x.parquet"))
    assert not (tmp_path / "x.parquet").exists()
