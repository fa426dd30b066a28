"""The stratified sample and the k-fold checks of ``longbert probe`` (pipeline.classify.probe): which rows a
corpus probe extracts, whether every class can be split into the folds, and the cross-validated
StandardScaler + LogisticRegression scores."""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin

from ..errors import InputError


def check_classes(y: np.ndarray, folds: int, source: str, label_col: str,
                   corpus: dict[str, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(classes, counts) of the labels, after the checks a stratified k-fold needs.

    Args:
        corpus: a corpus probe's rows per class in the whole corpus; the message then tells a class
            the corpus has too few rows of (add rows, or lower --folds) from one that lost rows in the
            sample or to row errors (the corpus has enough: no rows to add).

    Raises:
        InputError: fewer than 2 classes, or a class with fewer rows than folds (names up to 5 such
            classes and the fix; a class of 1 row cannot be split by any --folds).
    """
    classes, counts = np.unique(y.astype(str), return_counts=True)
    if len(classes) < 2:
        raise InputError(f"{source}: column {label_col!r} has {len(classes)} distinct value(s) over the "
                         f"{len(y)} rows with features; a probe needs at least 2 classes")
    if counts.min() >= folds:
        return classes, counts
    small = [(str(c), int(n)) for c, n in zip(classes, counts) if n < folds]
    listed = ", ".join(f"{c!r}: {n} row{'' if n == 1 else 's'}" for c, n in small[:5])
    if len(small) > 5:
        listed += f" and {len(small) - 5} more classes"
    head = f"{source}: stratified {folds}-fold needs >= {folds} rows per class; {listed}"
    lost = [(c, n, corpus[c]) for c, n in small if corpus is not None and corpus.get(c, 0) >= folds]
    if lost:
        c, n, has = lost[0]
        lower = f", or lower --folds to {int(counts.min())}" if counts.min() >= 2 else ""
        raise InputError(f"{head}; the corpus has {has} rows of {c!r}, but only {n} got features (the others have "
                         f"row errors, e.g. empty text; see the left-out rows): fix or drop those rows{lower}")
    if counts.min() < 2:  # no k >= 2 can stratify a class of one row
        raise InputError(f"{head}; a class of 1 row cannot be split by any --folds (2 is the least): add rows to "
                         "the 1-row classes or leave them out, or label with another --label-col")
    raise InputError(f"{head}; lower --folds to {int(counts.min())} or add rows of those classes")



def cross_validate_probe(X: np.ndarray, y: np.ndarray, folds: int, seed: int) -> dict[str, Any]:
    """Accuracy and macro-F1 per fold of StandardScaler + LogisticRegression(max_iter=2000) under
    StratifiedKFold(folds, shuffle=True, random_state=seed); X (N, D) float32, y (N,) str. "seconds": the
    wall time of the cross-validation (the extraction is not in it)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_validate
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    import time

    t0 = time.perf_counter()
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning on tiny folds must not drown the table
        scores = cross_validate(model, X, y, cv=cv, scoring=("accuracy", "f1_macro"))
    acc, f1 = scores["test_accuracy"], scores["test_f1_macro"]
    return {"folds": folds, "accuracy": acc.tolist(), "accuracy_mean": float(acc.mean()),
            "accuracy_std": float(acc.std()), "f1_macro": f1.tolist(), "f1_macro_mean": float(f1.mean()),
            "f1_macro_std": float(f1.std()), "seconds": time.perf_counter() - t0}


def stratified_sample(labels: np.ndarray, n: int, seed: int, min_per_class: int = 0) -> np.ndarray:
    """Row indices (ascending) of a stratified sample of ``n`` rows: each class keeps its share of the
    rows, rounded by largest remainder, drawn at random (numpy default_rng(seed)) within the class.
    All rows when n >= len(labels). Example: labels a x 60, b x 40, n 10 -> 6 a rows and 4 b rows.

    ``min_per_class`` (probe: the fold count): every class keeps at least min(its rows, min_per_class)
    rows, taken from the classes with the most rows above that floor, so a small class is not shrunk
    below what a stratified k-fold needs; when those floors alone exceed ``n`` the sample holds them
    (more than n rows). Example: a x 96, b x 4, n 20, min_per_class 4 -> 16 a rows and 4 b rows
    (a share alone would keep 1 b row).
    """
    total = len(labels)
    if n >= total:
        return np.arange(total)
    classes, inverse = np.unique(labels, return_inverse=True)
    counts = np.bincount(inverse)
    quota = counts * n / total
    take = np.floor(quota).astype(int)
    for c in np.argsort(-(quota - take), kind="stable")[: n - int(take.sum())]:
        take[c] += 1
    floor = np.minimum(counts, min_per_class)
    take = np.maximum(take, floor)
    surplus = int(take.sum()) - max(n, int(floor.sum()))
    while surplus > 0:  # give back the rows the floors added, one at a time from the largest excess
        c = int(np.argmax(take - floor))
        take[c] -= 1
        surplus -= 1
    rng = np.random.default_rng(seed)
    picked = [rng.choice(np.flatnonzero(inverse == c), size=int(k), replace=False) for c, k in enumerate(take)]
    return np.sort(np.concatenate(picked))


def one_blas_thread():
    """A context in which BLAS (OpenBLAS, MKL) runs one thread in this process (threadpoolctl): the probes'
    logistic regressions are many small vector operations, where a second BLAS thread costs more than it
    gives (cross_validate_lexical's ``jobs``). joblib's worker processes set the same for themselves."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


LEXICAL_CS = (0.01, 0.1, 1.0, 10.0, 100.0)   # the C grid of the lexical baseline's inner search
LEXICAL_NAME = "tfidf_word_1-2gram_lr"       # its row's name in the probe's table and --out CSV
# The lexical model's n-grams: word uni+bigrams; or, for text a word tokenizer cannot split (Chinese,
# Japanese, Thai: no spaces between words), character uni+bigrams inside word boundaries, what a
# scikit-learn user passes there (CountVectorizer(analyzer="char_wb", ngram_range=(1, 2))).
ANALYZERS = ("word", "char_wb")


def lexical_name(analyzer: str = "word") -> str:
    """The lexical row's name for its analyzer. Example: "char_wb" -> "tfidf_char_wb_1-2gram_lr"."""
    return LEXICAL_NAME if analyzer == "word" else f"tfidf_{analyzer}_1-2gram_lr"


def ngram_options(analyzer: str = "word") -> dict[str, Any]:
    """The CountVectorizer / TfidfVectorizer arguments of the lexical n-grams (ANALYZERS): uni+bigrams of
    words, or of characters within word boundaries. Raises ValueError for another analyzer."""
    if analyzer not in ANALYZERS:
        raise ValueError(f"analyzer={analyzer!r}; choose one of {ANALYZERS}")
    return {"ngram_range": (1, 2)} if analyzer == "word" else {"analyzer": analyzer, "ngram_range": (1, 2)}


def ngram_counts(texts, analyzer: str = "word"):
    """(N, V) CSR n-gram counts of N texts (None reads as ""), columns sorted by term: the input of
    FoldTfidf and counted_text_model. Raises ValueError (scikit-learn's) when the texts hold no n-gram."""
    from sklearn.feature_extraction.text import CountVectorizer

    docs = [("" if t is None else str(t)) for t in texts]
    return CountVectorizer(**ngram_options(analyzer)).fit_transform(docs).tocsr()


NO_TERMS = "After pruning, no terms remain"   # FoldTfidf's and TfidfVectorizer's message when min_df leaves none


def no_terms(err: BaseException) -> bool:
    """True when ``err`` says the n-grams left no term (none in >= 2 training texts, or none at all):
    the word analyzer on text without spaces between words."""
    return isinstance(err, ValueError) and (NO_TERMS in str(err) or "empty vocabulary" in str(err))


_MEMORY: list = []


def _tfidf_memory():
    """A joblib.Memory in a temporary folder (removed at exit) for the lexical pipeline: the grid's C values
    share each split's fitted TF-IDF (scikit-learn's Pipeline(memory=)), so TF-IDF is fitted once per split,
    not once per C; the results are the same."""
    if not _MEMORY:
        import atexit
        import shutil
        import tempfile

        from joblib import Memory

        folder = tempfile.mkdtemp(prefix="longbert-tfidf-")
        atexit.register(shutil.rmtree, folder, True)
        _MEMORY.append(Memory(location=folder, verbose=0))
    return _MEMORY[0]


def lexical_model(folds: int, seed: int, analyzer: str = "word"):
    """The lexical baseline, an unfitted scikit-learn estimator on raw texts: GridSearchCV over C
    (LEXICAL_CS, by accuracy) of Pipeline(TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True,
    min_df=2), LogisticRegression(max_iter=2000)) with an inner StratifiedKFold(folds, shuffle=True,
    random_state=seed); ``analyzer`` "char_wb": character uni+bigrams (ngram_options) in place of words.
    Cross-validated on the outer folds it is a nested CV: vocabulary, IDF and C
    are all chosen inside each outer training fold, never on its test fold. A word n-gram TF-IDF
    with a linear model is the baseline long-document BERT classifiers are measured against (Park et
    al. 2022, "Efficient classification of long documents using transformers")."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.pipeline import Pipeline

    pipe = Pipeline([("tfidf", TfidfVectorizer(**ngram_options(analyzer), sublinear_tf=True, min_df=2)),
                     ("lr", LogisticRegression(max_iter=2000))], memory=_tfidf_memory())
    inner = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    return GridSearchCV(pipe, {"lr__C": list(LEXICAL_CS)}, cv=inner, scoring="accuracy")


class FoldTfidf(TransformerMixin, BaseEstimator):
    """TF-IDF of a training fold, fitted on n-gram counts made once for the whole corpus: the same
    matrix as ``TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2)`` (with the counts'
    analyzer) fitted on the fold's texts, without analysing the texts again for every fold and C.

    Why it is the same: a document's n-gram counts do not depend on the other documents, and
    TfidfVectorizer's vocabulary is sorted, so the fold's vocabulary (the columns whose document
    frequency on the fold's rows is >= min_df) is a subset of the corpus's sorted columns in the same
    order. IDF is scikit-learn's smooth one, log((1 + n) / (1 + df)) + 1, over the fold's n rows; tf is
    1 + log(count); rows are L2-normalized (TfidfTransformer). Tested equal to TfidfVectorizer per fold.

    Input: (N, V) sparse counts (``ngram_counts(texts, analyzer)``; for words
    ``CountVectorizer(ngram_range=(1, 2)).fit_transform(texts)``), rows of the corpus. Output of
    transform: (n, V_fold) float64 CSR.
    """

    def __init__(self, min_df: int = 2):
        self.min_df = min_df

    def fit(self, counts, y=None):
        n = counts.shape[0]
        df = np.bincount(counts.tocsr().indices, minlength=counts.shape[1])       # (V,) documents per term
        self.columns_ = np.flatnonzero(df >= self.min_df)                          # the fold's vocabulary
        if not len(self.columns_):
            raise ValueError("After pruning, no terms remain. Try a lower min_df or a higher max_df.")
        self.idf_ = np.log((1.0 + n) / (1.0 + df[self.columns_])) + 1.0           # (V_fold,) float64
        self.n_features_ = len(self.columns_)
        return self

    def transform(self, counts):
        from sklearn.preprocessing import normalize

        X = counts.tocsr()[:, self.columns_].astype(np.float64)
        X.data = np.log(X.data) + 1.0                                              # sublinear tf
        X = X.multiply(self.idf_).tocsr()
        return normalize(X, norm="l2", copy=False)



def counted_text_model(C: float = 1.0):
    """The lexical model on the rows of a corpus's n-gram counts (ngram_counts, any analyzer): FoldTfidf
    (the same TF-IDF as TfidfVectorizer with those n-grams on the rows' texts) + LogisticRegression(C, max_iter=2000), as lexical_model's and
    pipeline.classify.hybrid.text_model's, without analysing the texts again."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline

    return Pipeline([("tfidf", FoldTfidf(min_df=2)), ("lr", LogisticRegression(C=C, max_iter=2000))])


def counted_lexical_model(folds: int, seed: int):
    """lexical_model on count rows (counted_text_model's C searched over LEXICAL_CS): the same scores and C."""
    from sklearn.model_selection import GridSearchCV, StratifiedKFold

    inner = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    return GridSearchCV(counted_text_model(), {"lr__C": list(LEXICAL_CS)}, cv=inner, scoring="accuracy")


def cross_validate_lexical(texts: list[str], y: np.ndarray, folds: int, seed: int, jobs: int = 1,
                           analyzer: str = "word") -> dict[str, Any]:
    """cross_validate_probe's keys for the lexical baseline (lexical_model's scores and C, computed from the
    texts' n-gram counts made once: FoldTfidf) on the raw texts, under the
    same outer StratifiedKFold(folds, shuffle=True, random_state=seed) as every BERT feature, plus
    "dimension" (the mean TF-IDF vocabulary size over the outer training folds), "C" (the C chosen on
    each outer training fold), "inner_folds" (the k of that search), "analyzer" and "seconds".

    Args:
        texts: N documents (str); y: (N,) labels (str). The inner search splits each outer training
            fold into ``folds`` parts too (each class keeps >= folds - 1 rows there when it has >= folds).
        jobs: processes for the outer folds (joblib; the scores do not depend on it). The fits run with
            one BLAS thread each: L-BFGS on a ~50,000-term TF-IDF spends its time in vector operations
            too small for threads, and on 2 cores of an Intel Xeon one C=100 fit on 240 man pages took
            5.3 s with OpenBLAS's 2 threads and 0.39 s with one while another job shared the CPUs.
        analyzer: "word" (word uni+bigrams) or "char_wb" (character uni+bigrams: ngram_options).
    Raises:
        ValueError: from scikit-learn, e.g. no term left by min_df=2 in a training fold (no_terms(err)
            is True: text without spaces between words, for the word analyzer).
    """
    import time

    from sklearn.model_selection import StratifiedKFold, cross_validate

    t0 = time.perf_counter()
    # the texts analysed once; each fold's TF-IDF is taken from these counts (FoldTfidf: the same matrix)
    X = ngram_counts(texts, analyzer)
    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    smallest = int(np.unique(y.astype(str), return_counts=True)[1].min())   # its rows in an outer training fold:
    inner_folds = max(2, min(folds, smallest - -(-smallest // folds)))       # smallest - ceil(smallest / folds)
    with warnings.catch_warnings(), one_blas_thread():
        warnings.simplefilter("ignore")
        scores = cross_validate(counted_lexical_model(inner_folds, seed), X, y, cv=cv,
                                scoring=("accuracy", "f1_macro"), return_estimator=True,
                                n_jobs=jobs if jobs > 1 else None)
    acc, f1 = scores["test_accuracy"], scores["test_f1_macro"]
    dim = np.mean([e.best_estimator_.named_steps["tfidf"].n_features_ for e in scores["estimator"]])
    return {"folds": folds, "C": [float(e.best_params_["lr__C"]) for e in scores["estimator"]], "accuracy": acc.tolist(), "accuracy_mean": float(acc.mean()),
            "accuracy_std": float(acc.std()), "f1_macro": f1.tolist(), "f1_macro_mean": float(f1.mean()),
            "f1_macro_std": float(f1.std()), "dimension": int(round(dim)), "inner_folds": inner_folds,
            "analyzer": analyzer, "seconds": time.perf_counter() - t0}
