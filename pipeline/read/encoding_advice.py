"""The message for bytes that do not decode, with advice that gives a right result when followed.

* A UTF-16 / UTF-32 byte-order mark: the whole command, ``--encoding utf-16`` and, when the first line
  holds tabs (a spreadsheet's "Unicode Text" export is a tab-separated table), ``--format tsv``.
* A UTF-8 file some of whose lines are in another encoding (mixed): no ``--encoding`` reads it right
  (latin-1 decodes every byte, so it garbles the UTF-8 lines without a word), so the message names the
  lines that are not UTF-8 and offers ``--on-bad-lines skip``, which skips and counts their records
  (a text document: those lines). A folder of text files some of which are not UTF-8 while others are
  UTF-8 text is one corpus mixing encodings: the message names the files (``folder_message``).
* Otherwise: file, byte offset, line, the bytes and the ``--encoding`` to pass: the encoding
  charset-normalizer finds likely for the bytes around the failing line (``likely_encoding``), with that
  line as it then reads, so the user can see it is right before rerunning. latin-1 is never offered:
  it decodes any bytes, so it is never wrong enough to fail, and a Cyrillic or Chinese file read as
  latin-1 runs to the end as garbage.
"""
from __future__ import annotations

import codecs
from collections.abc import Callable
from pathlib import Path

WIDE = ("utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be")
_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32 (little-endian)", "utf-32"), (b"\x00\x00\xfe\xff", "UTF-32 (big-endian)", "utf-32"),
         (b"\xff\xfe", "UTF-16 (little-endian)", "utf-16"), (b"\xfe\xff", "UTF-16 (big-endian)", "utf-16"))
LINES_SHOWN = 10
SAMPLE_BYTES = 1 << 16   # bytes from the failing line on that the encoding is guessed from

# The encodings a guess may name, most common first: on a tie (bytes that decode the same, or a guess
# with as little evidence as one accented letter) the first is named. No latin-1 (cp1252 reads the same
# letters, and fails on the few bytes it does not define rather than making control characters of them)
# and no DOS or Mac code pages, which charset-normalizer otherwise ranks first on short Western text.
LIKELY = {"cp1252": "Western European: accented Latin letters", "cp1251": "Cyrillic", "cp1250": "Central European",
          "gb18030": "Chinese", "big5": "Traditional Chinese", "shift_jis": "Japanese", "euc_kr": "Korean",
          "cp1253": "Greek", "cp1254": "Turkish", "cp1255": "Hebrew", "cp1256": "Arabic", "cp1257": "Baltic",
          "cp1258": "Vietnamese", "koi8_r": "Cyrillic, KOI8-R", "koi8_u": "Cyrillic, KOI8-U", "cp874": "Thai",
          "euc_jp": "Japanese", "iso8859_2": "Central European", "iso8859_5": "Cyrillic", "iso8859_7": "Greek",
          "iso8859_15": "Western European", "mac_roman": "Western European, classic Mac OS"}
_SUPERSETS = {"gbk": "gb18030", "gb2312": "gb18030", "cp932": "shift_jis", "cp949": "euc_kr"}   # read the same text


def _options(head: bytes, option: str, fmt: str | None) -> str:
    """'--encoding utf-16', plus ' --format tsv' when the file's first line (decoded from ``head``, its
    first bytes) holds a tab and the format tried is not TSV."""
    first = head.decode(option, errors="ignore").split("\n", 1)[0]
    tsv = fmt not in (None, "tsv") and "\t" in first
    return f"--encoding {option}" + (" --format tsv" if tsv else "")


