"""What a file is, from its first bytes rather than its name: a compressed stream (those the reader
decompresses: gzip, zstd, bzip2, xz; and those it does not: LZ4, 7z, RAR, lzip, Unix compress), a
zip / Office / image / PDF file, a parquet file, or an empty file. The byte signatures themselves are
pipeline.read.signatures.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from .signatures import BINARY, STREAMS, UNSUPPORTED, ZIP, head_of, stream_of
from .sources import Source, how

def _unsupported(src: Source, path: Path, head: bytes) -> None:
    for magic, (what, command) in UNSUPPORTED.items():
        if head.startswith(magic):
            raise InputError(f"{path}: this file is {what} (it starts with bytes {magic.hex(' ')}), which the "
                             f"reader does not decompress; it was {how(src)}; unpack it first "
                             f"(`{command.replace('FILE', path.name)}`) and pass the file inside, or compress it "
                             "as gzip, zstd, bzip2 or xz (.gz, .zst, .bz2, .xz are read directly)")


def magic_check(src: Source, path: Path) -> None:
    """A file whose first bytes say it is another format than the one tried: InputError with the fix.

    Raises:
        InputError: an empty file (0 bytes); a compressed stream the reader does not read (LZ4, 7z,
            RAR...), naming the command that unpacks it; a zip / image / PDF / Office file; a parquet
            file read as text or a text file read as parquet; a compressed stream whose name does not say
            so (the name to give it), or a name that says so over bytes that are not that stream.
    """
    head = head_of(path)
    if not head and src.compression:
        raise InputError(f"{path}: the file is empty (0 bytes), not a {STREAMS[src.compression][1]} stream; the file "
                         "is cut short: download or copy it again")
    if not head:
        raise InputError(f"{path}: the file is empty (0 bytes), so it holds no rows; pass the file with the "
                         "data (a file left empty by an interrupted download or copy: get it again)")
    _unsupported(src, path, head)
    for magic, what in BINARY.items():
        if magic != b"PAR1" and head.startswith(magic):
            unzip = "; a .zip archive: unzip it and pass the files inside" if magic == ZIP else ""
            raise InputError(f"{path}: this is {what} (it starts with bytes {magic.hex(' ')}), not text; it was "
                             f"{how(src)}; export it as CSV or JSON Lines (a spreadsheet: save as \"CSV UTF-8\""
                             f"{unzip}), or leave it out of the inputs")
    if head.startswith(b"PAR1") and src.format != "parquet":
        raise InputError(f"{path}: this is a parquet file (it starts with PAR1) but was {how(src)}; "
                         "name it .parquet or pass --format parquet")
    if src.format == "parquet":
        if not head.startswith(b"PAR1"):
            raise InputError(f"{path}: not a parquet file (it does not start with PAR1) but was {how(src)}; "
                             "pass --format csv, tsv or jsonl for a text file")
        return
    kind = stream_of(head)
    if kind is not None and kind != src.compression:
        _, name, ext = STREAMS[kind]
        raise InputError(f"{path}: the file is {name}-compressed but was {how(src)} as plain text; name it "
                         f"{path.name}{ext} so it is decompressed")
    if src.compression is not None and kind is None:
        _, name, ext = STREAMS[src.compression]
        raise InputError(f"{path}: the name ends in {ext} but the file is not {name}-compressed (it starts with "
                         f"bytes {head[:4].hex(' ')}); rename it without {ext} if it is plain text")
    if src.format in ("csv", "tsv") and not src.forced:
        json_check(src, path)


def json_check(src: Source, path: Path) -> None:
    """A file read as CSV or TSV (from its name or by default, not --format) whose first bytes are JSON:
    InputError naming the JSON it holds and the fix, whether or not its first line would parse as a CSV header.

    Raises:
        InputError: JSON Lines (a first line that is a JSON object: --format jsonl); a JSON array of
            objects, as pandas' ``to_json(orient="records")`` writes it, on one line or indented; one
            JSON object over several lines. The last two are converted to JSON Lines with the command named.
    """
    from .streams import open_binary   # here: streams imports this module's neighbours

    with open_binary(path, src.compression) as fh:
        text = fh.read(_JSON_HEAD).decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    stem = path.name.split(".")[0] or path.name
    first = text.split("\n", 1)[0].strip()
    if text.startswith("{") and _is_object(first):
        raise InputError(f"{path}: the first line looks like JSON Lines, but the file was {how(src)}; "
                         "pass --format jsonl or name it .jsonl")
    if text.startswith("[") and text[1:].lstrip(" \t\r\n")[:1] in ("{", "]"):
        raise InputError(f"{path}: the file holds a JSON array of objects (as pandas' df.to_json(orient=\"records\") "
                         f"writes it), but was {how(src)}; longbert reads JSON Lines, one object per line: convert it "
                         f"with `jq -c '.[]' {path.name} > {stem}.jsonl` (or pandas' df.to_json(\"{stem}.jsonl\", "
                         "orient=\"records\", lines=True)) and pass the .jsonl file")
    if text.startswith("{") and "\n" in text:
        raise InputError(f"{path}: the file holds JSON spread over several lines (an indented object), but was "
                         f"{how(src)}; longbert reads JSON Lines, one object per line: convert it with "
                         f"`jq -c . {path.name} > {stem}.jsonl` and pass the .jsonl file")


_JSON_HEAD = 1 << 16  # bytes looked at: a first JSON Lines record longer than this is checked by the reader


def _is_object(line: str) -> bool:
    import json

    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False
