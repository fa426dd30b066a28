"""--dims: fewer dimensions per vector, a projection fitted once and kept as the rows stage's fitted state.

A ``Projection`` maps (n, D) vectors to (n, N): ``(x - mean) @ components.T``. ``fit_pca`` fits a centred
PCA (numpy's SVD in float64, components' signs as scikit-learn's PCA gives them), ``truncation`` is a
Matryoshka model's plain cut (mean 0, the first N unit rows). The numbers only, no Arrow and no config:
the rows stage applies it (pipeline.output.rows), the run fits it on its first documents
(pipeline.engine.calibrate) and the output's metadata records it (``to_metadata`` / ``from_metadata``).

Method: principal component analysis on the first documents' vectors (as a binary centre is the mean of
those documents), as FAISS's ``PCAMatrix`` and scikit-learn's ``PCA`` fit it, then applied to every vector.
"""
from __future__ import annotations

import base64
from collections.abc import Mapping
import dataclasses
from typing import Any

import numpy as np

from .columns import FEATURES
from .errors import ConfigError

PROJECTION_DOCS = 1024   # --dims: the first documents (vectors) a projection is fitted on
METHODS = ("pca", "truncate")


@dataclasses.dataclass(frozen=True, eq=False)
class Projection:
    """A linear map of (n, D) vectors to (n, N): (x - mean) @ components.T, in float32.

    Fields:
        mean: (D,) float32, the centre subtracted first (zeros for a truncation).
        components: (N, D) float32, one unit row per kept dimension (PCA: the principal axes, largest
            variance first; truncation: the first N rows of the identity).
        method: "pca" or "truncate". fitted_on: the vectors the PCA was fitted on (0: not known).

    Example:
        >>> p = fit_pca(X, 128)            # X (n, 384) float32, n >= 128
        >>> p.apply(X).shape               # (n, 128) float32
    """

    mean: np.ndarray
    components: np.ndarray
    method: str = "pca"
    fitted_on: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "mean", np.ascontiguousarray(self.mean, dtype=np.float32))
        object.__setattr__(self, "components", np.ascontiguousarray(self.components, dtype=np.float32))
        if self.method not in METHODS:
            raise ValueError(f"Projection: method={self.method!r}; choose one of {METHODS}")
        if self.mean.ndim != 1 or self.components.ndim != 2 or self.components.shape[1] != self.mean.shape[0] \
                or not self.components.shape[0]:
            raise ValueError(f"Projection: mean of shape {self.mean.shape} and components of shape "
                             f"{self.components.shape}; need (D,) and (N, D) with N >= 1")
        if not (np.isfinite(self.mean).all() and np.isfinite(self.components).all()):
            raise ValueError("Projection: its mean or components hold a value that is not finite")

    @property
    def dim(self) -> int:
        """N, the dimensions it keeps."""
        return int(self.components.shape[0])

    @property
    def input_dim(self) -> int:
        """D, the dimensions of the vectors it takes."""
        return int(self.components.shape[1])

    def apply(self, x: np.ndarray) -> np.ndarray:
        """(n, D) float vectors -> (n, N) float32 ``(x - mean) @ components.T``, summed in float64 row by row
        (numpy's einsum, not a BLAS kernel whose order of sums depends on n), so a vector's projection is
        the same bits whatever rows share its batch. A row that is not finite stays not finite.

        Raises:
            ValueError: x is not (n, D)."""
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.input_dim:
            raise ValueError(f"Projection.apply takes (n, {self.input_dim}) vectors; got shape {x.shape}")
        centred = x.astype(np.float64) - self.mean.astype(np.float64)                     # (n, D)
        return np.einsum("nd,kd->nk", centred, self.components.astype(np.float64)).astype(np.float32)  # (n, N)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Projection) and self.method == other.method
                and self.mean.shape == other.mean.shape and self.components.shape == other.components.shape
                and bool(np.array_equal(self.mean, other.mean)) and bool(np.array_equal(self.components, other.components)))

    __hash__ = object.__hash__

    def to_metadata(self) -> dict[str, Any]:
        """The JSON-able entry the output's metadata keeps: method, input_dim, dim, fitted_on, and mean and
        components as base64 of their little-endian float32 bytes (exact; components row-major (N, D))."""
        return {"method": self.method, "input_dim": self.input_dim, "dim": self.dim, "fitted_on": int(self.fitted_on),
                "dtype": "float32", "encoding": "base64 little-endian", "mean": _b64(self.mean),
                "components": _b64(self.components)}

    @classmethod
    def from_metadata(cls, entry: dict[str, Any]) -> Projection:
        """The Projection of a ``to_metadata`` entry.

        Raises:
            ValueError: an entry of another form (missing keys, sizes that do not match)."""
        try:
            d, n = int(entry["input_dim"]), int(entry["dim"])
            mean = np.frombuffer(base64.b64decode(entry["mean"]), dtype="<f4")
            components = np.frombuffer(base64.b64decode(entry["components"]), dtype="<f4").reshape(n, d)
            return cls(mean, components, str(entry.get("method", "pca")), int(entry.get("fitted_on", 0)))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"not a projection entry ({err})") from None


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype="<f4").tobytes()).decode("ascii")


