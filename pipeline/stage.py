"""The stage contract: a stage is ``Batch -> Batch`` with a ``name``, and declares the Batch fields it
reads (``requires``) and fills (``fills``), as a spaCy component declares ``requires`` and ``assigns``.

``Stage`` is the base of the built-in stages: each is built from its own parameters, returns them with
``get_params()`` (``type(s)(**s.get_params())`` builds an equal stage, as a scikit-learn estimator is
rebuilt) and shows them in its ``repr``. They speak scikit-learn's protocol: ``get_params(deep=...)``,
``set_params(**params)`` and ``sklearn.base.clone``; each pickles and deep-copies (the encode stage's
weights pickle as what reloads them, see pipeline.model.encode_stage.Weights). A user's stage needs
none of this: any callable ``Batch -> Batch`` is one; it may set ``requires`` / ``fills`` to have its place in a chain checked.
A stage after ``rows`` that appends columns to the output table declares them in ``adds_columns`` (pyarrow
fields, or (name, type) pairs); the file's schema then holds them (pipeline.engine.columns).
"""
from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .batch import Batch
from .errors import ConfigError, ParamError

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
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """This stage's constructor arguments by name: ``type(self)(**self.get_params())`` builds an equal stage.

        ``deep`` is scikit-learn's: a stage holds no estimators, so it changes nothing.
        """

    def set_params(self, **params: Any) -> Stage:
        """Set constructor arguments by name, as scikit-learn's ``set_params``: the stage is rebuilt in
        place from its parameters with these replaced (what its constructor derives is derived again).

        Returns:
            This stage.

        Raises:
            ParamError (a ConfigError and a ValueError): a name that is not one of this stage's
                parameters, naming it and the valid ones.
        """
        if not params:
            return self
        current = self.get_params(deep=False)
        unknown = [k for k in params if k not in current]
        if unknown:
            raise ParamError(f"invalid parameter {unknown[0]!r} for stage {self.name!r} ({type(self).__name__}); "
                              f"valid parameters: {sorted(current)}")
        fresh = type(self)(**{**current, **params})
        self.__dict__.update(fresh.__dict__)
        return self

    def __sklearn_clone__(self) -> Stage:
        """``sklearn.base.clone``: a stage built from deep copies of the parameters (an equal stage; the
        encode stage's weights and window store are shared, as in copy.deepcopy)."""
        import copy

        return copy.deepcopy(type(self)(**self.get_params(deep=False)))

    def params_key(self) -> dict[str, Any]:
        """The parameters in a stable, JSON-able form (``stable_value``): what equality and the --resume
        fingerprint compare."""
        return {k: stable_value(v) for k, v in self.get_params(deep=False).items()}

    def check(self, batch: Batch) -> None:
        """Raise ConfigError when ``batch`` lacks a field this stage reads (it ran out of order)."""
        for field in self.requires:
            if getattr(batch, field) is None:
                maker = MAKERS.get(field, "an earlier stage")
                raise ConfigError(f"stage {self.name!r} got a batch that stage {maker!r} has not filled "
                                  f"({field!r} is empty); run {maker!r} before {self.name!r} "
                                  "(pipe.names lists the order)")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.params_key() == other.params_key()

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={_short(v)}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({shown})"


# The built-in stage that fills each field (for messages).
MAKERS = {"docs": "tokenize", "windows": "segment", "plan": "dedup", "encoded": "encode", "vectors": "aggregate",
          "table": "rows"}
# How to add each of them to a list of stages (messages); Pipeline.from_options builds them all.
MAKER_CALLS = {"tokenize": "longbert.Tokenize(tokenizer)", "segment": "longbert.Segment(strategies, cls_id, sep_id)",
               "dedup": "longbert.Dedup()", "encode": "longbert.Encode(model, features, tokenizer, facts)",
               "aggregate": "longbert.Aggregate(features, aggregates)",
               "rows": "longbert.Rows(kept, out_dtype)"}


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


