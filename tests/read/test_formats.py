"""Input formats (issue 10): one corpus written as CSV, TSV, JSON Lines, parquet, a folder of .txt files
and compressed streams gives the same rows and vectors; each bad-input message by its exact text."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import CASES, invoke, words

from pipeline.options.config import PipelineConfig
from pipeline.read import BlockSpec, read_block, scan

REPO = Path(__file__).resolve().parents[2]


def _real_documents(n: int) -> list[str]:
    """Real long man pages from examples/corpus.csv (several thousand characters each)."""
    frame = pd.read_csv(REPO / "examples" / "corpus.csv", dtype=str, keep_default_na=False)
    return [t for t in frame["text"] if len(t) > 4000][:n]


ROWS = [
    {"id": "000123", "text": words(1200), "label": "long"},
    {"id": "007", "text": "42", "label": "0042"},
    {"id": "0", "text": "", "label": ""},
    {"id": "1e5", "text": "3.50", "label": "NA"},
    {"id": "x1", "text": f'{words(30)}\n"quoted", with, commas\r\n\ttabbed\t{words(700, 3)}', "label": "nl"},
    {"id": "x2", "text": "   ", "label": "null"},
    {"id": "x3", "text": words(511), "label": "TRUE"},
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, list[dict]]:
    """The same rows in every format, in one folder per format."""
    rows = ROWS + [{"id": f"real{i}", "text": t, "label": "man"} for i, t in enumerate(_real_documents(2))]
    root = tmp_path_factory.mktemp("formats")
    frame = pd.DataFrame(rows)
    (root / "csv").mkdir()
    frame.to_csv(root / "csv" / "c.csv", index=False)
    (root / "semi").mkdir()
    frame.to_csv(root / "semi" / "c.csv", index=False, sep=";")
    (root / "tsv").mkdir()
    frame.to_csv(root / "tsv" / "c.tsv", index=False, sep="\t")
    (root / "jsonl").mkdir()
    lines = "".join(json.dumps(r) + "\n" for r in rows)
    (root / "jsonl" / "c.jsonl").write_text(lines)
    (root / "gz").mkdir()
    with gzip.open(root / "gz" / "c.jsonl.gz", "wt") as fh:
        fh.write(lines)
    (root / "zst").mkdir()
    import zstandard
    (root / "zst" / "c.csv.zst").write_bytes(zstandard.ZstdCompressor().compress(frame.to_csv(index=False).encode()))
    (root / "parquet").mkdir()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), root / "parquet" / "c.parquet", row_group_size=3)
    (root / "text").mkdir()
    for r in rows:
        (root / "text" / f"{r['id']}.txt").write_bytes(r["text"].encode())
    return root, rows


INPUTS = {"csv": "csv/c.csv", "semicolon": "semi/c.csv", "tsv": "tsv/c.tsv", "jsonl": "jsonl/c.jsonl",
          "jsonl.gz": "gz/c.jsonl.gz", "csv.zst": "zst/c.csv.zst", "parquet": "parquet/c.parquet", "text": "text"}


def extract_format(runner, model, corpus_root: Path, fmt: str, out: Path, *extra) -> pd.DataFrame:
    args = [corpus_root / INPUTS[fmt], "--model", model, "--no-progress", "--strategy", "chunk", "--block-rows", "4",
            "-o", out, *extra]
    if fmt != "text":
        args += ["--keep-col", "label"]
    if fmt == "semicolon":
        args += ["--delimiter", ";"]
    result = invoke(runner, ["extract", *args])
    assert result.exit_code == 0, result.output
    assert "ids from the input column 'id'" in result.output or fmt == "text"
    return pd.read_parquet(out)


@pytest.mark.parametrize("fmt", list(INPUTS))
def test_every_format_gives_the_csv_output(runner, tiny_model_dir, corpus, tmp_path, fmt):
    root, rows = corpus
    reference = extract_format(runner, tiny_model_dir, root, "csv", tmp_path / "reference.parquet")
    assert reference["id"].tolist() == [r["id"] for r in rows]
    assert reference["label"].tolist() == [r["label"] for r in rows]
    df = extract_format(runner, tiny_model_dir, root, fmt, tmp_path / f"{fmt}.parquet")
    if fmt == "text":  # ids are the files' paths, in sorted order
        df = df.assign(id=df["id"].str.removesuffix(".txt")).set_index("id").loc[reference["id"]].reset_index()
    else:
        assert df["label"].tolist() == reference["label"].tolist()
    assert df["id"].tolist() == reference["id"].tolist()
    assert df["n_tokens"].tolist() == reference["n_tokens"].tolist()
    assert df["n_windows"].tolist() == reference["n_windows"].tolist()
    assert df["error"].tolist() == reference["error"].tolist()
    assert reference["error"].tolist()[2] == "empty text" and reference["n_tokens"][0] == 1200
    for a, b in zip(reference["features"], df["features"]):
        assert (a is None) == (b is None)
        if a is not None:
            assert np.abs(np.asarray(a) - np.asarray(b)).max() < 1e-5


def test_read_block_reads_exactly_its_rows_from_a_json_spec(corpus):
    """Every block of every format, read from its spec after a JSON round trip (as Ray ships it),
    holds exactly the planned rows with the texts as written."""
    root, rows = corpus
    for fmt, rel in INPUTS.items():
        options = {"inputs": (str(root / rel),), "block_rows": 4}
        if fmt == "semicolon":
            options["delimiter"] = ";"
        cfg = PipelineConfig.from_options(**options)
        plan = scan(cfg.read)
        assert plan.n_rows == len(rows) and [b.first_row for b in plan.blocks] == [0, 4, 8][:len(plan.blocks)]
        texts = []
        for spec in plan.blocks:
            block = read_block(BlockSpec.from_json(spec.to_json()))
            assert block.num_rows == spec.n_rows
            texts += block.column("text").to_pylist()
        expected = [r["text"] for r in rows]
        if fmt == "text":
            expected = [r["text"] for r in sorted(rows, key=lambda r: f"{r['id']}.txt")]
        assert texts == expected, fmt


def test_csv_blocks_start_at_the_right_byte_and_line(tmp_path):
    """A block's spec names the byte offset and line of its first record, for \\n, \\r\\n and \\r endings."""
    for end in ("\n", "\r\n", "\r"):
        src = tmp_path / "in.csv"
        src.write_bytes(f'id,text{end}1,a{end}2,"b{end}c"{end}{end}3,d{end}4,e{end}'.encode())
        cfg = PipelineConfig.from_options(inputs=(str(src),), block_rows=2)
        plan = scan(cfg.read)
        second = plan.blocks[1]
        data = src.read_bytes()
        assert second.offset == data.index(b"3,d") and second.line == 6
        assert [read_block(b).column("text").to_pylist() for b in plan.blocks] == [["a", f"b{end}c"], ["d", "e"]]


