"""Inputs end where they say, every byte is checked, one tree walker (issue 17, the read stage).

Each bad input gets exit 2 with a message naming the file and the byte or line, never a traceback.
Messages are asserted by their exact text (built from the test's own paths)."""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from conftest import invoke, plan_of, refused, rows_of

from pipeline.read import read_blocks
from pipeline.engine.run import Summary

# copies of ../shared/cases/B38_*: kept apart from tests/cases, whose CSVs test_ray reads as one valid corpus
CASES = Path(__file__).resolve().parents[1] / "read_cases"
ROWS = [{"id": str(i), "text": f"document {i} " + "word " * 40} for i in range(60)]
JSONL = "".join(json.dumps(r) + "\n" for r in ROWS).encode()


def test_extract_exit_code_is_2_for_a_cut_gzip(runner, tiny_model_dir, tmp_path):
    data = gzip.compress(JSONL)
    src = tmp_path / "in.jsonl.gz"
    src.write_bytes(data[:len(data) // 2])
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output and "Aborted" not in result.output
    assert result.output.startswith(f"Error: {src}: the gzip stream ends early after decompressed byte ")
    assert "the file is cut short or corrupt, as by an interrupted download or copy: get it again" in result.output


@pytest.mark.parametrize("cut", [1, 3, 40, 0.5])
def test_cut_zstd_and_gzip_streams_are_refused(tmp_path, cut):
    for name, data in (("z.jsonl.zst", zstandard.ZstdCompressor().compress(JSONL)),
                       ("z.jsonl.gz", gzip.compress(JSONL))):
        keep = len(data) - cut if isinstance(cut, int) else int(len(data) * cut)
        src = tmp_path / name
        src.write_bytes(data[:keep])
        kind = "zstd" if name.endswith("zst") else "gzip"
        assert refused(src).startswith(f"{src}: the {kind} stream ends early after decompressed byte ")


def test_whole_multi_frame_zstd_reads_every_row(tmp_path):
    src = tmp_path / "m.jsonl.zst"
    half = len(JSONL) // 2
    cut = JSONL.index(b"\n", half) + 1
    src.write_bytes(zstandard.ZstdCompressor().compress(JSONL[:cut]) + zstandard.ZstdCompressor().compress(JSONL[cut:]))
    assert rows_of(src, id_col="id") == ROWS


def test_empty_compressed_file_and_damaged_stream(tmp_path):
    empty = tmp_path / "e.csv.gz"
    empty.write_bytes(b"")
    assert refused(empty) == (f"{empty}: the file is empty (0 bytes), not a gzip stream; the file is cut short: "
                              "download or copy it again")
    data = bytearray(gzip.compress(JSONL))
    data[len(data) // 2] ^= 0xFF
    bad = tmp_path / "b.jsonl.gz"
    bad.write_bytes(bytes(data))
    assert f"{bad}: the gzip stream is damaged after decompressed byte " in refused(bad)


def test_last_record_cut_inside_a_quote_or_an_object(tmp_path):
    csv_src = tmp_path / "cut.csv"
    csv_src.write_bytes(b'id,text\n1,a\n2,"cut he')
    expected = ("line 3 (byte 12 of the file): the file ends inside this record, with no line end (a quoted field "
                'is still open (unbalanced ")); it looks cut short, as by an interrupted download or copy: get the '
                "whole file again, or complete the record and end the line")
    for bad_lines in ("error", "skip"):  # a cut file is not a bad line: skipping it would lose the row
        assert refused(csv_src, on_bad_lines=bad_lines) == f"{csv_src}: {expected}"
    json_src = tmp_path / "cut.jsonl.zst"
    json_src.write_bytes(zstandard.ZstdCompressor().compress(b'{"text": "a"}\n{"text": "cu'))
    assert refused(json_src, on_bad_lines="skip").startswith(
        f"{json_src}: line 2 (byte 14 of the decompressed text): the file ends inside this record, with no line "
        "end (not valid JSON (Unterminated string")


def test_stray_quote_in_a_complete_file_is_still_a_bad_line(tmp_path):
    src = tmp_path / "q.csv"
    src.write_bytes(b'id,text\n1,"open\n2,b\n')  # ends with a line end: a stray quote, not a cut file
    assert rows_of(src, id_col="id", on_bad_lines="skip") == [{"id": "2", "text": "b"}]


def test_utf16_export_names_the_byte_order_mark_and_the_encoding(runner, tiny_model_dir, tmp_path):
    src = CASES / "B38_utf16.tsv"
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 2
    assert result.output == (f"Error: {src}: the file starts with a UTF-16 (little-endian) byte-order mark (bytes ff "
                             "fe), so it is UTF-16 text, not utf-8 (a spreadsheet's \"Unicode Text\" export is "
                             "UTF-16); pass --encoding utf-16, or convert the file to UTF-8\n")
    # the advice works: the same file with --encoding utf-16
    assert rows_of(src, encoding="utf-16", id_col="id") == [{"id": "1", "text": "café au lait"},
                                                          {"id": "2", "text": "second row of the export"}]


def test_utf32_and_compressed_utf16(tmp_path):
    text = "id,text\r\n1,naïve\r\n2,zweite Zeile\r\n"
    src = tmp_path / "u32.csv"
    src.write_bytes(text.encode("utf-32"))
    assert "byte-order mark (bytes ff fe 00 00), so it is UTF-32 text, not utf-8" in refused(src)
    assert "pass --encoding utf-32" in refused(src)
    gz = tmp_path / "u16.csv.gz"
    gz.write_bytes(gzip.compress(text.encode("utf-16")))
    plan = plan_of(gz, encoding="utf-16", id_col="id", block_rows=1)
    assert [r for t in read_blocks(plan) for r in t.to_pylist()] == [{"id": "1", "text": "naïve"},
                                                                   {"id": "2", "text": "zweite Zeile"}]


def test_cp1252_header_gets_the_data_line_message(runner, tiny_model_dir, tmp_path):
    src = CASES / "B38_cp1252_header.csv"
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 2
    assert result.output == (f"Error: {src}: byte offset 11 (line 1) is not valid utf-8 (bytes e9 67 6f 72); the "
                             "bytes look like cp1252 (Western European: accented Latin letters), as which line 1 reads "
                             "'id,text,catégorie': pass --encoding cp1252 if that is right, or convert the file to UTF-8\n")
    assert rows_of(src, encoding="cp1252", keep_cols=("catégorie",))[0] == {
        "id": "1", "text": "first row", "catégorie": "a"}


def test_binary_files_matched_by_a_glob_or_named(tmp_path):
    (tmp_path / "a.csv").write_text("text\nx\n")
    (tmp_path / "book.xlsx").write_bytes(b"PK\x03\x04" + b"\0" * 30)
    (tmp_path / "pic.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 30)
    assert refused(tmp_path / "*") == (
        f"input glob {str(tmp_path / '*')!r} matches 2 files of no known format ({tmp_path / 'book.xlsx'}, "
        f"{tmp_path / 'pic.png'}); known extensions are .csv, .tsv, .tab, .jsonl, .ndjson, .parquet, .pq, .txt, "
        ".md (with .gz, .zst, .bz2 or .xz); narrow the glob, or pass --format")
    assert refused(tmp_path / "book.xlsx") == (
        f"{tmp_path / 'book.xlsx'}: this is a zip archive (an .xlsx, .docx or .zip file) (it starts with bytes 50 4b "
        "03 04), not text; it was read as CSV (the default: the extension .xlsx names no known format); "
        "export it as CSV or JSON Lines (a "
        "spreadsheet: save as \"CSV UTF-8\"; a .zip archive: unzip it and pass the files inside), or leave it out "
        "of the inputs")
    assert "this is a PNG image (it starts with bytes 89 50 4e 47), not text" in refused(tmp_path / "*.png",
                                                                                          format="csv")


def test_json_lone_surrogate_and_repeated_key(runner, tiny_model_dir, tmp_path):
    src = tmp_path / "s.jsonl"
    src.write_text('{"text": "fine"}\n{"text": "half \\ud83d of an emoji"}\n')
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 2
    assert result.output == (f"Error: {src}: line 2: key 'text' holds a lone surrogate \\ud83d (half of a UTF-16 "
                             "pair, which no UTF-8 text can hold); fix the line (read as JSON Lines (from the "
                             "extension .jsonl); pass --format csv or tsv if it is not JSON Lines), or pass "
                             "--on-bad-lines skip to drop such lines\n")
    assert rows_of(tmp_path / "s.jsonl", on_bad_lines="skip") == [{"id": 0, "text": "fine"}]
    (tmp_path / "s.jsonl").write_text('{"text": "\\ud83d\\ude00 a pair is fine"}\n{"text": "a", "id": 1, "text": "b"}\n')
    assert refused(src) == (
        f"{src}: line 2: the object names the key 'text' twice (JSON keeps only the last value); fix the line (read "
        "as JSON Lines (from the extension .jsonl); pass --format csv or tsv if it is not JSON Lines), or pass "
        "--on-bad-lines skip to drop such lines")
    assert rows_of(src, on_bad_lines="skip") == [{"id": 0, "text": "\U0001F600 a pair is fine"}]


def test_file_name_not_utf8(runner, tiny_model_dir, tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.txt").write_text("fine")
    name = os.fsdecode(b"caf\xe9.txt")  # latin-1 bytes: Python holds the \xe9 as the lone surrogate \udce9
    (folder / name).write_text("named in latin-1")
    result = invoke(runner, ["extract", folder, "--model", tiny_model_dir, "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 2
    assert result.output == (f"Error: input file name {os.fsencode(folder / name)!r} is not valid UTF-8, so it cannot "
                             "be an id or be shown; rename the file to UTF-8 (e.g. convmv -f latin1 -t utf-8 "
                             "--notest)\n")
    assert "Traceback" not in result.output


@pytest.mark.parametrize("kind", ["string", "large_string", "string_view", "dictionary"])
def test_every_arrow_string_type_is_text(tmp_path, kind):
    texts = ["alpha", None, "gamma"]
    arr = pa.array(texts, pa.string())
    arr = {"string": arr, "large_string": arr.cast(pa.large_string()), "string_view": arr.cast(pa.string_view()),
           "dictionary": arr.dictionary_encode()}[kind]
    src = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": arr, "id": arr}), src)
    assert str(pq.read_schema(src).field("text").type) == {"dictionary": "dictionary<values=string, indices=int32, "
                                                            "ordered=0>"}.get(kind, kind)
    assert rows_of(src) == [{"id": "alpha", "text": "alpha"}, {"id": None, "text": ""}, {"id": "gamma", "text": "gamma"}]


def test_polars_string_view_parquet(tmp_path):
    src = tmp_path / "p.parquet"
    pl.DataFrame({"text": ["one", "two"]}).write_parquet(src)
    assert rows_of(src) == [{"id": 0, "text": "one"}, {"id": 1, "text": "two"}]


def test_walker_follows_symlinks_once_and_counts_skipped_files(tmp_path):
    root = tmp_path / "tree"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f.txt").write_text("the one file")
    (root / "a" / "notes.md").write_text("a note")
    (root / "a" / "b" / "pic.png").write_bytes(b"\x89PNG")
    (root / "a" / "data.csv").write_text("text\nx\n")
    (root / ".hidden.txt").write_text("hidden: not read, not counted")
    (root / "a" / "b" / "up").symlink_to("..")          # a loop
    (root / "again").symlink_to("a")                    # the same folder twice
    (root / "link.txt").symlink_to("a/b/f.txt")         # the same file twice
    plan = plan_of(root)
    assert [r["id"] for t in read_blocks(plan) for r in t.to_pylist()] == ["a/b/f.txt", "a/notes.md"]
    assert plan.skipped_files == 2
    assert Summary(output="o", documents=2, skipped_files=2).line() == (
        "2 documents, 0 tokens, 0 windows encoded, 0 rows with errors, 0.0 s -> o (2 files skipped (not .txt/.md))")
    globbed = plan_of(root / "**" / "*.txt")
    assert [r["id"] for t in read_blocks(globbed) for r in t.to_pylist()] == ["a/b/f.txt"]
    assert globbed.skipped_files == 0


def test_glob_matches_like_glob_without_loops(tmp_path):
    for rel in ("x/1.csv", "x/y/2.csv", "x/y/z/3.csv", "x/4.tsv"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("text\nrow\n" if rel.endswith("csv") else "text\nrow\n")
    (tmp_path / "x" / "y" / "z" / "loop").symlink_to(tmp_path / "x")
    names = lambda plan: [Path(f.path).relative_to(tmp_path).as_posix() for f in plan.files]  # noqa: E731
    assert names(plan_of(tmp_path / "x" / "**" / "*.csv")) == ["x/1.csv", "x/y/2.csv", "x/y/z/3.csv"]
    assert names(plan_of(tmp_path / "x" / "*" / "*.csv")) == ["x/y/2.csv"]
    assert names(plan_of(tmp_path / "x" / "?.*")) == ["x/1.csv", "x/4.tsv"]
