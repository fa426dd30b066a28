"""The Python API's options: extract's option names, underscored, turned into a config the same way for
``Pipeline.from_options``, ``encode`` and ``LongBertVectorizer`` (the CLI's repeated ``--feature`` is
``feature=``, one spec or a list)."""
from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

from ..errors import PipelineError
from .config import PipelineConfig

# extract's on/off flags: ``--overwrite`` is ``overwrite=True``, ``--no-progress`` is ``progress=False``
_SWITCHES = {"with-source", "allow-pickle", "normalize", "overwrite", "resume", "strict", "progress"}
# flags whose Python name is not the flag's, underscored (pipeline.options.values.flag)
_NAMES = {"keep-col": "keep_cols"}
_VALUE = r"('(?:[^'\\]|\\.)*'|\"[^\"]*\"|-?\d[\w.+-]*)"


def python_message(text: str) -> str:
    """A message in the words of a Python call: each extract flag as its argument.

    Example: "--pooling='avg'; choose one of ..." -> "pooling='avg'; choose one of ...";
    "pass --overwrite to start again" -> "pass overwrite=True to start again"; "--output 'x.csv'" ->
    "output='x.csv'"; "--no-progress" -> "progress=False"; "-o out/x.parquet" -> "output='out/x.parquet'".
    """
    def name(flag: str) -> str:
        return _NAMES.get(flag, flag.replace("-", "_"))

    text = re.sub(r"(?<![\w-])-o ([^\s,;()']+)", lambda m: f"output={m.group(1)!r}", text)
    text = re.sub(r"(?<![\w-])--no-([a-z][a-z0-9-]*)",
                  lambda m: f"{name(m.group(1))}=False" if m.group(1) in _SWITCHES else m.group(0), text)
    text = re.sub(r"(?<![\w-])--([a-z][a-z0-9-]*)(=| (?=" + _VALUE + r"))?",
                  lambda m: name(m.group(1)) + ("=" if m.group(2) else "=True" if m.group(1) in _SWITCHES else ""),
                  text)
    return text


@contextlib.contextmanager
def python_names() -> Iterator[None]:
    """Re-raise a PipelineError (its own type) with its message in Python's words (python_message):
    for the Python API's entry points, whose callers pass arguments, not flags."""
    try:
        yield
    except PipelineError as err:
        if err.args and isinstance(err.args[0], str):
            err.args = (python_message(err.args[0]), *err.args[1:])
        raise


def config_from_python(**options: Any) -> PipelineConfig:
    """A PipelineConfig from extract's options by their Python names; no progress bar unless asked.

    Example: config_from_python(model="default", feature=["head:cls", "chunk:mean"], overlap=16.0)
    -> features ("head:cls", "chunk:mean"), overlap 16 (an integral float is an int).

    Raises:
        ConfigError: an unknown option name, a value of the wrong type or out of range (naming it as
            the Python argument, ``pooling='avg'``, not as the flag: python_message).
    """
    with python_names():
        return _config(**options)


def _config(**options: Any) -> PipelineConfig:
    options.setdefault("progress", False)
    if "feature" in options:   # the CLI's repeated --feature is the config's `features`
        feature = options.pop("feature")
        if feature is not None:
            options["features"] = (feature,) if isinstance(feature, str) else tuple(feature)
    if options.get("model") is not None:
        options["model"] = str(options["model"])   # a pathlib.Path is a folder's name too
    return PipelineConfig.from_options(**options)
