"""The X of ``HybridClassifier`` (pipeline.classify.hybrid): plain texts in any form LongBertVectorizer
takes, or (text, vector) pairs of vectors computed beforehand (``hybrid_inputs``)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def hybrid_inputs(texts: Sequence[str], vectors: np.ndarray, *more: np.ndarray) -> list[tuple[str, Any]]:
    """The X of HybridClassifier: one (text, vector) pair per document, a list so that scikit-learn's
    splitters (cross_val_score, cross_validate) index it like any array. With ``more`` matrices (several
    BERT features, one base model each), one (text, (vector, vector, ...)) pair per document.

    Args:
        texts: N documents (str; None reads as ""); vectors: (N, D) float BERT document vectors, row i of text i;
            more: further (N, D_k) matrices of other features of the same texts.
    Raises:
        ValueError: texts and a matrix differ in length, or a matrix is not 2-D.
    """
    matrices = [np.asarray(v) for v in (vectors, *more)]
    for V in matrices:
        if V.ndim != 2 or len(V) != len(texts):
            raise ValueError(f"hybrid_inputs: {len(texts)} texts and vectors of shape {V.shape}; need (N, D), one "
                             "row a text")
    if not more:
        return [("" if t is None else str(t), matrices[0][i]) for i, t in enumerate(texts)]
    return [("" if t is None else str(t), tuple(V[i] for V in matrices)) for i, t in enumerate(texts)]


def _split(X) -> tuple[np.ndarray, np.ndarray | list[np.ndarray]]:
    """(texts (N,) object, vectors (N, D) float32, or a list of (N, D_k) matrices for pairs of several
    features) of hybrid_inputs pairs. Raises ValueError on anything else."""
    try:
        texts = np.asarray([t for t, _ in X], dtype=object)
        if len(X) and isinstance(X[0][1], (tuple, list)):   # several features: one matrix each
            return texts, [np.stack([np.asarray(v[k], dtype=np.float32) for _, v in X]) for k in range(len(X[0][1]))]
        V = np.stack([np.asarray(v, dtype=np.float32) for _, v in X]) if len(X) else np.empty((0, 0), np.float32)
    except (TypeError, ValueError) as err:
        raise ValueError("HybridClassifier takes X = plain texts (a list of str, encoded by its vectorizer) or "
                         f"hybrid_inputs(texts, vectors): (text, vector) pairs; got a {type(X).__name__} "
                         "of neither") from err
    return texts, V


def _is_pairs(X) -> bool:
    """True when X is hybrid_inputs pairs: a non-empty list or tuple whose every element is a 2-tuple
    (text, vector), the vector not a str. Example: [("a b", np.zeros(4))] -> True; ["a b"] -> False."""
    return (isinstance(X, (list, tuple)) and len(X) > 0
            and all(isinstance(p, tuple) and len(p) == 2 and not isinstance(p[1], str) for p in X))


def texts_or_pairs(X, caller: str) -> tuple[np.ndarray, np.ndarray | None]:
    """(texts (N,) object, None) of plain texts in any form LongBertVectorizer takes (a list, tuple, 1-D
    array or Series of str, an (N, 1) array or a one-column DataFrame: pipeline.texts.as_texts), or
    (texts, vectors (N, D) float32) of hybrid_inputs pairs. Example: pd.DataFrame({"text": ["a", "b"]})
    -> (array(["a", "b"]), None): the column's texts, never its name.

    Raises:
        TextsTypeError (a TypeError and a ValueError): X is neither, naming what was given.
        TextError (a ValueError): an element of plain texts is not a str, naming its position.
    """
    from ..errors import TextsTypeError
    from ..texts import as_texts

    if _is_pairs(X):
        return _split(X)
    try:
        texts = as_texts(X, f"HybridClassifier.{caller}")
    except TextsTypeError as err:
        raise TextsTypeError(f"{err}; or pass hybrid_inputs(texts, vectors): (text, vector) pairs") from None
    return np.asarray(texts, dtype=object), None
