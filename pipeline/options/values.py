"""One option value turned into its field's type, the same way wherever it enters (a config file, the
command line, a Python call): an integral number becomes an int (``16.0``, ``"1e4"`` -> 16, 10000), and
anything else is a ConfigError naming the option and the value. Used by every config section
(``config_section``, pipeline.options.config) and by the --layers parser (pipeline.options.features_config).

The command line gives text, YAML 1.1 reads ``1e4`` as text, so a number written as text is read as
that number; a true/false is never a number, and a number is never text (quote it in a config file).
"""
from __future__ import annotations

import dataclasses
import math
import numbers
import os
from decimal import Decimal, InvalidOperation
from typing import Any

from ..errors import ConfigError

_LIMIT = 2 ** 63  # no count or size of a run is near it; beyond it a value is a typo (1e99)
_FLAGS = {"keep_cols": "--keep-col", "output": "--output", "features": "--feature",
          "binary_center_file": "--binary-center", "projection_file": "--projection"}


def flag(name: str) -> str:
    """The command-line name of the option ``name``: 'max_length' -> '--max-length'."""
    return _FLAGS.get(name, "--" + name.replace("_", "-"))


def _decimal(text: str) -> Decimal | None:
    try:
        return Decimal(text.strip())
    except InvalidOperation:
        return None


def shown(value: Any) -> str:
    """A value as a message shows it, the same from every channel: 16.5 and "16.5" -> 16.5; "abc" -> 'abc'."""
    if isinstance(value, str):
        return value.strip() if _decimal(value) is not None else repr(value)
    return repr(value)


def _number(value: Any) -> Decimal | int | None:
    """The number ``value`` stands for, or None for a non-number: a str as written ("1e4"), a float as
    its shortest text (repr), so 2.051086199255165e+16 is 20510861992551650 from a float and from text."""
    if isinstance(value, (bool, type(None))) or type(value).__name__ == "bool_":   # numpy's bool too
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return Decimal(repr(float(value)))
    if isinstance(value, str):
        return _decimal(value)
    return None


def whole_number(name: str, value: Any) -> int:
    """``value`` as an int: 16, 16.0, "16", "1e4" -> 16, 16, 16, 10000.

    Raises:
        ConfigError: not a whole number (16.5, "abc", True, nan) or beyond +-2**63, naming the option.
    """
    number = _number(value)
    if isinstance(number, Decimal):
        integral = number.is_finite() and number == number.to_integral_value()
        big = number.is_finite() and abs(number) >= _LIMIT     # checked before int(): "1e999999" stays cheap
    else:
        integral, big = number is not None, number is not None and abs(number) >= _LIMIT
    if big:
        raise ConfigError(f"{flag(name)}={shown(value)} is out of range; give a whole number below 2**63")
    if integral:
        return int(number)
    raise ConfigError(f"{flag(name)}={shown(value)} is not a whole number; give an integer, e.g. {flag(name)} 16")


def real_number(name: str, value: Any) -> float:
    """``value`` as a finite float: 1, 0.5, "2.5" -> 1.0, 0.5, 2.5.

    Raises:
        ConfigError: not a number ("abc", True) or not finite (nan, inf), naming the option.
    """
    number = _number(value)
    if number is not None:
        out = float(number)
        if math.isfinite(out):
            return out
    raise ConfigError(f"{flag(name)}={shown(value)} is not a finite number; give a number, e.g. {flag(name)} 1")


def true_or_false(name: str, value: Any) -> bool:
    """``value`` as a bool: True / False (numpy's too); a config file's true, false, yes, no.

    Raises:
        ConfigError: anything else (1, "false": a text "false" would otherwise be true), naming the option.
    """
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    raise ConfigError(f"{flag(name)}={shown(value)} is not true or false; give True or False "
                      "(on the command line: the flag itself, or leave it out)")


def text(name: str, value: Any) -> str:
    """``value`` as a str: a str, or a path (pathlib.Path) as its text.

    Raises:
        ConfigError: a number, true/false or a list (YAML reads 2020 as a number: quote it, '2020').
    """
    if isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise ConfigError(f"{flag(name)}={shown(value)} is not text; give a string (in a config file, quote it)")


_KINDS = {"int": whole_number, "float": real_number, "bool": true_or_false, "str": text}


def coerce_fields(section: Any) -> None:
    """Turn every int, float, bool and str field of a frozen config dataclass into its type, in place.

    A field declared ``X | None`` keeps None; fields of other types (Literal choices, tuples) are
    left to the section's own checks. Example: SegmentConfig(overlap=16.0) -> overlap 16.

    Raises:
        ConfigError: as whole_number, real_number, true_or_false and text.
    """
    for f in dataclasses.fields(section):
        kind, optional = str(f.type), False
        if kind.endswith(" | None"):
            kind, optional = kind[:-len(" | None")], True
        convert = _KINDS.get(kind)
        value = getattr(section, f.name)
        if convert is None or (optional and value is None):
            continue
        new = convert(f.name, value)
        if new is not value:
            object.__setattr__(section, f.name, new)  # frozen: set once, as the section is built


def config_section(cls: type) -> type:
    """``@dataclass(frozen=True)`` for a PipelineConfig section whose values are turned into its fields'
    types (``coerce_fields``) before its own ``__post_init__`` checks their ranges, however the section
    is built (PipelineConfig.from_options, dataclasses.replace, or by hand)."""
    cls = dataclasses.dataclass(frozen=True)(cls)
    checks = cls.__dict__.get("__post_init__")

    def __post_init__(self) -> None:
        coerce_fields(self)
        if checks is not None:
            checks(self)

    __post_init__.__doc__ = checks.__doc__ if checks is not None else None
    cls.__post_init__ = __post_init__
    return cls
