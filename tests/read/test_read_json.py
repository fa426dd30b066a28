"""JSON inputs: a JSON Lines text that is not a string is a row error naming its type (the row is kept,
never embedded as its JSON); a file of JSON read as CSV (a .json name) is told what it holds and how to
read it, from its bytes, whether or not its first line parses as a CSV header."""
from __future__ import annotations

import shutil

import pyarrow.parquet as pq
import pytest
from conftest import CASES, invoke, refused, rows_of

TYPED = ('{"id": "a", "text": "w1 w2"}\n{"id": "b", "text": ["w1", "w2"]}\n{"id": "c", "text": {"k": "w1"}}\n'
         '{"id": "d", "text": 42}\n{"id": "e", "text": true}\n{"id": "f", "text": null}\n{"id": "g", "text": "w3"}\n')
TYPE_ERRORS = [None, "text is a JSON array, not a string", "text is a JSON object, not a string",
               "text is a JSON number, not a string", "text is a JSON boolean, not a string", "empty text", None]


def test_a_json_lines_text_that_is_not_a_string_is_read_as_a_row_error(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(TYPED)
    rows = rows_of(src, id_col="id")
    assert [r["id"] for r in rows] == list("abcdefg")
    assert [r["text"] for r in rows] == ["w1 w2", "", "", "", "", "", "w3"]   # never '["w1", "w2"]' or "42"
    assert [r["error"] for r in rows] == [None, *TYPE_ERRORS[1:5], None, None]


def test_a_json_lines_file_of_string_texts_has_no_error_column(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": "a", "text": "w1", "n": 1.50}\n')
    assert rows_of(src, id_col="id", keep_cols=("n",)) == [{"id": "a", "text": "w1", "n": "1.50"}]


def test_extract_keeps_every_row_of_non_string_json_texts_with_its_error(runner, tiny_model_dir, tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(TYPED)
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "--no-progress", "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 0, result.output
    assert "7 documents" in result.output and "5 rows with errors" in result.output
    table = pq.read_table(tmp_path / "o.parquet")
    assert table.column("id").to_pylist() == list("abcdefg")
    assert table.column("error").to_pylist() == TYPE_ERRORS
    assert table.column("n_windows").to_pylist() == [1, 0, 0, 0, 0, 0, 1]
    features = table.column("features").to_pylist()
    assert [f is None for f in features] == [False, True, True, True, True, True, False]
    strict = invoke(runner, ["extract", src, "--model", tiny_model_dir, "--no-progress", "--strict",
                             "-o", tmp_path / "s.parquet"])
    assert strict.exit_code == 1


JSONL_ADVICE = ("{src}: the first line looks like JSON Lines, but the file was read as CSV (the default: the "
                "extension .json names no known format); pass --format jsonl or name it .jsonl")
ARRAY_ADVICE = ("{src}: the file holds a JSON array of objects (as pandas' df.to_json(orient=\"records\") writes it), "
                "but was read as CSV (the default: the extension .json names no known format); longbert reads JSON "
                "Lines, one object per line: convert it with `jq -c '.[]' {name} > {stem}.jsonl` (or pandas' "
                "df.to_json(\"{stem}.jsonl\", orient=\"records\", lines=True)) and pass the .jsonl file")


@pytest.mark.parametrize("case, advice", [("B72_array.json", ARRAY_ADVICE), ("B72_pretty.json", ARRAY_ADVICE),
                                          ("B72_lines.json", JSONL_ADVICE)])
def test_a_json_file_read_as_csv_names_the_json_it_holds_and_the_fix(runner, tiny_model_dir, tmp_path, case, advice):
    src = tmp_path / case
    shutil.copy(CASES / case, src)
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 2
    expected = advice.format(src=src, name=case, stem=case.split(".")[0])
    assert result.output == f"Error: {expected}\n"
    assert "cut short" not in result.output and "header" not in result.output


def test_json_lines_named_json_reads_with_the_format_the_advice_names(tmp_path):
    src = tmp_path / "B72_lines.json"
    shutil.copy(CASES / "B72_lines.json", src)
    rows = rows_of(src, format="jsonl", id_col="id")
    assert [(r["id"], r["text"]) for r in rows] == [("a", "the river flooded the old town"),
                                                   ("b", "a court heard the case")]


def test_an_indented_json_object_gets_the_command_that_makes_json_lines(tmp_path):
    src = tmp_path / "one.json"
    src.write_text('{\n  "id": "a",\n  "text": "w1"\n}\n')
    assert refused(src) == (f"{src}: the file holds JSON spread over several lines (an indented object), but was read "
                            "as CSV (the default: the extension .json names no known format); longbert reads JSON "
                            "Lines, one object per line: convert it with `jq -c . one.json > one.jsonl` and pass the "
                            ".jsonl file")


def test_a_csv_whose_header_starts_with_a_bracket_is_still_a_csv(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text("[note],text\nx,w1\n")
    assert [r["text"] for r in rows_of(src)] == ["w1"]


@pytest.mark.parametrize("flag, key", [("--text-col", "body.text"), ("--keep-col", "meta.label")])
def test_a_dotted_key_into_a_nested_object_is_exit_2_with_the_command_that_flattens_it(runner, tiny_model_dir,
                                                                                         tmp_path, flag, key):
    import json

    src = tmp_path / "in.jsonl"
    records = [{"id": "a", "text": "w1", "body": {"text": "w1 w2"}, "meta": {"label": "x"}},
               {"id": "b", "text": "w3", "body": {"text": "w3"}, "meta": {"label": "y"}}]
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "-o", tmp_path / "o.parquet", flag, key])
    assert result.exit_code == 2
    head = key.split(".")[0]
    flat = "in.flat.jsonl"
    assert result.output == (f"Error: {src}: {flag} {key!r} names a key nested in {head!r}, and only top-level keys "
                             f"are read; flatten the records first: `jq -c '. + {{\"{key}\": .{key}}}' in.jsonl > "
                             f"{flat}`, then pass {flat} with {flag} {key}\n")
    # the advice works: the flattened records (as jq would write them) read with the dotted key
    (tmp_path / flat).write_text("".join(json.dumps({**r, key: r[head][key.split(".")[1]]}) + "\n" for r in records))
    out = tmp_path / "flat.parquet"
    result = invoke(runner, ["extract", tmp_path / flat, "--model", tiny_model_dir, "-o", out, flag, key,
                             "--no-progress"])
    assert result.exit_code == 0, result.output
    assert pq.read_table(out).num_rows == 2
