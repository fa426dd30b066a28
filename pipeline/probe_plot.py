"""The chart of ``longbert probe CORPUS`` (pipeline.probe.probe_corpus's report -> PNG), and the layers text
its table and chart share. Called by cli.py through pipeline.probe."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .features_config import STRATEGIES, compact_layers

# Strategy: marker shape (and its place on the x-axis); pooling: colour; aggregation: marker fill.
MARKERS = {"head": "o", "tail": "s", "head_tail": "^", "chunk": "D", "sliding": "v", "late": "P"}
COLOURS = {"cls": "#4c72b0", "mean": "#dd8452", "max": "#55a868", "pooler": "#c44e52"}
FILLS = {"mean": "full", "mean,max": "left", "first,last,mean,max": "none"}


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


def plot_corpus_probe(report: dict[str, Any], path: str | Path):
    """Accuracy (mean ± sd over folds) of every probed feature, one panel per layer choice (its layers in
    the title), strategies along the x-axis (each with its own marker, and its windows per document in
    the tick label), pooling by colour, aggregation by the marker's fill. The y-axis spans the results;
    the legend sits right of the panels, over no data; the best and the cheapest near it are named
    below. PNG at ``path``; returns the figure.

    Raises:
        ConfigError: matplotlib is not installed.
    """
    from .stats import pyplot, save_figure

    plt = pyplot()   # raises ConfigError without matplotlib
    from matplotlib.lines import Line2D
    results = report["results"]
    ordered = sorted(results, key=lambda r: (len(r["layers"]) > 1, -r["layers"][0]))   # -1, -2, then several
    layer_sets = list(dict.fromkeys(layers_text(r) for r in ordered))
    strategies = [s for s in STRATEGIES if any(r["strategy"] == s for r in results)]
    fig, axes = plt.subplots(1, len(layer_sets), figsize=(4.4 * len(layer_sets) + 2.8, 4.6), dpi=120, sharey=True,
                             squeeze=False)
    slots = [(p, a) for p in COLOURS for a in FILLS]               # 12 places side by side within a strategy
    for ax, layers in zip(axes[0], layer_sets):
        for r in (r for r in results if layers_text(r) == layers):
            x = strategies.index(r["strategy"]) - 0.36 + slots.index((r["pooling"], r["aggregate"])) * 0.72 / 11
            ax.errorbar([x], [r["accuracy_mean"]], yerr=[r["accuracy_std"]], fmt=MARKERS[r["strategy"]], ms=5,
                        capsize=1.5, elinewidth=0.8, color=COLOURS[r["pooling"]], fillstyle=FILLS[r["aggregate"]],
                        markeredgewidth=1)
        wpd = {r["strategy"]: r["windows_per_doc"] for r in results}
        ax.set_xticks(range(len(strategies)), [f"{s}\n{wpd[s]:.1f} win/doc" for s in strategies], fontsize=7)
        ax.set_xlim(-0.6, len(strategies) - 0.4)
        ax.set_title(f"layers {layers}", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        if _y_range(results)[0] <= report["majority"] <= _y_range(results)[1]:   # else named in the legend
            ax.axhline(report["majority"], color="grey", linestyle=":", linewidth=1)
    axes[0][0].set_ylim(*_y_range(results))
    axes[0][0].set_ylabel(f"accuracy, mean ± sd over {report['folds']} folds")
    handles = [Line2D([], [], color="black", marker=m, linestyle="none", label=s) for s, m in MARKERS.items()
               if s in strategies]
    handles += [Line2D([], [], color=c, marker="o", linestyle="none", label=f"pooling {p}") for p, c in COLOURS.items()
                if any(r["pooling"] == p for r in results)]
    handles += [Line2D([], [], color="black", marker="o", fillstyle=f, linestyle="none", label=f"aggregate {a}")
                for a, f in FILLS.items() if any(r["aggregate"] == a for r in results)]
    lo, hi = _y_range(results)
    where = "" if lo <= report["majority"] <= hi else " (off the axis)"
    handles.append(Line2D([], [], color="grey", linestyle=":", label=f"majority class {report['majority']:.3f}{where}"))
    right = 1 - 2.6 / fig.get_figwidth()    # the last 2.6 inches hold the legend, beside the panels
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(right + 0.01, 0.5), fontsize=7, frameon=False)
    best, cheap = report["best"], report["cheapest"]
    fig.suptitle(f"Linear probe, {report['documents']} documents, {report['classes']} classes", fontsize=10)
    fig.text(0.01, 0.005, f"best: {_label(best)}    cheapest within one sd: {_label(cheap)}", fontsize=7)
    save_figure(fig, path, rect=(0, 0.04, right, 1))
    return fig


def _label(r: dict[str, Any]) -> str:
    """'chunk, mean, layers -2, aggregate mean,max: 0.850 ± 0.009'."""
    return (f"{r['strategy']}, {r['pooling']}, layers {layers_text(r)}, aggregate {r['aggregate']}: "
            f"{r['accuracy_mean']:.3f} ± {r['accuracy_std']:.3f}")
