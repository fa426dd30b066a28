"""probe's ranking as words and as a table: the printed ranking and its summary (the extract command of a
feature, the lexical baseline's and the hybrids' lines), and the ``--out`` CSV (one row per feature of any kind)."""
from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from ..options.features_config import is_late
from ..text.tokenize import UNKNOWN_WARN_SHARE, unknown_warning
from .probe_plot import layers_text

if TYPE_CHECKING:
    from ..options.config import PipelineConfig


def scored(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """``row`` when it has scores; None for no row or a row that could not be computed (its "error")."""
    return None if row is None or row.get("accuracy_mean") is None else row


def compared(a: float, b: float, what: str) -> str:
    """How accuracy ``a`` stands against ``b`` (``what``, e.g. "the lexical baseline"), to the 3 decimals
    printed: "ties WHAT (b)" when they round to the same, else "beats WHAT (b) by +d" or "is below WHAT (b) by -d".
    Example: compared(0.9, 0.75, "x") -> "beats x (0.750) by +0.150"."""
    d = round(a, 3) - round(b, 3)
    if abs(d) < 5e-4:
        return f"ties {what} ({b:.3f})"
    return f"{'beats' if d > 0 else 'is below'} {what} ({b:.3f}) by {d:+.3f}"


def not_computable(feature: str, kind: str, reason: str, **keys: Any) -> dict[str, Any]:
    """A probe row that could not be computed: feature, kind, "error" (the reason), ``keys`` (e.g. base,
    windows_per_doc), and None for every score, so the table and the --out CSV show it without numbers
    and rank it last."""
    return {"feature": feature, "kind": kind, "error": reason, "windows_per_doc": keys.pop("windows_per_doc", 0.0),
            "dimension": None, "accuracy": [], "accuracy_mean": None, "accuracy_std": None, "f1_macro": [],
            "f1_macro_mean": None, "f1_macro_std": None, "seconds": None, **keys}


def reason(err: BaseException) -> str:
    """An exception as a one-line reason. Example: ValueError("x\ny") -> "ValueError: x y"."""
    return f"{type(err).__name__}: {' '.join(str(err).split())}"


def lexical_summary(lex: dict[str, Any], best: dict[str, Any]) -> str:
    """The summary's line on the lexical baseline against the best BERT feature: plainly that the
    baseline beats every BERT feature when its mean accuracy is above the best's, with the
    scikit-learn line that makes it (pipeline.classify.folds.lexical_model); the reason when it could
    not be computed; and the n-grams used when words left no term (character n-grams in their place)."""
    if scored(lex) is None:
        return (f"lexical baseline {lex['feature']}: not computable ({lex['error']}); the BERT rows are ranked "
                "without it")
    why = f"; {lex['fallback']}" if lex.get("fallback") else ""
    score = f"{lex['accuracy_mean']:.3f} ± {lex['accuracy_std']:.3f} (macro-F1 {lex['f1_macro_mean']:.3f}{why})"
    analyzer = lex.get("analyzer", "word")
    if lex["accuracy_mean"] > best["accuracy_mean"]:
        args = f"{lex['folds']}, 0" + (f", analyzer={analyzer!r}" if analyzer != "word" else "")
        return (f"lexical baseline {lex['feature']} {score} beats every BERT feature (best {best['feature']} "
                f"{best['accuracy_mean']:.3f}), with no model and no windows; recommended:\n"
                f"  from pipeline.classify.folds import lexical_model; "
                f"model = lexical_model({args}).fit(texts, labels)")
    return (f"lexical baseline {lex['feature']} {score}: the best BERT feature {best['feature']} "
            f"{compared(best['accuracy_mean'], lex['accuracy_mean'], 'it')}")


CSV_COLUMNS = ("feature", "kind", "accuracy", "accuracy_sd", "macro_f1", "macro_f1_sd", "windows_per_doc", "dim",
               "seconds", "bytes_per_doc")


def ranking_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One CSV_COLUMNS dict per row of probe_corpus's report, ranked by accuracy (best first; ties
    keep the order bert, lexical, hybrid, compact): the BERT features, the lexical baseline, the
    hybrids and the compact forms of the best. A row that could not be computed comes last, its score
    cells empty (None). bytes_per_doc: a BERT or compact row's stored bytes per document (float32 for the
    BERT rows, as extract writes by default); empty for the lexical and hybrid rows."""
    rows = list(report["results"]) + ([report["lexical"]] if report.get("lexical") is not None else []) + \
        list(report.get("hybrids", ())) + list(report.get("compact", ()))
    rows = sorted(rows, key=lambda r: (scored(r) is None, -(r["accuracy_mean"] or 0.0)))
    return [{"feature": r["feature"], "kind": r.get("kind", "bert"), "accuracy": r["accuracy_mean"],
             "accuracy_sd": r["accuracy_std"], "macro_f1": r["f1_macro_mean"], "macro_f1_sd": r["f1_macro_std"],
             "windows_per_doc": r["windows_per_doc"], "dim": r["dimension"], "seconds": r.get("seconds", ""),
             "bytes_per_doc": r.get("bytes_per_doc") or ""}
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
    """The summary's lines on the best hybrid: how it stands against the best BERT feature and the lexical
    baseline (ties, beats or is below each, by how much: compared), at what cost (its BERT feature's
    windows per document, the TF-IDF vocabulary beside it, its cross-validation's seconds against the
    BERT feature's); when it beats both, the extract command of its BERT feature and the Python line that
    fits it (texts and labels: the corpus rows of load_features' ids)."""
    done = [h for h in hybrids if scored(h) is not None]
    if not done:
        return [f"hybrid rows: not computable ({hybrids[0]['error']})"] if hybrids else []
    h = max(done, key=lambda r: r["accuracy_mean"])
    lex = scored(lex)
    rivals = [compared(h["accuracy_mean"], best["accuracy_mean"], f"the best BERT feature {best['feature']}")]
    if lex is not None:
        rivals.append(compared(h["accuracy_mean"], lex["accuracy_mean"], "the lexical baseline"))
    base = h.get("base", {})
    bases = h.get("bases") or [base]
    cost = ""
    if h.get("windows_per_doc") is not None:
        whose = "features'" if len(bases) > 1 else "feature's"
        cost = (f"; it costs its BERT {whose} {h['windows_per_doc']:.2f} windows/doc "
                "plus a TF-IDF model"
                + (f" of {lex['dimension']} terms" if lex is not None and lex.get("dimension") else ""))
    if h.get("seconds") is not None and base.get("seconds") is not None:
        cost += f", {h['seconds']:.1f} s to cross-validate against {base['seconds']:.1f} s for the BERT feature alone"
    combines = " + ".join(["TF-IDF"] + [b.get("feature", "?") for b in bases])
    tried = f" (the best of {len(hybrids)} tried: it stacks {combines})" if len(hybrids) > 1 else ""
    lines = [f"best hybrid: {h['feature']}{tried} {h['accuracy_mean']:.3f} ± {h['accuracy_std']:.3f} "
             f"{' and '.join(rivals)}{cost}"]
    beats = round(h["accuracy_mean"], 3) > round(max(best["accuracy_mean"], lex["accuracy_mean"] if lex else 0.0), 3)
    if beats:
        if len(bases) == 1:
            lines += ["  " + extract_command(cfg, h["base"], cfg.read.inputs, label_col),
                      "  ids, X, meta = longbert.load_features(\"features.parquet\"); "
                      "model = longbert.HybridClassifier().fit(longbert.hybrid_inputs(texts, X), labels)"]
        lines.append(f"  {'or ' if len(bases) == 1 else ''}on the texts alone: "
                     f"{hybrid_python(cfg, bases if len(bases) > 1 else h['base'], h.get('analyzer', 'word'))}")
    return lines


def hybrid_python(cfg: PipelineConfig, feature: dict[str, Any] | list[dict[str, Any]], analyzer: str = "word") -> str:
    """The Python line that fits the hybrid of one probed BERT feature on plain texts: HybridClassifier
    with a LongBertVectorizer of that feature's spec and aggregate and the run's model and window options
    (those the feature's strategy uses, when not at their defaults), and ``analyzer`` (the lexical n-grams)
    when not "word". Example: head:mean:-2 -> ``longbert.HybridClassifier(vectorizer=
    longbert.LongBertVectorizer(feature='head:mean:-2')).fit(texts, labels)``. A list of features: one
    vectorizer each, ``vectorizer=[...]`` (a hybrid of several BERT features)."""
    if isinstance(feature, list):
        vecs = [hybrid_python(cfg, f).split("vectorizer=", 1)[1].rsplit(").fit(", 1)[0] for f in feature]
        lexical = f", analyzer={analyzer!r}" if analyzer != "word" else ""
        return f"longbert.HybridClassifier(vectorizer=[{', '.join(vecs)}]{lexical}).fit(texts, labels)"
    from ..options.config import DEFAULT_MODEL

    seg = cfg.segment
    options = {"feature": feature["spec"], "aggregate": feature.get("aggregate", "mean"),
               "model": cfg.model.model, "max_length": seg.max_length, "head_tokens": seg.head_tokens,
               "tail_tokens": seg.tail_tokens, "overlap": seg.overlap, "chunk_tokens": seg.chunk_tokens,
               "max_tokens_per_doc": seg.max_tokens_per_doc}
    defaults = {"aggregate": "mean", "model": DEFAULT_MODEL, "max_length": None, "head_tokens": None,
                "tail_tokens": None, "overlap": 128, "chunk_tokens": 128, "max_tokens_per_doc": None}
    used = {"head_tail": ("head_tokens", "tail_tokens"), "sliding": ("overlap",), "late": ("overlap", "chunk_tokens")}
    unused = {"head_tokens", "tail_tokens", "overlap", "chunk_tokens"} - set(used.get(feature.get("strategy"), ()))
    given = ", ".join(f"{k}={v!r}" for k, v in options.items()
                      if k not in unused and (k not in defaults or v != defaults[k]))
    lexical = f", analyzer={analyzer!r}" if analyzer != "word" else ""
    return f"longbert.HybridClassifier(vectorizer=longbert.LongBertVectorizer({given}){lexical}).fit(texts, labels)"


def extract_command(cfg: PipelineConfig, feature: dict[str, Any], inputs: tuple[str, ...],
                    label_col: str | None = None) -> str:
    """The ``longbert extract`` command line that makes one probed feature (with its --aggregate) on the
    whole corpus: the run's reading options that are not at their defaults (--format, --text-col,
    --id-col, --keep-col, --encoding, --delimiter, --on-bad-lines, --with-source, --block-rows), its
    model, window and --cache options, paths as ``cfg`` holds them (the CLI gives --cache as typed), and
    the label column kept (``--keep-col label_col``) so its output can be probed."""
    from ..options.config import DEFAULT_MODEL
    from ..options.sections import ReadConfig

    read, default = cfg.read, ReadConfig()
    parts = ["longbert extract", *(shlex.quote(str(i)) for i in inputs)]
    if read.format is not None:
        parts.append(f"--format {read.format}")
    for flag, value in (("--text-col", read.text_col), ("--id-col", read.id_col), ("--encoding", read.encoding),
                        ("--delimiter", read.delimiter), ("--on-bad-lines", read.on_bad_lines),
                        ("--block-rows", read.block_rows)):
        if value != getattr(default, flag[2:].replace("-", "_")):
            parts.append(f"{flag} {shlex.quote(str(value))}")
    if read.with_source:
        parts.append("--with-source")
    keep = [c for c in read.keep_cols if c != label_col]
    if cfg.model.model != DEFAULT_MODEL:
        parts.append(f"--model {shlex.quote(cfg.model.model)}")
    if cfg.write.cache is not None:  # the probe's windows are in this store: extract reuses them
        parts.append(f"--cache {shlex.quote(str(cfg.write.cache))}")
    seg = cfg.segment
    if seg.max_length is not None:
        parts.append(f"--max-length {seg.max_length}")
    if feature["strategy"] == "head_tail" and (seg.head_tokens is not None or seg.tail_tokens is not None):
        parts += [f"--head-tokens {seg.head_tokens}"] if seg.head_tokens is not None else []
        parts += [f"--tail-tokens {seg.tail_tokens}"] if seg.tail_tokens is not None else []
    if feature["strategy"] == "sliding" and seg.overlap != 128:
        parts.append(f"--overlap {seg.overlap}")
    if is_late(feature["strategy"]):
        parts += [f"--overlap {seg.late_overlap}"] * (seg.late_overlap != 256) + \
            [f"--chunk-tokens {seg.chunk_tokens}"] * (seg.chunk_tokens != 128)
    if seg.max_tokens_per_doc is not None:
        parts.append(f"--max-tokens-per-doc {seg.max_tokens_per_doc}")
    if label_col is not None:   # so that `longbert probe features.parquet --label-col LABEL` works
        keep.append(label_col)
    parts += [f"--keep-col {shlex.quote(c)}" for c in keep]
    aggregate = feature.get("aggregate", "mean")
    if aggregate != "mean":
        parts.append(f"--aggregate {aggregate}")
    parts += [feature["extract_options"], "-o features.parquet"]
    return " ".join(parts)


def format_corpus_probe(report: dict[str, Any], cfg: PipelineConfig) -> str:
    """The ranked table of probe_corpus, the cost of the pass, and the cheapest feature near the best
    with the extract command that makes it."""
    head = ("rank", "feature", "layers", "aggregate", "windows/doc", "dim", "bytes/doc", "accuracy", "macro-F1")
    rows = [head]
    for i, r in enumerate(report["results"], 1):
        rows.append((str(i), r["feature"], layers_text(r), r.get("aggregate", "mean"), f"{r['windows_per_doc']:.2f}",
                     str(r["dimension"]), str(r["bytes_per_doc"]), f"{r['accuracy_mean']:.3f} ± {r['accuracy_std']:.3f}",
                     f"{r['f1_macro_mean']:.3f} ± {r['f1_macro_std']:.3f}"))
    lex = report.get("lexical")
    if lex is not None:
        rows.append(("-", lex["feature"], "", "", "0", *_scores(lex, "")))
    for r in report.get("hybrids", ()) + report.get("compact", []):
        rows.append(("-", r["feature"], layers_text(r.get("base", r)) if "layers" in r.get("base", r) else "",
                     "", f"{r['windows_per_doc']:.2f}", *_scores(r, str(r.get("bytes_per_doc") or ""))))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) if i in (1, 2, 3) else cell.rjust(w)
                       for i, (cell, w) in enumerate(zip(row, widths))).rstrip() for row in rows]
    best, cheap = report["best"], report["cheapest"]
    stored = report.get("windows_cached", 0)   # served by the window store: neither encoded nor shared
    saved = report["windows_requested"] - report["windows_encoded"] - stored
    cached = f", {stored} from the cache," if stored else ""
    lines.append(f"{report['documents']} documents (stratified sample), {len(report['results'])} features from one "
                 f"pass: {report['windows_encoded']} windows encoded{cached} for {report['windows_requested']} asked "
                 f"({saved} shared), {report['extract_seconds']:.1f} s; probes {report['probe_seconds']:.1f} s"
                 + (f"; lexical, hybrid and compact rows {report['baseline_seconds']:.1f} s"
                    if "baseline_seconds" in report else ""))
    lines.append(f"{report['folds']}-fold stratified CV, StandardScaler + LogisticRegression; {report['classes']} "
                 f"classes, majority-class accuracy {report['majority']:.3f}")
    if report.get("tokens") and report.get("unknown_tokens", 0) / report["tokens"] >= UNKNOWN_WARN_SHARE:
        lines.append(unknown_warning(report["unknown_tokens"], report["tokens"]))   # as extract's summary
    if report["left_out"] or report["dropped_labels"]:
        lines.append(f"left out: {report['left_out']} documents without features, {report['dropped_labels']} rows "
                     "with an empty label")
    lines.append(f"best: {best['feature']} {best['accuracy_mean']:.3f} ± {best['accuracy_std']:.3f}; cheapest within "
                 f"one sd of it: {cheap['feature']} ({cheap['windows_per_doc']:.2f} windows/doc, "
                 f"accuracy {cheap['accuracy_mean']:.3f} ± {cheap['accuracy_std']:.3f})")
    if scored(lex) is None or lex["accuracy_mean"] <= best["accuracy_mean"]:
        lines.append("  " + extract_command(cfg, cheap, cfg.read.inputs, report.get("label_col")))
        if report.get("label_col") is not None:
            lines.append(f"  longbert probe features.parquet --label-col {shlex.quote(report['label_col'])}")
    if lex is not None:
        lines.append(lexical_summary(lex, best))
    lines += hybrid_summary(report.get("hybrids", []), best, lex, cfg, report.get("label_col"))
    for c in report.get("compact", []):
        if c.get("dims") is not None or c.get("form") == "pca":   # the --dims rows: the smallest line below
            continue
        if scored(c) is None:
            lines.append(f"compact {c['form']}: not computable ({c['error']})")
            continue
        lines.append(f"compact {c['form']}: {c['feature']} keeps {c['accuracy_kept']:.1%} of the best's accuracy "
                     f"({c['accuracy_mean']:.3f} ± {c['accuracy_std']:.3f}) in {c['bytes_per_vector']} bytes per "
                     f"vector against {c['float32_bytes']} as float32")
    lines += dims_summary(report)
    return "\n".join(lines)


