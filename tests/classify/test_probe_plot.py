"""probe's charts: labels that do not overlap, each bar's own row count, a corpus chart whose ten best
features are named and whose others are faint, the legend off the data, the y-axis over the results."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from pipeline.classify.probe import probe_feature_set, variant_name

pytest.importorskip("matplotlib")
PNG = b"\x89PNG\r\n\x1a\n"


def corpus_report(seed: int = 0) -> dict:
    """A report as probe_corpus makes it for a 6-layer model with a pooler: every feature, and chunk's and
    sliding's aggregation variants, with random accuracies, ranked best first."""
    rng = np.random.default_rng(seed)
    results = []
    for f in probe_feature_set(6, True):
        for agg in ("mean", "mean,max", "first,last,mean,max") if f.strategy in ("chunk", "sliding") else ("mean",):
            results.append({"feature": variant_name(f, agg), "strategy": f.strategy, "pooling": f.pooling,
                            "layers": list(f.layers), "layer_agg": f.layer_agg, "aggregate": agg,
                            "windows_per_doc": 3.0 if f.strategy == "chunk" else 1.0, "dimension": 8,
                            "accuracy_mean": rng.uniform(0.80, 0.86), "accuracy_std": rng.uniform(0.005, 0.02)})
    results.sort(key=lambda r: -r["accuracy_mean"])
    return {"results": results, "best": results[0], "cheapest": results[1], "majority": 0.2, "folds": 5,
            "documents": 100, "classes": 3}


def overlapping(texts) -> list[tuple[str, str]]:
    """Pairs of non-empty texts whose drawn boxes overlap (the figure must have been drawn)."""
    boxes = [(t.get_text(), t.get_window_extent()) for t in texts if t.get_text()]
    return [(a, b) for (a, ba), (b, bb) in itertools.combinations(boxes, 2) if ba.overlaps(bb)]


def test_corpus_chart_names_the_ten_best_and_draws_the_rest_faint(tmp_path):
    from pipeline.classify.probe_plot import FAINT, MARKERS, TOP, plot_corpus_probe

    report = corpus_report()
    results = report["results"]
    assert len(results) == 96                                # 50 features + 2 x 20 variants + late's 6
    fig = plot_corpus_probe(report, tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:8] == PNG
    ax_top, ax_all = fig.axes
    names = [t.get_text() for t in ax_top.get_yticklabels()]
    assert names == [f"{i}. {r['feature']}" for i, r in enumerate(results[:TOP], 1)]
    # the top panel: one marker per named feature, at its accuracy, in rank order from the top
    markers = [line for line in ax_top.get_lines() if line.get_marker() not in ("None", "_", "|")]
    got = sorted((float(m.get_ydata()[0]), float(m.get_xdata()[0])) for m in markers)
    assert got == [(float(i), pytest.approx(r["accuracy_mean"])) for i, r in enumerate(results[:TOP])]
    # the all panel: every result once; the best TOP opaque, the rest faint
    points = [line for line in ax_all.get_lines() if line.get_marker() not in ("None", "_")]
    assert len(points) == len(results)
    alphas = sorted((line.get_alpha() for line in points), reverse=True)
    assert alphas == [1.0] * TOP + [FAINT] * (len(results) - TOP)
    opaque = sorted(float(p.get_ydata()[0]) for p in points if p.get_alpha() == 1.0)
    assert opaque == pytest.approx(sorted(r["accuracy_mean"] for r in results[:TOP]))
    assert {line.get_marker() for line in points} == set(MARKERS.values())
    lo = min(r["accuracy_mean"] - r["accuracy_std"] for r in results)
    hi = max(r["accuracy_mean"] + r["accuracy_std"] for r in results)
    y0, y1 = ax_all.get_ylim()
    assert lo - 0.02 < y0 <= lo and hi <= y1 < hi + 0.02               # the results' range, not 0..1
    fig.canvas.draw()
    assert overlapping(ax_top.get_yticklabels()) == []
    assert overlapping(ax_all.get_xticklabels()) == []
    legend = fig.legends[0].get_window_extent()
    assert all(not legend.overlaps(a.get_window_extent()) for a in fig.axes)   # beside the panels
    assert not ax_top.get_tightbbox().overlaps(ax_all.get_window_extent())     # the names stop before the data


def file_results(rows: list[int], names: list[str]) -> list[dict]:
    return [{"file": f"out/{n}", "strategy": "chunk", "pooling": "mean", "rows": k, "folds": 5, "classes": 3,
             "majority": 0.34, "accuracy_mean": 0.7 + i / 100, "accuracy_std": 0.02, "f1_macro_mean": 0.6 + i / 100,
             "f1_macro_std": 0.02} for i, (k, n) in enumerate(zip(rows, names))]


def test_file_chart_gives_each_bar_its_rows_and_labels_do_not_overlap(tmp_path):
    from pipeline.classify.probe_plot import plot_probe

    names = ["head.parquet", "many_features_of_a_long_run.parquet:f_chunk_cls_L-4..-1_concat_agg-first-last-mean-max",
             "head_tail.parquet", "x.parquet:f_sliding_max_L-4..-1_mean"]
    fig = plot_probe(file_results([60, 159, 60, 1200], names), tmp_path / "probe.png")
    (ax,) = fig.axes
    assert ax.get_title() == "Linear probe: 5-fold stratified CV, 3 classes"          # rows differ: not in the title
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert [label.splitlines()[-1] for label in labels] == ["60 rows", "159 rows", "60 rows", "1,200 rows"]
    assert [label.splitlines()[0] for label in labels] == names
    fig.canvas.draw()
    assert overlapping(ax.get_xticklabels()) == []


def test_file_chart_title_has_the_rows_when_all_files_share_them(tmp_path):
    from pipeline.classify.probe_plot import plot_probe

    fig = plot_probe(file_results([60, 60], ["a.parquet", "b.parquet"]), tmp_path / "probe.png")
    assert fig.axes[0].get_title() == "Linear probe: 5-fold stratified CV, 3 classes, 60 rows"
