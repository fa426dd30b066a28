"""How much probe accuracy a feature keeps in int8 and binary form, for a file that `extract` wrote.

Usage: python bench/compact_check.py FEATURES.parquet CORPUS.csv [--label-col label] [--id-col id] [--feature COLUMN]
Prints, for float32, int8 (pipeline.compact per-vector absmax), binary (the signs of x minus the mean of
the first 64 documents, as extract --out-dtype binary stores them) and binary without that centre
(the signs of x itself), the 5-fold
stratified accuracy (seed 0) of StandardScaler + LogisticRegression, as probe's rows compute it, and the
share of dimensions whose sign is the same in over 95% of the documents (where binary keeps little).
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

    import longbert
    from pipeline.classify.folds import cross_validate_probe
    from pipeline.compact import (CALIBRATION_DOCS, binary_center, dequantize_int8, pack_binary, quantize_int8,
                                  unpack_binary)

    ids, X, _ = longbert.load_features(args.features, feature=args.feature)
    labels = pd.read_csv(args.corpus).astype({args.id_col: str}).set_index(args.id_col)[args.label_col]
    y = np.asarray(labels.loc[[str(i) for i in ids]].astype(str))
    center = binary_center(X[:CALIBRATION_DOCS])
    forms = {"float32": X, "int8": dequantize_int8(*quantize_int8(X)),
             "binary": unpack_binary(pack_binary(X, center), X.shape[1]),
             "binary-uncentred": unpack_binary(pack_binary(X), X.shape[1])}
    base = None
    for form, Z in forms.items():
        acc = cross_validate_probe(Z, y, 5, 0)["accuracy_mean"]
        base = acc if base is None else base
        print(f"{form:16s} accuracy {acc:.3f} ({acc - base:+.3f})")
    positive = (X > 0).mean(axis=0)
    print(f"dimensions with one sign in > 95% of documents: {((positive > 0.95) | (positive < 0.05)).mean():.1%}")


if __name__ == "__main__":
    main()
