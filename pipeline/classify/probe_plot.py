"""The charts of ``longbert probe --plot``: extract's outputs (``plot_probe``) and a corpus
(``plot_corpus_probe``), and the layers text the corpus table and chart share."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..options.features_config import STRATEGIES, compact_layers

# Strategy: marker shape; pooling: colour; aggregation: marker fill.
MARKERS = {"head": "o", "tail": "s", "head_tail": "^", "chunk": "D", "sliding": "v", "late": "P"}
COLOURS = {"cls": "#4c72b0", "mean": "#dd8452", "max": "#55a868", "pooler": "#c44e52"}
FILLS = {"mean": "full", "first": "bottom", "last": "top", "max": "right", "mean,max": "left",
         "first,last,mean,max": "none"}
TOP = 10            # the corpus chart names this many features; the others are drawn faint
FAINT = 0.22        # their alpha
LEXICAL_COLOUR = "#8172b3"   # the lexical baseline's line
CHAR_INCH = 0.075   # width of one character of a size-8 label, for the figure width


def layers_text(result: dict[str, Any]) -> str:
    """A result's layers for the table and the chart: '-1', '-2', or 'mean(-4..-1)' (layer_agg of several)."""
    layers = tuple(result["layers"])
    return compact_layers(layers) if len(layers) == 1 else f"{result['layer_agg']}({compact_layers(layers)})"


def _y_range(results: list[dict[str, Any]]) -> tuple[float, float]:
    """The accuracy axis over the results (mean ± sd), with 8% margin, inside [0, 1]."""
    lo = min(r["accuracy_mean"] - r["accuracy_std"] for r in results)
    hi = max(r["accuracy_mean"] + r["accuracy_std"] for r in results)
    pad = max(hi - lo, 0.02) * 0.08
    return max(0.0, lo - pad), min(1.0, hi + pad)


def file_label(r: dict[str, Any]) -> str:
    """A bar group's label: the file (``name.parquet`` or ``name.parquet:column``), what it holds and
    the rows it was scored on, one per line. Example: 'head.parquet\\nhead, mean\\n300 rows'."""
    return f"{Path(r['file']).name}\n{r['strategy']}, {r['pooling']}\n{r['rows']:,} rows"


def plot_probe(results: list[dict[str, Any]], path: str | Path):
    """Bar chart of probe_files' results: per file (or file:column), accuracy and macro-F1 means
    (value on each bar) with ± sd error bars, and the majority-class accuracy as a dotted line.

    Each group's label names its file, strategy, pooling and its own row count (files may hold
    different rows); the title adds the row count only when every file has the same. Each group is
    as wide as its longest label line, so labels never overlap. PNG at ``path``.

    Returns:
        The matplotlib Figure (already saved and closed).

    Raises:
        ConfigError: matplotlib is not installed.
    """
    import numpy as np

    from ..engine.stats import pyplot, save_figure

    plt = pyplot()
    labels = [file_label(r) for r in results]
    group = max([1.6] + [CHAR_INCH * len(line) + 0.2 for text in labels for line in text.splitlines()])  # inches
    x = np.arange(len(results))
    width = 0.38
    fig, ax = plt.subplots(figsize=(max(5.0, group * len(results) + 1.2), 4.4), dpi=120)
    for offset, key, label, color in ((-width / 2, "accuracy", "accuracy", "#4c72b0"),
                                      (width / 2, "f1_macro", "macro-F1", "#dd8452")):
        means = [r[f"{key}_mean"] for r in results]
        bars = ax.bar(x + offset, means, width, yerr=[r[f"{key}_std"] for r in results], capsize=4, label=label,
                      color=color)
        ax.bar_label(bars, labels=[f"{m:.3f}" for m in means], label_type="center", color="white", fontsize=8)
    if results:
        ax.axhline(results[0]["majority"], color="grey", linestyle=":", label="majority class")
        r0 = results[0]
        rows = {r["rows"] for r in results}
        same = f", {r0['rows']:,} rows" if len(rows) == 1 else ""
        ax.set_title(f"Linear probe: {r0['folds']}-fold stratified CV, {r0['classes']} classes{same}", fontsize=10)
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_xlim(-0.5, len(results) - 0.5)
    ax.set_ylim(0, 1.2)  # headroom for the legend above the bars
    ax.set_ylabel(f"mean ± sd over {results[0]['folds'] if results else '?'} folds")
    ax.legend(loc="upper center", ncol=3, frameon=False)
    save_figure(fig, path)
    return fig


