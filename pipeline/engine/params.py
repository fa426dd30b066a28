"""A Pipeline's parameters: scikit-learn's protocol for its steps (``get_params`` with ``step__param``
names, ``set_params`` that rebuilds the stages it changes, ``named_steps``, what a slice is given) and
a run's read and write options (``with_io_options``)."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigError, ParamError
from ..options.config import PipelineConfig
from ..stage import Stage, describe


def pipeline_params(steps: Sequence[tuple[str, Any]], deep: bool = True) -> dict[str, Any]:
    """As scikit-learn's Pipeline.get_params: ``{"steps": [(name, stage)...]}``, the constructor's one
    argument, so that ``type(p)(**p.get_params(deep=False))`` rebuilds it; with ``deep`` also
    ``name: stage`` and ``name__param: value`` for each stage that has ``get_params``."""
    params: dict[str, Any] = {"steps": list(steps)}
    if deep:
        params.update(dict(steps))
        for name, stage in steps:
            if hasattr(stage, "get_params"):
                params.update({f"{name}__{k}": v for k, v in stage.get_params(deep=True).items()})
    return params


def set_step_params(steps: Sequence[tuple[str, Any]], params: dict[str, Any]) -> list[tuple[str, Any]]:
    """The steps with ``params`` set (scikit-learn's names: ``steps``, a stage name, ``name__param``); a
    built-in stage given ``name__param`` values is rebuilt as a new object (the one in ``steps`` is not
    changed). The chain is not checked here.

    Raises:
        ParamError (a ConfigError and a ValueError): an unknown stage name, naming the stages; an unknown
            parameter of a stage (Stage.set_params). ConfigError: two stages of one name, or ``name__param``
            for a stage without ``set_params``.
    """
    params = dict(params)
    steps = [tuple(p) if isinstance(p, (tuple, list)) else (describe(p), p) for p in params.pop("steps")] \
        if "steps" in params else list(steps)
    names = [n for n, _ in steps]
    nested: dict[str, dict[str, Any]] = {}
    for key, value in params.items():
        name, sep, sub = key.partition("__")
        if name not in names:
            raise ParamError(f"invalid parameter {key!r} for this pipeline: no stage {name!r}; "
                         f"the stages are {names} (parameters are 'steps', a stage name, or name__param)")
        if sep:
            nested.setdefault(name, {})[sub] = value
        else:
            steps[names.index(name)] = (name, value)
    for name, sub in nested.items():
        i = names.index(name)
        stage = steps[i][1]
        if not hasattr(stage, "set_params") or not hasattr(stage, "get_params"):
            raise ConfigError(f"stage {name!r} takes no parameters (it has no set_params); replace it with "
                              f"set_params({name}=...)")
        if isinstance(stage, Stage):
            stage = type(stage)(**stage.get_params(deep=False)).set_params(**sub)   # a new object
        else:
            stage = stage.set_params(**sub)
        steps[i] = (name, stage)
    if len(set(names)) != len(names):
        raise ConfigError(f"stage names must be unique; got {names}")
    return steps


class StepsByName(dict):
    """A pipeline's stages by name, also as attributes (scikit-learn's Bunch)."""

    def __init__(self, steps):
        super().__init__(steps)

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"no stage {name!r}; the stages are {list(self)}") from None

    def __dir__(self):
        return list(self)


def step_item(pipe, key: str | int | slice):
    """``pipe[key]``: a stage by name or position; for a slice, a pipeline of those stages (as
    scikit-learn's). A slice is checked as a chain that begins where its first stage stood: it takes a
    batch holding what the stages before it filled (``pipe[1:3].process(pipe[:1].process(batch))``)
    and keeps the options record.

    Raises:
        KeyError: no stage of that name. IndexError: a position out of range. ValueError: a slice's step is not 1.
    """
    steps = pipe.steps
    if isinstance(key, slice):
        if key.step not in (None, 1):
            raise ValueError("a pipeline slice takes consecutive stages (a step of 1), e.g. pipe[1:3]")
        start = range(len(steps))[key].start if steps else 0
        have = set(pipe.given)
        for name, stage in steps[:start]:
            have.update(getattr(stage, "fills", None) or pipe.inherited_fills.get(name, ()))
        return type(pipe)(steps[key], pipe.resolved, pipe.inherited_fills, tuple(sorted(have)))
    if isinstance(key, int):
        return steps[key][1]
    for name, stage in steps:
        if name == key:
            return stage
    raise KeyError(f"no stage {key!r}; the stages are {[n for n, _ in steps]}")


def with_io_options(cfg: PipelineConfig, **options: Any) -> PipelineConfig:
    """``cfg`` with read, write and engine options replaced (validated as the CLI's): the options a run may
    change without building another pipeline (``engine="ray"``, ``workers``... are the engine's).

    Raises:
        ConfigError: an option of another section (those are the pipeline's: build another), or a bad value.
    """
    from ..options.config import option_sections
    from ..options.config_file import coerce

    given: dict[str, dict[str, Any]] = {"read": {}, "write": {}, "ray": {}}
    for key, value in options.items():
        key = key.replace("-", "_")
        section = option_sections().get(key)
        if section not in given:
            raise ConfigError(f"{key!r} is not a read, write or engine option; options of the model, windows or "
                              "pooling are the pipeline's own: build it with Pipeline.from_options(...)")
        given[section][key] = coerce(key, value)   # as the CLI's values
    try:
        return dataclasses.replace(cfg, **{name: dataclasses.replace(getattr(cfg, name), **values)
                                           for name, values in given.items()})
    except TypeError as err:
        raise ConfigError(f"bad option value: {err}") from None
