"""probe's ranking as words and as a table: the lexical baseline's and the hybrids' summary lines, and
the ``--out`` CSV (one row per feature of any kind)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..options.config import PipelineConfig


def lexical_summary(lex: dict[str, Any], best: dict[str, Any]) -> str:
    """The summary's line on the lexical baseline against the best BERT feature: plainly that the
    baseline beats every BERT feature when its mean accuracy is above the best's, with the
    scikit-learn line that makes it (pipeline.classify.folds.lexical_model)."""
    score = f"{lex['accuracy_mean']:.3f} ± {lex['accuracy_std']:.3f} (macro-F1 {lex['f1_macro_mean']:.3f})"
    if lex["accuracy_mean"] > best["accuracy_mean"]:
        return (f"lexical baseline {lex['feature']} {score} beats every BERT feature (best {best['feature']} "
                f"{best['accuracy_mean']:.3f}), with no model and no windows; recommended:\n"
                f"  from pipeline.classify.folds import lexical_model; "
                f"model = lexical_model({lex['folds']}, 0).fit(texts, labels)")
    return (f"lexical baseline {lex['feature']} {score}: the best BERT feature {best['feature']} is "
            f"{best['accuracy_mean'] - lex['accuracy_mean']:+.3f} accuracy above it")


CSV_COLUMNS = ("feature", "kind", "accuracy", "accuracy_sd", "macro_f1", "macro_f1_sd", "windows_per_doc", "dim",
               "seconds")


def ranking_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One CSV_COLUMNS dict per row of probe_corpus's report, ranked by accuracy (best first; ties
    keep the order bert, lexical, hybrid, compact): the BERT features, the lexical baseline, the
    hybrids and the compact forms of the best."""
    rows = list(report["results"]) + ([report["lexical"]] if report.get("lexical") is not None else []) + \
        list(report.get("hybrids", ())) + list(report.get("compact", ()))
    rows = sorted(rows, key=lambda r: -r["accuracy_mean"])
    return [{"feature": r["feature"], "kind": r.get("kind", "bert"), "accuracy": r["accuracy_mean"],
             "accuracy_sd": r["accuracy_std"], "macro_f1": r["f1_macro_mean"], "macro_f1_sd": r["f1_macro_std"],
             "windows_per_doc": r["windows_per_doc"], "dim": r["dimension"], "seconds": r.get("seconds", "")}
            for r in rows]


def write_ranking_csv(report: dict[str, Any], path) -> None:
    """probe_corpus's ranking as CSV at ``path``: the header CSV_COLUMNS, one row per ranking_rows entry."""
    import csv

    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(ranking_rows(report))


def hybrid_summary(hybrids: list[dict[str, Any]], best: dict[str, Any], lex: dict[str, Any] | None,
                   cfg: PipelineConfig, label_col: str | None = None) -> list[str]:
    """The summary's lines on the best hybrid: its score against the best BERT feature and the lexical
    baseline; when it beats both, the extract command of its BERT feature and the Python line that
    fits it (texts and labels: the corpus rows of load_features' ids)."""
    if not hybrids:
        return []
    h = max(hybrids, key=lambda r: r["accuracy_mean"])
    rivals = max(best["accuracy_mean"], lex["accuracy_mean"] if lex is not None else 0.0)
    verdict = "beats" if h["accuracy_mean"] > rivals else "does not beat"
    lines = [f"best hybrid: {h['feature']} {h['accuracy_mean']:.3f} ± {h['accuracy_std']:.3f} {verdict} the best BERT "
             f"feature and the lexical baseline alone"]
    if verdict == "beats":
        from .probe import extract_command   # probe imports this module

        lines += ["  " + extract_command(cfg, h["base"], cfg.read.inputs, label_col),
                  "  ids, X, meta = longbert.load_features(\"features.parquet\"); "
                  "model = longbert.HybridClassifier().fit(longbert.hybrid_inputs(texts, X), labels)"]
    return lines
