"""The reader's last corners (issue 23, inputs): a file reached twice is read once; JSON values as
written (case B53) and nulls as nulls; bzip2 / xz and compressed or binary files known by their first
bytes; pipes (case B55); advice that works when followed; empty files, cut streams and binary parquet
columns named; inputs that change during the run (exit 1, naming the file).

Expected values are computed independently of pipeline.read: JSON numbers with the standard library's
``parse_float`` / ``parse_int`` hooks, decompressed byte counts with one-shot decompressor objects,
rows with the csv module."""
from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import lzma
import os
import random
import shutil
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import invoke, plan_of, refused, rows_of

from pipeline.errors import RunError
from pipeline.read import read_block, read_blocks, verify_inputs
from pipeline.engine.run import Summary

CASES = Path(__file__).resolve().parents[1] / "read_cases"
REPO = Path(__file__).resolve().parents[2]


def csv_rows(path: Path) -> list[dict]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


# ---------------------------------------------------------------------------------------------- read once

def test_a_file_reached_through_several_inputs_is_read_once(tmp_path):
    for k in (1, 2):
        (tmp_path / f"part{k}.csv").write_text(f"id,text\np{k}a,first of {k}\np{k}b,second of {k}\n")
    (tmp_path / "alias.csv").symlink_to(tmp_path / "part2.csv")
    plan = plan_of(tmp_path / "part1.csv", tmp_path / "part*.csv", tmp_path / "alias.csv")
    assert [f.path.name for f in plan.files] == ["part1.csv", "part2.csv"]
    expected = csv_rows(tmp_path / "part1.csv") + csv_rows(tmp_path / "part2.csv")
    assert [(r["id"], r["text"]) for t in read_blocks(plan) for r in t.to_pylist()] == \
        [(r["id"], r["text"]) for r in expected]
    assert plan.duplicate_ids == 0


def test_a_folder_and_its_files_given_again_are_read_once(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("alpha")
    (docs / "b.txt").write_text("beta")
    plan = plan_of(docs / "b.txt", docs, docs / "*.txt")
    assert [r["id"] for t in read_blocks(plan) for r in t.to_pylist()] == ["b.txt", "a.txt"]
    assert plan.duplicate_ids == 0


# ---------------------------------------------------------------------------------------------- JSON text

def _as_written(line: str) -> dict:
    """One JSON object with every number kept as its text (the standard library's hooks)."""
    return json.loads(line, parse_float=str, parse_int=str)


def test_json_numbers_are_kept_exactly_as_written():
    src = CASES / "B53.jsonl"
    expected = [_as_written(line) for line in src.read_text().splitlines() if line.strip()]
    plan = plan_of(src, id_col="id", keep_cols=("version",))
    got = [r for t in read_blocks(plan) for r in t.to_pylist()]
    assert [r["id"] for r in got] == [e["id"] for e in expected]
    assert [r["id"] for r in got][:3] == ["1.50", "1.5", "1E+3"]            # never re-printed: no collision
    assert [r["version"] for r in got] == [e["version"] for e in expected]
    assert got[0]["version"] == "3.10"
    assert plan.duplicate_ids == 0


def test_json_null_is_null_in_every_column_as_parquet_gives(tmp_path):
    records = [{"id": None, "text": "first", "label": None, "n": [1, 2.50]},
               {"id": "b", "text": None, "label": "x", "n": None},
               {"id": "c", "text": "third", "label": True, "n": {"k": 1E3}}]
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": null, "text": "first", "label": null, "n": [1,  2.50]}\n'
                   '{"id": "b", "text": null, "label": "x", "n": null}\n'
                   '{"id": "c", "text": "third", "label": true, "n": {"k": 1E3}}\n')
    got = rows_of(src, id_col="id", keep_cols=("label", "n"))
    assert [r["label"] for r in got] == [None, "x", "true"]
    assert [r["n"] for r in got] == ["[1,  2.50]", None, '{"k": 1E3}']     # nested values: their text as written
    assert [r["id"] for r in got] == [None, "b", "c"]
    pq.write_table(pa.table({k: pa.array([r[k] if not isinstance(r[k], (bool, list, dict)) else None for r in records],
                                         pa.string()) for k in ("id", "text", "label")}), tmp_path / "same.parquet")
    from_parquet = rows_of(tmp_path / "same.parquet", id_col="id", keep_cols=("label",))
    assert [r["id"] for r in got] == [r["id"] for r in from_parquet]
    assert [r["text"] for r in got] == [r["text"] for r in from_parquet] == ["first", "", "third"]
    assert got[0]["label"] is None and from_parquet[0]["label"] is None


