"""The local engine: ``run(cfg)`` scans the inputs, builds or takes a Pipeline, and streams its blocks
to the output (``longbert extract`` without ``--engine ray``; ``Pipeline.run`` streams its own through
the same pipeline.engine.stream loop).
"""
from __future__ import annotations

from collections.abc import Callable

from ..options.config import PipelineConfig
from .compose import Pipeline
from .run import Summary
from .stream import run_corpus


def run(cfg: PipelineConfig, echo: Callable[[str], None] | None = None, pipe=None) -> Summary:
    """Run the whole job on the local engine: inputs in, parquet out.

    Args:
        cfg: the validated config (cli.py builds it; Pipeline.run passes its own).
        echo: where to print notes (e.g. a resumed run); None prints nothing.
        pipe: the Pipeline to run (inserted or replaced stages included); None: the
            built-in stages for ``cfg``, resolved against the model once, after the inputs are scanned.

    Returns:
        The Summary of the run.

    Raises:
        ConfigError / InputError / ModelError (exit 2): before anything is written.
        RunError (exit 1): part-way; the output path then holds no file that looks complete.
    """
    return run_corpus(cfg, echo, build=Pipeline.from_config if pipe is None else pipe.for_run)
