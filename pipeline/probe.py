"""``longbert probe``: how well a linear classifier reads the labels off extracted features.

Called by cli.py. For each features file (pipeline.features.load_features), a scikit-learn
``make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))`` is cross-validated with
``StratifiedKFold(folds, shuffle=True, random_state=seed)``; the same folds for every file, so
strategies and poolings are compared on equal terms.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ConfigError, InputError
from .features import load_features


def _strategy_text(strategy: dict[str, Any]) -> str:
    """The metadata's strategy dict -> 'head_tail 128+382' / 'sliding overlap 128' / 'chunk'."""
    name = strategy.get("name", "?")
    if name == "head_tail":
        return f"head_tail {strategy.get('head_tokens')}+{strategy.get('tail_tokens')}"
    if name == "sliding":
        return f"sliding overlap {strategy.get('overlap')}"
    return str(name)


# Columns longbert computes itself: never labels.
_COMPUTED = ("n_tokens", "n_unknown", "n_windows", "truncated", "features", "error", "token_ids", "positions", "offsets",
             "token_features")


def _labels(path: str | Path, label_col: str, ids: np.ndarray, meta: dict[str, Any]) -> np.ndarray:
    """The label of each row with features, as str: the id column (``id``, or ``row`` for row
    numbers) or a --keep-col column.

    Raises:
        InputError: the column is one longbert computes, or is not in the file (lists the usable ones).
    """
    keep_cols = list(meta.get("keep_cols", []))
    id_name = "row" if ids.dtype.kind in "iu" else "id"   # load_features: int64 row numbers, or str ids
    usable = [id_name, *keep_cols]
    if label_col == id_name:
        return ids.astype(str)
    if label_col in meta["kept"]:
        return np.asarray(meta["kept"][label_col], dtype=object).astype(str)
    if label_col in _COMPUTED:
        raise InputError(f"{path}: --label-col {label_col!r} is a column longbert computes, not a label; pass one "
                         f"of {usable}, or extract again with --keep-col LABEL")
    raise InputError(f"{path}: no column {label_col!r} to label with; the columns that can be labels are {usable} "
                     f"({id_name} and the --keep-col columns); extract again with --keep-col {label_col}, or pass "
                     "--label-col with one of them")