# ---------------------------------------------------------------------------------------------- compression

ROWS_TEXT = "id,text\n" + "".join(f"{i},document number {i} with some words\n" for i in range(200))


@pytest.mark.parametrize("ext, pack", [(".bz2", bz2.compress), (".xz", lzma.compress),
                                       (".gz", lambda d: gzip.compress(d, mtime=0))])
def test_bz2_and_xz_are_read_like_gzip(tmp_path, ext, pack):
    plain = tmp_path / "plain.csv"
    plain.write_text(ROWS_TEXT)
    src = tmp_path / f"in.csv{ext}"
    src.write_bytes(pack(ROWS_TEXT.encode()))
    assert rows_of(src, id_col="id", block_rows=7) == rows_of(plain, id_col="id", block_rows=7)
    two = tmp_path / f"two.csv{ext}"     # two members / streams, one after the other, as `cat a.gz b.gz` makes
    half = ROWS_TEXT.index("\n100,") + 1
    two.write_bytes(pack(ROWS_TEXT[:half].encode()) + pack(ROWS_TEXT[half:].encode()))
    assert rows_of(two, id_col="id") == rows_of(plain, id_col="id")


@pytest.mark.parametrize("kind", ["gz", "bz2", "xz"])
def test_a_cut_stream_names_the_decompressed_byte_where_it_failed(tmp_path, kind):
    rng = random.Random(7)
    text = "id,text\n" + "".join(f"{i},{' '.join(rng.choice(['alpha', 'beta', 'gamma', 'delta', str(i)]) for _ in range(60))}\n"
                                 for i in range(3000))
    pack, fresh, name = {"gz": (gzip.compress, lambda: zlib.decompressobj(wbits=31), "gzip"),
                         "bz2": (lambda d: bz2.compress(d, 1), bz2.BZ2Decompressor, "bzip2"),  # 100 kB blocks
                         "xz": (lzma.compress, lambda: lzma.LZMADecompressor(format=lzma.FORMAT_XZ), "xz")}[kind]
    data = pack(text.encode())
    cut = data[:int(len(data) * 0.6)]
    decoded = len(fresh().decompress(cut))     # what a one-shot decompressor gets from the cut bytes
    assert decoded > 100_000
    src = tmp_path / f"cut.csv.{kind}"
    src.write_bytes(cut)
    assert refused(src).startswith(f"{src}: the {name} stream ends early after decompressed byte {decoded} ")


@pytest.mark.parametrize("magic, what, command", [
    (b"\x04\x22\x4d\x18", "LZ4-compressed", "lz4 -d in.csv.lz4"),
    (b"7z\xbc\xaf\x27\x1c", "a 7z archive", "7z x in.csv.lz4"),
    (b"Rar!\x1a\x07\x00", "a RAR archive", "unrar x in.csv.lz4"),
])
def test_unsupported_compression_names_the_format_and_the_way_out(tmp_path, magic, what, command):
    src = tmp_path / "in.csv.lz4"
    src.write_bytes(magic + os.urandom(40))
    assert refused(src) == (
        f"{src}: this file is {what} (it starts with bytes {magic[:6 if len(magic) > 4 else 4].hex(' ')}), which "
        "the reader does not decompress; it was read as CSV (the default: the extension .lz4 names no known format); "
        f"unpack it first (`{command}`) and pass the file inside, or compress it as gzip, zstd, bzip2 or xz (.gz, "
        ".zst, .bz2, .xz are read directly)")


def test_compressed_bytes_under_another_name_are_known_by_their_first_bytes(tmp_path):
    src = tmp_path / "data.csv"
    src.write_bytes(bz2.compress(ROWS_TEXT.encode()))
    assert refused(src) == (f"{src}: the file is bzip2-compressed but was read as CSV (from the extension .csv) as "
                            "plain text; name it data.csv.bz2 so it is decompressed")
    fake = tmp_path / "plain.csv.xz"
    fake.write_text(ROWS_TEXT)
    assert refused(fake) == (f"{fake}: the name ends in .xz but the file is not xz-compressed (it starts with bytes "
                             f"{ROWS_TEXT.encode()[:4].hex(' ')}); rename it without .xz if it is plain text")


