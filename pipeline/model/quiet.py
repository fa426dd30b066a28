"""How transformers is called on a model: offline for a local folder, its own warnings silenced."""
from __future__ import annotations

import contextlib
import os
import warnings
from pathlib import Path


def is_local(path: str) -> bool:
    """True when ``path`` is a folder on this machine (a local model), False for a hub id."""
    return Path(path).is_dir()


@contextlib.contextmanager
def offline_if_local(path: str):
    """A local model path never triggers a network call: HF_HUB_OFFLINE=1 while loading it."""
    if not is_local(path):
        yield
        return
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old


@contextlib.contextmanager
def quiet_transformers():
    """transformers' own warnings (its LOAD REPORT table of unused keys, deprecation notes) silenced:
    longbert's messages are the only ones."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(level)
