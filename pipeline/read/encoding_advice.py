"""The message for bytes that do not decode, with advice that gives a right result when followed.

* A UTF-16 / UTF-32 byte-order mark: the whole command, ``--encoding utf-16`` and, when the first line
  holds tabs (a spreadsheet's "Unicode Text" export is a tab-separated table), ``--format tsv``.
* A UTF-8 file some of whose lines are in another encoding (mixed): no ``--encoding`` reads it right
  (latin-1 decodes every byte, so it garbles the UTF-8 lines without a word), so the message names the
  lines that are not UTF-8 and offers ``--on-bad-lines skip``, which skips and counts their records
  (a text document: those lines). A folder of text files some of which are not UTF-8 while others are
  UTF-8 text is one corpus mixing encodings: the message names the files (``folder_message``).
* Otherwise: file, byte offset, line, the bytes and the ``--encoding`` to pass.
"""
from __future__ import annotations

import codecs
from collections.abc import Callable
from pathlib import Path

WIDE = ("utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be")
_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32 (little-endian)", "utf-32"), (b"\x00\x00\xfe\xff", "UTF-32 (big-endian)", "utf-32"),
         (b"\xff\xfe", "UTF-16 (little-endian)", "utf-16"), (b"\xfe\xff", "UTF-16 (big-endian)", "utf-16"))
LINES_SHOWN = 10


def _options(head: bytes, option: str, fmt: str | None) -> str:
    """'--encoding utf-16', plus ' --format tsv' when the file's first line (decoded from ``head``, its
    first bytes) holds a tab and the format tried is not TSV."""
    first = head.decode(option, errors="ignore").split("\n", 1)[0]
    tsv = fmt not in (None, "tsv") and "\t" in first
    return f"--encoding {option}" + (" --format tsv" if tsv else "")


def decode_message(path: Path, encoding: str, offset: int, line: int, bad: bytes, head: bytes,
                   fmt: str | None = None) -> str:
    """The message for bytes that do not decode, in a header or a data line: file, byte offset, line,
    the bytes, and the --encoding to pass (the whole command when ``head``, the file's first bytes,
    starts with a UTF-16 / UTF-32 byte-order mark; ``fmt`` is the format tried)."""
    for bom, name, option in _BOMS:
        if head.startswith(bom) and codecs.lookup(encoding).name not in WIDE:
            return (f"{path}: the file starts with a {name} byte-order mark (bytes {bom.hex(' ')}), so it is "
                    f"{name.split()[0]} text, not {encoding} (a spreadsheet's \"Unicode Text\" export is UTF-16); "
                    f"pass {_options(head, option, fmt)}, or convert the file to UTF-8")
    return (f"{path}: byte offset {offset} (line {line}) is not valid {encoding} (bytes {bad.hex(' ')}); pass "
            "--encoding with the file's encoding (e.g. latin-1, cp1252, gb18030) or convert the file to UTF-8")


def undecodable_message(path: Path, mixed: Callable[[], tuple[list[int], int, int | None]], encoding: str,
                        offset: int, line: int, bad: bytes, head: bytes, fmt: str | None = None) -> str:
    """``decode_message``, or for a UTF-8 file (a line format, or a text document) that also holds valid
    non-ASCII UTF-8 lines (mixed encodings) the message that names the lines that are not UTF-8 and the
    way to skip them. ``mixed``: reads the file for that (pipeline.read.streams.mixed_lines), called only
    for such a file."""
    if fmt is None or codecs.lookup(encoding).name != "utf-8" or any(head.startswith(b) for b, _, _ in _BOMS):
        return decode_message(path, encoding, offset, line, bad, head, fmt)
    lines, n_bad, good = mixed()
    if good is None or not lines:
        return decode_message(path, encoding, offset, line, bad, head, fmt)
    more = f" and {n_bad - len(lines)} more" if n_bad > len(lines) else ""
    shown = ", ".join(str(n) for n in lines)
    return (f"{path}: the file mixes encodings: line{'s' if n_bad > 1 else ''} {shown}{more} "
            f"{'are' if n_bad > 1 else 'is'} not valid UTF-8 (the first at byte offset {offset}, bytes "
            f"{bad.hex(' ')}), while other lines are UTF-8 text (line {good}), so no --encoding reads every line "
            "right (latin-1 or cp1252 would garble the UTF-8 lines); re-save those lines as UTF-8, or pass "
            f"--on-bad-lines skip to skip {_SKIPPED['text' if fmt == 'text' else 'records']}")


_SKIPPED = {"records": "the records that hold them (they are counted)",
            "text": "those lines, keeping the document's other lines (they are counted)"}


def folder_message(root: Path, bad: list[str], n_bad: int, good: str, first: str) -> str:
    """The message for a folder of text files (one corpus) where some files are not UTF-8 while others
    are UTF-8 text: no --encoding reads every file right, so it names the files, how to convert them,
    and --on-bad-lines skip.

    Args:
        root: the folder; bad: the first files (relative to it) that are not UTF-8, n_bad of them in all;
        good: a UTF-8 file with non-ASCII text; first: the message for the first bad file's bytes.
    """
    more = f" and {n_bad - len(bad)} more" if n_bad > len(bad) else ""
    one = n_bad == 1
    target = root / bad[0]
    return (f"{root}: the folder mixes encodings: {', '.join(bad)}{more} {'is' if one else 'are'} not valid UTF-8 "
            f"({first}), while other files are UTF-8 text ({good}), so no --encoding reads every file right "
            f"(--encoding latin-1 would garble the UTF-8 files); convert {'that file' if one else 'those files'} to "
            f"UTF-8 (e.g. `iconv -f cp1252 -t utf-8 {target} > {target}.new && mv {target}.new {target}`), or pass "
            f"--on-bad-lines skip to skip {'its' if one else 'their'} lines that are not UTF-8 (they are counted)")