def dims_summary(report: dict[str, Any]) -> list[str]:
    """The summary's lines on accuracy per byte: the smallest row (fewest bytes per document) within
    NEAR of the best feature's accuracy, with the extract options that store it; the --dims left out."""
    from .probe_compact import NEAR

    best, small = report["best"], report.get("smallest")
    lines = []
    failed = [c for c in report.get("compact", []) if c.get("form") == "pca" and scored(c) is None]
    if failed:
        lines.append(f"dims rows: not computable ({failed[0]['error']})")
    if small is not None:
        full = 4 * best["dimension"]
        if small is best:
            lines.append(f"smallest within {NEAR} of {best['feature']} ({best['accuracy_mean']:.3f}): the float32 "
                         f"feature itself, {full} bytes per document; no compact or fewer-dimension row keeps it")
        else:
            how = (f"--dims {small['dims']} " if small.get("dims") else "") + f"--out-dtype {small['form']}"
            lines.append(f"smallest within {NEAR} of {best['feature']} ({best['accuracy_mean']:.3f}, {full} bytes per "
                         f"document as float32): {small['feature']} {small['accuracy_mean']:.3f} ± "
                         f"{small['accuracy_std']:.3f} in {small['bytes_per_doc']} bytes per document "
                         f"({full / small['bytes_per_doc']:.1f}x fewer); extract it with {how}")
    if report.get("dims_skipped"):
        lines.append(f"dims {', '.join(map(str, report['dims_skipped']))} not probed: a PCA keeps no more dimensions "
                     "than a training fold has documents; probe a larger --sample")
    return lines


def _scores(r: dict[str, Any], size: str = "") -> tuple[str, str, str, str]:
    """A table row's dim, bytes/doc (``size``), accuracy and macro-F1 cells; "-", "", "not computable" and ""
    for a row without scores."""
    if scored(r) is None:
        return "-", "", "not computable", ""
    return (str(r["dimension"]), size, f"{r['accuracy_mean']:.3f} ± {r['accuracy_std']:.3f}",
            f"{r['f1_macro_mean']:.3f} ± {r['f1_macro_std']:.3f}")


def pass_line(documents: int, totals, seconds: float) -> str:
    """probe's line after its one extraction pass: documents, windows encoded, those the window store
    served (when it served any) and windows asked (pipeline.counts.BlockCounts ``totals``), seconds.
    Example: "one pass: 20 documents, 0 windows encoded, 20 from the cache, for 120 asked, 2.2 s"."""
    cached = f", {totals.windows_cached} from the cache," if totals.windows_cached else ""
    return (f"one pass: {documents} documents, {totals.windows} windows encoded{cached} for "
            f"{totals.windows_requested} asked, {seconds:.1f} s")
