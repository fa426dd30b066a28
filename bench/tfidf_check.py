"""An independent TF-IDF + LogisticRegression baseline on a probe's documents and outer folds, written with
scikit-learn alone, to check the accuracy of ``longbert probe``'s lexical row.

The rows are the probe's stratified sample (pipeline.classify.folds.stratified_sample, the one thing taken
from longbert, so that both see the same documents); the outer folds are StratifiedKFold(5, shuffle=True,
random_state=seed) as probe's. The model differs from probe's in how C is chosen: LogisticRegressionCV on
the outer training fold's TF-IDF (probe refits the TF-IDF inside each inner fold, by GridSearchCV).

    python bench/tfidf_check.py examples/labelled.csv
    python bench/tfidf_check.py out/man_corpus.csv --sample 200
"""
from __future__ import annotations

import argparse
import warnings
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegressionCV
from sklearn.model_selection import StratifiedKFold, cross_val_score
from sklearn.pipeline import make_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pipeline.classify.folds import stratified_sample  # noqa: E402


def main() -> None:
    warnings.filterwarnings("ignore", category=FutureWarning)   # scikit-learn 1.8 notes on LogisticRegressionCV defaults
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=Path)
    parser.add_argument("--sample", type=int, default=500)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    frame = pd.read_csv(args.csv, dtype=str, keep_default_na=False)
    picked = stratified_sample(frame["label"].to_numpy(), args.sample, args.seed, min_per_class=args.folds)
    texts, y = frame["text"].to_numpy()[picked], frame["label"].to_numpy()[picked]
    cv = StratifiedKFold(args.folds, shuffle=True, random_state=args.seed)
    inner = StratifiedKFold(args.folds, shuffle=True, random_state=args.seed)
    model = make_pipeline(TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2),
                          LogisticRegressionCV(Cs=[0.01, 0.1, 1, 10, 100], cv=inner, max_iter=2000))
    t0, c0 = time.perf_counter(), time.process_time()
    acc = cross_val_score(model, texts, y, cv=cv, scoring="accuracy")
    print(f"{args.csv.name}: {len(y)} documents, TF-IDF + LogisticRegressionCV accuracy {acc.mean():.3f} ± "
          f"{acc.std():.3f} (folds {np.round(acc, 3).tolist()}); {time.perf_counter() - t0:.1f} s wall, "
          f"{time.process_time() - c0:.1f} s CPU")


if __name__ == "__main__":
    main()
