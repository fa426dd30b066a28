"""The texts a user hands the Python API (``encode``, ``LongBertVectorizer``): the kinds accepted, a
``preprocess`` function applied to them, and the errors named by position.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from .errors import TextError, TextsTypeError


def text_list(texts: Any, caller: str) -> list:
    """The texts of ``encode`` or ``transform`` as a list, in order; the elements are not checked here.

    Accepted: a list, tuple, 1-D numpy array or pandas Series, an (n, 1) numpy array or a one-column
    DataFrame (its column). Example: ("a", "b") -> ["a", "b"]; pd.DataFrame({"text": ["a"]}) -> ["a"].

    Raises:
        TextsTypeError (a TypeError): anything else, naming what was given; a bare str or bytes as
            "a list of texts was expected".
    """
    what = type(texts).__name__
    if isinstance(texts, (str, bytes)):
        raise TextsTypeError(f"{caller}: a list of texts was expected, got a single string ({what}); "
                             "wrap it: [text]")
    pd = sys.modules.get("pandas")  # not imported: texts cannot be a pandas object
    if pd is not None and isinstance(texts, pd.DataFrame):
        if texts.shape[1] != 1:
            raise TextsTypeError(f"{caller}: a list of texts was expected, got a DataFrame of {texts.shape[1]} "
                                 f"columns {list(texts.columns)[:6]}; pass its text column, e.g. df['text']")
        texts = texts.iloc[:, 0]
    if pd is not None and isinstance(texts, pd.Series):
        return texts.tolist()
    if isinstance(texts, np.ndarray):
        arr = texts[:, 0] if texts.ndim == 2 and texts.shape[1] == 1 else texts
        if arr.ndim != 1:
            raise TextsTypeError(f"{caller}: a list of texts was expected, got a numpy array of shape "
                                 f"{texts.shape}; pass a 1-D array of texts, one per document")
        return arr.tolist()
    if isinstance(texts, (list, tuple)):
        return list(texts)
    raise TextsTypeError(f"{caller}: a list of texts was expected, got {what}; pass a list, tuple, numpy array "
                         "or pandas Series of str, or a one-column DataFrame (e.g. list(texts))")


def as_texts(X: Any, caller: str = "transform") -> list[str]:
    """X -> list of str (text_list); raises TextError for an element that is not a str."""
    texts = text_list(X, caller)
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise TextError(f"text at position {bad[0]} is {type(texts[bad[0]]).__name__}, not str "
                        f"({len(bad)} such positions: {bad[:10]}); fill or drop missing texts first")
    return texts


def raise_on_errors(errors: list[str | None], offset: int) -> None:
    """TextError listing the positions (offset + i) of the errors that are not None, and why (the first ten)."""
    bad = [(offset + i, e) for i, e in enumerate(errors) if e is not None]
    if bad:
        listed = ", ".join(f"{i} ({e})" for i, e in bad[:10])
        raise TextError(f"{len(bad)} text(s) cannot be embedded, at positions {listed}; drop or fill them "
                        "before transform (no zero vector is returned in their place)")


def preprocessed(items: list, errors: list[str | None], fn: Callable[[str], str]) -> tuple[list, list[str | None]]:
    """Each str item through ``fn``; a result that is not a str, or an exception, is that item's error."""
    out, errs = list(items), list(errors)
    for i, t in enumerate(items):
        if errs[i] is None:
            try:
                out[i] = fn(t)
            except Exception as err:  # the user's function: its failure is that text's error, not the run's
                errs[i] = f"preprocess failed: {type(err).__name__}: {err}"
                continue
            if not isinstance(out[i], str):
                errs[i] = f"preprocess returned {type(out[i]).__name__}, not str"
    return out, errs
