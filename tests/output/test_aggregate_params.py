"""longbert.Aggregate built by hand: feature specs as --feature takes them, and its errors."""
from __future__ import annotations

import re

import pytest

import longbert
from pipeline.errors import ConfigError
from pipeline.options.features_config import Feature

COLS, SLICES = (("chunk_mean", 384),), ((0, 384),)


def test_aggregate_takes_feature_specs_as_feature_does():
    by_spec = longbert.Aggregate(features=("chunk:mean",), columns=COLS, slices=SLICES)
    by_feature = longbert.Aggregate(features=(Feature(strategy="chunk", pooling="mean"),), columns=COLS, slices=SLICES)
    assert by_spec == by_feature
    assert by_spec.features == (Feature(strategy="chunk", pooling="mean", layers=(-1,), layer_agg="mean"),)
    assert type(by_spec)(**by_spec.get_params()) == by_spec
    assert (by_spec.n_layers, by_spec.hidden) == (None, None)   # no model's sizes assumed


def test_aggregate_refuses_what_is_not_a_list_of_features():
    with pytest.raises(ConfigError, match=re.escape("Aggregate: features must be a list or tuple of Feature objects "
                                                    "or specs such as 'chunk:mean'; got str 'chunk:mean'")):
        longbert.Aggregate(features="chunk:mean", columns=COLS, slices=SLICES)
    with pytest.raises(ConfigError, match=re.escape("Aggregate: features holds int 1; give Feature objects or specs "
                                                    "such as 'chunk:mean'")):
        longbert.Aggregate(features=(1,), columns=COLS, slices=SLICES)


def test_late_features_need_the_models_sizes():
    with pytest.raises(ConfigError, match=re.escape("Aggregate: late features need n_layers and hidden, the model's "
                                                    "num_hidden_layers and hidden_size (got n_layers=None, hidden=None)")):
        longbert.Aggregate(features=("late:mean",), columns=COLS, slices=SLICES)
    late = longbert.Aggregate(features=("late:mean",), columns=COLS, slices=SLICES, n_layers=6, hidden=384)
    assert late.token_layers == (6,)