def probe_file(path: str | Path, label_col: str, folds: int = 5, seed: int = 0) -> dict[str, Any]:
    """Cross-validated logistic-regression probe of one features file (see probe_files)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_validate
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    ids, X, meta = load_features(path)
    y = _labels(path, label_col, ids, meta)                                # (N,) str
    classes, counts = np.unique(y, return_counts=True)
    if len(classes) < 2:
        raise InputError(f"{path}: column {label_col!r} has {len(classes)} distinct value(s) over the "
                         f"{len(y)} rows with features; a probe needs at least 2 classes")
    if counts.min() < folds:
        small = [(c, int(n)) for c, n in zip(classes, counts) if n < folds]
        listed = ", ".join(f"{str(c)!r}: {n} row{'' if n == 1 else 's'}" for c, n in small[:5])
        if len(small) > 5:
            listed += f" and {len(small) - 5} more classes"
        if counts.min() < 2:  # no k >= 2 can stratify a class of one row
            raise InputError(f"{path}: stratified {folds}-fold needs >= {folds} rows per class; {listed}; a class "
                             "of 1 row cannot be split by any --folds (2 is the least): add rows to the 1-row "
                             "classes or leave them out, or label with another --label-col")
        raise InputError(f"{path}: stratified {folds}-fold needs >= {folds} rows per class; {listed}; lower "
                         f"--folds to {int(counts.min())} or add rows of those classes")
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning on tiny folds must not drown the table
        scores = cross_validate(model, X, y, cv=cv, scoring=("accuracy", "f1_macro"))
    acc, f1 = scores["test_accuracy"], scores["test_f1_macro"]
    return {
        "file": str(path),
        "strategy": _strategy_text(meta.get("strategy", {})),
        "pooling": meta.get("pooling"),
        "dimension": int(X.shape[1]),
        "rows": int(X.shape[0]),
        "left_out": len(meta["left_out"]),
        "classes": len(classes),
        "majority": float(counts.max() / counts.sum()),
        "folds": folds,
        "accuracy": acc.tolist(),
        "accuracy_mean": float(acc.mean()),
        "accuracy_std": float(acc.std()),
        "f1_macro": f1.tolist(),
        "f1_macro_mean": float(f1.mean()),
        "f1_macro_std": float(f1.std()),
    }


def probe_files(paths: list[str | Path], label_col: str, folds: int = 5, seed: int = 0) -> list[dict[str, Any]]:
    """Probe each features file: stratified k-fold accuracy and macro-F1 of a logistic regression.

    Labels come from a kept column (``--keep-col label`` at extract); rows with null features (and
    their labels) are left out and counted. Method: scikit-learn ``StratifiedKFold(n_splits=folds,
    shuffle=True, random_state=seed)``, model ``make_pipeline(StandardScaler(),
    LogisticRegression(max_iter=2000))`` refit on each training split, scored by ``cross_validate``.

    Args:
        paths: .parquet files or DIR/ outputs of ``longbert extract``.
        label_col: the column holding the labels (read as strings): a --keep-col column, or ``id``.
        folds: k of the stratified k-fold (>= 2). seed: random_state of the fold shuffle.

    Returns:
        One dict per file, in order: file, strategy (e.g. "head_tail 128+382"), pooling, dimension,
        rows (used), left_out (rows without features), classes, majority (share of the largest class:
        the accuracy of always guessing it), folds, accuracy / f1_macro (per fold, list of float),
        accuracy_mean, accuracy_std, f1_macro_mean, f1_macro_std (std over folds, ddof 0).

    Raises:
        ConfigError: folds < 2 or no path given.
        InputError: a file that load_features refuses, no such label column (lists the ones there are)
            or one longbert computes (n_tokens, ...), fewer than 2 classes, or a class with fewer rows
            than folds (names the class and the fix: a lower --folds, or more rows for a 1-row class).
    """
    if folds < 2:
        raise ConfigError(f"--folds={folds} must be >= 2")
    if not paths:
        raise ConfigError("no features file given; pass the -o outputs of `longbert extract`")
    return [probe_file(p, label_col, folds, seed) for p in paths]


def format_probe(results: list[dict[str, Any]]) -> str:
    """One table: file, strategy, pooling, dimension, rows, accuracy and macro-F1 (mean ± std over folds)."""
    head = ("file", "strategy", "pooling", "dim", "rows", "accuracy", "macro-F1")
    rows = [head]
    for r in results:
        rows.append((r["file"], r["strategy"], str(r["pooling"]), str(r["dimension"]), str(r["rows"]),
                     f"{r['accuracy_mean']:.3f} ± {r['accuracy_std']:.3f}",
                     f"{r['f1_macro_mean']:.3f} ± {r['f1_macro_std']:.3f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(cell.rjust(w) if i >= 3 else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))).rstrip()
             for row in rows]
    if results:
        r0 = results[0]
        lines.append(f"{r0['folds']}-fold stratified CV, StandardScaler + LogisticRegression; "
                     f"{r0['classes']} classes, majority-class accuracy {r0['majority']:.3f}")
    for r in results:
        if r["left_out"]:
            lines.append(f"{r['file']}: {r['left_out']} rows without features left out")
    return "\n".join(lines)


def plot_probe(results: list[dict[str, Any]], path: str | Path):
    """Bar chart: per file, accuracy and macro-F1 means (value on each bar) with ± std error bars, the
    majority-class accuracy as a dotted line, and a title naming the CV; PNG at ``path``.

    Returns:
        The matplotlib Figure (already saved and closed).

    Raises:
        ConfigError: matplotlib is not installed.
    """
    from .stats import _pyplot

    plt = _pyplot()
    n = len(results)
    x = np.arange(n)
    width = 0.38
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * n + 2), 4), dpi=120)
    for offset, key, label, color in ((-width / 2, "accuracy", "accuracy", "#4c72b0"),
                                      (width / 2, "f1_macro", "macro-F1", "#dd8452")):
        means = [r[f"{key}_mean"] for r in results]
        bars = ax.bar(x + offset, means, width, yerr=[r[f"{key}_std"] for r in results], capsize=4, label=label,
                      color=color)
        ax.bar_label(bars, labels=[f"{m:.3f}" for m in means], label_type="center", color="white", fontsize=8)
    if results:
        ax.axhline(results[0]["majority"], color="grey", linestyle=":", label="majority class")
        r0 = results[0]
        ax.set_title(f"Linear probe: {r0['folds']}-fold stratified CV, {r0['classes']} classes, "
                     f"{r0['rows']:,} rows", fontsize=10)
    ax.set_xticks(x, [f"{Path(r['file']).name}\n{r['strategy']}, {r['pooling']}" for r in results], fontsize=8)
    ax.set_ylim(0, 1.2)  # headroom for the legend above the bars
    ax.set_ylabel(f"mean ± std over {results[0]['folds'] if results else '?'} folds")
    ax.legend(loc="upper center", ncol=3, frameon=False)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return fig
