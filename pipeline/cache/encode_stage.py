"""The ``encode`` stage: a block's unique windows -> their vectors, from the model or, with a window
store, from the store (``encode_unique``). The only stage that loads weights, on its first call.
"""
from __future__ import annotations

import copy
import dataclasses
import threading
from typing import Any

import numpy as np

from ..batch import Batch
from ..counts import BlockCounts
from ..model.prompts import pools_prompt
from ..options.config import PipelineConfig
from ..stage import Stage
from ..types import ModelFacts


class Weights:
    """A model's weights loaded once, on first use, and shared by every Encode stage built with the
    same model options (a pipeline, the pipelines derived from it, the vectorizer's runs); thread-safe.

    Pickling keeps no weights: the unpickled Weights load them again, from the folder of the first
    config that asks (``encoder``; a model given in memory too), and refuse them (ModelError) when that
    folder's sha256 is no longer the one the weights were loaded with. ``copy.deepcopy`` returns the
    same Weights (shared, not copied).

    Args:
        model: an already loaded model (not loaded again), or None: loaded from the first config's
            ``model`` options (name, device, dtype, quantize, threads).
    """

    def __init__(self, model=None):
        self.model = model
        self.given = model is not None  # an in-memory model (a pickled copy loads it from the config instead)
        self.sha256: str | None = None  # of the files the weights were loaded from (None: given, or a hub model)
        self._encoders: dict = {}       # (model, pool, encode options) -> its Encoder
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        """What loads the weights again: the sha256 they were checked with (no model, lock or encoders)."""
        return {"sha256": self.sha256}

    def __setstate__(self, state: dict) -> None:
        self.model, self.given, self.sha256, self._encoders = None, False, state.get("sha256"), {}
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict) -> Weights:
        """The same Weights: a deep copy of a pipeline shares its loaded model, as derived pipelines do."""
        return self

    @property
    def loaded(self) -> bool:
        """Whether the weights are in memory."""
        return self.model is not None

    def encoder(self, config: PipelineConfig, tokenizer, sha256: str | None = None):
        """A pipeline.model.encode.Encoder of its own (own counters and progress hook) over the shared
        weights, for ``config``'s pools and batching.

        Args:
            sha256: the hash of the model's files when the run's options were resolved (ModelFacts.sha256).

        Raises:
            ModelError: as pipeline.model.load.load_model; or the folder's files changed after the options
                were resolved (its vectors would be filed in the store under a hash that did not make them).
        """
        from ..model.encode import Encoder   # torch loads here, not on import

        key = (config.model, config.pool, config.encode)
        with self._lock:
            if key not in self._encoders:
                fresh = self.model is None
                made = Encoder.from_config(config, tokenizer, model=self.model)
                self.model = made.full_model
                if fresh:
                    now = _files_sha256(config.model.model)
                    if self.sha256 is not None and now is not None and now != self.sha256:
                        self.model = None   # unpickled, and the folder is no longer what was loaded
                        raise _changed(config.model.model, self.sha256, now)
                    self.sha256 = now
                self._encoders[key] = made
            if sha256 is not None and self.sha256 is not None and self.sha256 != sha256:
                raise _changed(config.model.model, sha256, self.sha256)
            shared = self._encoders[key]
        mine = copy.copy(shared)
        mine.stats, mine.on_batch = type(shared.stats)(), None
        return mine


