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
from typing import Any, Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone

from .hybrid_input import texts_or_pairs, hybrid_inputs  # noqa: F401 - hybrid_inputs: re-exported
from .hybrid_text import (NO_WORD_TERMS, TextHalf, bert_model, fit_text_half,  # noqa: F401 - re-exported
                          search_folds, text_model)

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


def cross_validate_hybrid(texts: Sequence[str], X: np.ndarray, y: np.ndarray, folds: int, seed: int,
                          **params: Any) -> dict[str, Any]:
    """cross_validate_probe's keys (and "seconds") for HybridClassifier(seed=seed, **params) on the
    texts and (N, D) BERT vectors X (a tuple of matrices: several features), under the outer StratifiedKFold(folds, shuffle=True,
    random_state=seed) of every probe row."""
    import time

    from sklearn.model_selection import StratifiedKFold, cross_validate

    t0 = time.perf_counter()
    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pairs = hybrid_inputs(texts, *X) if isinstance(X, (list, tuple)) else hybrid_inputs(texts, X)
        scores = cross_validate(HybridClassifier(seed=seed, **params), pairs, y, cv=cv,
                                scoring=("accuracy", "f1_macro"))
    acc, f1 = scores["test_accuracy"], scores["test_f1_macro"]
    return {"folds": folds, "accuracy": acc.tolist(), "accuracy_mean": float(acc.mean()),
            "accuracy_std": float(acc.std()), "f1_macro": f1.tolist(), "f1_macro_mean": float(f1.mean()),
            "f1_macro_std": float(f1.std()), "seconds": time.perf_counter() - t0}


def cross_validate_hybrids(texts: Sequence[str], matrices: Sequence[np.ndarray], y: np.ndarray, folds: int, seed: int,
                           lexical_Cs: Sequence[float] | None = None, lexical_folds: int | None = None,
                           jobs: int = 1, analyzer: str = "word") -> list[dict[str, Any]]:
    """cross_validate_hybrid of each (N, D) matrix on the same texts, labels and outer folds, with the
    lexical half fitted once per outer fold for all of them (the results are the same as one
    cross_validate_hybrid each; the cost of the lexical half is paid once, not once per matrix).

    Args:
        texts: N documents; matrices: BERT document vectors, each (N, D_j), or a tuple of such matrices (a
            hybrid of several features: one BERT model each); y: (N,) labels.
        folds, seed: the outer StratifiedKFold(folds, shuffle=True, random_state=seed) of every probe row.
        lexical_Cs, lexical_folds: the probe's lexical row's C per outer fold and the k of its C search
            (cross_validate_lexical's "C" and "inner_folds"): where that k is the hybrid's own search's
            (search_folds of the fold's labels), its search gave the same C on the same rows and the
            C is taken as it is; None: each fold searches.
        jobs: processes (joblib) for the outer folds' lexical halves, then for the BERT halves, one
            matrix at a time each; the scores do not depend on it.
        analyzer: the lexical n-grams ("word" or "char_wb"), as HybridClassifier(analyzer=...).

    Returns:
        Per matrix, cross_validate_hybrid's keys; "seconds" is the shared lexical half's time split
        evenly, plus the matrix's own.
    """
    import time

    from joblib import Parallel, delayed
    from sklearn.model_selection import StratifiedKFold

    from .folds import ngram_counts, one_blas_thread

    t0 = time.perf_counter()
    counts = ngram_counts(texts, analyzer)   # the texts analysed once
    y = np.asarray(y)
    outer = list(StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed).split(np.zeros(len(y)), y))
    given = [float(lexical_Cs[i]) if lexical_Cs is not None and lexical_folds == search_folds(y[tr], 5) else None
             for i, (tr, _) in enumerate(outer)]
    # the outer folds' lexical halves in parallel too (each a process with one BLAS thread, as joblib sets;
    # with jobs=1 they run here, under one_blas_thread: small fits for which a second thread costs more)
    with one_blas_thread():
        halves = Parallel(n_jobs=min(jobs, len(outer)))(
            delayed(_text_half)(counts[tr], y[tr], counts[te], c, seed) for (tr, te), c in zip(outer, given))
        shared = (time.perf_counter() - t0) / max(1, len(matrices))
        scores = Parallel(n_jobs=jobs)(delayed(_bert_halves)(X, y, outer, halves, seed) for X in matrices)
    for score in scores:
        score["seconds"] += shared
    return scores


def _text_half(train: np.ndarray, y: np.ndarray, test: np.ndarray, C: float | None, seed: int):
    """(fit_text_half on one outer fold's training count rows, its class probabilities of the fold's test rows)."""
    half = fit_text_half(train, y, C, 5, seed, counted=True)
    return half, half.model.predict_proba(test)


def _bert_halves(X: np.ndarray, y: np.ndarray, outer: list, halves: list, seed: int) -> dict[str, Any]:
    """One matrix's outer cross-validation given each outer fold's lexical half and its test-row
    probabilities: HybridClassifier(seed=seed).fit_with_text_half on the fold's training rows, then the second level
    on the test rows' base probabilities; accuracy and macro-F1 as scikit-learn's scorers compute them."""
    import time

    from sklearn.metrics import accuracy_score, f1_score

    t0 = time.perf_counter()
    acc, f1 = [], []
    for (tr, te), (half, text_test) in zip(outer, halves):
        matrices = list(X) if isinstance(X, (list, tuple)) else [X]   # several features: one matrix each
        model = HybridClassifier(seed=seed).fit_with_text_half([np.asarray(M[tr], np.float32) for M in matrices],
                                                               y[tr], half)
        level_one = np.hstack([text_test, *model.bert_probabilities([np.asarray(M[te], np.float32) for M in matrices])])
        pred = model.classes_[np.argmax(model.meta_model_.predict_proba(level_one), axis=1)]
        acc.append(accuracy_score(y[te], pred))
        f1.append(f1_score(y[te], pred, average="macro"))
    acc, f1 = np.asarray(acc), np.asarray(f1)
    return {"folds": len(outer), "accuracy": acc.tolist(), "accuracy_mean": float(acc.mean()),
            "accuracy_std": float(acc.std()), "f1_macro": f1.tolist(), "f1_macro_mean": float(f1.mean()),
            "f1_macro_std": float(f1.std()), "seconds": time.perf_counter() - t0}