def stage_label(name: str, stage: Any, default: Any = None) -> str:
    """How a run names one of its stages, in the file's metadata and the --resume fingerprint.

    A built-in stage: "name" alone when its parameters are those the options build (``default``, the
    stage the run's options would make; None: not known, taken as equal), since the options are
    compared apart; else "name=Class#sha" with the first 12 hex digits of the sha256 of its
    parameters (``fingerprint_params``), so a pipeline with its own Segment (other windows) is another
    run. Any other stage: "name=module.qualname#sha" with the sha256 of its code (source text, else
    bytecode), so an edited function counts as another stage.
    Example: (“lower”, def lower(b): ...) -> "lower=__main__.lower#3f2a9c01d4e7";
    ("segment", Segment(windows of 8)) -> "segment=Segment#9b1c02e4aa7d".
    """
    import hashlib
    import inspect
    import json

    if isinstance(stage, Stage) and stage.name == name and (type(stage).__module__ + ".").startswith((__package__ or "pipeline") + "."):
        mine = fingerprint_params(stage)
        if default is None or (type(default) is type(stage) and fingerprint_params(default) == mine):
            return name
        text = json.dumps(mine, sort_keys=True, default=str).encode()
        return f"{name}={type(stage).__name__}#{hashlib.sha256(text).hexdigest()[:12]}"
    fn = stage if inspect.isfunction(stage) or inspect.ismethod(stage) else type(stage)
    try:
        code = inspect.getsource(fn).encode()
    except (OSError, TypeError):
        code = getattr(getattr(fn, "__code__", None), "co_code", b"") or repr(fn).encode()
    qual = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"
    return f"{name}={qual}#{hashlib.sha256(code).hexdigest()[:12]}"


def fingerprint_params(stage: Stage) -> dict[str, Any]:
    """A built-in stage's parameters as the --resume fingerprint compares them (``Stage.params_key``),
    without what a resumed run may change or only holds: the encode stage's weights, window store and
    progress callback (the model enters by its options and its facts' sha256).
    """
    key = stage.params_key()
    if stage.name == "encode":
        for held in ("weights", "store", "on_batch"):
            key.pop(held, None)
        if isinstance(key.get("facts"), dict):
            # a hub model's sha256 is known only after the load
            key["facts"] = {k: v for k, v in key["facts"].items() if k != "sha256"}
    return key


def stable_value(value: Any) -> Any:
    """``value`` in a stable, JSON-able form, the same in every process and run.

    Plain values as they are (tuples as lists, dict keys as text); a dataclass as {"type": its class
    name, field: value...}; an arrow schema as its text without metadata; a tokenizer as its class, the
    folder or hub name it was loaded from and its vocabulary size; a numpy array as its shape, dtype and sha256; the encode stage's shared weights as
    "loaded from the model options" (the model options and the model's facts, with its sha256, are the encode
    stage's other parameters; a model given in memory: by its id); a window
    store by its database file (None: in memory). Any other object by its class and id (equal only to
    itself, and not stable across processes).
    """
    import dataclasses
    import math

    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (tuple, list, frozenset, set)):
        items = [stable_value(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    if isinstance(value, Mapping):
        return {str(k): stable_value(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"type": type(value).__name__,
                **{f.name: stable_value(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    kind = type(value).__name__
    if hasattr(value, "item") and hasattr(value, "dtype") and getattr(value, "ndim", 1) == 0:
        return stable_value(value.item())   # a numpy scalar
    if kind == "ndarray" and hasattr(value, "tobytes"):   # a fitted array (a projection's): its shape, dtype and sha256
        import hashlib

        return {"array": list(value.shape), "dtype": str(value.dtype),
                "sha256": hashlib.sha256(value.tobytes()).hexdigest()}
    if kind == "Schema" and hasattr(value, "remove_metadata"):
        return value.remove_metadata().to_string()
    if hasattr(value, "name_or_path") and hasattr(value, "get_vocab"):
        return {"tokenizer": kind, "path": str(value.name_or_path), "vocab": len(value)}
    if kind == "Weights" and hasattr(value, "given"):
        return {"weights": f"given id:{id(value)}" if value.given else "loaded from the model options"}
    if kind == "WindowStore" and hasattr(value, "db_file"):
        return {"store": None if value.db_file is None else str(value.db_file)}
    if kind == "ObjectStore" and hasattr(value, "uri"):
        return {"store": str(value.uri)}
    return {"object": f"{type(value).__module__}.{type(value).__qualname__}", "id": id(value)}


def _short(value: Any) -> str:
    if isinstance(value, (str, int, float, bool, tuple, type(None))) or hasattr(value, "__dataclass_fields__"):
        text = repr(value)
    elif isinstance(value, dict):
        text = "{" + ", ".join(f"{k!r}: {_short(v)}" for k, v in value.items()) + "}"
    else:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 200 else text[:197] + "..."
