"""The output rules of the Python writers, the CLI's own: ``longbert.save_features`` (pipeline.api) and
``Pipeline.run`` (pipeline.engine.compose) refuse an existing output without ``overwrite=True``, a
name that is not ``.parquet`` (or, for ``Pipeline.run``, a folder ending in "/"), a folder where a
file would go, and an output that is one of the run's inputs; messages name the Python arguments.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from ..options.config import PipelineConfig
from ..options.paths import expand_user
from .spare_inputs import check_run_spares_inputs
from .manifest import run_files
from .places import is_uri, place_of


def check_features_path(path: str | Path, overwrite: bool) -> Path:
    """save_features' ``path``, ``~`` expanded, once it may be written.

    Example: check_features_path("~/mine.parquet", False) -> /home/ana/mine.parquet (when it is new).

    Raises:
        ConfigError: a URI (s3://...), a name ending in "/" or not in ".parquet", an existing folder, or
            an existing file without ``overwrite=True``; each message names the fix.
    """
    raw = str(path)
    if is_uri(raw):   # never a local folder made in a URI's name
        raise ConfigError(f"path {raw!r} is a URI; save_features writes one local .parquet file: write it locally, "
                          "then copy it (extract writes to object storage with -o s3://BUCKET/PREFIX/)")
    if raw.endswith(("/", "\\")):
        raise ConfigError(f"path {raw!r} names a folder; save_features writes one .parquet file: use e.g. "
                          f"{raw}features.parquet")
    out = Path(expand_user(raw, "path"))
    if out.suffix.lower() != ".parquet":
        raise ConfigError(f"path {raw!r} is not a .parquet file; save_features writes parquet: use e.g. "
                          f"{out.with_suffix('.parquet')}")
    if out.is_dir():
        raise ConfigError(f"path {raw!r} is a folder; save_features writes a file and never replaces a folder: "
                          f"use e.g. {out / 'features.parquet'}")
    if out.exists() and not overwrite:
        raise ConfigError(f"path {raw!r} exists; pass overwrite=True to replace it or choose another path")
    return out


def check_run_output(cfg: PipelineConfig) -> None:
    """Pipeline.run's output, before anything is read: never one of the inputs (check_run_spares_inputs);
    an existing file only with ``overwrite=True``; a ``DIR/`` holding a run only with ``resume=True`` or
    ``overwrite=True``. The suffix is WriteConfig's check; the rest is the CLI's (pipeline.output.lock).

    Raises:
        ConfigError: as check_run_spares_inputs, or an existing output without overwrite=True (or resume=True).
    """
    check_run_spares_inputs(cfg)
    if cfg.write.overwrite:
        return
    if not cfg.write.is_directory and Path(cfg.write.output).exists():
        raise ConfigError(f"output {str(Path(cfg.write.output))!r} exists; pass overwrite=True to replace it or "
                          "choose another path")
    if cfg.write.is_directory and not cfg.write.resume:
        place = place_of(cfg.write.output)   # an s3:// output is listed here only once the lock's checks passed
        if not place.remote and run_files(place.names()):   # some of its files are a longbert run's
            raise ConfigError(f"output {place.location!r} already holds a run; pass resume=True to continue it or "
                              "overwrite=True to replace it")
