"""Inputs as the command line names them (files, folders, globs) -> ``Source``s with their format.

A format comes from the extension (or ``--format``); ``.gz`` / ``.zst`` / ``.bz2`` / ``.xz`` name a
compressed stream. A folder or a glob's text files become one ``Source`` of format ``text`` whose
files are relative to the folder (or the glob's folder part), so ids are those relative paths. A file
reached through several inputs (a path and a glob, two globs, a folder twice) is read once, where it
is first reached. A pipe or another input that cannot seek (``/dev/stdin``, ``<(zcat x.gz)``) is
copied once to a temporary file (``pipes.spool``), which is then read like any file.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..options.config import ReadConfig
from ..errors import InputError
from . import remote
from .pipes import is_pipe, spool
from .remote import S3Path

TEXT_SUFFIXES = (".txt", ".md")
EXTENSIONS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl",
              ".parquet": "parquet", ".pq": "parquet", ".txt": "text", ".md": "text"}
COMPRESSIONS = {".gz": "gz", ".zst": "zst", ".bz2": "bz2", ".xz": "xz"}
FORMAT_NAMES = {"csv": "CSV", "tsv": "TSV", "jsonl": "JSON Lines", "parquet": "parquet", "text": "text"}
LINE_FORMATS = ("csv", "tsv", "jsonl")
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")   # another scheme than s3:// (gs://, https://, file://)


@dataclass(frozen=True)
class Source:
    """One input as resolved from the command line: a file with its format, or a folder of text files."""

    path: Path | S3Path                      # the file; text: the folder the ids are relative to
    format: str
    compression: str | None = None
    by_extension: bool = True                # the format came from the name, not --format
    files: tuple[str, ...] = ()              # text: the documents, relative to ``path`` (POSIX)
    skipped: int = 0                         # folder: files left out for their extension (not .txt/.md)
    forced: bool = False                     # the format came from --format (else the extension or the default)
    skipped_names: tuple[str, ...] = ()      # folder: the first files left out (paths through the folder given)
    spooled_from: str = ""                   # a pipe copied to ``path``: the name the user gave


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


def _name_check(path: Path) -> None:
    """InputError for a file name that is not valid UTF-8 (Python holds its bytes as lone surrogates)."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"input file name {os.fsencode(path)!r} is not valid UTF-8, so it cannot be an id or "
                         "be shown; rename the file to UTF-8 (e.g. convmv -f latin1 -t utf-8 --notest)") from None


def walk(root: Path, keep: Callable[[Path], bool] | None = None) -> list[Path]:
    """Every file under ``root`` (paths through ``root``), each once, in sorted relative-path order.

    Symlinks are followed once: a folder already walked (same device and inode) is not walked again,
    so a symlink loop ends; a file reached twice (through links) is listed once, by the path that
    sorts first. Folders reached through a symlink are walked after the real tree, so a file has its
    real path where it has one. Hidden files and folders (names starting with '.') are left out.
    ``keep`` (a glob's match) chooses among the files before the copies are dropped, so a file is
    listed by a path that ``keep`` accepts when it has one.
    """
    seen_dirs: set[tuple[int, int]] = set()
    found: list[tuple[str, tuple[int, int], Path]] = []
    todo, linked = [root], []
    while todo or linked:
        folder = todo.pop() if todo else linked.pop(0)
        try:
            st = folder.stat()
            if (st.st_dev, st.st_ino) in seen_dirs:
                continue
            seen_dirs.add((st.st_dev, st.st_ino))
            entries = sorted(folder.iterdir(), reverse=True)
        except OSError:
            continue  # unreadable or vanished: globbing skips it the same way
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir():
                (linked if entry.is_symlink() else todo).append(entry)
            elif entry.is_file():
                fst = entry.stat()
                found.append((entry.relative_to(root).as_posix(), (fst.st_dev, fst.st_ino), entry))
    out, seen_files = [], set()
    for _, key, path in sorted(found, key=lambda f: f[0]):
        if keep is not None and not keep(path):
            continue
        if key not in seen_files:
            seen_files.add(key)
            out.append(path)
    return out


def _segments_match(pattern: list[str], parts: list[str]) -> bool:
    """Glob segments against path segments: '**' is any number of folders; '*', '?', '[...]' stay in
    one segment and, as in ``glob``, do not match a name starting with '.'."""
    if not pattern:
        return not parts
    head = pattern[0]
    if head == "**":
        return any(_segments_match(pattern[1:], parts[i:]) for i in range(len(parts) + 1)
                   if not any(p.startswith(".") for p in parts[:i]))
    if not parts or (parts[0].startswith(".") and not head.startswith(".")):
        return False
    return fnmatch.fnmatchcase(parts[0], head) and _segments_match(pattern[1:], parts[1:])


