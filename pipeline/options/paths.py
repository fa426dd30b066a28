"""Paths as they enter a run: ``~`` expanded once, the same way for every way in (the command line, a
quoted option, a --config file, the environment, the Python API)."""
from __future__ import annotations

import os
import re

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
STORE_SCHEMES = ("s3",)     # --cache URIs besides a folder (pipeline.cache.stores.SCHEMES opens each)
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://")


def store_scheme(value: str) -> str:
    """The scheme of a --cache value: "" for a folder (a path, or ``file://PATH``), else the URI's scheme
    in lower case, known or not. A drive letter is not a scheme.

    Example: "s3://bucket/prefix" -> "s3"; "~/c" -> ""; "file:///tmp/c" -> ""; "gs://b" -> "gs".
    """
    found = _SCHEME.match(str(value))
    scheme = found.group(1).lower() if found else ""
    return "" if scheme == "file" else scheme


def check_store_uri(value: str, option: str = "--cache") -> str:
    """A --cache value made canonical: a folder ``~``-expanded (``file://`` removed), an ``s3://BUCKET/PREFIX``
    with its slashes tidied; nothing is opened or made.

    Example: "s3://b//runs/" -> "s3://b/runs"; "file:///tmp/c" -> "/tmp/c".

    Raises:
        ConfigError: a scheme no store opens (naming those that do), or an s3:// URI without a bucket.
    """
    text, scheme = str(value), store_scheme(value)
    if scheme == "":
        path = text.split("://", 1)[1] if _SCHEME.match(text) else text
        return expand_user(path, option)
    if scheme not in STORE_SCHEMES:
        raise ConfigError(f"{option} {text!r}: no window store opens {scheme}:// URIs; pass a folder or "
                          f"{' or '.join(s + '://BUCKET/PREFIX' for s in STORE_SCHEMES)}")
    bucket, _, prefix = text.split("://", 1)[1].partition("/")
    if not bucket:
        raise ConfigError(f"{option} {text!r} names no bucket; write {scheme}://BUCKET/PREFIX, e.g. "
                          f"{scheme}://my-bucket/longbert")
    prefix = "/".join(p for p in prefix.split("/") if p)
    return f"{scheme}://{bucket}/{prefix}" if prefix else f"{scheme}://{bucket}"


def default_cache(value: str | None) -> str | None:
    """The store to use: ``value`` (``--cache``) if given, else ``$LONGBERT_CACHE``, else None; a folder
    ``~``-expanded, a URI made canonical (check_store_uri). An empty string counts as not given.

    Example: default_cache(None) with LONGBERT_CACHE=~/c -> "/home/ana/c".

    Raises:
        ConfigError: as expand_user and check_store_uri.
    """
    if value:
        return check_store_uri(str(value), "--cache")
    return check_store_uri(os.environ[ENV_VAR], ENV_VAR) if os.environ.get(ENV_VAR) else None


OUTPUT_SCHEMES = ("s3",)   # -o URIs besides a local path (pipeline.output.places opens each)


def check_output_uri(value: str) -> str:
    """An ``-o`` value made canonical: a local path as given (``~`` expanded, ``file://`` removed); an
    ``s3://BUCKET/PREFIX/`` with its slashes tidied and ending in "/" (a folder of parts). Nothing is made
    or sent, and no local folder is ever made in a URI's name.

    Example: "s3://b//runs/x/" -> "s3://b/runs/x/"; "~/o.parquet" -> "/home/ana/o.parquet".

    Raises:
        ConfigError: another scheme, a URI without a bucket or prefix, or one that does not end in "/":
            object storage takes the folder form (a single ``s3://.../f.parquet`` is refused, naming
            ``s3://.../f/``).
    """
    text, scheme = str(value), store_scheme(value)
    if scheme == "":
        path = text.split("://", 1)[1] if _SCHEME.match(text) else text
        return expand_user(path, "--output")
    if scheme not in OUTPUT_SCHEMES:
        raise ConfigError(f"--output {text!r}: no output is written to {scheme}:// URIs; pass a local path or "
                          f"{' or '.join(s + '://BUCKET/PREFIX/' for s in OUTPUT_SCHEMES)}")
    bucket, _, prefix = text.split("://", 1)[1].partition("/")
    prefix = "/".join(p for p in prefix.split("/") if p)
    if not bucket or not prefix:
        raise ConfigError(f"--output {text!r} names no {'bucket' if not bucket else 'prefix'}; write "
                          f"{scheme}://BUCKET/PREFIX/, e.g. {scheme}://my-bucket/features/")
    if not text.endswith("/"):
        folder = f"{scheme}://{bucket}/{prefix.removesuffix('.parquet').removesuffix('.PARQUET')}/"
        raise ConfigError(f"--output {text!r}: object storage takes a folder of parts, not a single file; "
                          f"write -o {folder} (ending in /)")
    return f"{scheme}://{bucket}/{prefix}/"