class Encode(Stage):
    """``plan.unique`` -> ``encoded``: window vectors (every pooling of the run side by side), from the
    model or from the window store; loads the weights on first use.

    Args:
        config: the run's config, max_length resolved (model, device, dtype, the features' pools,
            batch size, token budget and --cache). tokenizer: the model's tokenizer (its pad id).
        facts: the model's facts (pipeline.model.facts.model_facts): the store's keys use its sha256.
        model: an already loaded model for config.model, or a ``Weights`` to share; None: loaded here.
        store: an open window store, any pipeline.cache.store_api.Store (the vectorizer's in-memory
            one, or another implementation); None: the SQLite store of config.write.cache, or none.
        with_tokens: also keep each window's per-token vectors (per-token output).

    Raises:
        ModelError / ConfigError: on the first call, as load_model and WindowCache.open.
    """

    name, requires, fills = "encode", ("plan",), ("encoded",)

    def __init__(self, config: PipelineConfig, tokenizer, facts: ModelFacts, model: Any = None, store=None,
                 with_tokens: bool = False):
        self.config, self.tokenizer, self.facts, self.store = config, tokenizer, facts, store
        self.with_tokens = with_tokens
        self.weights = model if isinstance(model, Weights) else Weights(model)
        self._encoder = self._cache = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        """The parameters only: the weights pickle as their sha256 (loaded again on the first call, see
        Weights), the store by its folder; the encoder, the open cache and the lock are made again."""
        state = dict(self.__dict__)
        state["_encoder"] = state["_cache"] = state["_lock"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict) -> Encode:
        """A copy that shares the weights and the store (an in-memory store is not emptied)."""
        memo[id(self.weights)], memo[id(self.store)] = self.weights, self.store
        new = object.__new__(Encode)
        memo[id(self)] = new
        new.__setstate__({k: copy.deepcopy(v, memo) for k, v in self.__getstate__().items()})
        return new

    def get_params(self, deep: bool = True) -> dict:
        return {"config": self.config, "tokenizer": self.tokenizer, "facts": self.facts, "model": self.weights,
                "store": self.store, "with_tokens": self.with_tokens}

    @property
    def loaded(self) -> bool:
        """Whether the weights are loaded."""
        return self.weights.loaded

    @property
    def encoder(self):
        """This stage's Encoder (loads the weights and opens the store on first use)."""
        self.load()
        return self._encoder

    def load(self) -> None:
        """Load the weights (once per Weights) and open the --cache store.

        Raises:
            ModelError: as pipeline.model.load.load_model. ConfigError: as WindowCache.open.
        """
        with self._lock:
            if self._encoder is not None:
                return
            from .window_cache import WindowCache

            encoder = self.weights.encoder(self.config, self.tokenizer, self.facts.sha256)
            encoder.pool_prompt = pools_prompt(self.config, self.facts)   # a window's prompt: pooled or not
            if self.facts.sha256 is None:   # a hub model's files are on disk only now: hash them for the store
                sha = self.weights.sha256 or _files_sha256(self.config.model.model)
                if sha is not None:
                    self.facts = dataclasses.replace(self.facts, sha256=sha)
            self._cache = WindowCache.open(self.config, self.facts, self.store)   # None without --cache
            self._encoder = encoder

    def with_io(self, config: PipelineConfig, facts: ModelFacts) -> Encode:
        """This stage for a run with ``config``'s read and write options: the same weights, the run's store."""
        return Encode(config, self.tokenizer, facts, self.weights, self.store, self.with_tokens)

    def __call__(self, batch: Batch) -> Batch:
        from .window_cache import encode_unique

        self.check(batch)
        encoder = self.encoder
        stats = encoder.stats
        oom, fp32 = stats.oom_splits, stats.fp32_recomputed
        enc, cached = encode_unique(encoder, self._cache, batch.unique, with_tokens=self.with_tokens,
                                    with_layers=late_windows(batch))
        counts = BlockCounts(windows=len(batch.unique) - cached, windows_cached=cached,
                             oom_splits=stats.oom_splits - oom, fp32_recomputed=stats.fp32_recomputed - fp32)
        return batch.replace(encoded=enc, cached=cached, counts=counts)


def _files_sha256(name: str) -> str | None:
    """The sha256 of a model's files now (pipeline.model.checkpoint.model_sha256; cached by size and mtime)."""
    from ..model.checkpoint import model_sha256
    from ..model.facts import checkpoint_folder, resolve_model_path

    folder = checkpoint_folder(resolve_model_path(name))
    return None if folder is None else model_sha256(folder)


def _changed(name: str, then: str, now: str):
    from ..errors import ModelError

    return ModelError(f"--model {name!r} changed while it was being read: its files' sha256 was {then[:12]}... "
                      f"when the options were checked and is {now[:12]}... now (the folder was saved again); "
                      "run again once it is written")


def late_windows(batch: Batch) -> np.ndarray | None:
    """(n_unique,) bool: the unique windows whose per-token vectors a late feature reads; None without one."""
    if "late" not in batch.windows:
        return None
    mask = np.zeros(len(batch.unique), dtype=bool)
    mask[batch.into_unique("late")] = True
    return mask
