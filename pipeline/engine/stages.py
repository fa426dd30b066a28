"""The built-in stages and the run context they share; pipeline.engine.compose chains them into a Pipeline.

A stage is any callable ``Batch -> Batch`` with a ``name``. The built-in ones, in order:
``tokenize`` -> ``segment`` -> ``dedup`` -> ``encode`` -> ``aggregate`` -> ``rows``. Only ``encode``
runs the model; the others are CPU work on numpy and pyarrow (importing this module imports torch,
through pipeline.model.pool, but loads no weights).
"""
from __future__ import annotations

import abc
import dataclasses
from typing import Any

import pyarrow as pa

from ..output.aggregate import aggregate_documents, aggregate_windows
from .batch import Batch
from .block import BlockCounts, feature_dim, release_free_heap, resolve_config
from ..options.config import PipelineConfig
from ..text.dedup import plan_windows
from ..model.pool import pool_offsets, window_pools
from ..output.rows import document_table, window_table
from ..text.segment import segment as segment_doc
from ..read.specs import ROW_ERROR
from ..text.tokenize import tokenize_block
from ..output.schema import feature_columns, output_schema

STAGE_NAMES = ("tokenize", "segment", "dedup", "encode", "aggregate", "rows")


class Context:
    """A run's options resolved against the model once, and the model itself once it is needed.

    Resolving reads the model's config and tokenizer (max length, special tokens, family checks,
    layers, pooler) and loads no weights; ``load()`` loads the weights, opens the window store
    (--cache) and is called by the ``encode`` stage on first use.

    Args:
        cfg: the run's config (max_length may be None: taken from the model).
        tokenizer: an already loaded fast tokenizer for cfg.model (None: loaded here).
        model: an already loaded model for cfg.model (the vectorizer's per-process cache); None: loaded by load().
        store: an open pipeline.cache.store.WindowStore to use (the vectorizer's in-memory one); None: the
            store of ``cfg.write.cache`` (--cache DIR), or none.

    Raises:
        ConfigError / ModelError: as pipeline.engine.block.resolve_config.
    """

    def __init__(self, cfg: PipelineConfig, tokenizer=None, model=None, store=None):
        self.cfg, self.tokenizer, self.facts = resolve_config(cfg, tokenizer)
        self.hidden = self.facts.hidden_size
        self.dim, self.token_dim = feature_dim(self.cfg, self.hidden)
        self.features = self.cfg.feature_list()
        self.columns = feature_columns(self.cfg, self.hidden)   # [(name, D)], one per feature
        pools = window_pools(self.cfg)
        offsets = pool_offsets(pools, self.hidden)               # where each pool lies in a window vector
        keys = [p.pool_key for p in pools]
        self.slices = [offsets[keys.index(f.pool_key)] for f in self.features]
        self.stats = BlockCounts()   # every block's counts, summed
        self.encoder = None          # pipeline.model.encode.Encoder, by load()
        self.cache = None            # pipeline.cache.window_cache.WindowCache with --cache, by load()
        self._model, self._store, self._schemas = model, store, {}

    def set_io(self, cfg: PipelineConfig) -> PipelineConfig:
        """Take ``cfg``'s read and write options (inputs, output, --keep-col, --out-dtype, --cache...) for
        the next run; the options resolved against the model, the tokenizer and a loaded model stay.

        Returns:
            The config that was in place (pass it back to restore its read and write options).

        Raises:
            ConfigError: a --keep-col that clashes with a column of this run (PipelineConfig checks it
                when replaced); as WindowCache.open.
        """
        before = self.cfg
        resolved = dataclasses.replace(self.cfg, read=cfg.read, write=cfg.write)
        self.cfg = resolved
        self._schemas.clear()
        if self.encoder is not None and before.write.cache != resolved.write.cache:
            from ..cache.window_cache import WindowCache
            self.cache = WindowCache.open(self.cfg, self.facts, self._store)
        return before

    @property
    def loaded(self) -> bool:
        """Whether the weights are loaded."""
        return self.encoder is not None

    def load(self) -> None:
        """Load the weights (once) and open the --cache store.

        Raises:
            ModelError: as pipeline.model.load.load_model. ConfigError: as WindowCache.open (--cache without a
                hashable model, a folder that is not a store).
        """
        if self.encoder is not None:
            return
        from ..model.encode import Encoder          # torch loads here, not on import
        from ..model.facts import checkpoint_folder, model_sha256, resolve_model_path
        from ..cache.window_cache import WindowCache

        self.encoder = Encoder.from_config(self.cfg, self.tokenizer, model=self._model)
        if self.facts.sha256 is None:  # a hub model's weights are in the cache only now
            folder = checkpoint_folder(resolve_model_path(self.cfg.model.model))
            if folder is not None:
                self.facts = dataclasses.replace(self.facts, sha256=model_sha256(folder))
                self._schemas.clear()
        self.cache = WindowCache.open(self.cfg, self.facts, self._store)   # None without --cache

    def schema(self, id_type: pa.DataType) -> pa.Schema:
        """The output schema for ids of ``id_type`` (pa.int64(): a ``row`` column; pa.string(): ``id``)."""
        key = str(id_type)
        if key not in self._schemas:
            self._schemas[key] = output_schema(self.cfg, id_type, self.facts, self.dim, self.token_dim)
        return self._schemas[key]


