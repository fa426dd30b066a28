"""Shipping a pipeline: pickle and copy.deepcopy of a Pipeline and of every built-in stage, before and
after the weights load, in this process, in a spawned process and in a joblib (loky) worker."""
from __future__ import annotations

import copy
import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest
from conftest import words

import longbert

TEXTS = [words(30), words(5, 3), words(12, 7)]


def _vectors(pipe) -> np.ndarray:
    return np.asarray(pipe(longbert.Batch.from_texts(TEXTS)).column("features").to_pylist(), dtype=np.float32)


def _encode_in_worker(blob: bytes) -> np.ndarray:
    return _vectors(pickle.loads(blob))


@pytest.fixture(scope="module")
def fresh(tiny_model_dir):
    """A pipeline whose weights are not loaded yet (the module's ``pipe`` loads them)."""
    return longbert.Pipeline.from_options(model=str(tiny_model_dir), strategy="chunk", max_length=16)


def test_pickle_and_deepcopy_before_the_weights_load_give_the_parents_vectors(tiny_model_dir):
    pipe = longbert.Pipeline.from_options(model=str(tiny_model_dir), strategy="chunk", max_length=16)
    assert not pipe.encode_stage().loaded
    back = pickle.loads(pickle.dumps(pipe))
    deep = copy.deepcopy(pipe)
    assert not back.encode_stage().loaded and back.names == pipe.names
    assert deep.encode_stage().weights is pipe.encode_stage().weights   # shared, never copied
    want = _vectors(pipe)
    np.testing.assert_array_equal(_vectors(back), want)
    np.testing.assert_array_equal(_vectors(deep), want)


def test_pickle_after_a_run_reloads_the_weights_from_their_folder(fresh):
    want = _vectors(fresh)
    weights = fresh.encode_stage().weights
    assert weights.loaded and weights.sha256 is not None
    back = pickle.loads(pickle.dumps(fresh))
    assert not back.encode_stage().loaded                                 # no weights travel
    assert back.encode_stage().weights.sha256 == weights.sha256          # but what they were checked with
    np.testing.assert_array_equal(_vectors(back), want)
    assert back.encode_stage().weights.model is not weights.model
    deep = copy.deepcopy(fresh)
    assert deep.encode_stage().weights is weights and deep.encode_stage().loaded
    np.testing.assert_array_equal(_vectors(deep), want)


def test_every_built_in_stage_pickles_and_deep_copies_to_an_equal_stage(fresh):
    _vectors(fresh)
    for stage in fresh:
        back = pickle.loads(pickle.dumps(stage))
        assert type(back) is type(stage) and back.name == stage.name
        assert repr(back) == repr(stage)
        assert copy.deepcopy(stage).get_params().keys() == stage.get_params().keys()


def test_unpickled_weights_refuse_a_folder_whose_files_changed(fresh, tmp_path):
    from pipeline.model.encode_stage import Weights
    from pipeline.errors import ModelError

    _vectors(fresh)
    w = pickle.loads(pickle.dumps(fresh.encode_stage().weights))
    w.sha256 = "0" * 64   # as if the folder was saved again after the parent loaded it
    with pytest.raises(ModelError, match="was saved again after this pipeline was pickled.*build the pipeline again from the folder"):
        w.encoder(fresh.encode_stage().spec, fresh.encode_stage().tokenizer)
    assert isinstance(w, Weights) and not w.loaded


def test_a_spawned_process_encodes_the_parents_vectors_exactly(fresh):
    want = _vectors(fresh)
    blob = pickle.dumps(fresh)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        got = pool.submit(_encode_in_worker, blob).result(timeout=300)
    np.testing.assert_array_equal(got, want)


def test_a_joblib_loky_worker_encodes_the_parents_vectors_exactly(fresh):
    joblib = pytest.importorskip("joblib")
    want = _vectors(fresh)
    got = joblib.Parallel(n_jobs=2, backend="loky")(joblib.delayed(_vectors)(fresh) for _ in range(2))
    for g in got:
        np.testing.assert_array_equal(g, want)


def test_a_pipeline_with_a_window_store_pickles_after_a_run_and_reopens_the_store(tiny_model_dir, tmp_path):
    pipe = longbert.Pipeline.from_options(model=str(tiny_model_dir), strategy="chunk", max_length=16,
                                          cache=str(tmp_path / "store"))
    want = _vectors(pipe)                                   # opens the store's sqlite connection
    back = pickle.loads(pickle.dumps(pipe))
    np.testing.assert_array_equal(_vectors(back), want)     # every window found in the reopened store
    np.testing.assert_array_equal(_vectors(copy.deepcopy(pipe)), want)
