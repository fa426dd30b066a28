"""Never write over an input: every path a run writes (the output file or ``DIR/``, the output's lock
file, the window store's folder, a --plot image) is compared with the input files, links and ``..``
resolved, before anything is read.
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..options.config import PipelineConfig


@dataclass(frozen=True)
class Written:
    """A path the run writes: ``option`` names it in messages ("--output", "--cache", "--plot").
    ``folder``: the run writes inside it (DIR/ parts, the store's files), so it may hold no input.
    ``label``: how the message names it, when not as ``option 'path'`` (the output's lock file)."""

    option: str
    path: str
    folder: bool = False
    label: str = ""


def input_files(patterns: Iterable[str]) -> list[tuple[str, Path]]:
    """(the input as named, its real path) for each regular file the inputs name, found without reading
    any file: a file itself, a folder's .txt and .md files, a glob's matches (pipeline.read.sources'
    walker). A path that does not exist, or a pipe, is left out (the scan names the first; no run
    writes to the second).

    Example: ["docs/", "a.csv"] with docs/x.txt -> [("docs/x.txt", /abs/docs/x.txt), ("a.csv", /abs/a.csv)].
    """
    from ..read.sources import TEXT_SUFFIXES, glob_files, walk

    out = []
    for pattern in patterns:
        pattern = str(pattern)
        if pattern.startswith("s3://"):
            continue   # an S3 input is no local file a run could write over
        if any(ch in pattern for ch in "*?["):
            found = glob_files(pattern)[1]
        elif os.path.isdir(pattern):   # a folder's documents: its .txt and .md files, as the reader takes them
            found = [f for f in walk(Path(pattern)) if f.suffix.lower() in TEXT_SUFFIXES]
        else:
            found = [Path(pattern)]
        for f in found:
            real = os.path.realpath(f)
            if os.path.isfile(real):
                out.append((str(f), Path(real)))
    return out


def _file_id(path: Path) -> tuple[int, int] | None:
    """(device, inode) of an existing file, None otherwise: a hard link to an input is the input too."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _clash(target: Written, files: list[tuple[str, Path]], ids: list) -> tuple[str, Path] | None:
    """The first input that ``target`` would write over: the same file, or a file inside the folder.
    ``ids``: _file_id of each of ``files``."""
    real = os.path.realpath(os.path.expanduser(target.path))
    own, inside = _file_id(Path(real)), real.rstrip(os.sep) + os.sep
    for (named, path), file_id in zip(files, ids):
        text = str(path)
        if text == real or (own is not None and own == file_id) or (target.folder and text.startswith(inside)):
            return named, path
    return None


def _refusal(target: Written, named: str, path: Path) -> ConfigError:
    """The message: both paths as given, the real ones where links or ``..`` hide the clash, the fix."""
    real = os.path.realpath(os.path.expanduser(target.path))
    shown = target.path.rstrip("/\\") or target.path
    head = target.label or f"{target.option} {shown!r}"
    if target.folder:
        hidden = not os.path.abspath(named).startswith(os.path.abspath(shown) + os.sep)
        through = f" ({path} is inside {real})" if hidden else ""
        fix = "pass --cache a folder of its own" if target.option == "--cache" else \
            f"pass {target.option} a new or empty folder that holds no input"
        return ConfigError(f"{head} holds the input {named!r}{through}; longbert never writes into a folder "
                           f"that holds an input, even when told to overwrite: {fix}")
    hidden = not os.path.abspath(named) == os.path.abspath(target.path) == real
    through = f" (both are {real})" if hidden else ""
    fix = f"pass {target.option} another path"
    if target.option == "--output":
        fix = f"write the features elsewhere, e.g. -o {Path(named).with_name(Path(named).stem + '.features.parquet')}"
    return ConfigError(f"{head} is the input {named!r}{through}; longbert never writes over an input, even when "
                       f"told to overwrite: {fix}")


def check_spares_inputs(inputs: Iterable[str], targets: Iterable[Written]) -> None:
    """Refuse a run that would write over one of its inputs.

    Args:
        inputs: the inputs as given (files, folders, globs). targets: the paths the run writes.

    Raises:
        ConfigError (exit 2): a target is an input file (through links, ``..`` or a hard link), or a
            target folder holds one; names both paths and the fix.
    """
    files = input_files(inputs)
    ids = [_file_id(path) for _, path in files]
    for target in targets:
        clash = _clash(target, files, ids)
        if clash is not None:
            raise _refusal(target, *clash)


def lock_path(output: Path) -> Path:
    """The lock file of ``output``: ``.NAME.longbert-lock`` in the same folder (a DIR/ output: beside DIR);
    one of the run's targets (pipeline.output.lock takes it there)."""
    return output.parent / f".{output.name}.longbert-lock"


def run_targets(cfg: PipelineConfig) -> list[Written]:
    """The local paths a run of ``cfg`` writes: its output (a file and its lock file, or DIR/ and the lock
    beside it; none for an s3:// output) and the window store's folder (--cache; a store URI such as s3:// is no local path)."""
    from ..options.paths import store_scheme

    out = cfg.write.output
    targets = []
    if store_scheme(out) == "":   # an s3:// output (and its lock, inside it) is no local path
        lock = lock_path(Path(out))
        targets = [Written("--output", out, cfg.write.is_directory),
                   Written("--output", str(lock), label=f"the lock file {str(lock)!r} of --output {out!r}")]
    if cfg.write.cache and store_scheme(cfg.write.cache) == "":
        targets.append(Written("--cache", cfg.write.cache, folder=True))
    return targets


def check_run_spares_inputs(cfg: PipelineConfig) -> None:
    """check_spares_inputs for a run's inputs and run_targets.

    Raises:
        ConfigError (exit 2): as check_spares_inputs.
    """
    check_spares_inputs(cfg.read.inputs, run_targets(cfg))