def test_with_source_names_each_rows_file(runner, tiny_model_dir, corpus, tmp_path):
    root, rows = corpus
    out = tmp_path / "o.parquet"
    result = invoke(runner, ["extract", root / "csv" / "c.csv", root / "jsonl" / "c.jsonl", root / "parquet" / "c.parquet",
                             "--model", tiny_model_dir, "--no-progress", "--with-source", "--keep-col", "label",
                             "--max-length", "16", "-o", out])
    assert result.exit_code == 0, result.output
    df = pd.read_parquet(out)
    n = len(rows)
    assert df["source"].tolist() == ["csv/c.csv"] * n + ["jsonl/c.jsonl"] * n + ["parquet/c.parquet"] * n
    assert df["id"].tolist() == [r["id"] for r in rows] * 3
    folder = invoke(runner, ["extract", root / "text", "--model", tiny_model_dir, "--no-progress", "--with-source",
                             "--max-length", "16", "-o", tmp_path / "t.parquet"])
    assert folder.exit_code == 0, folder.output
    df = pd.read_parquet(tmp_path / "t.parquet")
    assert df["source"].tolist() == [f"text/{i}" for i in df["id"]] and df["id"].tolist() == sorted(df["id"])


def test_json_lines_values_and_bad_lines(runner, tiny_model_dir, tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": 7, "text": "w1 w2", "label": null}\n\n[1, 2]\n{"id": "8", "body": "x"}\n'
                   '{"id": "9", "text": "w3", "label": 3.5}\nnot json\n')
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "--keep-col", "label", "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 2
    assert result.output == (f"Error: {src}: line 3: a JSON list, not an object; fix the line (read as JSON Lines "
                             "(from the extension .jsonl); pass --format csv or tsv if it is not JSON Lines), or pass "
                             "--on-bad-lines skip to drop such lines\n")
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "--keep-col", "label", "--no-progress",
                             "--on-bad-lines", "skip", "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 0, result.output
    assert "3 bad lines skipped" in result.output      # the list, the line without "text", "not json"
    df = pd.read_parquet(tmp_path / "o.parquet")
    assert df["id"].tolist() == ["7", "9"]
    assert pq.read_table(tmp_path / "o.parquet").column("label").to_pylist() == [None, "3.5"]  # null is null


