"""The advice for a file that is not UTF-8 names the encoding its bytes are in (charset-normalizer's
guess among the common ones), shows the failing line as that encoding reads it, never offers latin-1,
and following it reads every row as written."""
from __future__ import annotations

import pytest
from conftest import invoke, refused, rows_of

from pipeline.read.encoding_advice import decode_message, likely_encoding

TEXTS = {
    "cp1251": ["Привет, это тестовый документ о погоде в Москве.", "Сегодня хорошая погода, и мы идём гулять в парк."],
    "koi8_r": ["Привет, это тестовый документ о погоде в Москве.", "Сегодня хорошая погода, и мы идём гулять в парк."],
    "cp1252": ["Le café était très agréable et l'été fut chaud.", "Où est la bibliothèque? À côté de l'école."],
    "cp1250": ["Zażółć gęślą jaźń, powiedział Łukasz.", "Żółw przeszedł przez łąkę."],
    "cp1253": ["Καλημέρα κόσμε, τι κάνεις σήμερα;", "Ο καιρός είναι πολύ ωραίος."],
    "gb18030": ["天气很好我们去公园散步吧。", "股票市场今天大幅上涨投资者很高兴。"],
    "shift_jis": ["今日は良い天気ですね。公園に行きましょう。", "明日は雨が降るそうです。"],
}


@pytest.mark.parametrize("encoding", list(TEXTS))
def test_the_advice_names_the_files_encoding_and_following_it_reads_every_row(tmp_path, encoding):
    texts = TEXTS[encoding]
    src = tmp_path / "docs.csv"
    src.write_bytes(("id,text\n1,plain ascii\n" + "".join(f'{i},"{t}"\n' for i, t in enumerate(texts, 2)))
                    .encode(encoding))
    message = refused(src)
    assert f"--encoding {encoding} if that is right" in message
    line = '2,"' + texts[0] + '"'   # line 3 as written
    assert f"as which line 3 reads {line!r}: pass" in message
    assert "latin" not in message
    assert [r["text"] for r in rows_of(src, encoding=encoding)] == ["plain ascii", *texts]


def test_a_cp1251_file_gets_the_whole_message(runner, tiny_model_dir, tmp_path):
    src = tmp_path / "ru.csv"
    src.write_bytes("id,text\n1,Привет мир и все люди в нём\n".encode("cp1251"))
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 2
    assert result.output == (f"Error: {src}: byte offset 10 (line 2) is not valid utf-8 (bytes cf f0 e8 e2); the bytes "
                             "look like cp1251 (Cyrillic), as which line 2 reads '1,Привет мир и все люди в нём': pass "
                             "--encoding cp1251 if that is right, or convert the file to UTF-8\n")


def test_without_a_guess_the_examples_start_with_cp1252_not_latin_1():
    assert likely_encoding(b"") is None
    assert likely_encoding("Привет, мир".encode("cp1251")) == ("cp1251", "Cyrillic")
    assert likely_encoding("Привет, мир".encode("cp1251"), tried="cp1251")[0] != "cp1251"   # the one tried is no advice
    message = decode_message("f.csv", "utf-8", 3, 1, b"", b"")
    assert message == ("f.csv: byte offset 3 (line 1) is not valid utf-8 (bytes ); pass --encoding with the file's "
                       "encoding (e.g. cp1252 for Western European, cp1251 for Cyrillic, gb18030 for Chinese) or "
                       "convert the file to UTF-8")
