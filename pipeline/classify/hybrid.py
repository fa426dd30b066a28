"""``HybridClassifier``: a stacked combination of a lexical model (TF-IDF of word uni+bigrams +
LogisticRegression) and a linear model on BERT document vectors (StandardScaler + LogisticRegression).

The method is stacked generalization (Wolpert 1992, "Stacked generalization", Neural Networks 5(2)):
within the training rows, an inner StratifiedKFold gives out-of-fold class probabilities of each base
model; a second-level LogisticRegression is fitted on those probabilities side by side; the base
models are then refitted on all the training rows, and at prediction time their probabilities feed
the second level. No choice (TF-IDF vocabulary and IDF, either C, the second level) sees rows outside
``fit``'s, so an outer cross-validation of the estimator is a nested one. Plain texts are encoded by a
``LongBertVectorizer`` (the estimator's ``vectorizer`` parameter); precomputed vectors come as
``hybrid_inputs`` pairs. Used by ``longbert probe``'s hybrid rows (cross_validate_hybrid) and from Python.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone

from .hybrid_input import texts_or_pairs, hybrid_inputs  # noqa: F401 - hybrid_inputs: re-exported

NO_WORD_TERMS = ("HybridClassifier: no word or word pair occurs in 2 training texts, so the lexical model has no terms "
                 "(text without spaces between words, e.g. Chinese or Japanese?); pass analyzer='char_wb' for "
                 "character n-grams")


def _inner_folds(y: np.ndarray, folds: int) -> int:
    """An inner k for the rows of y: folds, lowered so every class keeps a row in each part (>= 2)."""
    smallest = int(np.unique(y.astype(str), return_counts=True)[1].min())
    if smallest < 2:
        raise ValueError(f"HybridClassifier: a class has {smallest} training row; stacking needs >= 2 of each")
    return max(2, min(folds, smallest))


def text_model(C: float, analyzer: str = "word"):
    """The lexical base model, unfitted: TF-IDF of word uni+bigrams (``analyzer`` "char_wb": character
    uni+bigrams; pipeline.classify.folds.ngram_options) (sublinear tf, min_df 2) + LogisticRegression(C),
    as the probe's lexical row (pipeline.classify.folds.lexical_model)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline

    from .folds import ngram_options

    return Pipeline([("tfidf", TfidfVectorizer(**ngram_options(analyzer), sublinear_tf=True, min_df=2)),
                     ("lr", LogisticRegression(C=C, max_iter=2000))])


