"""``longbert probe FILE...``: how well a linear classifier reads the labels off extracted features files.
For each features column (pipeline.classify.features.load_features) of each file, a
scikit-learn ``make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))`` is cross-validated
with ``StratifiedKFold(folds, shuffle=True, random_state=seed)`` (pipeline.classify.folds); the same folds for
every column, so strategies, poolings and layers are compared on equal terms. pipeline.classify.probe probes a
raw corpus the same way.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, InputError
from .features import load_features
from .folds import check_classes, cross_validate_probe
from ..columns import COMPUTED, ID, ROW
from ..options.features_config import is_late


def _strategy_text(strategy: dict[str, Any]) -> str:
    """The metadata's strategy dict -> 'head_tail 128+382' / 'sliding overlap 128' / 'chunk'."""
    name = strategy.get("name", "?")
    if name == "head_tail":
        return f"head_tail {strategy.get('head_tokens')}+{strategy.get('tail_tokens')}"
    if name == "sliding" or is_late(name):
        chunks = f" chunks {strategy.get('chunk_tokens')}" if is_late(name) else ""
        return f"{name}{chunks} overlap {strategy.get('overlap')}"
    return str(name)


def _labels(path: str | Path, label_col: str, ids: np.ndarray, meta: dict[str, Any]) -> np.ndarray:
    """The label of each row with features, as str: the id column (``id``, or ``row`` for row
    numbers) or a --keep-col column.

    Raises:
        InputError: the column is one longbert computes, or is not in the file (lists the usable ones).
    """
    keep_cols = list(meta.get("keep_cols", []))
    id_name = ROW if ids.dtype.kind in "iu" else ID   # load_features: int64 row numbers, or str ids
    usable = [id_name, *keep_cols]
    if label_col == id_name:
        return ids.astype(str)
    if label_col in meta["kept"]:
        return np.asarray(meta["kept"][label_col], dtype=object)   # a null label stays None (probe_file drops it)
    scales = [c.get("scale_column") for c in (meta.get("compact") or {}).get("columns", [])]  # --out-dtype int8
    if label_col in COMPUTED or label_col in [f["column"] for f in meta.get("features") or []] or label_col in scales:
        raise InputError(f"{path}: --label-col {label_col!r} is a column longbert computes, not a label; pass one "
                         f"of {usable}, or extract again with --keep-col LABEL")
    raise InputError(f"{path}: no column {label_col!r} to label with; the columns that can be labels are {usable} "
                     f"({id_name} and the --keep-col columns); extract again with --keep-col {label_col}, or pass "
                     "--label-col with one of them")


def windows_per_doc(strategy: dict[str, Any], n_tokens: np.ndarray) -> float:
    """Mean windows per document the strategy makes alone (window rules on each row's n_tokens).

    Args:
        strategy: the metadata's strategy dict (name, max_length, max_tokens_per_doc, its numbers).
        n_tokens: (N,) document tokens.
    """
    from ..options.config import SegmentConfig
    from ..text.segment import window_spans

    if len(n_tokens) == 0:
        return 0.0
    seg = SegmentConfig(strategy=strategy["name"], max_length=strategy["max_length"],
                        head_tokens=strategy.get("head_tokens"), tail_tokens=strategy.get("tail_tokens"),
                        overlap=strategy.get("overlap", 0), late_overlap=strategy.get("overlap", 256))
    cap = strategy.get("max_tokens_per_doc")
    kept = [int(n) if cap is None else min(int(n), cap) for n in n_tokens]
    return float(np.mean([len(window_spans(k, seg)) for k in kept]))


def probe_file(path: str | Path, label_col: str, folds: int = 5, seed: int = 0) -> list[dict[str, Any]]:
    """Cross-validated logistic-regression probe of each feature column of one file (see probe_files)."""
    from .features import feature_names

    names = feature_names(path)
    results = []
    for name in names:
        ids, X, meta = load_features(path, feature=name)
        if meta.get("level") == "window":
            raise InputError(f"{path} is a --level window output (one row per window); probe scores one vector "
                             "per document: extract with --level document (e.g. --aggregate first,last,mean,max)")
        y = _labels(path, label_col, ids, meta)                              # (N,) str, None: a null label
        labelled = np.array([v is not None for v in y], dtype=bool)          # a null is no class (as in a corpus)
        X, y = X[labelled], y[labelled].astype(str)                          # (n, D), (n,) str
        classes, counts = check_classes(y, folds, str(path), label_col)
        strategy = meta.get("strategy") or {}
        results.append({
            "file": str(path) if len(names) == 1 else f"{path}:{name}",
            "feature": name,
            "strategy": _strategy_text(strategy),
            "pooling": meta.get("pooling"),
            "layers": meta.get("layers"),
            "layer_agg": meta.get("layer_agg"),
            "dimension": int(X.shape[1]),
            "rows": int(X.shape[0]),
            "left_out": len(meta["left_out"]) + int((~labelled).sum()),
            "classes": len(classes),
            "majority": float(counts.max() / counts.sum()),
            "windows_per_doc": windows_per_doc(strategy, meta["rows"]["n_tokens"]) if strategy else None,
            **cross_validate_probe(X, y.astype(str), folds, seed),
        })
    return results


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
        One dict per feature column of each file, in order (a several-feature file gives one per
        column, its ``file`` written ``PATH:COLUMN``): file, feature (column), strategy (e.g.
        "head_tail 128+382"), pooling, layers, layer_agg, windows_per_doc (the strategy alone), dimension,
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
    return [r for p in paths for r in probe_file(p, label_col, folds, seed)]


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
