"""Which centre keeps the most probe accuracy in binary (sign) form, for a file that `extract` wrote.

Usage: python bench/binary_centres.py FEATURES.parquet CORPUS.csv [--label-col label] [--id-col id] [--feature COLUMN]

For the calibration set extract uses (the first 64 documents) and for 5 random draws of 64 documents
(numpy default_rng(1..5)), prints the loss in probe accuracy (5-fold stratified, seed 0, StandardScaler
+ LogisticRegression, as probe's compact rows compute it) of the signs of x minus the calibration
set's per-dimension mean (what extract --out-dtype binary stores), median, and 20% trimmed mean; then,
on the first 64 documents, the signs of a random orthogonal rotation (QR of a Gaussian matrix,
default_rng(0)) of x minus the mean, unscaled and with each dimension divided by its sd first
(SimHash-style random hyperplanes, Charikar 2002).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("features", type=Path)
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--label-col", default="label")
    ap.add_argument("--id-col", default="id")
    ap.add_argument("--feature", default=None, help="the feature column of a file with several (default: the first)")
    args = ap.parse_args()

    from scipy.stats import trim_mean

    import longbert
    from pipeline.classify.folds import cross_validate_probe
    from pipeline.compact import CALIBRATION_DOCS, unpack_binary

    ids, X, _ = longbert.load_features(args.features, feature=args.feature)
    labels = pd.read_csv(args.corpus).astype({args.id_col: str}).set_index(args.id_col)[args.label_col]
    y = np.asarray(labels.loc[[str(i) for i in ids]].astype(str))
    X = np.asarray(X, dtype=np.float32)
    n, d = X.shape

    def accuracy(Z: np.ndarray) -> float:
        return cross_validate_probe(Z, y, 5, 0)["accuracy_mean"]

    def signs(Z: np.ndarray) -> np.ndarray:
        return unpack_binary(np.packbits(Z > 0, axis=1), d)

    base = accuracy(X)
    print(f"{n} documents, {d} dimensions; float32 accuracy {base:.3f}; loss of each binary form:")
    losses: dict[str, list[float]] = {"mean": [], "median": [], "trimmed mean 20%": []}
    for seed in range(6):
        cal = X[:CALIBRATION_DOCS] if seed == 0 else X[np.random.default_rng(seed).choice(n, CALIBRATION_DOCS, replace=False)]
        centres = {"mean": cal.mean(0), "median": np.median(cal, 0), "trimmed mean 20%": trim_mean(cal, 0.2, axis=0)}
        for name, centre in centres.items():
            losses[name].append(accuracy(signs(X - centre)) - base)
        where = "first 64" if seed == 0 else f"random 64 (seed {seed})"
        print(f"  {where:22s} " + "  ".join(f"{k} {v[-1]:+.3f}" for k, v in losses.items()), flush=True)
    for name, values in losses.items():
        print(f"  {name:18s} mean loss {np.mean(values):+.3f}, worst {np.min(values):+.3f}")
    R = np.linalg.qr(np.random.default_rng(0).standard_normal((d, d)))[0].astype(np.float32)
    cal = X[:CALIBRATION_DOCS]
    centred = X - cal.mean(0)
    print(f"  first 64, rotated: {accuracy(signs(centred @ R)) - base:+.3f}; "
          f"scaled then rotated: {accuracy(signs((centred / (cal.std(0) + 1e-6)) @ R)) - base:+.3f}")


if __name__ == "__main__":
    main()