def _point(ax, r: dict[str, Any], x: float, y: float, alpha: float, horizontal: bool = False) -> None:
    """One result as a marker (strategy), colour (pooling) and fill (aggregation) with its ± sd bar."""
    err = {"xerr" if horizontal else "yerr": [r["accuracy_std"]]}
    ax.errorbar([x], [y], fmt=MARKERS[r["strategy"]], ms=5, capsize=1.5, elinewidth=0.8, alpha=alpha,
                color=COLOURS[r["pooling"]], fillstyle=FILLS[r["aggregate"]], markeredgewidth=1, **err)


def plot_corpus_probe(report: dict[str, Any], path: str | Path):
    """probe_corpus's report as two panels. Left: the TOP best features by name (rank and the column
    name extract gives it), best at the top, accuracy mean ± sd along x. Right: every probed feature's accuracy
    (y) by strategy (x, with its windows per document in the tick label; within a strategy the
    points sit side by side by layers, pooling and aggregation), the TOP best in full colour and the
    rest faint. Strategy is the marker, pooling the colour, aggregation the fill; the legend sits
    right of the panels, over no data; the best and the cheapest near it are named below. The
    report's lexical baseline (when it has one) is a dashed line across both panels at its accuracy. PNG at
    ``path``; returns the figure.

    Raises:
        ConfigError: matplotlib is not installed.
    """
    from ..engine.stats import pyplot, save_figure

    plt = pyplot()   # raises ConfigError without matplotlib
    results = report["results"]                # ranked, best first
    top = results[:TOP]
    names = [f"{i}. {r['feature']}" for i, r in enumerate(top, 1)]    # the column name holds its layers
    left_w = 1.2 + CHAR_INCH * max(len(n) for n in names)
    sized = _sized(report)                     # accuracy per byte: a third panel when probe made compact rows
    widths = [2.4, 5.6] + ([3.6] if sized else [])
    fig, axes = plt.subplots(1, len(widths), figsize=(left_w + sum(widths) + 2.6, 4.8), dpi=120,
                             gridspec_kw={"width_ratios": widths})
    ax_top, ax_all = axes[:2]
    lex = report.get("lexical")
    lex = None if lex is None or lex.get("accuracy_mean") is None else lex   # a row that could not be computed
    lo, hi = _y_range(results + ([lex] if lex is not None else []))
    for i, r in enumerate(top):
        _point(ax_top, r, r["accuracy_mean"], i, 1.0, horizontal=True)
    ax_top.set_yticks(range(len(top)), names, fontsize=7)
    ax_top.set_ylim(len(top) - 0.5, -0.5)      # rank 1 at the top
    ax_top.set_xlim(lo, hi)
    ax_top.set_xlabel("accuracy, mean ± sd", fontsize=8)
    ax_top.set_title(f"the {len(top)} best of {len(results)}", fontsize=9)
    ax_top.grid(axis="x", alpha=0.3)

    strategies = [s for s in STRATEGIES if any(r["strategy"] == s for r in results)]
    slots = list(dict.fromkeys((layers_text(r), r["pooling"], r["aggregate"]) for r in results))
    step = 0.8 / max(len(slots), 1)
    for rank, r in reversed(list(enumerate(results))):   # the best drawn last, on top
        slot = slots.index((layers_text(r), r["pooling"], r["aggregate"]))
        x = strategies.index(r["strategy"]) - 0.4 + (slot + 0.5) * step
        _point(ax_all, r, x, r["accuracy_mean"], 1.0 if rank < TOP else FAINT)
    wpd = {r["strategy"]: r["windows_per_doc"] for r in results}
    ax_all.set_xticks(range(len(strategies)), [f"{s}\n{wpd[s]:.1f} win/doc" for s in strategies], fontsize=7)
    ax_all.set_xlim(-0.5, len(strategies) - 0.5)
    ax_all.set_ylim(lo, hi)
    ax_all.set_ylabel(f"accuracy, mean ± sd over {report['folds']} folds", fontsize=8)
    ax_all.set_title(f"all {len(results)}: the {len(top)} best in colour, the rest faint", fontsize=9)
    ax_all.grid(axis="y", alpha=0.3)
    if lo <= report["majority"] <= hi:          # else named in the legend
        ax_all.axhline(report["majority"], color="grey", linestyle=":", linewidth=1)
        ax_top.axvline(report["majority"], color="grey", linestyle=":", linewidth=1)
    handles = _legend(results, report["majority"], lo <= report["majority"] <= hi)
    if lex is not None:                         # the lexical baseline: a line across both panels
        ax_all.axhline(lex["accuracy_mean"], color=LEXICAL_COLOUR, linestyle="--", linewidth=1.2)
        ax_top.axvline(lex["accuracy_mean"], color=LEXICAL_COLOUR, linestyle="--", linewidth=1.2)
        from matplotlib.lines import Line2D
        handles.append(Line2D([], [], color=LEXICAL_COLOUR, linestyle="--",
                              label=f"TF-IDF baseline {lex['accuracy_mean']:.3f}"))
    if sized:
        _bytes_panel(axes[2], sized, report["best"], lex)
    right = 1 - 2.6 / fig.get_figwidth()        # the last 2.6 inches hold the legend, beside the panels
    fig.legend(handles=handles, loc="center left",
               bbox_to_anchor=(right + 0.01, 0.5), fontsize=7, frameon=False)
    best, cheap = report["best"], report["cheapest"]
    fig.suptitle(f"Linear probe, {report['documents']} documents, {report['classes']} classes", fontsize=10)
    fig.text(0.01, 0.005, f"best: {_label(best)}    cheapest within one sd: {_label(cheap)}", fontsize=7)
    save_figure(fig, path, rect=(0, 0.04, right, 1))
    return fig


