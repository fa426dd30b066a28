"""Paths as they enter a run: ``~`` expanded once, the same way for every way in (the command line, a
quoted option, a --config file, the environment, the Python API)."""
from __future__ import annotations

import os

from ..errors import ConfigError


def expand_user(path: str, option: str) -> str:
    """``path`` with a leading ``~`` or ``~user`` replaced by that home folder (os.path.expanduser), as a
    shell does for an unquoted word; any other path is returned as given.

    A quoted ``-o '~/x/'`` or ``output: ~/x.parquet`` in a config file therefore names the same place
    as the unquoted ``-o ~/x/``, and no folder literally named ``~`` is ever made.

    Args:
        path: the path as given. option: its flag, for the message, e.g. "--output".

    Returns:
        e.g. "~/feats.parquet" -> "/home/ana/feats.parquet"; "out/x.parquet" -> "out/x.parquet";
        "~draft.parquet" (no user "draft.parquet") -> "~draft.parquet" (a plain file name).

    Raises:
        ConfigError: ``~`` or ``~user`` leads a folder part, but that home folder is unknown (HOME not
            set, no such user): the path would otherwise make or read a folder literally named ``~``.
    """
    if not path.startswith("~"):
        return path
    expanded = os.path.expanduser(path)
    head = path.replace("\\", "/").split("/", 1)[0]
    if expanded == path and (head == "~" or "/" in path.replace("\\", "/")):
        who = "HOME is not set" if head == "~" else f"there is no user {head[1:]!r}"
        raise ConfigError(f"{option} {path!r}: {head} cannot be expanded ({who}); write the full path, "
                          f"e.g. {option} /home/NAME/{path.split('/', 1)[-1]}")
    return expanded


ENV_VAR = "LONGBERT_CACHE"  # the default of --cache


def default_cache(value: str | None) -> str | None:
    """The store folder to use: ``value`` (``--cache``) if given, else ``$LONGBERT_CACHE``, else None;
    ``~`` expanded. An empty string counts as not given.

    Example: default_cache(None) with LONGBERT_CACHE=~/c -> "/home/ana/c".

    Raises:
        ConfigError: as expand_user.
    """
    if value:
        return expand_user(str(value), "--cache")
    return expand_user(os.environ[ENV_VAR], ENV_VAR) if os.environ.get(ENV_VAR) else None
