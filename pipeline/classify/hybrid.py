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


def hybrid_inputs(texts: Sequence[str], vectors: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """The X of HybridClassifier: one (text, vector) pair per document, a list so that scikit-learn's
    splitters (cross_val_score, cross_validate) index it like any array.

    Args:
        texts: N documents (str; None reads as ""); vectors: (N, D) float BERT document vectors, row i of text i.
    Raises:
        ValueError: texts and vectors differ in length, or vectors is not 2-D.
    """
    V = np.asarray(vectors)
    if V.ndim != 2 or len(V) != len(texts):
        raise ValueError(f"hybrid_inputs: {len(texts)} texts and vectors of shape {V.shape}; need (N, D), one row a text")
    return [("" if t is None else str(t), V[i]) for i, t in enumerate(texts)]


def _split(X) -> tuple[np.ndarray, np.ndarray]:
    """(texts (N,) object, vectors (N, D) float32) of hybrid_inputs pairs. Raises ValueError on anything else."""
    try:
        texts = np.asarray([t for t, _ in X], dtype=object)
        V = np.stack([np.asarray(v, dtype=np.float32) for _, v in X]) if len(X) else np.empty((0, 0), np.float32)
    except (TypeError, ValueError) as err:
        raise ValueError("HybridClassifier takes X = plain texts (a list of str, encoded by its vectorizer) or "
                         f"hybrid_inputs(texts, vectors): (text, vector) pairs; got a {type(X).__name__} "
                         "of neither") from err
    return texts, V


def _is_texts(X) -> bool:
    """True when X is plain texts (every element a str: a list, tuple, 1-D array or Series of str), False for
    anything else (hybrid_inputs pairs among them)."""
    items = X.tolist() if hasattr(X, "tolist") else X
    try:
        return len(items) > 0 and all(isinstance(t, str) for t in items)
    except TypeError:
        return False


def _inner_folds(y: np.ndarray, folds: int) -> int:
    """An inner k for the rows of y: folds, lowered so every class keeps a row in each part (>= 2)."""
    smallest = int(np.unique(y.astype(str), return_counts=True)[1].min())
    if smallest < 2:
        raise ValueError(f"HybridClassifier: a class has {smallest} training row; stacking needs >= 2 of each")
    return max(2, min(folds, smallest))


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
        vectorizer: the LongBertVectorizer that encodes plain texts (its options are the feature's: model,
            strategy, pooling, layers, aggregate, feature, ...; nested parameters such as
            ``vectorizer__strategy`` reach them); None: LongBertVectorizer() with its defaults. Cloned at fit.

    X is either N plain texts (a list, tuple, 1-D array or Series of str), encoded by the vectorizer
    once per call (its ":memory:" window store, the default, keeps each window's vector, so folds and
    clones of a cross-validation encode each distinct text once), or ``hybrid_inputs(texts, vectors)``:
    N (text, (D,) vector) pairs of vectors computed beforehand (the vectorizer is then not used); y (N,) labels.

    Attributes after fit: classes_ (the sorted labels), text_model_, bert_model_ (the base models
    refitted on all of fit's rows), meta_model_ (the second level, on 2 x n_classes probabilities:
    the lexical model's, then the BERT model's), inner_folds_ (the k used), text_C_ (the lexical C used),
    vectorizer_ (the fitted clone of vectorizer when fit was given plain texts, else None).

    Example:
        >>> model = HybridClassifier(vectorizer=LongBertVectorizer(strategy="head", layers=(-2,)))
        >>> cross_val_score(model, texts, labels, cv=StratifiedKFold(5, shuffle=True, random_state=0))
    """

    def __init__(self, text_C: float | None = None, bert_C: float = 1.0, meta_C: float = 1.0, inner_folds: int = 5,
                 seed: int = 0, vectorizer: Any = None):
        self.text_C = text_C
        self.bert_C = bert_C
        self.meta_C = meta_C
        self.inner_folds = inner_folds
        self.seed = seed
        self.vectorizer = vectorizer

    def _texts_vectors(self, X, fitting: bool) -> tuple[np.ndarray, np.ndarray]:
        """(texts (N,) object, vectors (N, D) float32) of X: hybrid_inputs pairs as given, or plain texts
        encoded by vectorizer_ (set by fit: a clone of vectorizer, LongBertVectorizer() when None; None
        when fit was given pairs).

        Raises:
            ValueError: X is neither; or plain texts after a fit on pairs (no vectorizer was fitted).
            TextError, ConfigError, ModelError: from LongBertVectorizer (a text that cannot be embedded,
                a bad option, a model that does not load).
        """
        if not _is_texts(X):
            if fitting:
                self.vectorizer_ = None
            return _split(X)
        texts = np.asarray(X.tolist() if hasattr(X, "tolist") else list(X), dtype=object)   # (N,)
        if fitting:
            from .vectorizer import LongBertVectorizer

            self.vectorizer_ = (LongBertVectorizer() if self.vectorizer is None else clone(self.vectorizer)).fit(texts)
        elif self.vectorizer_ is None:
            raise ValueError("HybridClassifier was fitted on (text, vector) pairs, so it has no vectorizer for "
                             "plain texts: pass hybrid_inputs(texts, vectors), or fit it on plain texts")
        return texts, self.vectorizer_.transform(texts.tolist())   # (N, D) float32

    def _text_model(self, C: float):
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import Pipeline

        return Pipeline([("tfidf", TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2)),
                         ("lr", LogisticRegression(C=C, max_iter=2000))])

    def _bert_model(self):
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        return make_pipeline(StandardScaler(), LogisticRegression(C=self.bert_C, max_iter=2000))

    def fit(self, X, y):
        """Fit on N plain texts or (text, vector) pairs and (N,) labels; returns self.

        Raises:
            ValueError: X is neither plain texts nor hybrid_inputs pairs, a class has fewer than 2 rows,
                or (from scikit-learn) no term survives min_df=2.
            TextError, ConfigError, ModelError: from the vectorizer, on plain texts.
        """
        from sklearn.linear_model import LogisticRegression
        from sklearn.model_selection import StratifiedKFold, cross_val_predict

        texts, V = self._texts_vectors(X, fitting=True)
        y = np.asarray(y)
        self.classes_ = np.unique(y)
        self.inner_folds_ = _inner_folds(y, self.inner_folds)
        cv = StratifiedKFold(n_splits=self.inner_folds_, shuffle=True, random_state=self.seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # ConvergenceWarning on tiny folds
            if self.text_C is None:           # C searched once on fit's rows, then used by every inner model
                from .folds import lexical_model

                smallest = int(np.unique(y.astype(str), return_counts=True)[1].min())
                k = max(2, min(self.inner_folds, smallest - -(-smallest // self.inner_folds)))
                search = lexical_model(k, self.seed).fit(texts, y)
                self.text_C_ = float(search.best_params_["lr__C"])
            else:
                self.text_C_ = float(self.text_C)
            splits = list(cv.split(V, y))
            text_p = np.zeros((len(y), len(self.classes_)))
            bert_p = np.zeros((len(y), len(self.classes_)))
            for tr, te in splits:   # out-of-fold probabilities: each row from models that never saw it
                tm = self._text_model(self.text_C_).fit(texts[tr], y[tr])
                bm = self._bert_model().fit(V[tr], y[tr])
                text_p[np.ix_(te, np.searchsorted(self.classes_, tm.classes_))] = tm.predict_proba(texts[te])
                bert_p[np.ix_(te, np.searchsorted(self.classes_, bm.classes_))] = bm.predict_proba(V[te])
            self.meta_model_ = LogisticRegression(C=self.meta_C, max_iter=2000).fit(np.hstack([text_p, bert_p]), y)
            self.text_model_ = self._text_model(self.text_C_).fit(texts, y)
            self.bert_model_ = self._bert_model().fit(V, y)
        return self

    def _level_one(self, X) -> np.ndarray:
        texts, V = self._texts_vectors(X, fitting=False)
        return np.hstack([self.text_model_.predict_proba(texts), self.bert_model_.predict_proba(V)])

    def predict_proba(self, X) -> np.ndarray:
        """(N, n_classes) float64 probabilities, columns in classes_ order, of N plain texts or (text, vector)
        pairs. Raises NotFittedError before fit, ValueError as fit (and for plain texts after a fit on pairs)."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "meta_model_")
        return self.meta_model_.predict_proba(self._level_one(X))

    def predict(self, X) -> np.ndarray:
        """(N,) labels (classes_ dtype): the most probable class of predict_proba."""
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]


def cross_validate_hybrid(texts: Sequence[str], X: np.ndarray, y: np.ndarray, folds: int, seed: int,
                          **params: Any) -> dict[str, Any]:
    """cross_validate_probe's keys (and "seconds") for HybridClassifier(seed=seed, **params) on the
    texts and (N, D) BERT vectors X, under the outer StratifiedKFold(folds, shuffle=True,
    random_state=seed) of every probe row."""
    import time

    from sklearn.model_selection import StratifiedKFold, cross_validate

    t0 = time.perf_counter()
    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scores = cross_validate(HybridClassifier(seed=seed, **params), hybrid_inputs(texts, X), y, cv=cv,
                                scoring=("accuracy", "f1_macro"))
    acc, f1 = scores["test_accuracy"], scores["test_f1_macro"]
    return {"folds": folds, "accuracy": acc.tolist(), "accuracy_mean": float(acc.mean()),
            "accuracy_std": float(acc.std()), "f1_macro": f1.tolist(), "f1_macro_mean": float(f1.mean()),
            "f1_macro_std": float(f1.std()), "seconds": time.perf_counter() - t0}