def bert_model(C: float):
    """The BERT base model, unfitted: StandardScaler + LogisticRegression(C), as the probe's BERT rows."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=2000))


def search_folds(y: np.ndarray, inner_folds: int) -> int:
    """k of the lexical C search on the rows of y: inner_folds, lowered so that each class keeps
    >= k - 1 rows in a search's training part (>= 2)."""
    smallest = int(np.unique(y.astype(str), return_counts=True)[1].min())
    return max(2, min(inner_folds, smallest - -(-smallest // inner_folds)))


@dataclass(frozen=True)
class TextHalf:
    """The lexical half of a HybridClassifier fitted on N rows: what depends on the texts alone, so that
    hybrids of several BERT features on the same rows fit it once.

    Fields: classes ((n_classes,) sorted labels), inner_folds (k), splits (the k inner (train, test)
    index arrays), C (the lexical C used), oof ((N, n_classes) float64 out-of-fold probabilities of the
    lexical model, columns in classes order), model (the lexical model refitted on all N rows).
    """
    classes: np.ndarray
    inner_folds: int
    splits: tuple
    C: float
    oof: np.ndarray
    model: Any


def fit_text_half(texts: np.ndarray, y: np.ndarray, text_C: float | None, inner_folds: int, seed: int,
                  counted: bool = False, analyzer: str = "word") -> TextHalf:
    """The lexical half of a hybrid on (N,) texts (object) and (N,) labels; with ``counted``, ``texts``
    are the rows of the corpus's n-gram counts (pipeline.classify.folds.ngram_counts) and the models are
    pipeline.classify.folds.counted_text_model's (the same probabilities; the probe's hybrid rows).
    ``analyzer``: the n-grams of plain texts ("word" or "char_wb"; text_model).

    text_C None: C searched over LEXICAL_CS by pipeline.classify.folds.lexical_model with
    search_folds(y, inner_folds) folds (the probe's lexical row makes the same search on the same rows).
    The out-of-fold probabilities come from StratifiedKFold(_inner_folds(y, inner_folds), shuffle=True,
    random_state=seed).

    Raises:
        ValueError: a class has fewer than 2 rows, or no n-gram occurs in 2 training texts (for the word
            analyzer the message says to pass analyzer="char_wb": text without spaces between words).
    """
    from sklearn.model_selection import StratifiedKFold

    from .folds import no_terms

    classes = np.unique(y)
    k = _inner_folds(y, inner_folds)
    splits = tuple(StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(np.zeros(len(y)), y))
    try:
        return _fit_text_half_on(texts, y, text_C, inner_folds, seed, counted, analyzer, classes, k, splits)
    except ValueError as err:
        if not no_terms(err) or counted or analyzer != "word":
            raise
        raise ValueError(NO_WORD_TERMS) from err


def _fit_text_half_on(texts, y, text_C, inner_folds, seed, counted, analyzer, classes, k, splits) -> TextHalf:
    """fit_text_half's work once its inner folds are drawn."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # ConvergenceWarning on tiny folds
        if text_C is None:                # C searched once on these rows, then used by every inner model
            from .folds import counted_lexical_model, lexical_model

            search = (counted_lexical_model(search_folds(y, inner_folds), seed) if counted
                      else lexical_model(search_folds(y, inner_folds), seed, analyzer))
            text_C = search.fit(texts, y).best_params_["lr__C"]
        from .folds import counted_text_model

        model_of = counted_text_model if counted else (lambda C: text_model(C, analyzer))
        oof = np.zeros((len(y), len(classes)))
        for tr, te in splits:
            tm = model_of(float(text_C)).fit(texts[tr], y[tr])
            oof[np.ix_(te, np.searchsorted(classes, tm.classes_))] = tm.predict_proba(texts[te])
        model = model_of(float(text_C)).fit(texts, y)
    return TextHalf(classes, k, splits, float(text_C), oof, model)


class HybridClassifier(ClassifierMixin, BaseEstimator):
    """Stacking of TF-IDF + LogisticRegression and StandardScaler + LogisticRegression on BERT vectors.

    Args:
        text_C: the lexical model's C; None (default) chooses it from pipeline.classify.folds.LEXICAL_CS
            once per fit, by the probe baseline's inner StratifiedKFold search
            (pipeline.classify.folds.lexical_model) on fit's rows, and uses it for the inner and the
            final lexical models (one search, not one per inner fold: cheaper, and still blind to
            any row outside fit's).
        bert_C: C of the BERT vectors' LogisticRegression (1.0, as the probe's BERT rows).
        meta_C: C of the second-level LogisticRegression on the base models' probabilities.
        inner_folds: k of the inner StratifiedKFold that gives the out-of-fold probabilities (lowered to
            the smallest class's rows when that is fewer).
        seed: random_state of the inner folds.
        analyzer: the lexical model's n-grams: "word" (word uni+bigrams) or "char_wb" (character
            uni+bigrams, for text without spaces between words: Chinese, Japanese, Thai).
        vectorizer: the LongBertVectorizer that encodes plain texts (its options are the feature's: model,
            strategy, pooling, layers, aggregate, feature, ...; nested parameters such as
            ``vectorizer__strategy`` reach them); None: LongBertVectorizer() with its defaults. Cloned at fit.
            A list of vectorizers stacks several BERT features: one StandardScaler + LogisticRegression per
            feature beside the lexical model, all under the one second level.

    X is either N plain texts in any form LongBertVectorizer takes (a list, tuple, 1-D array or Series
    of str, an (N, 1) array or a one-column DataFrame such as ``df[["text"]]``), encoded by the vectorizer
    once per call (its ":memory:" window store, the default, keeps each window's vector, so folds and
    clones of a cross-validation encode each distinct text once), or ``hybrid_inputs(texts, vectors)``:
    N (text, (D,) vector) pairs of vectors computed beforehand (the vectorizer is then not used), or
    ``hybrid_inputs(texts, X1, X2, ...)`` for several features; y (N,) labels.

    Attributes after fit: classes_ (the sorted labels), text_model_, bert_model_ (the base models
    refitted on all of fit's rows; bert_models_ one per feature, bert_model_ the first), meta_model_ (the
    second level, on (1 + features) x n_classes probabilities: the lexical model's, then each BERT model's),
    inner_folds_ (the k used), text_C_ (the lexical C used), vectorizer_ (the fitted clone of vectorizer, a
    list of them for several, when fit was given plain texts, else None).

    Example:
        >>> model = HybridClassifier(vectorizer=LongBertVectorizer(strategy="head", layers=(-2,)))
        >>> cross_val_score(model, texts, labels, cv=StratifiedKFold(5, shuffle=True, random_state=0))
        >>> HybridClassifier(vectorizer=[LongBertVectorizer(feature="head:mean"), LongBertVectorizer(feature="late:max")])
    """

    def __init__(self, text_C: float | None = None, bert_C: float = 1.0, meta_C: float = 1.0, inner_folds: int = 5,
                 seed: int = 0, vectorizer: Any = None, analyzer: str = "word"):
        self.text_C = text_C
        self.bert_C = bert_C
        self.meta_C = meta_C
        self.inner_folds = inner_folds
        self.seed = seed
        self.vectorizer = vectorizer
        self.analyzer = analyzer

    def _texts_vectors(self, X, fitting: bool, caller: str) -> tuple[np.ndarray, np.ndarray]:
        """(texts (N,) object, vectors (N, D) float32) of X: hybrid_inputs pairs as given, or plain texts
        (any form texts_or_pairs takes) encoded by vectorizer_ (set by fit: a clone of vectorizer,
        LongBertVectorizer() when None; None when fit was given pairs).

        Raises:
            TextsTypeError (a ValueError): X is neither. ValueError: plain texts after a fit on pairs (no
                vectorizer was fitted).
            TextError, ConfigError, ModelError: from LongBertVectorizer (a text that cannot be embedded,
                a bad option, a model that does not load).
        """
        texts, V = texts_or_pairs(X, caller)
        if V is not None:
            if fitting:
                self.vectorizer_ = None
            return texts, V
        if fitting:
            from .vectorizer import LongBertVectorizer

            given = self.vectorizer if self.vectorizer is not None else LongBertVectorizer()
            self.vectorizer_ = ([clone(v).fit(texts) for v in given] if isinstance(given, (list, tuple))
                                else clone(given).fit(texts))
        elif self.vectorizer_ is None:
            raise ValueError("HybridClassifier was fitted on (text, vector) pairs, so it has no vectorizer for "
                             "plain texts: pass hybrid_inputs(texts, vectors), or fit it on plain texts")
        if isinstance(self.vectorizer_, list):   # several features: one (N, D_k) float32 matrix each
            return texts, [v.transform(texts.tolist()) for v in self.vectorizer_]
        return texts, self.vectorizer_.transform(texts.tolist())   # (N, D) float32

    def fit(self, X, y):
        """Fit on N plain texts (a list, tuple, 1-D array or Series of str, an (N, 1) array or a one-column
        DataFrame) or (text, vector) pairs and (N,) labels; returns self.

        Raises:
            TextsTypeError (a TypeError and a ValueError): X is neither plain texts nor hybrid_inputs
                pairs, naming what was given (e.g. a DataFrame of two columns).
            ValueError: a class has fewer than 2 rows, or no n-gram occurs in 2 training texts
                (NO_WORD_TERMS for the word analyzer: pass analyzer="char_wb").
            TextError, ConfigError, ModelError: from the vectorizer, on plain texts.
        """
        from sklearn.feature_extraction.text import CountVectorizer
        from sklearn.pipeline import Pipeline

        from .folds import ngram_options, no_terms, one_blas_thread

        texts, V = self._texts_vectors(X, fitting=True, caller="fit")
        y = np.asarray(y)
        # probe's fast path: the texts analysed once into n-gram counts, every inner fit and the C search on
        # rows of them (FoldTfidf: the same TF-IDF as TfidfVectorizer on the rows' texts), one BLAS thread
        counter = CountVectorizer(**ngram_options(self.analyzer))
        try:
            with one_blas_thread():
                counts = counter.fit_transform([("" if t is None else str(t)) for t in texts]).tocsr()  # (N, V)
                half = fit_text_half(counts, y, self.text_C, self.inner_folds, self.seed, counted=True)
                self.fit_with_text_half(V, y, half)
        except ValueError as err:
            if not no_terms(err) or self.analyzer != "word":
                raise
            raise ValueError(NO_WORD_TERMS) from err
        self.text_model_ = Pipeline([("counts", counter), ("lexical", half.model)])   # texts in, as before
        return self

    def fit_with_text_half(self, V: np.ndarray | Sequence[np.ndarray], y: np.ndarray, text: TextHalf) -> HybridClassifier:
        """The BERT half (one model per matrix when ``V`` is a list of (N, D_k) matrices) and the second level on
        (N, D) V and (N,) y, beside ``text`` (fit_text_half of the same rows, inner folds and seed: one such
        half serves every feature of a probe's fold)."""
        from sklearn.linear_model import LogisticRegression

        self.classes_, self.inner_folds_, self.text_C_ = text.classes, text.inner_folds, text.C
        matrices = list(V) if isinstance(V, (list, tuple)) else [V]
        level = [text.oof]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # ConvergenceWarning on tiny folds
            for M in matrices:
                bert_p = np.zeros((len(y), len(self.classes_)))
                for tr, te in text.splits:   # out-of-fold probabilities: each row from models that never saw it
                    bm = bert_model(self.bert_C).fit(M[tr], y[tr])
                    bert_p[np.ix_(te, np.searchsorted(self.classes_, bm.classes_))] = bm.predict_proba(M[te])
                level.append(bert_p)
            self.meta_model_ = LogisticRegression(C=self.meta_C, max_iter=2000).fit(np.hstack(level), y)
            self.text_model_ = text.model
            self.bert_models_ = [bert_model(self.bert_C).fit(M, y) for M in matrices]
            self.bert_model_ = self.bert_models_[0]
        return self

    def bert_probabilities(self, V: np.ndarray | Sequence[np.ndarray]) -> list[np.ndarray]:
        """Each fitted BERT model's (N, n_classes) probabilities of its matrix of ``V`` (one, or a list)."""
        matrices = list(V) if isinstance(V, (list, tuple)) else [V]
        return [m.predict_proba(M) for m, M in zip(self.bert_models_, matrices)]

    def _level_one(self, X, caller: str) -> np.ndarray:
        """(N, (1 + features) x n_classes) base-model probabilities of X, after the fitted check.

        Raises:
            NotFittedError: before fit (before X is looked at).
        """
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "meta_model_")
        texts, V = self._texts_vectors(X, fitting=False, caller=caller)
        return np.hstack([self.text_model_.predict_proba(texts), *self.bert_probabilities(V)])

    def predict_proba(self, X) -> np.ndarray:
        """(N, n_classes) float64 probabilities, columns in classes_ order, of N plain texts (any form fit
        takes) or (text, vector) pairs.

        Raises:
            NotFittedError: before fit. ValueError, TextsTypeError: as fit (and for plain texts after a fit on pairs).
        """
        level_one = self._level_one(X, "predict_proba")   # NotFittedError first
        return self.meta_model_.predict_proba(level_one)

    def predict(self, X) -> np.ndarray:
        """(N,) labels (classes_ dtype): the most probable class of predict_proba. Raises as predict_proba."""
        level_one = self._level_one(X, "predict")   # NotFittedError first
        return self.classes_[np.argmax(self.meta_model_.predict_proba(level_one), axis=1)]

    def __sklearn_tags__(self):
        """A classifier of texts, as LongBertVectorizer declares: 1-D input of str (or pairs), not a 2-D
        numeric array, so scikit-learn's check_estimator runs only the checks that apply to text input."""
        tags = super().__sklearn_tags__()
        tags.input_tags.one_d_array = True
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        return tags


# the cross-validations of the estimator (probe's hybrid rows), re-exported: they build HybridClassifier
from .hybrid_cv import cross_validate_hybrid, cross_validate_hybrids  # noqa: E402,F401
