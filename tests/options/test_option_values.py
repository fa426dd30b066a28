"""Option values are coerced and checked once, where they enter: a config file, the command line, a
Python call. An integral number is an int wherever it is written (16.0, "1e4"); anything else is a
ConfigError naming the option and the value, the same message from every channel; a failed Python
call leaves nothing cached for the next one."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import yaml
from conftest import CASES, invoke, read_features, words, write_csv
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import longbert
from pipeline.classify import loaded, vectorizer
from pipeline.errors import ConfigError
from pipeline.options.config import PipelineConfig

TEXTS = [words(300), words(5, 7)]   # B67.csv's shape (a long row, a short one) in the tiny model's words


# ------------------------------------------------------------------------------------- examples

@pytest.mark.parametrize("key, value, expected", [
    ("overlap", 16.0, 16), ("block_rows", "1e4", 10000), ("max_length", 64.0, 64), ("threads", 1.0, 1),
    ("batch_size", "8", 8), ("max_tokens_per_doc", np.float64(1e3), 1000), ("head_tokens", np.int64(7), 7),
    ("chunk_tokens", " 32 ", 32), ("overlap", -0.0, 0)])
def test_an_integral_number_becomes_an_int(key, value, expected):
    cfg = PipelineConfig.from_options(strategy="chunk", **{key: value})
    section = next(s for s in (cfg.read, cfg.model, cfg.segment, cfg.encode) if hasattr(s, key))
    got = getattr(section, key)
    assert got == expected and type(got) is int


@pytest.mark.parametrize("key, value, message", [
    ("overlap", 16.5, "--overlap=16.5 is not a whole number; give an integer, e.g. --overlap 16"),
    ("overlap", "abc", "--overlap='abc' is not a whole number; give an integer, e.g. --overlap 16"),
    ("overlap", True, "--overlap=True is not a whole number; give an integer, e.g. --overlap 16"),
    ("block_rows", float("nan"), "--block-rows=nan is not a whole number; give an integer, e.g. --block-rows 16"),
    ("max_length", "1e30", "--max-length=1e30 is out of range; give a whole number below 2**63"),
    ("threads", [1], "--threads=[1] is not a whole number; give an integer, e.g. --threads 16"),
    ("layers", "-1.5", "--layers=-1.5 must be comma-separated integers, e.g. -4,-3,-2,-1"),
    ("layers", [-1, True], "--layers=[-1, True] must be comma-separated integers, e.g. -4,-3,-2,-1"),
    ("normalize", "false", "--normalize='false' is not true or false; give True or False (on the command line: "
                           "the flag itself, or leave it out)"),
    ("overwrite", 1, "--overwrite=1 is not true or false; give True or False (on the command line: the flag "
                     "itself, or leave it out)"),
    ("text_col", 2020, "--text-col=2020 is not text; give a string (in a config file, quote it)"),
])
def test_a_value_of_the_wrong_kind_is_a_config_error_naming_the_option(key, value, message):
    with pytest.raises(ConfigError) as err:
        PipelineConfig.from_options(**{key: value})
    assert str(err.value) == message


def test_a_float_option_takes_numbers_and_refuses_what_is_not_finite():
    cfg = PipelineConfig.from_options(engine="ray", gpus_per_worker="0.5", cpus_per_worker=2)
    assert (cfg.ray.gpus_per_worker, cfg.ray.cpus_per_worker) == (0.5, 2.0)
    assert type(cfg.ray.cpus_per_worker) is float
    with pytest.raises(ConfigError) as err:
        PipelineConfig.from_options(engine="ray", gpus_per_worker=float("inf"))
    assert str(err.value) == "--gpus-per-worker=inf is not a finite number; give a number, e.g. --gpus-per-worker 1"


def test_layers_written_as_integral_floats_are_ints():
    assert PipelineConfig.from_options(layers=[-2.0, -1]).pool.layers == (-2, -1)
    assert PipelineConfig.from_options(features=["chunk:mean:-2.0"]).pool.layers == (-2,)


def test_a_section_built_by_hand_or_replaced_is_coerced_too():
    import dataclasses

    from pipeline.options.config import SegmentConfig
    seg = SegmentConfig(strategy="sliding", overlap=16.0)
    assert type(seg.overlap) is int and seg.overlap == 16
    with pytest.raises(ConfigError, match=r"^--overlap=2\.5 is not a whole number"):
        dataclasses.replace(seg, overlap=2.5)


@pytest.mark.parametrize("case, key, value", [("B67_block_rows.yaml", "block_rows", 10000),
                                              ("B67_max_length.yaml", "max_length", 64),
                                              ("B67_overlap.yaml", "overlap", 16), ("B67_threads.yaml", "threads", 1)])
def test_config_files_with_float_numbers_give_int_options(case, key, value):
    cfg = PipelineConfig.from_options(config_file=CASES / case)
    section = next(s for s in (cfg.read, cfg.model, cfg.segment) if hasattr(s, key))
    assert getattr(section, key) == value and type(getattr(section, key)) is int


def test_cli_runs_a_config_with_float_numbers_as_their_ints(runner, tmp_path, tiny_model_dir):
    write_csv(tmp_path / "in.csv", [{"id": i + 1, "text": t} for i, t in enumerate(TEXTS)])
    args = ["extract", tmp_path / "in.csv", "--model", tiny_model_dir, "--no-progress"]
    floats = invoke(runner, [*args, "--config", CASES / "B67_overlap.yaml", "-o", tmp_path / "a.parquet"])
    ints = invoke(runner, [*args, "--strategy", "sliding", "--max-length", "64", "--overlap", "16",
                           "-o", tmp_path / "b.parquet"])
    assert floats.exit_code == 0 and ints.exit_code == 0, floats.output + ints.output
    a, b = read_features(tmp_path / "a.parquet"), read_features(tmp_path / "b.parquet")
    assert list(a["id"]) == ["1", "2"] and list(a["n_windows"]) == list(b["n_windows"])
    assert a["n_windows"][0] > 1   # the long row made several sliding windows
    np.testing.assert_array_equal(np.stack(a["features"]), np.stack(b["features"]))


def test_cli_refuses_a_non_integral_option_with_exit_2_before_the_model_loads(runner, tmp_path):
    shutil.copy(CASES / "B67.csv", tmp_path / "in.csv")
    (tmp_path / "bad.yaml").write_text("overlap: 16.5\n")
    for extra in (["--overlap", "16.5"], ["--config", tmp_path / "bad.yaml"]):
        # a model that does not exist: had it been loaded first, the message would be about it
        result = invoke(runner, ["extract", tmp_path / "in.csv", "--model", tmp_path / "no_model", "--strategy",
                                 "sliding", *extra, "-o", tmp_path / "o.parquet"])
        assert result.exit_code == 2
        assert result.output == "Error: --overlap=16.5 is not a whole number; give an integer, e.g. --overlap 16\n"
        assert not (tmp_path / "o.parquet").exists()


# ------------------------------------------------------------------------------------- Python calls

@pytest.mark.parametrize("order", [(16.0, 16), (16, 16.0)])
def test_encode_with_a_float_overlap_equals_the_int_call_in_either_order(tiny_model_dir, order):
    loaded._LOADED.clear()
    out = [longbert.encode(TEXTS, model=str(tiny_model_dir), strategy="sliding", max_length=64, overlap=v)
           for v in order]
    assert out[0].shape == (2, 32) and np.isfinite(out[0]).all()
    np.testing.assert_array_equal(out[0], out[1])
    cfg = loaded._LOADED["pipeline"][0][0]
    assert type(cfg.segment.overlap) is int


def test_a_failed_encode_leaves_nothing_cached_for_the_next_call(tiny_model_dir, monkeypatch):
    kw = dict(model=str(tiny_model_dir), strategy="sliding", max_length=64, overlap=16)
    loaded._LOADED.clear()
    expected = longbert.encode(TEXTS, **kw)
    assert np.isfinite(expected).all()
    real = vectorizer.block_from_texts

    def broken(texts):
        raise RuntimeError("the block could not be made")
    monkeypatch.setattr(vectorizer, "block_from_texts", broken)
    with pytest.raises(RuntimeError, match="the block could not be made"):
        longbert.encode(TEXTS, **kw)
    assert "pipeline" not in loaded._LOADED       # the failed call's pipeline is gone; the model stays
    monkeypatch.setattr(vectorizer, "block_from_texts", real)
    np.testing.assert_array_equal(longbert.encode(TEXTS, **kw), expected)
    with pytest.raises(ConfigError, match=r"^overlap=16\.5 is not a whole number"):
        longbert.encode(TEXTS, **{**kw, "overlap": 16.5})
    np.testing.assert_array_equal(longbert.encode(TEXTS, **kw), expected)


def test_the_vectorizer_and_pipeline_coerce_as_the_cli():
    assert longbert.LongBertVectorizer(overlap=16.0, batch_size="8").config().segment.overlap == 16
    with pytest.raises(ConfigError) as err:
        longbert.LongBertVectorizer(batch_size=2.5).fit()
    assert str(err.value) == "batch_size=2.5 is not a whole number; give an integer, e.g. batch_size=16"
    with pytest.raises(ConfigError) as err:
        longbert.LongBertVectorizer(normalize="no").fit()
    assert str(err.value).startswith("normalize='no' is not true or false")
    with pytest.raises(ConfigError) as err:
        longbert.Pipeline.from_options(model="default", overlap="abc")
    assert str(err.value) == "overlap='abc' is not a whole number; give an integer, e.g. overlap=16"


# ------------------------------------------------------------------------------------- the property

INT_OPTIONS = ("overlap", "block_rows", "max_length", "batch_size", "threads", "chunk_tokens", "head_tokens",
               "max_tokens_per_doc", "max_batch_tokens", "workers")
FLOAT_OPTIONS = ("gpus_per_worker", "cpus_per_worker")
FLAG_OPTIONS = ("normalize", "overwrite", "strict", "with_source", "allow_pickle")
TEXT_OPTIONS = ("text_col", "id_col", "encoding", "device")
CONTEXT = {"overlap": {"strategy": "sliding"}, "workers": {"engine": "ray"}, "gpus_per_worker": {"engine": "ray"},
           "cpus_per_worker": {"engine": "ray"}}

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=8)
_floats = st.floats(allow_nan=True, allow_infinity=True)
_numbers = st.one_of(st.integers(-10 ** 20, 10 ** 20), st.integers(-600, 600), _floats,
                     st.integers(-600, 600).map(float), st.floats(-600, 600))
_number_texts = st.one_of(_numbers.map(repr), st.integers(0, 600).map(lambda i: f"{i}e{i % 3}"),
                          st.integers(0, 600).map(lambda i: f"{i}.0"))
_anything = st.one_of(_numbers, _number_texts, _text, st.booleans(), st.lists(st.integers(0, 3), max_size=2))


def _cli_token(value) -> str | None:
    """What the command line can write for an option that takes a value: text, a number as its text."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value)
    return None   # true/false and lists have no command-line form for such an option


