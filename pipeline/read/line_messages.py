"""The messages of the line formats (CSV, TSV, JSON Lines) for a bad record, a file cut short inside
its last record, and a header that holds another delimiter."""
from __future__ import annotations

from dataclasses import dataclass

from .sources import Source, how
from .specs import Columns


@dataclass
class BadRecord(Exception):
    """Where a bad record starts and why."""

    line: int          # 1-based physical line where the record starts
    reason: str
    offset: int = 0    # byte offset where it starts (of the decompressed text)
    cut: bool = False  # it runs into the end of the file, which has no final line end: a cut-short file


def cut_message(src: Source, bad: BadRecord) -> str:
    """A last record that runs into the end of a file with no final line end: the file is cut short."""
    where = "of the decompressed text" if src.compression else "of the file"
    reason = 'a quoted field is still open (unbalanced ")' if "unexpected end of data" in bad.reason else bad.reason
    return (f"{src.path}: line {bad.line} (byte {bad.offset} {where}): the file ends inside this record, with no "
            f"line end ({reason}); it looks cut short, as by an interrupted download or copy: get the whole "
            "file again, or complete the record and end the line")


def bad_message(src: Source, bad: BadRecord) -> str:
    if "unexpected end of data" in bad.reason:
        what = "a quoted field starts here and never ends (unbalanced \"); close the quote"
    else:
        what = f"{bad.reason}; fix the line"
    hint = ""
    if src.format == "jsonl":
        hint = f" ({how(src)}; pass --format csv or tsv if it is not JSON Lines)"
    elif src.format != "csv" or src.compression or not src.by_extension:
        hint = f" ({how(src)})"
    return f"{src.path}: line {bad.line}: {what}{hint}, or pass --on-bad-lines skip to drop such lines"


def delimiter_hint(names: list[str], cols: Columns, fmt: str) -> str:
    """A one-column header that holds another delimiter: the option that reads it."""
    if len(names) != 1:
        return ""
    delim = cols.delimiter or ("\t" if fmt == "tsv" else ",")
    for char, name, fix in (("\t", "a tab", "--format tsv or --delimiter $'\\t'"),
                            (";", "a semicolon", "--delimiter ';'"),
                            (",", "a comma", "--delimiter ','"), ("|", "a '|'", "--delimiter '|'")):
        if char != delim and char in names[0]:
            return f" (the header has no {delim!r} but has {name}: pass {fix})"
    return ""