def glob_files(pattern: str) -> tuple[Path, list[Path]]:
    """(the glob's folder part, the files it matches, sorted, each once: ``walk``'s rules): how the
    reader expands a glob input, also used to find the files a run must not write over
    (pipeline.output.spare_inputs). Example: "docs/**/*.txt" -> (Path("docs"), [docs/a.txt, docs/b/c.txt]);
    a folder part that does not exist gives no files."""
    base = _glob_base(pattern)
    rest = list(Path(pattern).parts[len(base.parts):])
    if not base.is_dir():
        return base, []
    return base, walk(base, lambda f: _segments_match(rest, list(f.relative_to(base).parts)))


SKIPPED_SHOWN = 5  # a folder's skipped files named in the summary; the rest are counted


def _text_source(root: Path, files: list[Path], override: str | None, skipped: list[Path] | None = None) -> Source:
    for f in files:
        _name_check(f)
    rel = tuple(f.relative_to(root).as_posix() for f in files)
    skipped = skipped or []
    return Source(root, "text", None, override is None, rel, len(skipped), override is not None,
                  tuple(str(p) for p in skipped[:SKIPPED_SHOWN]))


def _from_glob(pattern: str, override: str | None) -> list[Source]:
    """A glob's inputs: its text files as one text source, every other match a source of its own.

    Raises:
        InputError: no match; matches of no known format (without --format), listed.
    """
    base, matches = glob_files(pattern)
    if not matches:
        raise InputError(f"input glob {pattern!r} matches no file; check the pattern and quote it "
                         "so the shell does not expand it")
    return _glob_sources(pattern, base, matches, override)


def _glob_sources(pattern: str, base: Path | S3Path, matches: list, override: str | None) -> list[Source]:
    """The sources of a glob's matches (files, or S3 objects) under its folder part ``base``."""
    unknown = [m for m in matches if override is None and not format_of(m, None)[2]]
    if unknown:
        names = [str(m) for m in unknown[:10]] + ([f"and {len(unknown) - 10} more"] if len(unknown) > 10 else [])
        raise InputError(f"input glob {pattern!r} matches {len(unknown)} files of no known format ({', '.join(names)}); "
                         f"known extensions are {', '.join(EXTENSIONS)} (with .gz, .zst, .bz2 or .xz); narrow the glob, "
                         "or pass --format")
    texts = [m for m in matches if format_of(m, override)[0] == "text"]
    out = [_text_source(base, texts, override)] if texts else []
    for m in matches:
        if m not in texts:
            _name_check(m)
            out.append(Source(m, *format_of(m, override), forced=override is not None))
    return out


def _from_folder(pattern: str, path: Path | S3Path, every: list, override: str | None) -> Source:
    """A folder's ``.txt`` / ``.md`` files (``every``: ``walk``'s files, or the objects under an S3
    prefix), counting the files left out for their extension."""
    if override not in (None, "text"):
        raise InputError(f"input {pattern!r} is a folder, read as text files; for --format {override} "
                         f"pass its files or a glob like '{pattern.rstrip('/')}/*.{override}'")
    files = [p for p in every if p.suffix.lower() in TEXT_SUFFIXES]
    if not files:
        raise InputError(f"input folder {pattern!r} holds no .txt or .md files; pass files or a glob instead")
    return _text_source(path, files, override, [p for p in every if p.suffix.lower() not in TEXT_SUFFIXES])


def _from_s3(pattern: str, override: str | None) -> list[Source]:
    """An ``s3://BUCKET/...`` input, as a local one: an object (a HEAD), else a prefix read as a folder,
    or a glob over the keys under its folder part (one LIST per 1,000 keys); names starting with '.'
    are left out of folders and globs, as ``walk`` leaves out hidden files.

    Raises:
        InputError: no bucket, no credentials, no object or prefix there, a glob that matches nothing,
            an S3 failure (pipeline.read.s3_connect.error: no such bucket, refused, nothing answers).
    """
    root = S3Path.parse(pattern)
    if not root.bucket or any(ch in root.bucket for ch in "*?["):
        raise InputError(f"input {pattern!r} names no bucket; write s3://BUCKET/KEY, a prefix s3://BUCKET/PREFIX/ "
                         "or a glob such as 's3://BUCKET/PREFIX/*.jsonl' (a bucket name cannot hold a wildcard)")
    remote.check_access(root)
    parts = root.key.split("/") if root.key else []
    wild = next((i for i, p in enumerate(parts) if any(c in p for c in "*?[")), None)
    if wild is None and root.key and not pattern.endswith("/"):
        obj = remote.head(root)
        if obj is not None:
            fmt, compression, by_ext = format_of(obj, override)
            if fmt == "text":
                return [_text_source(obj.parent, [obj], override)]
            return [Source(obj, fmt, compression, by_ext, forced=override is not None)]
    base = S3Path(root.bucket, "/".join(parts[:wild])) if wild is not None else root
    deep = wild is None or len(parts) - wild > 1 or "**" in parts[wild]
    objects = [o for o in remote.list_objects(base, deep)
               if not any(part.startswith(".") for part in o.relative_to(base).parts)]
    if wild is not None:
        matches = [o for o in objects if _segments_match(parts[wild:], list(o.relative_to(base).parts))]
        if not matches:
            raise InputError(f"input glob {pattern!r} matches no object ({len(objects)} under {base}/); check the "
                             "pattern and quote it so the shell does not expand it")
        return _glob_sources(pattern, base, matches, override)
    if not objects:
        raise InputError(f"input {pattern!r} does not exist: no object has that key or starts with {base}/; check "
                         f"the path (aws s3 ls {base}/ lists it)")
    return [_from_folder(pattern, base, objects, override)]


