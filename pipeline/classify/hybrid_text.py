"""The lexical half of ``HybridClassifier`` (pipeline.classify.hybrid) and its base models: what depends on the
texts alone (``fit_text_half``: out-of-fold probabilities of TF-IDF + LogisticRegression on inner folds), so
that hybrids of several BERT features on the same rows fit it once; ``bert_model``, the BERT base model."""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np


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
