"""probe CORPUS's aggregation variants (slices of the sample's parts); its chart: tests/classify/test_probe_plot.py."""
from __future__ import annotations

import numpy as np

from pipeline.options.features_config import Feature
from pipeline.classify.probe import PROBE_PARTS, probe_variants, variant_name


def test_variants_are_the_named_parts_in_order():
    d = 3
    parts = {name: np.full((2, d), float(i + 1)) for i, name in enumerate(PROBE_PARTS)}    # mean 1, first 2, ...
    M = np.concatenate([parts[p] for p in PROBE_PARTS], axis=1)                           # (2, 4d)
    chunk, head = Feature("chunk", "mean"), Feature("head", "cls")
    got = probe_variants([chunk, head], [M, M[:, :d]], lambda f: d)
    assert [(f.strategy, agg) for f, agg, _ in got] == [("chunk", "mean"), ("chunk", "first"), ("chunk", "last"),
                                                        ("chunk", "max"), ("chunk", "mean,max"),
                                                        ("chunk", "first,last,mean,max"), ("head", "mean")]
    expected = {"mean": ["mean"], "first": ["first"], "last": ["last"], "max": ["max"], "mean,max": ["mean", "max"],
                "first,last,mean,max": ["first", "last", "mean", "max"]}
    for f, agg, X in got:
        np.testing.assert_array_equal(X, np.concatenate([parts[p] for p in expected[agg]], axis=1))
    assert [variant_name(f, agg) for f, agg, _ in got] == ["f_chunk_mean", "f_chunk_mean_agg-first",
                                                           "f_chunk_mean_agg-last", "f_chunk_mean_agg-max",
                                                           "f_chunk_mean_agg-mean-max",
                                                           "f_chunk_mean_agg-first-last-mean-max", "f_head_cls"]
