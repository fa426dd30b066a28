"""Hybrid methods compared on one feature file: stacking (HybridClassifier's, meta C 0.1 / 1 / 10, on
probabilities or log-probabilities), a weighted average of the two models' probabilities (weight
chosen on the inner out-of-fold probabilities, or 0.5), and a weighted geometric mean; each on the
5-fold stratified outer folds (seed 0) of probe, every choice inside the training fold.

Usage: python bench/hybrid_methods.py FEATURES.parquet CORPUS.csv [FEATURE_COLUMN]
(CORPUS.csv has id, text and label columns; FEATURES.parquet is extract's output of its rows.)
"""
import sys, warnings, numpy as np, pandas as pd
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
warnings.simplefilter("ignore")
import longbert
from sklearn.model_selection import StratifiedKFold
from sklearn.linear_model import LogisticRegression
from pipeline.classify.hybrid import fit_text_half, bert_model
feat, corpus = sys.argv[1], sys.argv[2]
col = sys.argv[3] if len(sys.argv) > 3 else None
ids, X, _ = longbert.load_features(feat, feature=col)
df = pd.read_csv(corpus).astype({"id": str}).set_index("id").loc[[str(i) for i in ids]]
texts = df.text.fillna("").astype(str).to_numpy(dtype=object); y = df.label.astype(str).to_numpy()
outer = StratifiedKFold(5, shuffle=True, random_state=0)
res = {}
for tr, te in outer.split(X, y):
    half = fit_text_half(texts[tr], y[tr], None, 5, 0)
    cls = half.classes
    bp = np.zeros((len(tr), len(cls)))
    for itr, ite in half.splits:
        bm = bert_model(1.0).fit(X[tr][itr], y[tr][itr]); bp[ite] = bm.predict_proba(X[tr][ite])
    bm = bert_model(1.0).fit(X[tr], y[tr])
    tt, bt = half.model.predict_proba(texts[te]), bm.predict_proba(X[te])
    yt = y[tr]
    def acc(p): return (cls[p.argmax(1)] == y[te]).mean()
    res.setdefault("text", []).append(acc(tt)); res.setdefault("bert", []).append(acc(bt))
    for C in (0.1, 1.0, 10.0):
        m = LogisticRegression(C=C, max_iter=2000).fit(np.hstack([half.oof, bp]), yt)
        res.setdefault(f"stack C={C}", []).append(acc(m.predict_proba(np.hstack([tt, bt]))))
        m = LogisticRegression(C=C, max_iter=2000).fit(np.log(np.hstack([half.oof, bp]) + 1e-6), yt)
        res.setdefault(f"stack-log C={C}", []).append(acc(m.predict_proba(np.log(np.hstack([tt, bt]) + 1e-6))))
    ws = np.linspace(0, 1, 21)
    oof_acc = [((cls[(w * half.oof + (1 - w) * bp).argmax(1)]) == yt).mean() for w in ws]
    best = max(range(len(ws)), key=lambda i: (oof_acc[i], -abs(ws[i] - 0.5)))
    res.setdefault("wavg (w by inner OOF)", []).append(acc(ws[best] * tt + (1 - ws[best]) * bt))
    res.setdefault("wavg 0.5", []).append(acc(0.5 * tt + 0.5 * bt))
    # geometric mean
    oofg = [((cls[(w * np.log(half.oof + 1e-6) + (1 - w) * np.log(bp + 1e-6)).argmax(1)]) == yt).mean() for w in ws]
    bg = max(range(len(ws)), key=lambda i: (oofg[i], -abs(ws[i] - 0.5)))
    res.setdefault("geo wavg (w by inner OOF)", []).append(acc(ws[bg] * np.log(tt + 1e-6) + (1 - ws[bg]) * np.log(bt + 1e-6)))
for k, v in res.items(): print(f"{k:28s} {np.mean(v):.3f} ± {np.std(v):.3f}")
