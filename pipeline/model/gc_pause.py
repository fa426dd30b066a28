"""``paused_gc``: Python's cyclic garbage collector paused around the start-up steps that import
transformers' model code and read a model (pipeline.model.facts, pipeline.model.load), then restored.

Why: importing transformers' model code makes about 3,000 modules' worth of long-lived objects, and
the collector re-walks all of them at every full collection it triggers along the way (6 full and
about 80 middle ones for the default model): about 1 CPU s of a one-row ``extract`` on a 2-core AVX2
EPYC (docs/hardware.md, Start-up time). The garbage made meanwhile is collected as usual once the
collector runs again; nothing is frozen or leaked.
"""
from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def paused_gc():
    """The cyclic collector off for the ``with`` block (or the decorated call: ``@paused_gc()``), then
    back to its former state: a collector the caller had turned off stays off. Reference counting
    frees objects as usual meanwhile; only cycles wait for the next collection."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
