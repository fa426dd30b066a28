"""Inputs as the command line names them (files, folders, globs) -> ``Source``s with their format.

A format comes from the extension (or ``--format``); ``.gz`` / ``.zst`` name a compressed stream.
A folder or a glob's text files become one ``Source`` of format ``text`` whose files are relative
to the folder (or the glob's folder part), so ids are those relative paths.
"""
from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path

from ..config import ReadConfig
from ..errors import InputError

TEXT_SUFFIXES = (".txt", ".md")
EXTENSIONS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl",
              ".parquet": "parquet", ".pq": "parquet", ".txt": "text", ".md": "text"}
COMPRESSIONS = {".gz": "gz", ".zst": "zst"}
FORMAT_NAMES = {"csv": "CSV", "tsv": "TSV", "jsonl": "JSON Lines", "parquet": "parquet", "text": "text"}
LINE_FORMATS = ("csv", "tsv", "jsonl")


@dataclass(frozen=True)
class Source:
    """One input as resolved from the command line: a file with its format, or a folder of text files."""

    path: Path                               # the file; text: the folder the ids are relative to
    format: str
    compression: str | None = None
    by_extension: bool = True                # the format came from the name, not --format
    files: tuple[str, ...] = ()              # text: the documents, relative to ``path`` (POSIX)


def format_of(path: Path, override: str | None) -> tuple[str, str | None, bool]:
    """(format, compression, by_extension) of a file name: 'a.jsonl.gz' -> ('jsonl', 'gz', True)."""
    suffixes = [s.lower() for s in path.suffixes]
    compression = COMPRESSIONS.get(suffixes[-1]) if suffixes else None
    if compression:
        suffixes = suffixes[:-1]
    if override is not None:
        return override, compression, False
    fmt = EXTENSIONS.get(suffixes[-1]) if suffixes else None
    return fmt or "csv", compression, fmt is not None  # an unknown extension is read as CSV


def _glob_base(pattern: str) -> Path:
    """The folder part of a glob before its first wildcard: 'docs/**/*.txt' -> docs."""
    parts = Path(pattern).parts
    base = [p for p in parts[:next(i for i, p in enumerate(parts) if any(c in p for c in "*?["))]]
    return Path(*base) if base else Path(".")


def _text_source(root: Path, files: list[Path], override: str | None) -> Source:
    rel = tuple(f.relative_to(root).as_posix() for f in files)
    return Source(root, "text", None, override is None, rel)


def expand_inputs(cfg: ReadConfig) -> list[Source]:
    """Paths, folders and globs -> the inputs, in the order given (each glob's matches sorted).

    A folder stands for its ``.txt`` / ``.md`` files (recursively, sorted by relative path), one
    document each, ids relative to the folder; a glob's text files get ids relative to the glob's
    folder part; a single text file's id is its name.

    Raises:
        InputError: no input, a glob that matches no file, a path that does not exist, a folder with
            no text files, or a folder with --format other than text.
    """
    if not cfg.inputs:
        raise InputError("no input given; pass one or more files, folders or globs, e.g. `longbert extract docs.csv`")
    out: list[Source] = []
    for pattern in cfg.inputs:
        if any(ch in pattern for ch in "*?["):
            matches = [Path(m) for m in sorted(glob.glob(pattern, recursive=True)) if Path(m).is_file()]
            if not matches:
                raise InputError(f"input glob {pattern!r} matches no file; check the pattern and quote it "
                                 "so the shell does not expand it")
            base = _glob_base(pattern)
            texts = [m for m in matches if format_of(m, cfg.format)[0] == "text"]
            if texts:
                out.append(_text_source(base, texts, cfg.format))
            out.extend(Source(m, *format_of(m, cfg.format)) for m in matches if m not in texts)
            continue
        path = Path(pattern)
        if not path.exists():
            raise InputError(f"input {pattern!r} does not exist; check the path")
        if path.is_dir():
            if cfg.format not in (None, "text"):
                raise InputError(f"input {pattern!r} is a folder, read as text files; for --format {cfg.format} "
                                 f"pass its files or a glob like '{pattern.rstrip('/')}/*.{cfg.format}'")
            files = sorted((p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES
                            and not any(part.startswith(".") for part in p.relative_to(path).parts)),
                           key=lambda p: p.relative_to(path).as_posix())
            if not files:
                raise InputError(f"input folder {pattern!r} holds no .txt or .md files; pass files or a glob instead")
            out.append(_text_source(path, files, cfg.format))
            continue
        fmt, compression, by_ext = format_of(path, cfg.format)
        if fmt == "text":
            out.append(_text_source(path.parent, [path], cfg.format))
        else:
            out.append(Source(path, fmt, compression, by_ext))
    return out


def how(src: Source) -> str:
    """'read as CSV (from the extension .csv)' for messages."""
    name = FORMAT_NAMES[src.format]
    if src.by_extension:
        ext = "".join(src.path.suffixes[-2:]) if src.compression else src.path.suffix
        return f"read as {name} (from the extension {ext or '(none)'})"
    return f"read as {name} (--format {src.format})"
