"""Options as they arrive from a YAML config file or as flat names (CLI, Python): read the file safely and
turn the values into the config fields' types.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .features_config import parse_layers
from .paths import expand_user


def coerce(key: str, value: Any) -> Any:
    """Turn YAML/CLI values into the dataclass field types (tuples for sequences, layers parsed)."""
    if key == "layers":
        return parse_layers(value)
    if key in ("inputs", "keep_cols"):
        if isinstance(value, (str, Path)):
            return (str(value),)
        return tuple(str(v) for v in value)
    if key == "aggregate" and isinstance(value, (list, tuple)):   # YAML: [first, last, mean, max]
        return ",".join(str(v) for v in value)
    if key == "quantize" and value in (False, None):
        return "none"
    if isinstance(value, Path):
        return str(value)
    return value


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a config file with yaml.safe_load (a config sets options, never runs code).

    Raises:
        ConfigError: the file is missing, not YAML, or not a mapping of option names.
    """
    import yaml   # here, not on import: only a run with --config reads YAML

    path = Path(expand_user(str(path), "--config"))
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ConfigError(f"--config {str(path)!r} cannot be read: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"--config {str(path)!r} is not valid YAML: {err}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config {str(path)!r} must be a mapping of option names to values, "
                          f"got {type(data).__name__}")
    return {str(k).replace("-", "_"): v for k, v in data.items()}
