"""RayConfig: the --engine ray options, one section of pipeline.options.config.PipelineConfig (re-exported there)."""
from __future__ import annotations

from typing import Literal

from ..errors import ConfigError
from .features_config import check_choice
from .values import config_section

ENGINES = ("local", "ray")


@config_section
class RayConfig:
    engine: Literal["local", "ray"] = "local"
    ray_address: str | None = None         # None: start a local Ray; "auto" or an address: join it
    workers: int = 1                       # model replicas, one actor each
    gpus_per_worker: float = 0.0
    cpus_per_worker: float | None = None   # None: a local Ray's cores / workers; 1 on a joined cluster

    def __post_init__(self) -> None:
        check_choice("--engine", self.engine, ENGINES)
        if self.workers < 1:
            raise ConfigError(f"--workers={self.workers} must be >= 1")
        if self.gpus_per_worker < 0:
            raise ConfigError(f"--gpus-per-worker={self.gpus_per_worker} must be >= 0 (0: CPU actors)")
        if self.cpus_per_worker is not None and self.cpus_per_worker <= 0:
            raise ConfigError(f"--cpus-per-worker={self.cpus_per_worker} must be > 0")
        if self.engine == "local":
            given = [flag for flag, value, default in (
                ("--ray-address", self.ray_address, None), ("--workers", self.workers, 1),
                ("--gpus-per-worker", self.gpus_per_worker, 0.0), ("--cpus-per-worker", self.cpus_per_worker, None),
            ) if value != default]
            if given:
                verb, them = ("applies", "it") if len(given) == 1 else ("apply", "them")
                raise ConfigError(f"{', '.join(given)} {verb} only to --engine ray; add --engine ray, or drop {them}")