def fit_pca(x: np.ndarray, n: int) -> Projection:
    """A centred PCA of (m, D) vectors to ``n`` dimensions: mean = the rows' mean; components = the first n
    right singular vectors of (x - mean) (numpy's SVD in float64), each signed so that its entry of
    largest magnitude is positive (scikit-learn's PCA convention, ``svd_flip(u_based_decision=False)``),
    so the same rows give scikit-learn's ``PCA(n).fit(x)`` mean_ and components_ within float32 rounding.
    Rows that are not finite are left out.

    Raises:
        ValueError: x is not 2-D, n < 1, n >= D, or n above the finite rows (m)."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"fit_pca takes (m, D) vectors; got shape {x.shape}")
    x = x[np.isfinite(x).all(axis=1)]
    m, d = x.shape
    if not 1 <= n < d or n > m:
        raise ValueError(f"fit_pca: {n} dimensions of {m} vectors of {d}; need 1 <= n < {d} and n <= {m}")
    mean = x.mean(axis=0)                                                     # (D,)
    _, _, vt = np.linalg.svd(x - mean, full_matrices=False)                   # (min(m, D), D)
    vt = vt[:n]
    signs = np.sign(vt[np.arange(n), np.argmax(np.abs(vt), axis=1)])         # (n,)
    vt *= np.where(signs == 0, 1.0, signs)[:, None]
    return Projection(mean.astype(np.float32), vt.astype(np.float32), "pca", m)


def truncation(d: int, n: int) -> Projection:
    """The first ``n`` of ``d`` dimensions, as a Projection (mean 0, the first n rows of the identity):
    a Matryoshka model's own cut (sentence-transformers' ``truncate_dim``).

    Raises:
        ValueError: not 1 <= n < d."""
    if not 1 <= n < d:
        raise ValueError(f"truncation: {n} of {d} dimensions; need 1 <= n < {d}")
    return Projection(np.zeros(d, np.float32), np.eye(d, dtype=np.float32)[:n], "truncate", 0)


def projections_of(value: object) -> dict[str, Projection] | None:
    """A ``projection`` as Rows keeps it: {column: pipeline.projection.Projection}.

    Example: (np.zeros(4), np.eye(4)[:2]) -> {"features": Projection(mean 0, 2 of 4 dimensions)}.

    Raises:
        ConfigError: not a Projection, a (mean, components) pair, a {"mean", "components"} dict, or a
            {column: one of those} mapping (naming the value and the forms to give).
    """
    if value is None:
        return None

    def one(v: object) -> Projection:
        if isinstance(v, Projection):
            return v
        try:
            if isinstance(v, Mapping) and "components" in v:
                return Projection(v.get("mean", np.zeros(np.shape(v["components"])[-1])), v["components"],
                                  str(v.get("method", "pca")))
            if isinstance(v, (tuple, list)) and len(v) == 2:
                return Projection(*v)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"Rows: projection {_shown(v)} is not a projection ({err}); give (mean (D,), "
                              "components (N, D)) of finite numbers, e.g. sklearn PCA(N).fit(X)'s "
                              "(mean_, components_)") from None
        raise ConfigError(f"Rows: projection {_shown(v)} is not a projection; give (mean (D,), components (N, D)) "
                          "for the column 'features', or {column: (mean, components)}, e.g. sklearn "
                          "PCA(N).fit(X)'s (mean_, components_)")

    if isinstance(value, Mapping) and "components" not in value:
        if not value or not all(isinstance(k, str) for k in value):
            raise ConfigError(f"Rows: projection {_shown(value)} is not a projection; give (mean, components) or "
                              "{column: (mean, components)}")
        return {k: one(v) for k, v in value.items()}
    return {FEATURES: one(value)}


def _shown(value: object) -> str:
    """A value as a message names it: its type and shape, or its repr when short."""
    shape = getattr(value, "shape", None)
    text = f"{type(value).__name__} of shape {tuple(shape)}" if shape is not None else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