@pytest.mark.parametrize("content, what", [
    (bz2.compress(b"a note that was compressed"), "bzip2-compressed"),
    (lzma.compress(b"a note that was compressed"), "xz-compressed"),
    (b"PK\x03\x04" + bytes(30), "a zip archive (an .xlsx, .docx or .zip file)"),
    (b"text\x00with a NUL byte", "binary data or UTF-16 text without a byte-order mark (it holds NUL bytes)"),
])
def test_a_folder_never_embeds_compressed_or_binary_bytes(tmp_path, content, what):
    (tmp_path / "good.txt").write_text("a real note")
    bad = tmp_path / "notes.txt"
    bad.write_bytes(content)
    hint = " (UTF-16 text: pass --encoding utf-16)" if "NUL" in what else ""   # only where UTF-16 may be what it is
    for options in ({}, {"encoding": "latin-1"}):     # latin-1 decodes any byte: the check is not a decode error
        assert refused(tmp_path, **options) == (
            f"{bad}: this is {what}, not a text document; a .txt / .md input is read as one document of text: "
            f"decompress or convert it{hint}, or move it out of the inputs")


# ---------------------------------------------------------------------------------------------- pipes

def _through_fifo(tmp_path: Path, data: bytes, name: str = "fifo") -> Path:
    """A named pipe that yields ``data`` once, to one reader (as `<(zcat x.gz)` or /dev/stdin)."""
    fifo = tmp_path / name
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "wb") as fh:
            fh.write(data)
    threading.Thread(target=feed, daemon=True).start()
    return fifo


def test_a_pipe_is_read_like_the_file_it_carries(tmp_path):
    src = CASES / "B55.csv"
    got = rows_of(_through_fifo(tmp_path, src.read_bytes()), id_col="id", block_rows=1)
    assert [(r["id"], r["text"]) for r in got] == [(r["id"], r["text"]) for r in csv_rows(src)]


def test_a_pipe_of_json_lines_compressed_or_not(tmp_path):
    packed = (CASES / "B55.jsonl.gz").read_bytes()
    expected = [json.loads(line) for line in gzip.decompress(packed).decode().splitlines() if line.strip()]
    plain = rows_of(_through_fifo(tmp_path, gzip.decompress(packed), "a"), format="jsonl", id_col="id")
    assert plain == [{"id": e["id"], "text": e["text"]} for e in expected]
    packed_rows = rows_of(_through_fifo(tmp_path, packed, "b"), format="jsonl", id_col="id")   # gzip bytes in a pipe
    assert packed_rows == plain


def test_a_pipe_read_without_format_gets_advice_that_works(tmp_path):
    packed = (CASES / "B55.jsonl.gz").read_bytes()
    message = refused(_through_fifo(tmp_path, gzip.decompress(packed)))
    assert "the first line looks like JSON Lines, but the file was read as CSV (the default for a pipe; pass " \
           "--format to choose); pass --format jsonl" in message


