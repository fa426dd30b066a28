"""Engines by name, opened in one place: ``open_engine(cfg)`` looks ``--engine`` up in ``ENGINES`` and imports
that engine's module only then, with an install hint when its library is missing, as stores are opened by
scheme (pipeline.cache.stores). A second engine (Daft, Spark) is one module with an ``Engine`` class and
one line here. The driver (pipeline.engine.driver) sees only the ``Engine`` protocol.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from ..errors import ConfigError
from ..options.config import PipelineConfig
from ..options.ray_config import ENGINES as ENGINE_NAMES


class Engine(Protocol):
    """What an engine does for the driver: get ready (exit 2 problems before any output is opened), give the
    pipeline the driver may run itself (the binary centre), run the blocks still to do, and close."""

    def prepare(self, pipe, echo: Callable[[str], None] | None):
        """Before the sink opens: load what the engine needs, check what can fail (ConfigError, exit 2);
        returns the pipeline to run (the local engine's may now know a hub model's sha256)."""

    def calibration_pipe(self, pipe):
        """The pipeline the driver runs on the first documents for --out-dtype binary's centre."""

    def stream(self, pipe, todo: list, sink, schema, progress) -> Iterator:
        """The blocks ``todo`` (BlockSpecs, plan order) run: pipeline.engine.part_work ``Piece``s (the
        driver writes them) or ``PartDone`` records (written by workers into ``sink.parts_folder()``), in
        plan order. ``schema``: the output's. ``progress``: the run's pipeline.engine.run.BatchProgress."""

    def close(self, pipe) -> None:
        """Release what ``prepare`` took (the driver's model and window store)."""


@dataclass(frozen=True)
class EngineEntry:
    """Where an engine lives: ``pipeline.engine.<module>.<factory>(cfg) -> Engine``, imported on first use;
    ``library``: the module it needs, from the ``extra`` (``pip install -e '.[extra]'`` in a clone)."""

    module: str
    factory: str
    library: str | None = None
    extra: str | None = None


ENGINES: dict[str, EngineEntry] = {
    "local": EngineEntry("local", "LocalEngine"),                                 # this process, the default
    "ray": EngineEntry("ray_engine", "RayEngine", library="ray", extra="ray"),    # Ray actors, one per worker
}
assert tuple(ENGINES) == ENGINE_NAMES   # the options check --engine against the same names


def open_engine(cfg: PipelineConfig) -> Engine:
    """The engine ``cfg.ray.engine`` names, for this run's config.

    Raises:
        ConfigError (exit 2): its library is not installed (naming the extra to install).
    """
    entry = ENGINES[cfg.ray.engine]
    if entry.library is not None:
        try:
            importlib.import_module(entry.library)
        except ImportError:
            raise ConfigError(f"--engine {cfg.ray.engine} needs the {entry.library} library, which is not installed: "
                              f"pip install -e '.[{entry.extra}]' in a clone of longbert, or use --engine local") from None
    module = importlib.import_module(f"{__package__}.{entry.module}")
    return getattr(module, entry.factory)(cfg)