def likely_encoding(sample: bytes, tried: str = "utf-8") -> tuple[str, str] | None:
    """(codec, what it is for) that charset-normalizer finds most likely for ``sample``, among LIKELY
    (on a tie the first of LIKELY's order); None when it finds none, when it finds only the encoding
    ``tried``, or when charset-normalizer is not installed.
    Example: "Привет, мир".encode("cp1251") -> ("cp1251", "Cyrillic")."""
    try:
        from charset_normalizer import from_bytes
    except ImportError:   # a dependency; a broken install still gets the general advice
        return None
    matches = list(from_bytes(sample, cp_isolation=[*LIKELY, *_SUPERSETS]))
    if not matches:
        return None
    first = matches[0]
    tied = [m for m in matches if (m.chaos, m.coherence) == (first.chaos, first.coherence)]
    names = {_SUPERSETS.get(n, n) for m in tied for n in m.could_be_from_charset} & set(LIKELY)
    order = list(LIKELY)
    names.discard(codecs.lookup(tried).name.replace("-", "_"))
    if not names:
        return None
    name = min(names, key=order.index)
    return name, LIKELY[name]


def _as_read(line_bytes: bytes, codec: str, width: int = 60) -> str:
    """The line decoded with ``codec`` (undecodable bytes as U+FFFD), stripped, cut to ``width`` characters."""
    text = " ".join(line_bytes.decode(codec, errors="replace").split())
    return text if len(text) <= width else text[:width - 1] + "…"


def decode_message(path: Path, encoding: str, offset: int, line: int, bad: bytes, head: bytes,
                   fmt: str | None = None, sample: bytes = b"") -> str:
    """The message for bytes that do not decode, in a header or a data line: file, byte offset, line,
    the bytes, and the --encoding to pass (the whole command when ``head``, the file's first bytes,
    starts with a UTF-16 / UTF-32 byte-order mark; ``fmt`` is the format tried). ``sample``: bytes from
    the start of the failing line on (up to SAMPLE_BYTES): the encoding named is likely_encoding's
    guess from them, with the failing line as it then reads; without a guess, examples of common ones.

    Example: a cp1251 CSV read as UTF-8 -> "...; the bytes look like cp1251 (Cyrillic), as which line 3
    reads 'Привет, мир': pass --encoding cp1251 if that is right, or convert the file to UTF-8"."""
    for bom, name, option in _BOMS:
        if head.startswith(bom) and codecs.lookup(encoding).name not in WIDE:
            return (f"{path}: the file starts with a {name} byte-order mark (bytes {bom.hex(' ')}), so it is "
                    f"{name.split()[0]} text, not {encoding} (a spreadsheet's \"Unicode Text\" export is UTF-16); "
                    f"pass {_options(head, option, fmt)}, or convert the file to UTF-8")
    where = f"{path}: byte offset {offset} (line {line}) is not valid {encoding} (bytes {bad.hex(' ')})"
    guess = likely_encoding(sample or bad, encoding)
    if guess is None:
        return (f"{where}; pass --encoding with the file's encoding (e.g. cp1252 for Western European, cp1251 "
                "for Cyrillic, gb18030 for Chinese) or convert the file to UTF-8")
    codec, kind = guess
    first_line = (sample or bad).splitlines()[0] if (sample or bad) else b""
    return (f"{where}; the bytes look like {codec} ({kind}), as which line {line} reads "
            f"{_as_read(first_line, codec)!r}: pass --encoding {codec} if that is right, or convert the file to UTF-8")


def undecodable_message(path: Path, mixed: Callable[[], tuple[list[int], int, int | None]], encoding: str,
                        offset: int, line: int, bad: bytes, head: bytes, fmt: str | None = None,
                        sample: bytes = b"") -> str:
    """``decode_message``, or for a UTF-8 file (a line format, or a text document) that also holds valid
    non-ASCII UTF-8 lines (mixed encodings) the message that names the lines that are not UTF-8 and the
    way to skip them. ``mixed``: reads the file for that (pipeline.read.streams.mixed_lines), called only
    for such a file. ``sample``: decode_message's."""
    if fmt is None or codecs.lookup(encoding).name != "utf-8" or any(head.startswith(b) for b, _, _ in _BOMS):
        return decode_message(path, encoding, offset, line, bad, head, fmt, sample)
    lines, n_bad, good = mixed()
    if good is None or not lines:
        return decode_message(path, encoding, offset, line, bad, head, fmt, sample)
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