def test_extract_reads_dev_stdin(tiny_model_dir, tmp_path):
    out = tmp_path / "o.parquet"
    proc = subprocess.run([sys.executable, str(REPO / "cli.py"), "extract", "/dev/stdin", "--model", str(tiny_model_dir),
                           "--id-col", "id", "--no-progress", "-o", str(out)],
                          input=(CASES / "B55.csv").read_bytes(), capture_output=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()
    assert "Traceback" not in proc.stderr.decode()
    assert pq.read_table(out).column("id").to_pylist() == [r["id"] for r in csv_rows(CASES / "B55.csv")]


# ---------------------------------------------------------------------------------------------- advice

def test_utf16_export_named_txt_gets_the_whole_command_and_it_works(tmp_path):
    src = tmp_path / "export.txt"
    shutil.copy(CASES / "B38_utf16.tsv", src)
    message = refused(src)
    assert message.endswith("UTF-16 text, not utf-8 (a spreadsheet's \"Unicode Text\" export is UTF-16); pass "
                            "--encoding utf-16 --format tsv, or convert the file to UTF-8")
    expected = list(csv.DictReader(io.StringIO(src.read_bytes().decode("utf-16"), newline=""), delimiter="\t"))
    assert rows_of(src, encoding="utf-16", format="tsv", id_col="id") == [{"id": e["id"], "text": e["text"]}
                                                                          for e in expected]


MIXED = b"id,text\n1,caf\xc3\xa9 one\n2,caf\xe9 two\n3,plain\n4,na\xefve\n5,\xc3\xbcber\n"


def test_mixed_encodings_name_the_lines_and_skip_counts_them(tmp_path, runner, tiny_model_dir):
    src = tmp_path / "mixed.csv"
    src.write_bytes(MIXED)
    bad = [n for n, line in enumerate(MIXED.split(b"\n"), 1) if not _utf8(line)]
    assert bad == [3, 5]
    assert refused(src) == (
        f"{src}: the file mixes encodings: lines 3, 5 are not valid UTF-8 (the first at byte offset 25, bytes e9 20 74 "
        "77), while other lines are UTF-8 text (line 2), so no --encoding reads every line right (latin-1 or cp1252 "
        "would garble the UTF-8 lines); re-save those lines as UTF-8, or pass --on-bad-lines skip to skip the records "
        "that hold them (they are counted)")
    plan = plan_of(src, on_bad_lines="skip", id_col="id", block_rows=2)
    assert [r for t in read_blocks(plan) for r in t.to_pylist()] == [
        {"id": "1", "text": "café one"}, {"id": "3", "text": "plain"}, {"id": "5", "text": "über"}]
    assert plan.n_bad_lines == 2
    jsonl = tmp_path / "mixed.jsonl"
    jsonl.write_bytes(b'{"text": "caf\xe9"}\n{"text": "caf\xc3\xa9"}\n')
    assert rows_of(jsonl, on_bad_lines="skip") == [{"id": 0, "text": "café"}]
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "--on-bad-lines", "skip", "--no-progress",
                             "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 0, result.output
    assert "2 bad lines skipped" in result.output


def _utf8(line: bytes) -> bool:
    try:
        line.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


# ---------------------------------------------------------------------------------------------- messages

@pytest.mark.parametrize("name", ["e.csv", "e.jsonl", "e.parquet", "e.tsv"])
def test_an_empty_file_says_it_is_empty(tmp_path, name):
    src = tmp_path / name
    src.write_bytes(b"")
    assert refused(src) == (f"{src}: the file is empty (0 bytes), so it holds no rows; pass the file with the data "
                            "(a file left empty by an interrupted download or copy: get it again)")


def test_a_csv_of_blank_lines_says_it_is_empty(tmp_path):
    src = tmp_path / "blank.csv.gz"
    src.write_bytes(gzip.compress(b"\n\n"))
    assert refused(src) == (f"{src}: the file is empty (it holds no header line, only blank lines or nothing); a CSV "
                            "file needs a header line with a 'text' column")


def test_parquet_with_a_binary_id_that_is_not_utf8_is_not_called_damaged(tmp_path):
    src = tmp_path / "b.parquet"
    pq.write_table(pa.table({"id": pa.array([b"ok", b"\xff\xfe7"], pa.binary()), "text": ["one", "two"]}), src)
    assert pq.read_table(src).num_rows == 2      # the file is intact
    message = refused(src, id_col="id")
    assert message == (f"{src}: column 'id' holds bytes (type binary), and row 2 is not UTF-8 text (bytes ff fe 37); "
                       "the file is intact, but an id or kept column must be text: pass another column, or write this "
                       "one as strings (e.g. hex or base64)")
    assert "damaged" not in message
    good = tmp_path / "g.parquet"
    pq.write_table(pa.table({"id": pa.array([b"ok", b"caf\xc3\xa9"], pa.binary()), "text": ["one", "two"]}), good)
    assert [r["id"] for r in rows_of(good, id_col="id")] == ["ok", "café"]


def test_a_folder_names_its_skipped_files(tmp_path):
    (tmp_path / "a.txt").write_text("a note")
    names = [f"f{k}.pdf" for k in range(7)]
    for n in names:
        (tmp_path / n).write_bytes(b"%PDF-1.4")
    plan = plan_of(tmp_path)
    assert plan.skipped_files == 7
    assert plan.skipped_names == [str(tmp_path / n) for n in names[:5]]
    line = Summary(output="o", documents=1, skipped_files=plan.skipped_files, skipped_names=plan.skipped_names).line()
    shown = ", ".join(str(tmp_path / n) for n in names[:5])
    assert line.endswith(f"-> o (7 files skipped (not .txt/.md: {shown} and 2 more))")


# ---------------------------------------------------------------------------------------------- changes

def test_a_file_changed_after_the_scan_stops_the_block(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text("id,text\n1,first\n2,second\n")
    plan = plan_of(src, id_col="id")
    src.write_text("id,text\n1,FIRST\n2,second\n")            # same size, later time
    with pytest.raises(RunError) as err:
        read_block(plan.blocks[0])
    assert str(err.value).startswith(f"{src}: the input changed while the run read it (its modification time "
                                     "moved after the scan read it)")
    src.write_text("id,text\n1,first\n")
    before, now = len("id,text\n1,first\n2,second\n"), len("id,text\n1,first\n")
    with pytest.raises(RunError, match=rf"\({before} bytes when the scan read it, {now} now\)"):
        read_block(plan.blocks[0])


def test_a_change_that_keeps_size_and_time_is_caught_by_the_sha256(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in (("a.txt", "alpha"), ("b.txt", "beta!")):
        (docs / name).write_text(text)
    csv_src = tmp_path / "in.csv"
    csv_src.write_text("id,text\n1,first\n")
    plan = plan_of(csv_src, id_col="id")
    verify_inputs(plan.files)                                # unchanged: no error
    st = csv_src.stat()
    csv_src.write_text("id,text\n1,FIRST\n")
    os.utime(csv_src, ns=(st.st_atime_ns, st.st_mtime_ns))   # as `touch -r` or `cp -p` leave it
    assert [r["text"] for r in read_block(plan.blocks[0]).to_pylist()] == ["FIRST"]   # the stamps cannot see it
    with pytest.raises(RunError) as err:
        verify_inputs(plan.files)
    assert str(err.value).startswith(f"{csv_src}: the input changed while the run read it (its sha256 at the end "
                                     "of the run differs from the one the scan recorded)")
    folder = plan_of(docs)
    st = (docs / "b.txt").stat()
    (docs / "b.txt").write_text("BETA!")
    os.utime(docs / "b.txt", ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(RunError, match=f"^{docs}: the input changed"):
        verify_inputs(folder.files)


def test_extract_exits_1_and_a_dir_keeps_its_parts_when_an_input_changes(runner, tiny_model_dir, tmp_path,
                                                                          monkeypatch):
    import pipeline.engine.driver as run_module   # the one driver, which checks the inputs at the end

    src = tmp_path / "in.csv"
    src.write_text("id,text\n" + "".join(f"{i},w{i} words here\n" for i in range(6)))
    real = run_module.verify_inputs

    def changed_then_verify(files):
        st = src.stat()
        src.write_text(src.read_text().replace("words", "WORDS"))
        os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
        real(files)
    monkeypatch.setattr(run_module, "verify_inputs", changed_then_verify)
    out = tmp_path / "out"
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "--id-col", "id", "--block-rows", "2",
                             "--no-progress", "-o", f"{out}/"])
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"Error: {src}: the input changed while the run read it")
    parts = sorted(p.name for p in out.glob("_part-*.parquet.pending"))   # finished parts, kept for --resume
    assert len(parts) == 3 and not (out / "_manifest.parquet").exists()


def test_a_json_null_label_is_no_class_for_probe(runner, tiny_model_dir, tmp_path):
    from pipeline.classify.probe_files import probe_file

    labels = ["a", "b"] * 4 + [None]
    src = tmp_path / "l.jsonl"
    src.write_text("".join(json.dumps({"text": f"w{i} w{i + 1} words", "label": lab}) + "\n"
                           for i, lab in enumerate(labels)))
    out = tmp_path / "f.parquet"
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "--keep-col", "label", "--no-progress",
                             "-o", out])
    assert result.exit_code == 0, result.output
    assert pq.read_table(out).column("label").to_pylist() == labels
    [report] = probe_file(out, "label", folds=2)
    assert report["classes"] == 2 and report["rows"] == 8 and report["left_out"] == 1
