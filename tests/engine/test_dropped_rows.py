"""A filter stage that drops rows is named in the run's summary: the rows read, the rows each stage
dropped and the rows written, which the file's row count confirms."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from conftest import words, write_csv

IDS = [f"d{i}" for i in range(10)]


def drop_d3(batch):
    return batch.take([i for i, row_id in enumerate(batch.ids) if row_id != "d3"])


def drop_short(batch):
    return batch.take([i for i, d in enumerate(batch.docs) if d.n_tokens >= 6])


@pytest.fixture
def src(tmp_path):
    return write_csv(tmp_path / "in.csv", [{"id": i, "text": words(3 + k)} for k, i in enumerate(IDS)])


@pytest.mark.parametrize("block_rows", [None, 3])
def test_the_summary_names_the_rows_read_and_what_the_filter_dropped(pipe, src, tmp_path, block_rows):
    out = tmp_path / "out.parquet"
    options = {} if block_rows is None else {"block_rows": block_rows}
    summary = pipe.insert(drop_d3, after="tokenize").run(str(src), str(out), **options)
    ids = pq.read_table(out).column("id").to_pylist()
    assert ids == [i for i in IDS if i != "d3"]
    assert summary.rows_read == len(IDS) and summary.dropped == {"drop_d3": len(IDS) - len(ids)}
    assert summary.line().startswith(f"{len(IDS)} rows read; 'drop_d3' dropped 1; {len(ids)} documents written, ")


def test_two_filters_are_counted_apart(pipe, src, tmp_path):
    out = tmp_path / "out.parquet"
    filtered = pipe.insert(drop_d3, after="tokenize").insert(drop_short, after="drop_d3")
    summary = filtered.run(str(src), str(out), block_rows=4)
    n_short = sum(3 + k < 6 for k in range(len(IDS)))   # words(3 + k): 3 + k tokens
    written = pq.read_table(out).num_rows
    assert written == len(IDS) - 1 - n_short
    assert summary.dropped == {"drop_d3": 1, "drop_short": n_short}
    assert summary.line().startswith(f"{len(IDS)} rows read; 'drop_d3' dropped 1; 'drop_short' dropped {n_short}; "
                                     f"{written} documents written, ")


def test_a_run_that_drops_nothing_keeps_its_summary(pipe, src, tmp_path):
    summary = pipe.run(str(src), str(tmp_path / "out.parquet"))
    assert summary.dropped == {} and summary.rows_read == len(IDS)
    assert summary.line().startswith(f"{len(IDS)} documents, ")
