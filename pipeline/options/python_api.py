"""The Python API's options: extract's option names, underscored, turned into a config the same way for
``Pipeline.from_options``, ``encode`` and ``LongBertVectorizer`` (the CLI's repeated ``--feature`` is
``feature=``, one spec or a list)."""
from __future__ import annotations

from typing import Any

from .config import PipelineConfig


def config_from_python(**options: Any) -> PipelineConfig:
    """A PipelineConfig from extract's options by their Python names; no progress bar unless asked.

    Example: config_from_python(model="default", feature=["head:cls", "chunk:mean"], overlap=16.0)
    -> features ("head:cls", "chunk:mean"), overlap 16 (an integral float is an int).

    Raises:
        ConfigError: an unknown option name, a value of the wrong type or out of range (naming it).
    """
    options.setdefault("progress", False)
    if "feature" in options:   # the CLI's repeated --feature is the config's `features`
        feature = options.pop("feature")
        if feature is not None:
            options["features"] = (feature,) if isinstance(feature, str) else tuple(feature)
    if options.get("model") is not None:
        options["model"] = str(options["model"])   # a pathlib.Path is a folder's name too
    return PipelineConfig.from_options(**options)
