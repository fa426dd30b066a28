"""probe's accuracy per byte: the best BERT feature's vectors stored compact (int8, binary) and projected to
fewer dimensions (--dims' PCA, fitted inside each training fold) times float32/int8/binary, each row with the
bytes per document extract would store. Called by pipeline.classify.probe; numbers only, no report text."""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin

PROBE_DIMS = (32, 64, 128, 256)   # the --dims probed for the best feature (those below its dimension)
DIMS_FORMS = ("float32", "int8", "binary")
NEAR = 0.005                      # "within 0.005 of the feature's accuracy": the summary's smallest row


class StoredForm(TransformerMixin, BaseEstimator):
    """What a classifier reads back from extract --dims N --out-dtype FORM, fitted on training rows only.

    fit: the PCA to ``dims`` dimensions (pipeline.projection.fit_pca; None: no projection) of the training
    rows, then binary's centre, the mean of the first CALIBRATION_DOCS projected training rows (as extract
    centres on its first documents). transform: (n, D) -> (n, dims or D) float32 of the stored form decoded:
    float32 as is, int8 q * scale (pipeline.compact.quantize_int8), binary +1 / -1 around the centre.
    """

    def __init__(self, dims: int | None = None, form: str = "float32"):
        self.dims = dims
        self.form = form

    def fit(self, X, y=None):
        from ..compact import CALIBRATION_DOCS, binary_center
        from ..projection import fit_pca

        X = np.asarray(X, np.float32)
        self.projection_ = fit_pca(X, self.dims) if self.dims else None
        Z = self.projection_.apply(X) if self.projection_ is not None else X
        self.center_ = binary_center(Z[:CALIBRATION_DOCS]) if self.form == "binary" else None
        return self

    def transform(self, X):
        from ..compact import dequantize_int8, pack_binary, quantize_int8, unpack_binary

        X = np.asarray(X, np.float32)
        Z = self.projection_.apply(X) if self.projection_ is not None else X       # (n, N)
        if self.form == "int8":
            return dequantize_int8(*quantize_int8(Z))
        if self.form == "binary":
            return unpack_binary(pack_binary(Z, self.center_), Z.shape[1])
        return Z


def cross_validate_stored(X: np.ndarray, y: np.ndarray, folds: int, seed: int, dims: int | None,
                          form: str) -> dict[str, Any]:
    """cross_validate_probe's keys for StoredForm(dims, form) + StandardScaler + LogisticRegression(max_iter=2000)
    under the probe's StratifiedKFold(folds, shuffle=True, random_state=seed): the PCA and the centre are
    fitted on each training fold alone, never on its test rows."""
    import time

    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_validate
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    t0 = time.perf_counter()
    model = make_pipeline(StoredForm(dims, form), StandardScaler(), LogisticRegression(max_iter=2000))
    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scores = cross_validate(model, X, y, cv=cv, scoring=("accuracy", "f1_macro"))
    acc, f1 = scores["test_accuracy"], scores["test_f1_macro"]
    return {"folds": folds, "accuracy": acc.tolist(), "accuracy_mean": float(acc.mean()),
            "accuracy_std": float(acc.std()), "f1_macro": f1.tolist(), "f1_macro_mean": float(f1.mean()),
            "f1_macro_std": float(f1.std()), "seconds": time.perf_counter() - t0}


def probed_dims(d: int, n_train: int, dims: tuple[int, ...] = PROBE_DIMS) -> tuple[list[int], list[int]]:
    """(the dims probed, those left out): each of ``dims`` below the feature's D, and at most the smallest
    training fold's rows (a PCA keeps no more dimensions than it has rows)."""
    below = [n for n in dims if n < d]
    return [n for n in below if n <= n_train], [n for n in below if n > n_train]


