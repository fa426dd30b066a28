"""Byte-level fuzzing of the read stage (issues 17 and 23): valid inputs in every format and compression
(gzip, zstd, bzip2, xz), each corrupted by one cut, flipped, inserted or deleted byte, fed to ``scan`` +
``read_block`` directly; one input in eight comes through a named pipe (as ``<(zcat x.gz)`` does), and
JSON Lines with numbers, nulls and booleans as ids and kept columns are fuzzed on their own.

What is asserted for every corrupted input:
  * the reader either returns rows or raises InputError whose message names the file; any other
    exception fails the test (it would be a traceback for the user);
  * when it returns rows, they equal the rows of an independent reference parse of the same stored
    bytes: decompression by another API (``zlib.decompress(wbits=31)`` for gzip, one-shot
    ``zstandard.decompress`` for zstd; both check the stream's end and checksum; ``bz2.decompress``
    and ``lzma.decompress`` for bzip2 and xz), strict UTF-8
    decoding, then the standard library's ``csv`` (strict) or ``json`` (repeated keys and lone
    surrogates refused; a number kept as written by the ``parse_float`` / ``parse_int`` hooks, a null as
    None), or ``pyarrow.parquet.read_table`` of the whole file. If the reference
    cannot parse the bytes, the reader must not return rows. So an accepted input never loses,
    adds or changes a row: "all rows the file holds" is what the reference finds there.
Corruptions are applied to the stored bytes, and for compressed inputs also to the plain bytes before
compression (which exercises the parsers behind a valid stream). A seeded generator makes the run
repeatable; inputs that once failed are kept as regression cases below.
"""
from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import lzma
import os
import random
import re
import threading
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from pipeline.options.config import PipelineConfig
from pipeline.errors import InputError
from pipeline.read import read_block, scan

ROWS = [{"id": f"r{i}", "text": t} for i, t in enumerate([
    "plain words", 'a "quoted" word, and a comma', "two\nlines", "tab\tinside", "", "café – ünïcode 😀",
    "   ", "last one"])]
LINE_KINDS = [(fmt, comp) for fmt in ("csv", "tsv", "jsonl") for comp in (None, "gz", "zst", "bz2", "xz")]
KINDS = LINE_KINDS + [("parquet", None), ("text", None)]
CUTS = ("cut", "flip", "insert", "delete")
PER_KIND_AND_CUT = 40                     # 17 kinds x 4 corruptions x 40 = 2,720 inputs
PIPE_SHARE = 0.125                        # inputs (not text folders) given through a named pipe


def plain_bytes(fmt: str) -> bytes:
    if fmt == "jsonl":
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROWS).encode()
    buf = io.StringIO()
    writer = csv.writer(buf, delimiter="\t" if fmt == "tsv" else ",", lineterminator="\n")
    writer.writerow(["id", "text"])
    writer.writerows([r["id"], r["text"]] for r in ROWS)
    return buf.getvalue().encode()


def compress(data: bytes, comp: str | None) -> bytes:
    if comp == "gz":
        return gzip.compress(data, mtime=0)
    if comp == "zst":
        return zstandard.ZstdCompressor(write_checksum=True).compress(data)
    if comp == "bz2":
        return bz2.compress(data)
    if comp == "xz":
        return lzma.compress(data)
    return data


def parquet_bytes() -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"id": [r["id"] for r in ROWS], "text": [r["text"] for r in ROWS]}), sink,
                   row_group_size=3)
    return sink.getvalue()


def corrupt(data: bytes, how: str, rng: random.Random) -> bytes:
    at = rng.randrange(len(data) + (1 if how == "insert" else 0))
    if how == "cut":
        return data[:at]
    if how == "flip":
        return data[:at] + bytes([data[at] ^ rng.randrange(1, 256)]) + data[at + 1:]
    if how == "insert":
        return data[:at] + bytes([rng.choice(b'\n\r",\t{}\\"\x00\xff\xc3' + bytes([rng.randrange(256)]))]) + data[at:]
    return data[:at] + data[at + 1:]


# ---------------------------------------------------------------------------------------------- reference

class NotReadable(Exception):
    """The reference parse finds no valid file in these bytes."""


def _decompress(data: bytes, comp: str | None) -> bytes:
    try:
        if comp == "gz":
            d = zlib.decompressobj(wbits=31)
            out = d.decompress(data)
            if not d.eof or d.unused_data:
                raise NotReadable("gzip stream cut or followed by other bytes")
            return out
        if comp == "zst":
            return zstandard.ZstdDecompressor().decompress(data, max_output_size=1 << 20)
        if comp == "bz2":
            return bz2.decompress(data)
        if comp == "xz":
            return lzma.decompress(data, format=lzma.FORMAT_XZ)
        return data
    except (zlib.error, zstandard.ZstdError, OSError, EOFError, ValueError, lzma.LZMAError) as err:
        raise NotReadable(err) from None


def _no_repeats(pairs):
    if len({k for k, _ in pairs}) != len(pairs):
        raise NotReadable("repeated key")
    return dict(pairs)