class Stage(abc.ABC):
    """A built-in stage: ``stage(batch) -> batch`` with ``name``; holds the pipeline's Context. (A user's
    stage needs none of this: any callable ``Batch -> Batch`` is one.)"""

    name = ""

    def __init__(self, ctx: Context):
        self.ctx = ctx

    @abc.abstractmethod
    def __call__(self, batch: Batch) -> Batch:
        """The batch with this stage's fields filled."""

    def __repr__(self) -> str:
        return f"<longbert stage {self.name!r}>"


class Tokenize(Stage):
    """Texts -> ``docs``: content token ids without specials, never truncated but by
    --max-tokens-per-doc; a text that makes no token gets its error (pipeline.text.tokenize.tokenize_block)."""

    name = "tokenize"

    def __call__(self, batch: Batch) -> Batch:
        cfg = self.ctx.cfg
        read_errors = batch.rows.column(ROW_ERROR).to_pylist() if ROW_ERROR in batch.rows.column_names else None
        docs = tokenize_block(batch.texts, self.ctx.tokenizer, cfg.segment.max_tokens_per_doc,
                              with_offsets=cfg.pool.level == "token", vocab_rows=self.ctx.facts.vocab_rows,
                              read_errors=read_errors)
        return batch.replace(docs=docs)


class Segment(Stage):
    """``docs`` -> ``windows``: every requested strategy's windows of each document, at most
    max_length ids with the model's own specials (pipeline.text.segment.segment)."""

    name = "segment"

    def __call__(self, batch: Batch) -> Batch:
        if batch.docs is None:
            raise _order_error(self.name, "tokenize")
        cfg, facts = self.ctx.cfg, self.ctx.facts
        windows: dict[str, list] = {}
        for strategy in dict.fromkeys(f.strategy for f in self.ctx.features):
            seg = cfg.segment if strategy == cfg.segment.strategy else dataclasses.replace(cfg.segment, strategy=strategy)
            windows[strategy] = [w for doc in batch.docs if doc.error is None
                                 for w in segment_doc(doc, seg, facts.cls_id, facts.sep_id)]
        return batch.replace(windows=windows)


class Dedup(Stage):
    """``windows`` -> ``plan``: each distinct window once, shared by strategies and by identical
    token ids (pipeline.text.dedup.plan_windows)."""

    name = "dedup"

    def __call__(self, batch: Batch) -> Batch:
        if batch.windows is None:
            raise _order_error(self.name, "segment")
        return batch.replace(plan=plan_windows(list(batch.windows.values())))


