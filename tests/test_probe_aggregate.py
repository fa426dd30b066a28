"""probe CORPUS's aggregation variants (slices of the sample's parts) and its chart (legend off the data,
y-axis over the results, strategies by marker)."""
from __future__ import annotations

import numpy as np
import pytest

from pipeline.config import Feature
from pipeline.probe import PROBE_PARTS, probe_variants, variant_name


def test_variants_are_the_named_parts_in_order():
    d = 3
    parts = {name: np.full((2, d), float(i + 1)) for i, name in enumerate(PROBE_PARTS)}    # mean 1, first 2, ...
    M = np.concatenate([parts[p] for p in PROBE_PARTS], axis=1)                           # (2, 4d)
    chunk, head = Feature("chunk", "mean"), Feature("head", "cls")
    got = probe_variants([chunk, head], [M, M[:, :d]], lambda f: d)
    assert [(f.strategy, agg) for f, agg, _ in got] == [("chunk", "mean"), ("chunk", "mean,max"),
                                                        ("chunk", "first,last,mean,max"), ("head", "mean")]
    expected = {"mean": ["mean"], "mean,max": ["mean", "max"], "first,last,mean,max": ["first", "last", "mean", "max"]}
    for f, agg, X in got:
        np.testing.assert_array_equal(X, np.concatenate([parts[p] for p in expected[agg]], axis=1))
    assert [variant_name(f, agg) for f, agg, _ in got] == ["f_chunk_mean", "f_chunk_mean_agg-mean-max",
                                                           "f_chunk_mean_agg-first-last-mean-max", "f_head_cls"]


def test_chart_legend_covers_no_data_and_y_spans_the_results(tmp_path):
    pytest.importorskip("matplotlib")
    from pipeline.probe import probe_feature_set
    from pipeline.probe_plot import MARKERS, plot_corpus_probe

    rng = np.random.default_rng(0)
    results = []
    for f in probe_feature_set(6, True):
        for agg in ("mean", "mean,max") if f.strategy in ("chunk", "sliding") else ("mean",):
            results.append({"feature": variant_name(f, agg), "strategy": f.strategy, "pooling": f.pooling,
                            "layers": list(f.layers), "layer_agg": f.layer_agg, "aggregate": agg,
                            "windows_per_doc": 3.0 if f.strategy == "chunk" else 1.0, "dimension": 8,
                            "accuracy_mean": rng.uniform(0.80, 0.86), "accuracy_std": 0.01})
    results.sort(key=lambda r: -r["accuracy_mean"])
    report = {"results": results, "best": results[0], "cheapest": results[1], "majority": 0.2, "folds": 5,
              "documents": 100, "classes": 3}
    fig = plot_corpus_probe(report, tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    axes = fig.axes
    assert [a.get_title() for a in axes] == ["layers -1", "layers -2", "layers mean(-4..-1)"]
    lo = min(r["accuracy_mean"] - r["accuracy_std"] for r in results)
    hi = max(r["accuracy_mean"] + r["accuracy_std"] for r in results)
    y0, y1 = axes[0].get_ylim()
    assert lo - 0.02 < y0 <= lo and hi <= y1 < hi + 0.02                 # the results' range, not 0..1
    fig.canvas.draw()
    legend = fig.legends[0].get_window_extent()
    assert all(not legend.overlaps(a.get_window_extent()) for a in axes)  # beside the panels
    markers = {line.get_marker() for a in axes for line in a.get_lines() if line.get_marker() not in ("None", "_")}
    assert markers >= set(MARKERS.values())
