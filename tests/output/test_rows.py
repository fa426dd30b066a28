"""The rows stage: one output row per text in input order, the ids, counts, errors and vectors it was handed;
built alone from its own values (kept columns, output dtype, a binary centre given as an array)."""
from __future__ import annotations

import json
import pickle
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import words, write_csv

import longbert
from pipeline.columns import ERROR, FEATURES, ID, N_TOKENS, N_WINDOWS
from pipeline.errors import ConfigError
from pipeline.output.rows import FP16_OVERFLOW


def test_rows_stage_writes_one_row_per_text(pipe):
    """30 tokens in chunk windows of 14 are 3 windows; a blank text is a row with its error and no vector."""
    batch = pipe.process(longbert.Batch.from_texts([words(30), " ", words(3)], ids=["a", "b", "c"]))
    table = batch.table
    assert table.column(ID).to_pylist() == ["a", "b", "c"]
    assert table.column(N_TOKENS).to_pylist() == [30, 0, 3]
    assert table.column(N_WINDOWS).to_pylist() == [3, 0, 1]
    assert table.column(ERROR).to_pylist() == [None, "empty text", None]
    vectors = table.column(FEATURES).to_pylist()
    assert vectors[1] is None
    np.testing.assert_array_equal(np.array([vectors[0], vectors[2]], dtype=np.float32),
                                  batch.vectors[FEATURES][[0, 2]])
    assert batch.counts.documents == 3 and batch.counts.errors == 1


def _aggregated(pipe, texts):
    """``texts`` through pipe's stages up to and including ``aggregate``."""
    return pipe.process(longbert.Batch.from_texts(texts, ids=[f"d{i}" for i in range(len(texts))]), 0,
                        pipe.names.index("rows"))


def test_rows_built_alone_packs_the_bits_of_x_minus_a_centre_given_as_an_array(pipe):
    batch = _aggregated(pipe, [words(20), words(9, 4), words(31, 7)])
    x = batch.vectors[FEATURES]                                                       # (3, 32) float32
    center = np.linspace(-0.5, 0.5, x.shape[1])                                       # float64: kept as float32
    rows = longbert.Rows(out_dtype="binary", binary_center=center)
    table = rows(batch).table
    packed = np.array(table.column(FEATURES).to_pylist(), dtype=np.uint8)            # (3, 4)
    np.testing.assert_array_equal(packed, np.packbits(x - center.astype(np.float32) > 0, axis=1))
    assert table.schema.field(FEATURES).type == pa.list_(pa.uint8(), 4) and table.schema.metadata is None
    assert type(rows)(**rows.get_params()) == rows and pickle.loads(pickle.dumps(rows)) == rows
    mapped = longbert.Rows(out_dtype="binary", binary_center={FEATURES: center})
    assert mapped == rows and rows.get_params()["binary_center"][FEATURES][0] == -0.5


@pytest.mark.parametrize("out_dtype, leaf", [("float32", pa.float32()), ("float16", pa.float16()), ("int8", pa.int8())])
def test_rows_fields_come_from_the_batchs_vectors_and_the_stages_values(pipe, out_dtype, leaf):
    batch = _aggregated(pipe, [words(20), words(5)])
    table = longbert.Rows(out_dtype=out_dtype)(batch).table
    assert table.schema.field(FEATURES).type == pa.list_(leaf, 32)
    assert table.column_names[:1] == [ID] and ("features_scale" in table.column_names) == (out_dtype == "int8")
    x = np.array(table.column(FEATURES).to_pylist(), dtype=np.float32)
    if out_dtype == "int8":
        x = x * np.array(table.column("features_scale").to_pylist(), dtype=np.float32)[:, None]
    np.testing.assert_allclose(x, batch.vectors[FEATURES], atol={"float32": 0, "float16": 1e-3, "int8": 0.05}[out_dtype])


def test_rows_makes_a_row_its_dtype_cannot_store_an_error(pipe):
    batch = _aggregated(pipe, [words(20), words(5)])
    big = batch.vectors[FEATURES].copy()
    big[1, 3] = 1e6                                   # beyond float16's 65504
    table = longbert.Rows(out_dtype="float16")(batch.replace(vectors={FEATURES: big})).table
    assert table.column(ERROR).to_pylist() == [None, FP16_OVERFLOW]
    assert table.column(FEATURES).to_pylist()[1] is None


def test_rows_refuses_a_centre_it_cannot_use():
    with pytest.raises(ConfigError, match=re.escape("Rows: binary_center is the centre of --out-dtype binary's bits, "
                                                    "but out_dtype is 'float32'; pass out_dtype='binary'")):
        longbert.Rows(binary_center=np.zeros(4))
    with pytest.raises(ConfigError, match=re.escape("Rows: binary_center ndarray of shape (2, 2) is not a centre; give "
                                                    "one (D,) array of finite numbers")):
        longbert.Rows(out_dtype="binary", binary_center=np.zeros((2, 2)))
    with pytest.raises(ConfigError, match=re.escape("Rows: out_dtype='bits'; choose one of")):
        longbert.Rows(out_dtype="bits")


def test_a_centre_of_another_size_or_column_is_refused_when_the_rows_are_built(pipe):
    batch = _aggregated(pipe, [words(20)])
    with pytest.raises(ConfigError, match=re.escape("Rows: binary_center['features'] has 16 values, but the column's "
                                                    "vectors have 32")):
        longbert.Rows(out_dtype="binary", binary_center=np.zeros(16))(batch)
    with pytest.raises(ConfigError, match=re.escape("Rows: binary_center has centres for ['f_x'], but the rows hold "
                                                    "column 'features'")):
        longbert.Rows(out_dtype="binary", binary_center={"f_x": np.zeros(32)})(batch)


def test_from_options_takes_a_centre_and_the_file_records_it(tiny_model_dir, tmp_path):
    src = write_csv(tmp_path / "in.csv", [{"id": f"d{i}", "text": words(12 + 5 * i, i)} for i in range(3)])
    center = np.full(32, 0.01, np.float32)
    common = dict(model=str(tiny_model_dir), strategy="chunk", max_length=16)
    floats = longbert.Pipeline.from_options(**common)
    floats.run(str(src), str(tmp_path / "f.parquet"))
    x = np.array(pq.read_table(tmp_path / "f.parquet").column(FEATURES).to_pylist(), dtype=np.float32)
    pipe = longbert.Pipeline.from_options(**common, out_dtype="binary", binary_center=center)
    summary = pipe.run(str(src), str(tmp_path / "b.parquet"))
    assert "binary:" not in summary.line()          # the centre was given: no note about this run's documents
    packed = np.array(pq.read_table(tmp_path / "b.parquet").column(FEATURES).to_pylist(), dtype=np.uint8)
    np.testing.assert_array_equal(packed, np.packbits(x > center, axis=1))
    meta = json.loads(pq.read_schema(tmp_path / "b.parquet").metadata[b"longbert"])
    assert meta["compact"]["columns"][0]["center"] == [float(c) for c in center]
    assert "stages" not in meta                       # the options' own stages: the --resume fingerprint as before
    with pytest.raises(ConfigError, match="^" + re.escape("binary_center['features'] has 8 values, but the column's "
                                                          "vectors have 32")):   # the caller's argument, not a stage
        longbert.Pipeline.from_options(**common, out_dtype="binary", binary_center=np.zeros(8))