def reference_rows(data: bytes, fmt: str, comp: str | None) -> list[tuple[str, str]]:
    """(id, text) of every row, parsed without pipeline.read; NotReadable if any record is bad."""
    raw = _decompress(data, comp)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise NotReadable("not UTF-8") from None
    if fmt == "jsonl":
        rows = []
        for line in io.StringIO(text, newline=""):
            if not line.strip():
                continue
            try:
                obj = json.loads(line, object_pairs_hook=_no_repeats)
            except ValueError:
                raise NotReadable("bad JSON") from None
            if not isinstance(obj, dict) or "id" not in obj or "text" not in obj:
                raise NotReadable("not a record")
            vals = [v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in (obj["id"], obj["text"])]
            if any(re.search("[\ud800-\udfff]", v) for v in vals):
                raise NotReadable("lone surrogate")
            rows.append(tuple(vals))
        return rows
    try:
        records = [r for r in csv.reader(io.StringIO(text, newline=""), delimiter="\t" if fmt == "tsv" else ",",
                                         strict=True) if r]
    except csv.Error:
        raise NotReadable("bad CSV") from None
    if not records or records[0].count("id") != 1 or records[0].count("text") != 1:
        raise NotReadable("no header with id and text")
    header = records[0]
    if any(len(r) != len(header) for r in records[1:]):
        raise NotReadable("field count")
    return [(r[header.index("id")], r[header.index("text")]) for r in records[1:]]


def reference_parquet(path: Path) -> list[tuple[str, str]]:
    try:
        table = pq.read_table(path, columns=["id", "text"])
        table.validate(full=True)
        return [(r["id"], r["text"] or "") for r in table.to_pylist()]
    except (pa.ArrowException, OSError) as err:
        raise NotReadable(err) from None


# ---------------------------------------------------------------------------------------------- the check

def read_all(src: Path, **options) -> list[tuple[str, str]]:
    plan = scan(PipelineConfig.from_options(inputs=(str(src),), block_rows=3, **options).read)
    return [(r["id"], r["text"]) for spec in plan.blocks for r in read_block(spec).to_pylist()]


def through_pipe(fifo: Path, data: bytes) -> None:
    """Make ``fifo`` a named pipe that gives ``data`` once to its first reader (a thread writes it)."""
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "wb") as fh:
            fh.write(data)
    threading.Thread(target=feed, daemon=True).start()


def check_one(folder: Path, fmt: str, comp: str | None, stored: bytes, pipe: bool = False) -> str:
    """Write one (corrupted) input (``pipe``: give it through a named pipe), read it, and compare;
    returns 'rows' or 'refused'."""
    if pipe:
        src = bad = folder / (f"in.{fmt}" + (f".{comp}" if comp else ""))
        through_pipe(src, stored)
        (folder / "copy").mkdir()
        (folder / "copy" / bad.name).write_bytes(stored)   # a regular file for the reference parquet reader
        options = {"id_col": "id"}
    elif fmt == "text":
        (folder / "a.txt").write_text("first file")
        src, bad = folder, folder / "b.txt"
        bad.write_bytes(stored)
        options = {}
    else:
        src = bad = folder / (f"in.{fmt}" + (f".{comp}" if comp else ""))
        bad.write_bytes(stored)
        options = {"id_col": "id"}
    try:
        got = read_all(src, **options)
    except InputError as err:
        assert str(err) and bad.name in str(err), f"{bad.name} not named in {err}"
        return "refused"
    if fmt == "text":
        try:
            expected = [("a.txt", "first file"), ("b.txt", stored.decode("utf-8-sig"))]
        except UnicodeDecodeError:
            raise AssertionError(f"accepted bytes that are not UTF-8: {stored!r}") from None
    elif fmt == "parquet":
        expected = reference_parquet(folder / "copy" / bad.name if pipe else bad)
    else:
        expected = reference_rows(stored, fmt, comp)
    assert got == expected, f"{fmt} {comp}: read {got}, the file holds {expected}; bytes {stored!r}"
    return "rows"


def originals() -> dict[tuple[str, str | None], bytes]:
    out = {(fmt, comp): compress(plain_bytes(fmt), comp) for fmt, comp in LINE_KINDS}
    out[("parquet", None)] = parquet_bytes()
    out[("text", None)] = "a document,\nwith two lines – and ünïcode\n".encode()
    return out


def test_uncorrupted_inputs_read_every_row(tmp_path):
    for (fmt, comp), data in originals().items():
        folder = tmp_path / f"{fmt}-{comp}"
        folder.mkdir()
        assert check_one(folder, fmt, comp, data) == "rows"
        if fmt not in ("text",):
            assert len(read_all(next(folder.iterdir()), id_col="id")) == len(ROWS)


