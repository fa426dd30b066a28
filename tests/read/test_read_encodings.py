"""Advice about --encoding only where an encoding is the problem, and never advice that garbles other
lines or files when followed: a compressed file named .txt is not offered UTF-16; a text file or a
folder (one corpus) that mixes UTF-8 with another encoding is told so, with --on-bad-lines skip."""
from __future__ import annotations

import bz2

import pytest
from conftest import plan_of, refused, rows_of

from pipeline.read import read_blocks


def test_a_bzip2_file_named_txt_gets_no_encoding_advice(tmp_path):
    src = tmp_path / "notes.txt"
    src.write_bytes(bz2.compress(b"the river flooded the old town\n"))
    message = refused(src)
    assert message == (f"{src}: this is bzip2-compressed, not a text document; a .txt / .md input is read as one "
                       "document of text: decompress or convert it, or move it out of the inputs")
    assert "--encoding" not in message


MIXED_TEXT = b"caf\xc3\xa9 line one\nna\xefve line\nthird \xc3\xa9\n"   # UTF-8, with line 2 in cp1252


def test_a_text_file_mixing_encodings_is_told_so_and_skip_leaves_out_those_lines(tmp_path):
    src = tmp_path / "mixed.txt"
    src.write_bytes(MIXED_TEXT)
    assert refused(src) == (
        f"{src}: the file mixes encodings: line 2 is not valid UTF-8 (the first at byte offset 17, bytes ef 76 65 20), "
        "while other lines are UTF-8 text (line 1), so no --encoding reads every line right (latin-1 or cp1252 would "
        "garble the UTF-8 lines); re-save those lines as UTF-8, or pass --on-bad-lines skip to skip those lines, "
        "keeping the document's other lines (they are counted)")
    plan = plan_of(src, on_bad_lines="skip")
    assert [r["text"] for t in read_blocks(plan) for r in t.to_pylist()] == ["café line one\nthird é\n"]
    assert plan.n_bad_lines == 1


def test_a_folder_mixing_encodings_names_the_file_and_its_fix(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_bytes("café au lait\n".encode())
    (folder / "b.txt").write_bytes("naïve\r\nplain line\n".encode("latin-1"))
    (folder / "c.txt").write_bytes("résumé\n".encode())
    b = folder / "b.txt"
    assert refused(folder) == (
        f"{folder}: the folder mixes encodings: b.txt is not valid UTF-8 (b.txt: byte offset 2 (line 1), bytes ef 76 65 "
        "0d), while other files are UTF-8 text (a.txt), so no --encoding reads every file right (--encoding latin-1 "
        f"would garble the UTF-8 files); convert that file to UTF-8 (e.g. `iconv -f cp1252 -t utf-8 {b} > {b}.new && "
        f"mv {b}.new {b}`), or pass --on-bad-lines skip to skip its lines that are not UTF-8 (they are counted)")
    plan = plan_of(folder, on_bad_lines="skip")
    rows = [r for t in read_blocks(plan) for r in t.to_pylist()]
    assert [(r["id"], r["text"]) for r in rows] == [("a.txt", "café au lait\n"), ("b.txt", "plain line\n"),
                                                    ("c.txt", "résumé\n")]   # the UTF-8 files as written
    assert plan.n_bad_lines == 1


def test_a_folder_of_one_other_encoding_keeps_the_encoding_advice(tmp_path):
    """Every non-ASCII file is latin-1 (the others ASCII): the advice names cp1252 (never latin-1), which
    reads all of them right."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_bytes(b"plain ascii\n")
    (folder / "b.txt").write_bytes("naïve\n".encode("latin-1"))
    assert refused(folder) == (f"{folder / 'b.txt'}: byte offset 2 (line 1) is not valid utf-8 (bytes ef 76 65 0a); "
                               "the bytes look like cp1252 (Western European: accented Latin letters), as which line 1 "
                               "reads 'naïve': pass --encoding cp1252 if that is right, or convert the file to UTF-8")
    assert [r["text"] for r in rows_of(folder, encoding="cp1252")] == ["plain ascii\n", "naïve\n"]


@pytest.mark.parametrize("on_bad_lines", ["error", "skip"])
def test_a_utf8_text_folder_reads_the_same_with_either_on_bad_lines(tmp_path, on_bad_lines):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_bytes("\ufeffcafé\r\nline\n".encode())
    assert [r["text"] for r in rows_of(folder, on_bad_lines=on_bad_lines)] == ["café\r\nline\n"]
