"""longbert.Aggregate built by hand from its own values: feature specs as --feature takes them, its errors,
and its vectors checked against numpy on the window vectors it reads (the encoded batch's layout)."""
from __future__ import annotations

import pickle
import re

import numpy as np
import pytest
from conftest import words

import longbert
from pipeline.errors import ConfigError
from pipeline.options.features_config import Feature


def test_aggregate_takes_feature_specs_as_feature_does():
    by_spec = longbert.Aggregate(features=("chunk:mean",))
    by_feature = longbert.Aggregate(features=(Feature(strategy="chunk", pooling="mean"),))
    assert by_spec == by_feature
    assert by_spec.features == (Feature(strategy="chunk", pooling="mean", layers=(-1,), layer_agg="mean"),)
    assert type(by_spec)(**by_spec.get_params()) == by_spec
    assert sorted(by_spec.get_params()) == ["aggregates", "chunk_tokens", "features", "normalize"]
    assert pickle.loads(pickle.dumps(by_spec)) == by_spec


def test_column_names_come_from_the_values_alone():
    assert longbert.Aggregate(["chunk:mean"], aggregates=("mean", "max")).column_names() == ["features"]
    two = longbert.Aggregate(["chunk:mean", "head:cls"], aggregates=("mean", "max"))
    assert two.column_names() == ["f_chunk_mean_agg-mean-max", "f_head_cls_agg-mean-max"]
    assert longbert.WindowAggregate(["chunk:mean", "chunk:cls"], aggregates=("mean", "max")).column_names() == \
        ["f_chunk_mean", "f_chunk_cls"]


def test_aggregate_refuses_what_is_not_a_list_of_features_or_aggregates():
    with pytest.raises(ConfigError, match=re.escape("Aggregate: features must be a list or tuple of Feature objects "
                                                    "or specs such as 'chunk:mean'; got str 'chunk:mean'")):
        longbert.Aggregate(features="chunk:mean")
    with pytest.raises(ConfigError, match=re.escape("Aggregate: features holds int 1; give Feature objects or specs "
                                                    "such as 'chunk:mean'")):
        longbert.Aggregate(features=(1,))
    with pytest.raises(ConfigError, match=re.escape("Aggregate: aggregates=('median',); choose from")):
        longbert.Aggregate(features=("chunk:mean",), aggregates=("median",))


def _encoded(pipe, features, texts):
    """``texts`` through pipe's tokenize, segment, dedup and an Encode of ``features`` built alone."""
    encode = longbert.Encode(pipe["encode"].model, [Feature(*f.split(":")) for f in features],
                             pipe["encode"].tokenizer, pipe["encode"].facts)
    return encode(pipe.prepare(longbert.Batch.from_texts(texts)))


def test_mean_and_max_of_two_windows_equal_numpys(pipe):
    """30 tokens in chunk windows of 14 content tokens are 3 windows; 20 tokens are 2."""
    batch = _encoded(pipe, ["chunk:mean"], [words(20), words(30, 3)])
    out = longbert.Aggregate(["chunk:mean"], aggregates=("mean", "max"))(batch)
    rows = batch.into_unique("chunk")
    docs = np.array([w.doc for w in batch.windows["chunk"]])
    for d, n in ((0, 2), (1, 3)):
        x = batch.encoded.vectors[rows[docs == d]]                                     # (n, 32)
        assert x.shape == (n, 32)
        want = np.concatenate([x.mean(axis=0), x.max(axis=0)])
        np.testing.assert_allclose(out.vectors["features"][d], want, rtol=1e-6, atol=1e-7)
    assert out.valid.tolist() == [True, True] and out.n_windows.tolist() == [2, 3]


def test_each_feature_reads_its_slice_from_the_encoded_layout(pipe):
    """The Encode pools mean then cls side by side; an Aggregate of cls alone reads the second half."""
    batch = _encoded(pipe, ["chunk:mean", "chunk:cls"], [words(20)])
    assert batch.encoded.layout.pools[1][1] == (32, 64) and batch.encoded.vectors.shape == (2, 64)
    out = longbert.Aggregate(["chunk:cls"])(batch)
    np.testing.assert_allclose(out.vectors["features"][0], batch.encoded.vectors[:, 32:64].mean(axis=0), rtol=1e-6)
    with pytest.raises(ConfigError, match=re.escape("feature 'chunk:max' reads pooling ('max', (-1,), 'mean'), "
                                                    "which the encoded batch does not hold")):
        longbert.Aggregate(["chunk:max"])(batch)


def test_an_encoded_batch_without_its_layout_is_refused(pipe):
    batch = _encoded(pipe, ["chunk:mean"], [words(20)])
    bare = batch.replace(encoded=type(batch.encoded)(vectors=batch.encoded.vectors, finite=batch.encoded.finite))
    with pytest.raises(ConfigError, match=re.escape("the encoded batch does not say where each pooling lies")):
        longbert.Aggregate(["chunk:mean"])(bare)