def test_fuzz_corrupted_inputs_read_whole_or_refused(tmp_path):
    rng = random.Random(20261201)
    outcomes = {"rows": 0, "refused": 0}
    n = 0
    for (fmt, comp), data in originals().items():
        plain = plain_bytes(fmt) if comp else None
        for how in CUTS:
            for _ in range(PER_KIND_AND_CUT):
                if plain is not None and rng.random() < 0.5:
                    stored = compress(corrupt(plain, how, rng), comp)   # a valid stream of damaged text
                else:
                    stored = corrupt(data, how, rng)
                folder = tmp_path / str(n)
                folder.mkdir()
                pipe = fmt != "text" and rng.random() < PIPE_SHARE
                try:
                    outcomes[check_one(folder, fmt, comp, stored, pipe)] += 1
                except AssertionError:
                    raise
                except Exception as err:  # any other exception is a traceback for the user
                    raise AssertionError(f"{fmt} {comp} {how}: {type(err).__name__}: {err}; bytes {stored!r}") from err
                n += 1
    assert n >= 2500
    assert outcomes["rows"] > 0 and outcomes["refused"] > 0   # both ends are exercised


CASES = sorted((Path(__file__).resolve().parents[1] / "fuzz_cases").glob("*.bin"))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_regression_inputs_found_by_the_fuzzer(tmp_path, case):
    """Inputs this fuzzer found against the reader before issue 17 (file name: format[.compression].what
    it raised or, NotReadable, that it returned rows the reference cannot find). Each is now read whole
    or refused with an InputError naming the file."""
    fmt, *rest = case.name.split(".")
    comp = rest[0] if rest[0] in ("gz", "zst") else None
    assert check_one(tmp_path, fmt, comp, case.read_bytes()) in ("rows", "refused")


def test_regression_cases_cover_what_failed():
    names = {c.name for c in CASES}
    assert {"jsonl.zst.NotReadable.bin", "tsv.gz.EOFError.bin", "parquet.OSError.bin",
            "tsv.UnicodeDecodeError.bin"} <= names


# ---------------------------------------------------------------------------------------------- JSON values

NUMBERS = ["1.50", "1.5", "1E+3", "1e-7", "-0", "0", "3.10", "12345678901234567890", "0.1000000000000000055511151231257827",
           "-2.5E-3", "7"]
OTHERS = ["null", "true", "false", '"1.50"', '"x"', '""']


def json_values_bytes(rng: random.Random) -> bytes:
    """JSON Lines whose ids and 'label' are numbers as written, nulls, booleans or strings."""
    lines = []
    for i in range(8):
        ident = rng.choice(NUMBERS + OTHERS)
        label = rng.choice(NUMBERS + OTHERS)
        text = rng.choice(['"a text"', "null", '"caf\\u00e9"', "42"])
        lines.append(f'{{"id": {ident}, "text": {text}, "label": {label}}}\n')
    return "".join(lines).encode()


def reference_json_values(data: bytes) -> list[tuple]:
    """(id, text, label, error) per record: numbers as written (json's parse hooks), null None (text: ""),
    booleans their JSON text, a text that is a number "" with its row error; NotReadable when any record is bad."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise NotReadable("not UTF-8") from None
    rows = []
    for line in io.StringIO(text, newline=""):
        if not line.strip():
            continue
        try:
            obj = json.loads(line, object_pairs_hook=_no_repeats, parse_float=str, parse_int=str, parse_constant=str)
        except ValueError:
            raise NotReadable("bad JSON") from None
        if not isinstance(obj, dict) or not {"id", "text", "label"} <= set(obj):
            raise NotReadable("not a record")
        if any(isinstance(obj[k], (list, dict)) for k in ("id", "text", "label")):
            raise NotReadable("nested value: not generated here")
        vals = [None if v is None else v if isinstance(v, str) else json.dumps(v) for v in
                (obj["id"], obj["text"], obj["label"])]
        typed = json.loads(line)["text"]   # the hooks above read 42 as "42": the JSON type, from a plain read
        error = None if typed is None or isinstance(typed, str) else "text is a JSON number, not a string"
        vals[1] = "" if vals[1] is None or error else vals[1]   # a number as text: a row error, never its JSON
        vals.append(error)
        if any(v is not None and re.search("[\ud800-\udfff]", v) for v in vals):
            raise NotReadable("lone surrogate")
        rows.append(tuple(vals))
    return rows


def test_fuzz_json_numbers_and_nulls_kept_as_written(tmp_path):
    rng = random.Random(23)
    outcomes = {"rows": 0, "refused": 0}
    for n in range(300):
        data = json_values_bytes(rng)
        stored = data if n % 3 == 0 else corrupt(data, rng.choice(CUTS), rng)
        src = tmp_path / f"{n}.jsonl"
        src.write_bytes(stored)
        try:
            plan = scan(PipelineConfig.from_options(inputs=(str(src),), id_col="id", keep_cols=("label",),
                                                    block_rows=3).read)
            got = [(r["id"], r["text"], r["label"], r.get("error")) for spec in plan.blocks
                   for r in read_block(spec).to_pylist()]
        except InputError as err:
            assert src.name in str(err)
            outcomes["refused"] += 1
            continue
        try:
            expected = reference_json_values(stored)
        except NotReadable as why:
            if "nested" in str(why):
                continue
            raise AssertionError(f"read {got} from bytes the reference refuses ({why}): {stored!r}") from None
        assert got == expected, f"read {got}, the file holds {expected}; bytes {stored!r}"
        outcomes["rows"] += 1
    assert outcomes["rows"] > 100 and outcomes["refused"] > 0
