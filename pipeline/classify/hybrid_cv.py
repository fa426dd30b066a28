"""The cross-validations of ``HybridClassifier`` (pipeline.classify.hybrid) on the probe's outer folds:
``cross_validate_hybrid`` (one estimator, as scikit-learn scores it) and ``cross_validate_hybrids`` (several
BERT inputs on the same texts, the lexical half fitted once per outer fold)."""
from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np



def cross_validate_hybrid(texts: Sequence[str], X: np.ndarray, y: np.ndarray, folds: int, seed: int,
                          **params: Any) -> dict[str, Any]:
    """cross_validate_probe's keys (and "seconds") for HybridClassifier(seed=seed, **params) on the
    texts and (N, D) BERT vectors X (a tuple of matrices: several features), under the outer StratifiedKFold(folds, shuffle=True,
    random_state=seed) of every probe row."""
    import time

    from sklearn.model_selection import StratifiedKFold, cross_validate

    from .hybrid import HybridClassifier, hybrid_inputs   # here: pipeline.classify.hybrid re-exports this module

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
    from .hybrid import search_folds

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
    from .hybrid import fit_text_half

    half = fit_text_half(train, y, C, 5, seed, counted=True)
    return half, half.model.predict_proba(test)


def _bert_halves(X: np.ndarray, y: np.ndarray, outer: list, halves: list, seed: int) -> dict[str, Any]:
    """One matrix's outer cross-validation given each outer fold's lexical half and its test-row
    probabilities: HybridClassifier(seed=seed).fit_with_text_half on the fold's training rows, then the second level
    on the test rows' base probabilities; accuracy and macro-F1 as scikit-learn's scorers compute them."""
    import time

    from sklearn.metrics import accuracy_score, f1_score

    from .hybrid import HybridClassifier

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
