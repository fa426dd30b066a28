"""The block function: a block of input rows in, a block of output rows out (the project's schema).

One copy of the logic for every engine: pipeline.run (local), pipeline.vectorizer (scikit-learn) and
pipeline.ray_engine (Ray Data ``map_batches``) all call ``Extractor``. A document is never split
across blocks; windows of all documents of a block share batches.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import functools
import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .config import PipelineConfig
from .dedup import WindowPlan, plan_windows
from .encode import Encoder
from .errors import ConfigError
from .late import doc_chunks, max_context
from .model import check_pooler, checkpoint_folder, model_facts, model_sha256, resolve_model_path
from .pool import aggregate_parts, normalize, pool_offsets, window_pools
from .segment import covered_tokens, segment
from .tokenize import tokenize_block
from .types import ModelFacts, TokenizedDoc, Window
from .window_cache import WindowCache, encode_unique
from .window_rows import window_table
from .write import feature_columns, fits_float16, output_schema, passthrough_columns

NON_FINITE = "non-finite features (overflow in half precision, also in the float32 recompute)"
FP16_OVERFLOW = "features overflow float16 (|x| > 65504); use --out-dtype float32"
FP16_TOKEN_OVERFLOW = "per-token features overflow float16 (|x| > 65504); use --out-dtype float32"


def resolve_config(cfg: PipelineConfig, tokenizer=None) -> tuple[PipelineConfig, object, ModelFacts]:
    """Fill what depends on the model (max_length) and check the options that need it; no weights load.

    Returns:
        (config with segment.max_length set, the fast tokenizer, the model's facts: family, hidden
        size, the positions it serves, special tokens, hash...).

    Raises:
        ConfigError: --max-length above the model's positions, overlap/head+tail too large for the
            window, a layer index the model lacks. ModelError: a family that cannot be served, the
            tokenizer/config cannot be loaded, --pooling pooler without pooler weights.
    """
    facts, tok = model_facts(cfg.model, tokenizer)
    model_max, n_layers = facts.max_length, facts.num_hidden_layers
    if any(f.pooling == "pooler" for f in cfg.feature_list()):
        check_pooler(facts, cfg.model.model)
    seg = cfg.segment
    if seg.max_length is not None and seg.max_length > model_max:
        raise ConfigError(f"--max-length={seg.max_length} exceeds the model's {model_max} positions; "
                          f"use --max-length {model_max} or less")
    if seg.max_length is None:  # re-validated with the model's size; tail_tokens resolves to C - head
        seg = dataclasses.replace(seg, max_length=model_max)
    check_features(cfg, seg)
    cfg.pool.check_layers(n_layers)
    return dataclasses.replace(cfg, segment=seg), tok, facts


def check_features(cfg: PipelineConfig, seg) -> None:
    """With several --feature: each strategy's window options against the window size, no --keep-col
    named like a feature column, and one strategy at --level window.

    Raises:
        ConfigError: as SegmentConfig.check_window for that strategy, a clashing --keep-col, or
            features of several strategies at --level window (a row per window of one strategy).
    """
    if not cfg.multi_feature:
        return
    strategies = list(dict.fromkeys(f.strategy for f in cfg.feature_list()))
    if cfg.pool.level == "window" and len(strategies) > 1:
        raise ConfigError(f"--level window writes one row per window of one strategy, but the features use "
                          f"{', '.join(strategies)}; give features of one strategy (e.g. --feature chunk:cls "
                          "--feature chunk:mean), and run once per strategy")
    for strategy in strategies:
        dataclasses.replace(seg, strategy=strategy)  # __post_init__ runs check_window for this strategy
    names = {name for name, _ in feature_columns(cfg, 0)}
    clash = [c for c in cfg.read.keep_cols if c in names]
    if clash:
        raise ConfigError(f"--keep-col {clash[0]!r} clashes with the feature column of that name; rename the "
                          "column in the CSV or drop that --feature")


def feature_dim(cfg: PipelineConfig, hidden: int) -> tuple[int, int]:
    """(D of ``features``, D of ``token_features``) of a one-feature run: Feature.dim for the token
    vectors (pooled as the feature's layers are; pooler takes only the last layer), times the
    --aggregate parts for ``features``."""
    dim = cfg.feature_list()[0].dim(hidden)
    return dim * cfg.pool.parts, dim


def output_for(cfg: PipelineConfig, tokenizer, id_type: pa.DataType) -> tuple[PipelineConfig, pa.Schema]:
    """(config with max_length resolved, the output schema) without loading weights: what a driver
    needs to open the sink before any worker has loaded the model.

    Raises:
        As resolve_config.
    """
    cfg, _, facts = resolve_config(cfg, tokenizer)
    dim, token_dim = feature_dim(cfg, facts.hidden_size)
    return cfg, output_schema(cfg, id_type, facts, dim, token_dim)


@dataclass
class Prepared:
    """A block after tokenize and segment, before the model.

    ``windows`` are the unique windows to encode (pipeline.dedup); ``strategy_windows`` holds every
    requested strategy's own windows, document by document, and ``plan.index`` maps them to ``windows``.
    """

    block: pa.Table
    docs: list[TokenizedDoc]
    windows: list[Window]
    strategy_windows: dict[str, list[Window]] | None = None
    plan: WindowPlan | None = None


@dataclass
class BlockCounts:
    """What one block (or, summed with ``add``, a run) did: the block function's counts for the summary."""

    documents: int = 0
    tokens: int = 0
    unknown: int = 0             # tokens the tokenizer mapped to its unknown token
    windows: int = 0             # windows encoded (unique, not found in the --cache store)
    errors: int = 0              # rows with an error (null features)
    windows_requested: int = 0   # windows all features asked for, before de-duplication
    windows_saved: int = 0       # requested - encoded: shared by strategies, or identical token ids
    oom_splits: int = 0          # batches split in two after an out-of-memory error
    fp32_recomputed: int = 0     # windows recomputed in float32 after a non-finite half-precision result
    windows_cached: int = 0      # unique windows taken from the window store (--cache), not encoded

    def add(self, other: BlockCounts) -> None:
        """Add ``other``'s counts to these, field by field."""
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def to_json(self) -> str:
        """The counts as a JSON object (the Ray actors send them with their tables)."""
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> BlockCounts:
        """Inverse of to_json."""
        return cls(**json.loads(text))


class Extractor:
    """Loads tokenizer and model once; ``extractor(block) -> output block``.

    Args:
        cfg: the run's config (max_length may be None: taken from the model).
        tokenizer: an already loaded fast tokenizer (optional; loaded from cfg.model otherwise).
        id_type: pa.int64() (row numbers) or pa.string() (id column values, text file paths); None:
            from cfg.read.id_col.
        model: an already loaded model for cfg.model (pipeline.vectorizer's per-process cache); None: load it.
        store: an open pipeline.store.WindowStore to use (the vectorizer's in-memory one); None: the
            store of ``cfg.write.cache`` (--cache DIR), or none.

    Raises:
        ConfigError / ModelError as resolve_config and pipeline.encode.load_model; ConfigError as
        pipeline.window_cache.WindowCache.open (--cache without a hashable model, not a store).
    """

    def __init__(self, cfg: PipelineConfig, tokenizer=None, id_type: pa.DataType | None = None, model=None,
                 store=None):
        self.cfg, self.tokenizer, self.facts = resolve_config(cfg, tokenizer)
        self.hidden = self.facts.hidden_size
        self.dim, self.token_dim = feature_dim(self.cfg, self.hidden)
        self.features = self.cfg.feature_list()
        self.columns = feature_columns(self.cfg, self.hidden)   # [(name, D)], one per feature
        if id_type is None:
            id_type = pa.int64() if cfg.read.id_col is None else pa.string()
        self.encoder = Encoder.from_config(self.cfg, self.tokenizer, model=model)
        # where each feature's vector lies in the encoder's concatenated window vector
        offsets = pool_offsets(self.encoder.pools, self.hidden)
        pool_keys = [p.pool_key for p in window_pools(self.cfg)]  # before stop_early
        self.slices = [offsets[pool_keys.index(f.pool_key)] for f in self.features]
        if self.facts.sha256 is None:  # a hub model's weights are in the cache only now
            folder = checkpoint_folder(resolve_model_path(cfg.model.model))
            if folder is not None:
                self.facts = dataclasses.replace(self.facts, sha256=model_sha256(folder))
        self.cache = WindowCache.open(self.cfg, self.facts, store)   # None without --cache
        self.schema = output_schema(self.cfg, id_type, self.facts, self.dim, self.token_dim)
        self.stats = BlockCounts()  # every block's counts, summed

    def __call__(self, block: pa.Table) -> pa.Table:
        """Rows in (columns id, text, keep columns) -> output rows (``self.schema``), same order."""
        return self.finish(self.prepare(block))[0]

    def prepare(self, block: pa.Table) -> Prepared:
        """Tokenize and segment a block (CPU only; the local engine runs it ahead of the model)."""
        texts = block.column("text").to_pylist()
        docs = tokenize_block(texts, self.tokenizer, self.cfg.segment.max_tokens_per_doc,
                              with_offsets=self.cfg.pool.level == "token")
        strategy_windows: dict[str, list[Window]] = {}
        for strategy in dict.fromkeys(f.strategy for f in self.features):
            seg = self.cfg.segment if strategy == self.cfg.segment.strategy else \
                dataclasses.replace(self.cfg.segment, strategy=strategy)
            windows: list[Window] = []
            for doc in docs:
                if doc.error is None:
                    windows.extend(segment(doc, seg, self.facts.cls_id, self.facts.sep_id))
            strategy_windows[strategy] = windows
        plan = plan_windows(list(strategy_windows.values()))
        return Prepared(block, docs, plan.unique, strategy_windows, plan)

    def finish(self, prep: Prepared) -> tuple[pa.Table, BlockCounts]:
        """Encode the block's unique windows (those not in the --cache store), pool them per feature and
        document, build the output table.

        Returns:
            (the output rows, ``self.schema``; the block's counts, also added to ``self.stats``).
        """
        token_level = self.cfg.pool.level == "token"
        oom, fp32 = self.encoder.stats.oom_splits, self.encoder.stats.fp32_recomputed
        enc, cached = encode_unique(self.encoder, self.cache, prep.windows, with_tokens=token_level,
                                    with_layers=self._late_windows(prep))
        if self.cfg.pool.level == "window":
            table, row_errors = window_table(self, prep, enc)
            return table, self._counts(prep, row_errors, oom, fp32, cached)
        n = len(prep.docs)
        strategies = list(prep.strategy_windows)
        index = dict(zip(strategies, prep.plan.index))                     # strategy -> (n_req,) into windows
        spans = {s: _doc_slices(prep.strategy_windows[s], n) for s in strategies}
        features = [np.zeros((n, dim), dtype=np.float32) for _, dim in self.columns]
        valid = np.zeros(n, dtype=bool)
        errors: list[str | None] = [d.error for d in prep.docs]
        n_windows = np.zeros(n, dtype=np.int32)
        truncated = np.zeros(n, dtype=bool)
        token_cols: dict[str, list] = {"token_ids": [], "positions": [], "offsets": [], "token_features": []}
        for doc in prep.docs:
            wins = {s: prep.strategy_windows[s][spans[s][doc.row]] for s in strategies}
            rows = {s: index[s][spans[s][doc.row]] for s in strategies}    # (windows of doc,) into enc
            every = [w for s in strategies for w in wins[s]]
            n_windows[doc.row] = len({w.spans for w in every})
            truncated[doc.row] = covered_tokens(every) < doc.n_tokens
            tokens = None
            if doc.error is None:
                if not all(enc.finite[rows[s]].all() for s in strategies):
                    errors[doc.row] = NON_FINITE
                else:
                    vecs = []
                    late = self.late_chunks(wins["late"], rows["late"], enc) if "late" in wins else {}
                    for f, (a, b) in zip(self.features, self.slices):
                        parts, weights = late[f] if f.strategy == "late" else (enc.vectors[rows[f.strategy], a:b],
                            np.array([w.n_content for w in wins[f.strategy]], dtype=np.float64))
                        vec = aggregate_parts(parts, weights, self.cfg.pool.aggregates)
                        vecs.append(normalize(vec) if self.cfg.pool.normalize else vec)
                    if self.cfg.write.out_dtype == "float16" and not all(fits_float16(v) for v in vecs):
                        errors[doc.row] = FP16_OVERFLOW
                    else:
                        for col, vec in zip(features, vecs):
                            col[doc.row] = vec
                        valid[doc.row] = True
                        if token_level:
                            s = strategies[0]
                            tokens = token_features(doc, wins[s], [enc.tokens[i] for i in rows[s]])
                            if self.cfg.write.out_dtype == "float16" and not fits_float16(tokens[3]):
                                errors[doc.row], valid[doc.row], tokens = FP16_TOKEN_OVERFLOW, False, None
            if token_level:
                for key, value in zip(token_cols, tokens or (None, None, None, None)):
                    token_cols[key].append(value)
        counts = self._counts(prep, errors, oom, fp32, cached)
        return self._table(prep.block, features, valid, errors, prep.docs, n_windows, truncated,
                           token_cols if token_level else None), counts

    def _late_windows(self, prep: Prepared) -> np.ndarray | None:
        """(n_unique,) bool: the unique windows a late feature reads token vectors of; None without one."""
        if "late" not in prep.strategy_windows:
            return None
        mask = np.zeros(len(prep.windows), dtype=bool)
        mask[prep.plan.index[list(prep.strategy_windows).index("late")]] = True
        return mask

    def late_chunks(self, windows: list[Window], rows: np.ndarray, enc) -> dict:
        """{late feature: (chunk vectors, tokens per chunk)} of one document's late ``windows``
        (``rows``: theirs in ``enc``), by pipeline.late.doc_chunks."""
        return doc_chunks([w.positions for w in windows], [enc.layers[i] for i in rows],
                          [f for f in self.features if f.strategy == "late"], self.cfg.segment.chunk_tokens,
                          self.encoder.token_layers, self.facts.num_hidden_layers, self.hidden)

    def _counts(self, prep: Prepared, errors: list[str | None], oom: int, fp32: int, cached: int = 0) -> BlockCounts:
        """The block's counts (``errors``: one per output row; ``cached``: windows from the store, not
        encoded), added to ``self.stats``; frees heap pages."""
        release_free_heap()
        counts = BlockCounts(
            documents=len(prep.docs), tokens=sum(d.n_tokens for d in prep.docs),
            unknown=sum(d.n_unknown for d in prep.docs), windows=len(prep.windows) - cached,
            windows_cached=cached, errors=sum(e is not None for e in errors), windows_requested=prep.plan.requested,
            windows_saved=prep.plan.saved, oom_splits=self.encoder.stats.oom_splits - oom,
            fp32_recomputed=self.encoder.stats.fp32_recomputed - fp32)
        self.stats.add(counts)
        return counts

    def _table(self, block, features, valid, errors, docs, n_windows, truncated, token_cols) -> pa.Table:
        schema = self.schema
        id_field = schema.field(0)  # "id", or "row" for row numbers
        cols: dict[str, pa.Array] = {id_field.name: block.column("id").combine_chunks().cast(id_field.type)}
        for name in passthrough_columns(self.cfg):
            cols[name] = block.column(name).combine_chunks()
        cols["n_tokens"] = pa.array([d.n_tokens for d in docs], type=pa.int32())
        cols["n_unknown"] = pa.array([d.n_unknown for d in docs], type=pa.int32())
        cols["n_windows"] = pa.array(n_windows, type=pa.int32())
        cols["truncated"] = pa.array(truncated, type=pa.bool_())
        for (name, _), values in zip(self.columns, features):
            cols[name] = _fixed_list(values, valid, schema.field(name).type)
        cols["error"] = pa.array(errors, type=pa.string())
        if token_cols is not None:
            for name, items in token_cols.items():
                cols[name] = _list_array(items, schema.field(name).type)
        return pa.Table.from_pydict(cols, schema=schema)


def _doc_slices(windows: list[Window], n_docs: int) -> list[slice]:
    """Per document row, the slice of ``windows`` (grouped by document, in row order) that is its own."""
    out = [slice(0, 0)] * n_docs
    start = 0
    while start < len(windows):
        row = windows[start].doc
        end = start
        while end < len(windows) and windows[end].doc == row:
            end += 1
        out[row] = slice(start, end)
        start = end
    return out


@functools.cache
def _malloc_trim():
    """glibc's malloc_trim, or None (another C library: musl, macOS, Windows)."""
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


def release_free_heap() -> None:
    """Give freed heap pages back to the OS once per block: glibc ``malloc_trim(0)`` (malloc_trim(3)).

    Why: after torch frees its large activation buffers, glibc raises its dynamic mmap threshold and
    serves later ones from the heap, which then fragments; peak RSS crept up with the number of blocks
    (1,440 MB after 3,000 documents against 1,248 MB with this call, default model, 256-row blocks).
    A no-op where the C library is not glibc.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _fixed_list(values: np.ndarray, valid: np.ndarray, list_type: pa.FixedSizeListType) -> pa.Array:
    """(n, D) float32 and (n,) validity -> fixed_size_list<float>[D] with nulls where not valid."""
    flat = pa.array(values.astype(list_type.value_type.to_pandas_dtype()).reshape(-1), type=list_type.value_type)
    mask = pa.array(~valid) if not valid.all() else None
    return pa.FixedSizeListArray.from_arrays(flat, list_size=list_type.list_size, mask=mask)


def _list_array(items: list[np.ndarray | None], list_type: pa.ListType) -> pa.Array:
    """Per row an (m,) or (m, k) array, or None -> list<x> or list<fixed_size_list<x>[k]> with nulls."""
    inner = list_type.value_type
    fixed = pa.types.is_fixed_size_list(inner)
    leaf = inner.value_type if fixed else inner
    dtype = leaf.to_pandas_dtype()
    offsets = np.zeros(len(items) + 1, dtype=np.int32)
    chunks = []
    for i, item in enumerate(items):
        offsets[i + 1] = offsets[i] + (item.shape[0] if item is not None else 0)
        if item is not None:
            chunks.append(item.astype(dtype).reshape(-1))
    flat = pa.array(np.concatenate(chunks) if chunks else np.zeros(0, dtype), type=leaf)
    values = pa.FixedSizeListArray.from_arrays(flat, list_size=inner.list_size) if fixed else flat
    mask = pa.array([item is None for item in items], type=pa.bool_())
    return pa.ListArray.from_arrays(pa.array(offsets), values, type=list_type, mask=mask)


def token_features(doc: TokenizedDoc, windows: list[Window], window_tokens: list[np.ndarray]):
    """Per-token output of one document: (token_ids, positions, offsets, token_features).

    Every position that is in some window appears once, ascending. A token in two overlapping
    windows takes its vector from the window where it has the most context, min(tokens left,
    tokens right) within the window (the "max context" rule of BERT's SQuAD code, Devlin et al.
    2019); on a tie the earlier window wins.

    Returns:
        token_ids int32 (m,), positions int32 (m,), offsets int32 (m, 2), token_features (m, D) float32.
    """
    positions, feats = max_context([w.positions for w in windows], window_tokens)    # (m,), (m, D)
    return (doc.ids[positions].astype(np.int32), positions.astype(np.int32),
            doc.offsets[positions].astype(np.int32), feats)
