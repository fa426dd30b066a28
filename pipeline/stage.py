"""The stage contract: a stage is ``Batch -> Batch`` with a ``name``, and declares the Batch fields it
reads (``requires``) and fills (``fills``), as a spaCy component declares ``requires`` and ``assigns``.

``Stage`` is the base of the built-in stages: each is built from its own parameters, returns them with
``get_params()`` (``type(s)(**s.get_params())`` builds an equal stage, as a scikit-learn estimator is
rebuilt) and shows them in its ``repr``. A user's stage needs none of this: any callable
``Batch -> Batch`` is one; it may set ``requires`` / ``fills`` to have its place in a chain checked.
"""
from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .batch import Batch
from .errors import ConfigError

# What a batch holds before any stage ran: its rows (``read`` or ``Batch.from_texts``).
INPUT_FIELDS = ("rows",)


class Stage(abc.ABC):
    """A built-in stage: ``stage(batch) -> batch``, its own parameters, what it reads and fills.

    Subclasses set ``name``, ``requires`` and ``fills``, take every parameter in ``__init__`` and
    return them from ``get_params``.
    """

    name: str = ""
    requires: tuple[str, ...] = ()
    fills: tuple[str, ...] = ()

    @abc.abstractmethod
    def __call__(self, batch: Batch) -> Batch:
        """The batch with this stage's ``fills`` set.

        Raises:
            ConfigError: a field in ``requires`` is not filled (the stage before it is missing).
        """

    @abc.abstractmethod
    def get_params(self) -> dict[str, Any]:
        """This stage's constructor arguments by name: ``type(self)(**self.get_params())`` builds an equal stage."""

    def check(self, batch: Batch) -> None:
        """Raise ConfigError when ``batch`` lacks a field this stage reads (it ran out of order)."""
        for field in self.requires:
            if getattr(batch, field) is None:
                maker = MAKERS.get(field, "an earlier stage")
                raise ConfigError(f"stage {self.name!r} got a batch that stage {maker!r} has not filled "
                                  f"({field!r} is empty); run {maker!r} before {self.name!r} "
                                  "(pipe.names lists the order)")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and _comparable(self.get_params()) == _comparable(other.get_params())

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={_short(v)}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({shown})"


# The built-in stage that fills each field (for messages).
MAKERS = {"docs": "tokenize", "windows": "segment", "plan": "dedup", "encoded": "encode", "vectors": "aggregate",
          "table": "rows"}
# How to add each of them to a list of stages (messages); Pipeline.from_options builds them all.
MAKER_CALLS = {"tokenize": "longbert.Tokenize(tokenizer)", "segment": "longbert.Segment(strategies, cls_id, sep_id)",
               "dedup": "longbert.Dedup()", "encode": "longbert.Encode(config, tokenizer, facts)",
               "aggregate": "longbert.Aggregate(features, columns, slices)",
               "rows": "longbert.Rows(schemas, kept, columns)"}


def describe(stage: Any) -> str:
    """A stage's name for messages: its ``name``, else its function name, else its type's name."""
    return getattr(stage, "name", None) or getattr(stage, "__name__", None) or type(stage).__name__


def check_chain(steps: Sequence[tuple[str, Any]], given: Iterable[str] = INPUT_FIELDS,
                fills: Mapping[str, tuple[str, ...]] | None = None) -> None:
    """Check that each stage's ``requires`` are filled by the stages before it.

    A stage without ``requires`` (a plain function) reads nothing the chain must provide, and one
    without ``fills`` fills nothing (its batch keeps the fields it was given), unless ``fills`` names
    it (a plain function put in place of a built-in stage fills what that stage filled).

    Args:
        steps: (name, stage) in order. given: the fields a batch holds before the first stage.
        fills: stage name -> the fields it fills, for stages that do not declare theirs.

    Raises:
        ConfigError: naming the first stage placed before a field it reads exists, the field, and the
            stage that fills it. Example: segment before tokenize -> "stage 'segment' reads 'docs',
            which no stage before it fills; put it after 'tokenize'"; no dedup in the list -> "stage
            'encode' reads 'plan', which no stage before it fills; stage 'dedup' fills it: add
            longbert.Dedup() before 'encode'".
    """
    have = set(given)
    names = [n for n, _ in steps]
    for name, stage in steps:
        for field in getattr(stage, "requires", ()):
            if field not in have:
                maker = MAKERS.get(field)
                if maker is None:
                    where = "put it after the stage that fills it"
                elif maker in names:
                    where = f"put it after {maker!r}"
                else:
                    where = f"stage {maker!r} fills it: add {MAKER_CALLS[maker]} before {name!r}"
                raise ConfigError(f"stage {name!r} reads {field!r}, which no stage before it fills; {where} "
                                  f"(the order is {[n for n, _ in steps]})")
        have.update(getattr(stage, "fills", None) or (fills or {}).get(name, ()))


def stage_label(name: str, stage: Any) -> str:
    """How a run names one of its stages, in the file's metadata and the --resume fingerprint.

    A built-in stage: "name" alone (its parameters follow from the options, which are compared
    apart). Any other: "name=module.qualname#sha" with the first 12 hex digits of the sha256 of
    its code (source text, else bytecode), so an edited function counts as another stage.
    Example: (“lower”, def lower(b): ...) -> "lower=__main__.lower#3f2a9c01d4e7".
    """
    import hashlib
    import inspect

    if isinstance(stage, Stage) and stage.name == name and (type(stage).__module__ + ".").startswith((__package__ or "pipeline") + "."):
        return name
    fn = stage if inspect.isfunction(stage) or inspect.ismethod(stage) else type(stage)
    try:
        code = inspect.getsource(fn).encode()
    except (OSError, TypeError):
        code = getattr(getattr(fn, "__code__", None), "co_code", b"") or repr(fn).encode()
    qual = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"
    return f"{name}={qual}#{hashlib.sha256(code).hexdigest()[:12]}"


def _comparable(params: dict) -> dict:
    """Parameters for equality: objects without value equality (a tokenizer, a model) by identity."""
    return {k: (v if _has_value_eq(v) else id(v)) for k, v in params.items()}


def _has_value_eq(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool, tuple, frozenset, type(None))) or (
        hasattr(value, "__dataclass_fields__") or isinstance(value, dict))


def _short(value: Any) -> str:
    if isinstance(value, (str, int, float, bool, tuple, type(None))) or hasattr(value, "__dataclass_fields__"):
        text = repr(value)
    elif isinstance(value, dict):
        text = "{" + ", ".join(f"{k!r}: {_short(v)}" for k, v in value.items()) + "}"
    else:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 200 else text[:197] + "..."