class Encode(Stage):
    """``plan.unique`` -> ``encoded``: window vectors from the model, or from the window store with
    --cache (pipeline.cache.window_cache.encode_unique); loads the weights on first use."""

    name = "encode"

    def __call__(self, batch: Batch) -> Batch:
        if batch.plan is None:
            raise _order_error(self.name, "dedup")
        from ..cache.window_cache import encode_unique

        ctx = self.ctx
        ctx.load()
        stats = ctx.encoder.stats
        oom, fp32 = stats.oom_splits, stats.fp32_recomputed
        enc, cached = encode_unique(ctx.encoder, ctx.cache, batch.unique, with_tokens=ctx.cfg.pool.level == "token",
                                    with_layers=late_windows(batch))
        counts = BlockCounts(windows=len(batch.unique) - cached, windows_cached=cached,
                             oom_splits=stats.oom_splits - oom, fp32_recomputed=stats.fp32_recomputed - fp32)
        return batch.replace(encoded=enc, cached=cached, counts=counts)


class Aggregate(Stage):
    """``encoded`` -> ``vectors``: each feature's window vectors combined per document with
    --aggregate (pipeline.output.aggregate), or at --level window one vector per window."""

    name = "aggregate"

    def __call__(self, batch: Batch) -> Batch:
        if batch.encoded is None:
            raise _order_error(self.name, "encode")
        if self.ctx.cfg.pool.level == "window":
            return aggregate_windows(self.ctx, batch)
        return aggregate_documents(self.ctx, batch)


class Rows(Stage):
    """``vectors`` -> ``table``: the output rows in the schema extract writes (pipeline.output.rows), and
    the block's ``counts`` (added to the context's run totals)."""

    name = "rows"

    def __call__(self, batch: Batch) -> Batch:
        if batch.vectors is None:
            raise _order_error(self.name, "aggregate")
        ctx = self.ctx
        schema = ctx.schema(batch.rows.column("id").type)
        build = window_table if ctx.cfg.pool.level == "window" else document_table
        table = build(schema, ctx.cfg, ctx.columns, batch)
        counts = block_counts(batch)
        release_free_heap()
        ctx.stats.add(counts)
        return batch.replace(table=table, counts=counts)


def late_windows(batch: Batch):
    """(n_unique,) bool: the unique windows whose per-token vectors a late feature reads; None without one."""
    if "late" not in batch.windows:
        return None
    import numpy as np

    mask = np.zeros(len(batch.unique), dtype=bool)
    mask[batch.into_unique("late")] = True
    return mask


def block_counts(batch: Batch) -> BlockCounts:
    """What one block did: its documents, tokens, rows with errors, and the encode stage's window counts."""
    docs, plan = batch.docs or [], batch.plan
    counts = dataclasses.replace(batch.counts) if batch.counts is not None else BlockCounts()
    counts.documents = batch.rows.num_rows
    counts.tokens = sum(d.n_tokens for d in docs)
    counts.unknown = sum(d.n_unknown for d in docs)
    counts.errors = sum(e is not None for e in batch.errors or [])
    if plan is not None:
        counts.windows_requested, counts.windows_saved = plan.requested, plan.saved
    return counts


BUILT_IN: dict[str, type[Stage]] = {s.name: s for s in (Tokenize, Segment, Dedup, Encode, Aggregate, Rows)}


def _order_error(stage: str, before: str) -> Exception:
    from ..errors import ConfigError

    return ConfigError(f"stage {stage!r} got a batch that stage {before!r} has not filled; run {before!r} "
                       f"before {stage!r} (pipe.names lists the order)")


def describe(stage: Any) -> str:
    """A stage's name for messages: its ``name``, else its function name."""
    return getattr(stage, "name", None) or getattr(stage, "__name__", None) or type(stage).__name__