def expand_inputs(cfg: ReadConfig) -> list[Source]:
    """Paths, folders and globs -> the inputs, in the order given (each glob's matches sorted).

    A folder stands for its ``.txt`` / ``.md`` files (``walk``: recursively, symlinks followed once,
    hidden names left out, sorted by relative path), one document each, ids relative to the folder;
    files of other extensions are counted (``Source.skipped``). A glob is matched by the same walker;
    its text files get ids relative to the glob's folder part; a single text file's id is its name.
    ``s3://BUCKET/...`` inputs are the same three forms over an S3 bucket's keys (``_from_s3``).

    Raises:
        InputError: no input, an S3 input that cannot be listed or read (``_from_s3``), a glob that matches no file or files of no known format, a path that does
            not exist, a folder with no text files, a folder with --format other than text, a file name
            that is not valid UTF-8.
    """
    if not cfg.inputs:
        raise InputError("no input given; pass one or more files, folders or globs, e.g. `longbert extract docs.csv`")
    out: list[Source] = []
    seen: set[tuple[int, int]] = set()
    for pattern in cfg.inputs:
        if pattern.startswith(remote.SCHEME):
            out.extend(_once(_from_s3(pattern, cfg.format), seen))
            continue
        if _URI.match(pattern):
            raise InputError(f"input {pattern!r}: only s3:// URIs are read from object storage; copy it to a local "
                             "file or to S3-compatible storage")
        if any(ch in pattern for ch in "*?["):
            out.extend(_once(_from_glob(pattern, cfg.format), seen))
            continue
        path = Path(pattern)
        if not path.exists():
            raise InputError(f"input {pattern!r} does not exist; check the path")
        if path.is_dir():
            out.extend(_once([_from_folder(pattern, path, walk(path), cfg.format)], seen))
            continue
        _name_check(path)
        fmt, compression, by_ext = format_of(path, cfg.format)
        if fmt == "text":
            out.extend(_once([_text_source(path.parent, [path], cfg.format)], seen))
        elif _file_key(path) not in seen and is_pipe(path):
            seen.add(_file_key(path))
            out.append(spool(Source(path, fmt, compression, by_ext, forced=cfg.format is not None)))
        else:
            out.extend(_once([Source(path, fmt, compression, by_ext, forced=cfg.format is not None)], seen))
    return out


def _file_key(path: Path | S3Path) -> tuple[int, int] | str:
    """(device, inode): the file itself, whichever path or link reaches it; an S3 object's URI."""
    if isinstance(path, S3Path):
        return str(path)
    st = path.stat()
    return st.st_dev, st.st_ino


def _once(sources: list[Source], seen: set[tuple[int, int]]) -> list[Source]:
    """The sources without the files an earlier input already reached (a text source keeps its other
    files; one left with none is dropped); adds the rest to ``seen``."""
    out = []
    for src in sources:
        if src.format != "text":
            if _file_key(src.path) not in seen:
                seen.add(_file_key(src.path))
                out.append(src)
            continue
        files = []
        for rel in src.files:
            key = _file_key(src.path / rel)
            if key not in seen:
                seen.add(key)
                files.append(rel)
        if files:
            out.append(dataclasses.replace(src, files=tuple(files)))
    return out


def how(src: Source) -> str:
    """'read as CSV (from the extension .csv)' for messages."""
    name = FORMAT_NAMES[src.format]
    ext = "".join(src.path.suffixes[-2:]) if src.compression else src.path.suffix
    if src.forced:
        return f"read as {name} (--format {src.format})"
    if src.by_extension:
        return f"read as {name} (from the extension {ext})"
    if src.spooled_from:
        return f"read as {name} (the default for a pipe; pass --format to choose)"
    return f"read as {name} (the default: the extension {ext or '(none)'} names no known format)"