FORM_COLOURS = {"float32": "#4c72b0", "int8": "#dd8452", "binary": "#55a868"}


def _sized(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of the accuracy-per-byte panel: the best BERT feature (float32) and its scored compact rows
    (int8, binary, and --dims N x float32/int8/binary), each with bytes_per_doc; [] when probe made none."""
    compact = [r for r in report.get("compact", []) if r.get("accuracy_mean") is not None and r.get("bytes_per_doc")]
    if not compact:
        return []
    best = report["best"]
    return [{**best, "form": "float32", "bytes_per_doc": best.get("bytes_per_doc") or 4 * best["dimension"]}] + compact


def _bytes_panel(ax, rows: list[dict[str, Any]], best: dict[str, Any], lex: dict[str, Any] | None) -> None:
    """Accuracy (mean ± sd) against stored bytes per document on a log axis: one colour per stored form,
    each point labelled with its dimensions; the best feature's accuracy - 0.005 dotted, the lexical
    baseline dashed."""
    for r in rows:
        ax.errorbar([r["bytes_per_doc"]], [r["accuracy_mean"]], yerr=[r["accuracy_std"]], fmt="o", ms=4, capsize=1.5,
                    elinewidth=0.8, color=FORM_COLOURS.get(r.get("form"), "black"))
        ax.annotate(str(r.get("dims") or r["dimension"]), (r["bytes_per_doc"], r["accuracy_mean"]), fontsize=6,
                    xytext=(3, 2), textcoords="offset points")
    ax.set_xscale("log")
    ax.axhline(best["accuracy_mean"] - 0.005, color="grey", linestyle=":", linewidth=1)
    if lex is not None:
        ax.axhline(lex["accuracy_mean"], color=LEXICAL_COLOUR, linestyle="--", linewidth=1.2)
    from matplotlib.lines import Line2D

    ax.legend(handles=[Line2D([], [], color=c, marker="o", linestyle="none", label=f) for f, c in FORM_COLOURS.items()]
              + [Line2D([], [], color="grey", linestyle=":", label="best - 0.005")], fontsize=6, loc="lower right")
    ax.set_xlabel("bytes per document (log)", fontsize=8)
    ax.set_ylabel("accuracy, mean ± sd", fontsize=8)
    ax.set_title(f"{best['feature']}: accuracy per byte", fontsize=9)
    ax.grid(alpha=0.3)


def _legend(results: list[dict[str, Any]], majority: float, on_axis: bool) -> list:
    """Legend handles: the strategies' markers, the poolings' colours, the aggregations' fills, the majority line."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color="black", marker=m, linestyle="none", label=s) for s, m in MARKERS.items()
               if any(r["strategy"] == s for r in results)]
    handles += [Line2D([], [], color=c, marker="o", linestyle="none", label=f"pooling {p}") for p, c in COLOURS.items()
                if any(r["pooling"] == p for r in results)]
    handles += [Line2D([], [], color="black", marker="o", fillstyle=f, linestyle="none", label=f"aggregate {a}")
                for a, f in FILLS.items() if any(r["aggregate"] == a for r in results)]
    where = "" if on_axis else " (off the axis)"
    handles.append(Line2D([], [], color="grey", linestyle=":", label=f"majority class {majority:.3f}{where}"))
    return handles


def _label(r: dict[str, Any]) -> str:
    """'chunk, mean, layers -2, aggregate mean,max: 0.850 ± 0.009'."""
    return (f"{r['strategy']}, {r['pooling']}, layers {layers_text(r)}, aggregate {r['aggregate']}: "
            f"{r['accuracy_mean']:.3f} ± {r['accuracy_std']:.3f}")
