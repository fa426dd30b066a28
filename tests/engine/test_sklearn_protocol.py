"""scikit-learn's protocol on the built-in stages and on Pipeline: get_params(deep=...), set_params,
sklearn.base.clone, named_steps, indexing and slicing; every stage pickles to an equal stage."""
from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest
from conftest import words

import longbert
from pipeline.errors import ConfigError

sklearn_base = pytest.importorskip("sklearn.base")

TEXTS = [words(30), words(5, 3)]


def _features(pipe) -> list:
    return pipe(longbert.Batch.from_texts(TEXTS)).column("features").to_pylist()


def test_every_built_in_stage_clones_and_pickles_to_an_equal_stage(pipe):
    for stage in pipe:
        assert stage.get_params(deep=False).keys() == stage.get_params(deep=True).keys() == stage.get_params().keys()
        cloned = sklearn_base.clone(stage)
        assert cloned is not stage and cloned == stage and type(cloned) is type(stage)
        assert pickle.loads(pickle.dumps(stage)) == stage
        assert type(stage)(**stage.get_params()) == stage
    rebuilt = longbert.Pipeline([sklearn_base.clone(s) for s in pipe])
    assert rebuilt.encode_stage().weights is pipe.encode_stage().weights   # shared, not copied
    assert _features(rebuilt) == _features(pipe)


def test_set_params_rebuilds_a_stage_and_refuses_an_unknown_name(pipe):
    seg = sklearn_base.clone(pipe["segment"])
    strategies = {k: dataclasses.replace(v, max_length=8) for k, v in seg.strategies.items()}
    assert seg.set_params(strategies=strategies) is seg
    assert seg.strategies["chunk"].max_length == 8 and seg != pipe["segment"]
    with pytest.raises(ValueError, match=r"invalid parameter 'windows'.*valid parameters: \['cls_id', 'prompt_ids', 'sep_id', 'strategies'\]"):
        seg.set_params(windows=3)
    with pytest.raises(ConfigError, match="with_tokens"):
        sklearn_base.clone(pipe["encode"]).set_params(with_token=True)


def test_pipeline_params_use_step_double_underscore_names_and_set_params_checks_the_chain(pipe):
    params = pipe.get_params(deep=True)
    assert params["segment"] is pipe["segment"] and params["segment__cls_id"] == pipe["segment"].cls_id
    assert [n for n, _ in params["steps"]] == list(pipe.names)
    assert "segment__cls_id" not in pipe.get_params(deep=False)
    derived = pipe.without("rows").insert(pipe["rows"], after="aggregate")   # its own copy of the steps
    seg = pipe["segment"]
    strategies = {k: dataclasses.replace(v, max_length=8) for k, v in seg.strategies.items()}
    assert derived.set_params(segment__strategies=strategies) is derived
    assert derived["segment"].strategies["chunk"].max_length == 8
    assert pipe["segment"] is seg and seg.strategies["chunk"].max_length != 8   # the parent's stage is untouched
    assert _features(derived) != _features(pipe)
    with pytest.raises(ConfigError, match="no stage 'segmnt'"):
        derived.set_params(segmnt__strategies=strategies)
    with pytest.raises(ConfigError, match="reads 'docs'"):
        derived.set_params(steps=[derived["segment"], derived["tokenize"]] + list(derived)[2:])
    assert derived.names == pipe.names                                      # unchanged by the refused call
    assert derived.named_steps.segment is derived.named_steps["segment"] is derived["segment"]
    assert pipe[0] is pipe["tokenize"] and pipe[-1] is pipe["rows"]


def test_a_slice_is_a_pipeline_that_begins_where_its_first_stage_stood(pipe):
    middle = pipe[1:3]
    assert isinstance(middle, longbert.Pipeline) and middle.names == ("segment", "dedup")
    batch = longbert.Batch.from_texts(TEXTS)
    head = pipe[:1].process(batch)
    planned = middle.process(head)
    assert planned.plan is not None
    table = pipe[3:](planned)
    assert table.column("features").to_pylist() == _features(pipe)
    assert pipe[:].names == pipe.names
    with pytest.raises(ConfigError, match="reads 'docs'"):
        longbert.Pipeline(list(pipe)[1:3])                                   # alone it is not a chain
    with pytest.raises(ValueError, match="step of 1"):
        pipe[::2]
    np.testing.assert_equal(len(pipe[2:2]), 0)


def test_clone_of_a_pipeline_is_an_equal_pipeline_of_its_own(pipe):
    assert pipe.get_params(deep=False).keys() == {"steps"}                 # the constructor's one argument
    assert type(pipe)(**pipe.get_params(deep=False)).names == pipe.names
    lower = pipe.insert(lambda b: b, before="tokenize", name="same")       # a callable without get_params too
    for original in (pipe, lower):
        twin = sklearn_base.clone(original)
        assert twin is not original and type(twin) is type(original) and twin.names == original.names
        for (name, a), (_, b) in zip(twin.steps, original.steps):
            if hasattr(b, "get_params"):                                   # a function deep-copies to itself
                assert a is not b and a == b, name                         # the stages' own equality                                      # the stages' own equality
        assert twin.encode_stage().weights is original.encode_stage().weights   # shared, not copied
        assert _features(twin) == _features(original)
    twin = sklearn_base.clone(pipe)
    seg = pipe["segment"]
    eight = {k: dataclasses.replace(v, max_length=8) for k, v in seg.strategies.items()}
    twin.set_params(segment__strategies=eight)
    assert pipe["segment"] is seg and seg.strategies["chunk"].max_length != 8   # the original is untouched
    assert _features(twin) != _features(pipe)
    wrapped = sklearn_base.clone({"p": pipe})["p"]                           # inside another estimator's params
    assert wrapped.names == pipe.names and wrapped is not pipe