def _outcome(build):
    try:
        return "config", build()
    except ConfigError as err:
        return "error", str(err)


@pytest.fixture
def channels(tmp_path, monkeypatch, runner):
    """(python, yaml, cli): three ways to build the config of one option value; each gives an _outcome."""
    import pipeline.engine.local as local_engine
    import pipeline.engine.ray_engine as ray_engine

    monkeypatch.delenv("LONGBERT_CACHE", raising=False)
    built: list[PipelineConfig] = []

    class Done:
        def line(self) -> str:
            return "captured"

    def capture(cfg, echo=None):
        built.append(cfg)
        return Done()
    monkeypatch.setattr(local_engine, "run", capture)
    monkeypatch.setattr(ray_engine, "run", capture)

    def python(key, value):
        return _outcome(lambda: PipelineConfig.from_options(inputs=("in.csv",), **CONTEXT.get(key, {}), **{key: value}))

    def from_yaml(key, value):
        path = tmp_path / "options.yaml"
        path.write_text(yaml.safe_dump({key: value, **CONTEXT.get(key, {})}), encoding="utf-8")
        return _outcome(lambda: PipelineConfig.from_options(config_file=path, inputs=("in.csv",)))

    def cli(key, argv):
        context = [f"--{k.replace('_', '-')}={v}" for k, v in CONTEXT.get(key, {}).items()]
        built.clear()
        result = invoke(runner, ["extract", "in.csv", *context, *argv])
        if result.exit_code == 0:
            assert len(built) == 1, result.output
            return "config", built[0]
        assert result.exit_code == 2, result.output
        error_lines = [line for line in result.output.splitlines() if line.startswith("Error: ")]
        return "error", error_lines[-1][len("Error: "):]
    return python, from_yaml, cli


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(INT_OPTIONS + FLOAT_OPTIONS + TEXT_OPTIONS), value=_anything)
def test_an_option_value_gives_the_same_config_or_error_through_python_a_config_file_and_the_cli(channels, key, value):
    python, from_yaml, cli = channels
    expected = python(key, value)
    assert from_yaml(key, value) == expected
    token = _cli_token(value)
    if token is not None and (isinstance(value, str) or key not in TEXT_OPTIONS):
        assert cli(key, [f"--{key.replace('_', '-')}={token}"]) == expected


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(FLAG_OPTIONS), value=st.one_of(st.booleans(), _anything))
def test_a_flag_value_gives_the_same_config_or_error_through_python_a_config_file_and_the_cli(channels, key, value):
    python, from_yaml, cli = channels
    expected = python(key, value)
    assert from_yaml(key, value) == expected
    if isinstance(value, bool):   # normalize=False is a value given (a model folder's Normalize yields to it)
        off = ["--no-normalize"] if key == "normalize" else []
        assert cli(key, [f"--{key.replace('_', '-')}"] if value else off) == expected
