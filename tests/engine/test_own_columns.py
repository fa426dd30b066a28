"""Output columns of one's own: a stage after 'rows' declares the columns it appends (``adds_columns``), the
file holds them (a .parquet file, a DIR/ of parts, a resumed DIR/), and an undeclared or changing column is
refused by name, not by pyarrow."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cut_at_part, words, write_csv

from pipeline.errors import ConfigError
from pipeline.output.write import read_manifest

TEXTS = [words(5 + 3 * i) for i in range(6)]


def n_chars(batch):
    lengths = pa.array([len(t) for t in batch.texts], pa.int64())   # int64 here: the declared int32 is written
    return batch.replace(table=batch.table.append_column("n_chars", lengths))


n_chars.adds_columns = (pa.field("n_chars", pa.int32()),)


def undeclared(batch):
    return batch.replace(table=batch.table.append_column("n_chars", pa.array([len(t) for t in batch.texts])))


@pytest.fixture
def src(tmp_path):
    return write_csv(tmp_path / "in.csv", [{"id": f"d{i}", "text": t} for i, t in enumerate(TEXTS)])


def _by_id(path) -> dict[str, int]:
    table = pq.read_table(path)
    return dict(zip(table.column("id").to_pylist(), table.column("n_chars").to_pylist()))


def test_a_declared_column_is_written_with_its_type(pipe, src, tmp_path):
    out = tmp_path / "out.parquet"
    pipe.insert(n_chars, after="rows").run(str(src), str(out))
    schema = pq.read_schema(out)
    assert schema.field("n_chars").type == pa.int32() and schema.names[-1] == "n_chars"
    assert schema.names[:-1] == pq.read_schema(_plain(pipe, src, tmp_path)).names
    assert _by_id(out) == {f"d{i}": len(t) for i, t in enumerate(TEXTS)}
    meta = json.loads(schema.metadata[b"longbert"])
    assert meta["added_columns"] == [{"column": "n_chars", "type": "int32", "stage": "n_chars"}]


def _plain(pipe, src, tmp_path):
    out = tmp_path / "plain.parquet"
    pipe.run(str(src), str(out))
    return out


def test_a_declared_column_in_a_dir_of_parts_and_a_resumed_one(pipe, src, tmp_path, monkeypatch):
    counted = pipe.insert(n_chars, after="rows")
    out = tmp_path / "parts"
    run_cut_at_part(monkeypatch, 2, counted, src, out, block_rows=2)
    with pytest.raises(ConfigError, match="the pipeline's stages differ"):   # the column is part of the run
        pipe.run(str(src), f"{out}/", block_rows=2, resume=True)
    with monkeypatch.context() as m:   # the same stage declaring another type: another run
        m.setattr(n_chars, "adds_columns", (pa.field("n_chars", pa.int64()),))
        with pytest.raises(ConfigError, match=r"the pipeline's stages differ .*\[n_chars:int64\]'\] now"):
            pipe.insert(n_chars, after="rows").run(str(src), f"{out}/", block_rows=2, resume=True)
    summary = counted.run(str(src), f"{out}/", block_rows=2, resume=True)
    assert summary.resumed_from == 2 and read_manifest(out)["complete"] is True
    parts = sorted(out.glob("part-*.parquet"))
    assert len(parts) == 3 and len({str(pq.read_schema(p).remove_metadata()) for p in parts}) == 1
    assert _by_id(out) == {f"d{i}": len(t) for i, t in enumerate(TEXTS)}


def test_an_undeclared_column_is_refused_naming_the_stage_and_the_column(pipe, src, tmp_path):
    out = tmp_path / "out.parquet"
    with pytest.raises(ConfigError, match=r"stage 'undeclared' added column\(s\) \['n_chars'\] to the output table "
                                          r"without declaring them; declare them on the stage"):
        pipe.insert(undeclared, after="rows").run(str(src), str(out))
    assert not out.exists()


def test_a_declared_column_missing_from_a_later_block_is_refused(pipe, src, tmp_path):
    seen = []

    def first_only(batch):
        seen.append(1)
        return n_chars(batch) if len(seen) == 1 else batch

    first_only.adds_columns = n_chars.adds_columns
    with pytest.raises(ConfigError, match=r"stage 'first_only' declares column\(s\) \['n_chars'\] but its table "
                                          r"has none"):
        pipe.insert(first_only, after="rows").run(str(src), f"{tmp_path / 'parts'}/", block_rows=2)
    assert len(seen) == 2


def test_values_that_do_not_fit_the_declared_type_are_refused(pipe, src, tmp_path):
    def big(batch):
        return batch.replace(table=batch.table.append_column("big", pa.array([1000] * len(batch), pa.int64())))

    big.adds_columns = (("big", pa.int8()),)
    with pytest.raises(ConfigError, match=r"stage 'big' declares column 'big' as int8, but a block holds int64"):
        pipe.insert(big, after="rows").run(str(src), str(tmp_path / "out.parquet"))


def test_declaring_columns_before_rows_or_twice_or_over_a_name_of_the_output_is_refused(pipe, src, tmp_path):
    with pytest.raises(ConfigError, match=r"stage 'n_chars' declares output columns \['n_chars'\], but runs before "
                                          r"the stage that makes the output table \('rows'\)"):
        pipe.insert(n_chars, before="rows")

    def again(batch):
        return batch

    again.adds_columns = n_chars.adds_columns
    with pytest.raises(ConfigError, match=r"column 'n_chars' is declared by stage 'n_chars' and by stage 'again'"):
        pipe.insert(n_chars, after="rows").insert(again, after="n_chars")

    def clash(batch):
        return batch

    clash.adds_columns = (pa.field("n_tokens", pa.int32()),)
    with pytest.raises(ConfigError, match=r"stage 'clash' declares column 'n_tokens', which the output already has"):
        pipe.insert(clash, after="rows").run(str(src), str(tmp_path / "out.parquet"))