def dims_rows(best: dict[str, Any], X: np.ndarray, y: np.ndarray, folds: int, seed: int,
              dims: tuple[int, ...] = PROBE_DIMS, jobs: int = 1) -> tuple[list[dict[str, Any]], list[int]]:
    """The best BERT feature at fewer dimensions: one row per probed dims (probed_dims) x DIMS_FORMS, each
    cross_validate_stored on (N, D) X. Keys: feature (the best's name + ":pca{N}:{form}"), kind "compact",
    form, dims (N), dimension (N), bytes_per_doc (pipeline.compact.bytes_per_vector(N, form): N float32s,
    N int8s and a float32 scale, or ceil(N / 8) bytes, as extract --dims N --out-dtype FORM stores a
    vector), float32_bytes (the unprojected float32's), windows_per_doc, accuracy_kept (against the best's),
    and cross_validate_stored's. Returns (rows, the dims left out for want of training rows)."""
    from joblib import Parallel, delayed
    from sklearn.model_selection import StratifiedKFold

    from ..compact import bytes_per_vector

    d = int(X.shape[1])
    n_train = min(len(tr) for tr, _ in StratifiedKFold(folds, shuffle=True, random_state=seed).split(X, y))
    probed, skipped = probed_dims(d, n_train, dims)
    todo = [(n, form) for n in probed for form in DIMS_FORMS]
    scores = Parallel(n_jobs=max(1, min(jobs, len(todo))))(
        delayed(cross_validate_stored)(X, y, folds, seed, n, form) for n, form in todo)
    rows = [{"feature": f"{best['feature']}:pca{n}:{form}", "kind": "compact", "form": form, "dims": n,
             "dimension": n, "bytes_per_doc": bytes_per_vector(n, form), "float32_bytes": bytes_per_vector(d, "float32"),
             "windows_per_doc": best["windows_per_doc"], "base": best,
             "accuracy_kept": s["accuracy_mean"] / best["accuracy_mean"] if best["accuracy_mean"] else 0.0, **s}
            for (n, form), s in zip(todo, scores)]
    return rows, skipped


def smallest_within(best: dict[str, Any], rows: list[dict[str, Any]], near: float = NEAR) -> dict[str, Any]:
    """The row of fewest bytes per document among ``best`` (its float32 form) and the scored compact
    ``rows`` whose mean accuracy is at least best's - ``near``; ties: the more accurate."""
    pool = [best] + [r for r in rows if r.get("accuracy_mean") is not None and r.get("bytes_per_doc")]
    ok = [r for r in pool if r["accuracy_mean"] >= best["accuracy_mean"] - near]
    return min(ok, key=lambda r: (r.get("bytes_per_doc") or 4 * r["dimension"], -r["accuracy_mean"]))


def compact_rows(best: dict[str, Any], X: np.ndarray, y: np.ndarray, folds: int, seed: int) -> list[dict[str, Any]]:
    """The best BERT feature's accuracy kept when its (N, D) vectors X are stored compact: int8
    (pipeline.compact.quantize_int8 then dequantize_int8) and binary (pack_binary around the mean of the
    first CALIBRATION_DOCS rows of X, as extract centres on its first documents, then unpack_binary),
    each probed as the BERT rows (cross_validate_probe, the same folds). Keys: feature (the best's name
    + ":int8" / ":binary"), kind "compact", form, bytes_per_vector (pipeline.compact.bytes_per_vector;
    float32_bytes the float32 form's), windows_per_doc, dimension (D), accuracy_kept (accuracy_mean /
    the best's), bytes_per_doc (the same as bytes_per_vector: one vector per document), and cross_validate_probe's."""
    from ..compact import (CALIBRATION_DOCS, binary_center, bytes_per_vector, dequantize_int8, pack_binary,
                           quantize_int8, unpack_binary)
    from .folds import cross_validate_probe

    d = int(X.shape[1])
    center = binary_center(X[:CALIBRATION_DOCS])
    forms = {"int8": dequantize_int8(*quantize_int8(X)), "binary": unpack_binary(pack_binary(X, center), d)}
    out = []
    for form, V in forms.items():
        score = cross_validate_probe(V, y, folds, seed)
        out.append({"feature": f"{best['feature']}:{form}", "kind": "compact", "form": form,
                    "bytes_per_vector": bytes_per_vector(d, form), "bytes_per_doc": bytes_per_vector(d, form),
                    "float32_bytes": bytes_per_vector(d, "float32"),
                    "windows_per_doc": best["windows_per_doc"], "dimension": d,
                    "accuracy_kept": score["accuracy_mean"] / best["accuracy_mean"] if best["accuracy_mean"] else 0.0,
                    **score})
    return out