def test_parquet_text_column_must_be_strings(runner, tiny_model_dir, tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64()), "text": pa.array([3, 4], pa.int32())}), src)
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 2
    assert result.output == (f"Error: {src}: column 'text' has type int32, not a string; pass --text-col with a text "
                             "column, or convert the column to strings\n")
    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64()), "text": ["w1", None]}), good)
    result = invoke(runner, ["extract", good, "--model", tiny_model_dir, "--no-progress", "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 0, result.output
    table = pq.read_table(tmp_path / "o.parquet")
    assert table.column("id").to_pylist() == ["1", "2"] and table.column("error").to_pylist() == [None, "empty text"]


@pytest.mark.parametrize("name, content, message", [
    ("data.csv", "PARQUET", "{src}: this is a parquet file (it starts with PAR1) but was read as CSV (from the extension "
                            ".csv); name it .parquet or pass --format parquet"),
    ("data.csv", "id\ttext\n1\tw1\n", "{src}: column 'text' not found; columns are ['id\\ttext']; pass --text-col with one "
                                      "of them (the header has no ',' but has a tab: pass --format tsv or --delimiter $'\\t')"),
    ("data.csv", "id;text\n1;w1\n", "{src}: column 'text' not found; columns are ['id;text']; pass --text-col with one of "
                                    "them (the header has no ',' but has a semicolon: pass --delimiter ';')"),
    ("data.csv", '{"id": 1, "text": "w1"}\n', "{src}: the first line looks like JSON Lines, but the file was read as "
                                             "CSV (from the extension .csv); pass --format jsonl or name it .jsonl"),
    ("data.jsonl", "id,text\n1,w1\n", "{src}: line 1: not valid JSON (Expecting value: line 1 column 1 (char 0)); fix the line "
                                      "(read as JSON Lines (from the extension .jsonl); pass --format csv or tsv if it is not "
                                      "JSON Lines), or pass --on-bad-lines skip to drop such lines"),
    ("data.parquet", "id,text\n1,w1\n", "{src}: not a parquet file (it does not start with PAR1) but was read as parquet "
                                        "(from the extension .parquet); pass --format csv, tsv or jsonl for a text file"),
    ("data.csv", "GZIP", "{src}: the file is gzip-compressed but was read as CSV (from the extension .csv) as plain text; "
                         "name it data.csv.gz so it is decompressed"),
], ids=["parquet-as-csv", "tsv-as-csv", "semicolon", "jsonl-as-csv", "csv-as-jsonl", "csv-as-parquet", "gzip-as-csv"])
def test_a_file_in_another_format_names_the_format_and_the_fix(runner, tiny_model_dir, tmp_path, name, content, message):
    src = tmp_path / name
    if content == "PARQUET":
        pq.write_table(pa.table({"text": ["w1"]}), src)
    elif content == "GZIP":
        src.write_bytes(gzip.compress(b"id,text\n1,w1\n"))
    else:
        src.write_text(content)
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 2
    assert result.output == f"Error: {message.replace('{src}', str(src))}\n"
    assert not (tmp_path / "o.parquet").exists()


def test_a_long_header_is_cut_short_in_the_message(runner, tiny_model_dir, tmp_path):
    src = tmp_path / "wide.csv"
    src.write_text(",".join(f"c{i}" for i in range(30)) + "," + "x" * 500 + "\n" + ",".join("1" * 31) + "\n")
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 2
    assert "columns are ['c0', 'c1', 'c2'," in result.output and "'c19'] and 11 more; pass --text-col" in result.output
    assert len(result.output) < 600


def test_cr_only_line_endings_name_the_right_line(runner, tiny_model_dir, tmp_path):
    """B31: classic Mac line ends, an invalid UTF-8 byte on the fourth line."""
    src = CASES / "B31_cp1252.csv"
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 2
    assert f"Error: {src}: byte offset 38 (line 4) is not valid utf-8 (bytes e9 20 74 68)" in result.output
    ok = invoke(runner, ["extract", src, "--model", tiny_model_dir, "--encoding", "cp1252", "--no-progress",
                         "-o", tmp_path / "o.parquet"])
    assert ok.exit_code == 0, ok.output
    df = pd.read_parquet(tmp_path / "o.parquet")
    assert df["id"].tolist() == ["1", "2", "3", "4"] and df["n_tokens"].tolist()[0] > 0
    cfg = PipelineConfig.from_options(inputs=(str(src),), encoding="cp1252")
    (block,) = [read_block(b) for b in scan(cfg.read).blocks]
    assert block.column("text").to_pylist() == ["first row", "second row", "café third row", "fourth row"]
    bad = tmp_path / "cr.csv"
    bad.write_bytes(b'id,text\r1,a\r2,"b\r3,c\r')
    result = invoke(runner, ["extract", bad, "--model", tiny_model_dir, "-o", tmp_path / "o2.parquet"])
    assert result.exit_code == 2 and f"{bad}: line 3: a quoted field starts here and never ends" in result.output


@pytest.mark.parametrize("case, args, message", [
    ("B27.csv", [], "B27.csv: the header names column 'text' 2 times (columns are ['id', 'text', 'text', 'label']); "
                    "rename the copies so each name is used once"),
    ("B35.csv", ["--keep-col", "label", "--keep-col", "label"], "--keep-col 'label' is given twice; name each column once"),
    ("B35.csv", ["--keep-col", "n_windows"], "--keep-col 'n_windows' clashes with an output column of that name"),
    ("B35.csv", ["-o", "features.csv"], "--output 'features.csv' is neither a .parquet file nor a directory (ending in /); "
                                        "longbert writes parquet: use e.g. -o features.parquet or -o DIR/"),
], ids=["header-twice", "keep-twice", "keep-reserved", "output-extension"])
def test_duplicate_and_clashing_columns_exit_2(runner, tiny_model_dir, tmp_path, case, args, message):
    result = invoke(runner, ["extract", CASES / case, "--model", tiny_model_dir, *args])
    assert result.exit_code == 2 and message in result.output, result.output


def test_text_files_and_tabular_inputs_mix_only_with_an_id_column(runner, tiny_model_dir, tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("w1 w2")
    (tmp_path / "docs" / "sub").mkdir()
    (tmp_path / "docs" / "sub" / "b.txt").write_text("w3")
    (tmp_path / "docs" / "skip.json").write_text("{}")
    table = tmp_path / "t.csv"
    table.write_text("key,text\nk1,w4\n")
    bad = invoke(runner, ["extract", tmp_path / "docs", table, "--model", tiny_model_dir, "-o", tmp_path / "o.parquet"])
    assert bad.exit_code == 2
    assert (f"text files (ids are their paths) are mixed with inputs that have no id column ({table}); pass --id-col "
            "with a column of those inputs") in bad.output
    ok = invoke(runner, ["extract", tmp_path / "docs", table, "--id-col", "key", "--model", tiny_model_dir,
                         "--no-progress", "-o", tmp_path / "o.parquet"])
    assert ok.exit_code == 0, ok.output
    assert pd.read_parquet(tmp_path / "o.parquet")["id"].tolist() == ["a.md", "sub/b.txt", "k1"]


def test_input_id_column_is_used_and_said(runner, tiny_model_dir, tmp_path):
    """Without --id-col, an input column named id is the id (as written), and the summary says so."""
    src = tmp_path / "in.csv"
    src.write_text("id,text\n2,w1\n1,\n")
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "--no-progress", "--strict", "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 1 and f"row with id '1' ({src} line 3): empty text" in result.output
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "--no-progress", "-o", tmp_path / "o.parquet"])
    assert "ids from the input column 'id' (pass --id-col to choose another)" in result.output
    assert pd.read_parquet(tmp_path / "o.parquet")["id"].tolist() == ["2", "1"]


def test_directory_output_opens_in_other_readers(runner, tiny_model_dir, tmp_path):
    """A finished DIR/ reads whole, in input order, in pandas, pyarrow, polars and duckdb; an unfinished
    one (as a kill leaves it) reads as no rows in pandas and pyarrow and fails in polars and duckdb."""
    import duckdb
    import polars as pl

    from pipeline.output.write import MANIFEST, part_name

    src = tmp_path / "in.csv"
    src.write_text("doc,text\n" + "".join(f"d{i},{words(i + 1)}\n" for i in range(7)))
    out = tmp_path / "parts"
    result = invoke(runner, ["extract", src, "--id-col", "doc", "--model", tiny_model_dir, "--no-progress",
                             "--block-rows", "2", "-o", f"{out}/"])
    assert result.exit_code == 0, result.output
    ids = [f"d{i}" for i in range(7)]
    assert sorted(p.name for p in out.iterdir()) == ["_manifest.parquet", *[f"part-{k:05d}.parquet" for k in range(4)]]
    assert pd.read_parquet(out)["id"].tolist() == ids
    assert pq.read_table(out).column("id").to_pylist() == ids
    assert pl.read_parquet(f"{out}/")["id"].to_list() == ids
    assert [r[0] for r in duckdb.sql(f"select id from read_parquet('{out}/**')").fetchall()] == ids
    assert duckdb.sql(f"select typeof(features) from read_parquet('{out}/*.parquet') limit 1").fetchall()[0][0] \
        in ("FLOAT[]", "FLOAT[32]")

    for part in out.glob("part-*.parquet"):                 # what a killed run leaves: pending parts, JSON manifest
        part.rename(out / part_name(int(part.name[5:10]), done=False))
    (out / "_manifest.parquet").unlink()
    (out / MANIFEST).write_text('{"complete": false, "parts": []}')
    assert len(pd.read_parquet(out)) == 0 and pq.read_table(out).num_rows == 0
    for read in (lambda: pl.read_parquet(f"{out}/"), lambda: pl.read_parquet(f"{out}/*.parquet")):
        with pytest.raises(Exception):
            read()
    for pattern in ("**", "*.parquet"):
        with pytest.raises(duckdb.Error):
            duckdb.sql(f"select count(*) from read_parquet('{out}/{pattern}')").fetchall()
