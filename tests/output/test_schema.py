"""The output schema (pipeline.output.schema): over random option sets, the output's column names are unique and
a --keep-col that collides with any output column of that run is exit 2 before the model loads."""
from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest
from conftest import invoke, words, write_csv
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.engine.resolved import feature_dim
from pipeline.options.config import PipelineConfig
from pipeline.errors import ConfigError
from pipeline.classify.features import load_features
from pipeline.options.features_config import AGGREGATES, LAYER_AGGS, POOLINGS, STRATEGIES, Feature
from pipeline.output.schema import feature_columns, output_columns, output_schema
from pipeline.types import ModelFacts

ML = 16
HIDDEN = 8
# The documented columns, spelled here independently of pipeline.output.schema (the README's output tables).
ALWAYS_RESERVED = {"id", "row", "source", "n_tokens", "n_unknown", "n_windows", "truncated", "features", "error",
                   "token_ids", "positions", "offsets", "token_features"}
BY_LEVEL = {"document": ["n_tokens", "n_unknown", "n_windows", "truncated"],
            "token": ["n_tokens", "n_unknown", "n_windows", "truncated"],
            "window": ["window", "spans", "n_tokens"]}
TOKEN_TAIL = ["token_ids", "positions", "offsets", "token_features"]
FACTS = ModelFacts(name="synthetic", sha256=None, family="bert", hidden_size=HIDDEN, num_hidden_layers=2,
                   max_length=ML, cls_id=2, sep_id=3, unk_id=1, token_type_ids=True, has_pooler=True)


def documented_columns(level: str, keep: list[str], with_source: bool, feats: list[str], row_ids: bool) -> list[str]:
    """The columns the README documents for a run, in order."""
    cols = ["row" if row_ids else "id", *keep, *(["source"] if with_source else []), *BY_LEVEL[level], *feats, "error"]
    return cols + (TOKEN_TAIL if level == "token" else [])


@st.composite
def option_sets(draw):
    """(options for PipelineConfig.from_options, the feature columns' names as the README spells them)."""
    level = draw(st.sampled_from(("document", "token", "window")))
    parts = draw(st.lists(st.sampled_from(AGGREGATES), min_size=1, max_size=3, unique=True))
    opts = dict(level=level, aggregate=",".join(parts), max_length=ML, overlap=4,
                out_dtype=draw(st.sampled_from(("float32", "float16"))), with_source=draw(st.booleans()),
                normalize=draw(st.booleans()))
    layer_sets = st.sampled_from(((-1,), (-2,), (-2, -1), (0, 1, 2)))
    n = 1 if level == "token" else draw(st.integers(1, 3))
    one_strategy = draw(st.sampled_from(STRATEGIES))
    strategies = st.just(one_strategy) if level == "window" else st.sampled_from(STRATEGIES)
    features = strategies.flatmap(lambda s: st.builds(   # late pools chunks of content tokens: mean or max
        Feature, strategy=st.just(s), pooling=st.sampled_from(["mean", "max"] if s == "late" else
                                                              [p for p in POOLINGS if p != "pooler"]),
        layers=layer_sets, layer_agg=st.sampled_from(LAYER_AGGS)))
    feats = draw(st.lists(features, min_size=n, max_size=n, unique_by=lambda f: f.name))
    if len(feats) == 1 and draw(st.booleans()):   # the shorthand options
        f = feats[0]
        opts.update(strategy=f.strategy, pooling=f.pooling, layers=f.layers, layer_agg=f.layer_agg)
    else:
        opts["features"] = [f.spec for f in feats]
    suffix = "" if len(feats) == 1 or level == "window" or len(parts) == 1 else "_agg-" + "-".join(parts)
    names = ["features"] if len(feats) == 1 else [f"{f.name}{suffix}" for f in feats]
    pool = sorted(ALWAYS_RESERVED | {"window", "spans", "label", "title", "window_no", "f_head_cls"} | set(names))
    opts["keep_cols"] = tuple(draw(st.lists(st.sampled_from(pool), max_size=3, unique=True)))
    return opts, names


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(option_sets(), st.booleans())
def test_column_names_are_unique_and_a_colliding_keep_col_is_refused(case, row_ids):
    opts, feats = case
    keep = list(opts["keep_cols"])
    fixed = documented_columns(opts["level"], [], opts["with_source"], feats, row_ids)
    clash = [c for c in keep if c in ALWAYS_RESERVED | set(fixed)]
    try:
        cfg = PipelineConfig.from_options(**opts)
    except ConfigError as err:
        assert clash, f"refused without a collision: {err}"
        assert str(err).startswith(f"--keep-col {clash[0]!r} clashes with ") and "rename the column in the" in str(err)
        return
    assert not clash, f"--keep-col {clash} was accepted"
    dim, token_dim = feature_dim(cfg, HIDDEN) if not cfg.multi_feature else (0, 0)
    schema = output_schema(cfg, pa.int64() if row_ids else pa.string(), FACTS, dim, token_dim)
    assert len(set(schema.names)) == len(schema.names)
    assert schema.names == documented_columns(opts["level"], keep, opts["with_source"], feats, row_ids)
    assert schema.names == output_columns(cfg, pa.int64() if row_ids else pa.string())
    assert [n for n, _ in feature_columns(cfg, HIDDEN)] == feats


@pytest.fixture
def no_model_load(monkeypatch):
    """Fails the test if a model's weights load (pipeline.model.encode.load_model)."""
    import pipeline.model.encode as encode_mod

    def refuse(*args, **kwargs):
        raise AssertionError("the model loaded")
    monkeypatch.setattr(encode_mod, "load_model", refuse)


@pytest.mark.parametrize("flags, col, why", [
    (["--level", "window"], "window", "(--level window writes 'window')"),
    (["--level", "window", "--strategy", "chunk"], "spans", "(--level window writes 'spans')"),
    (["--feature", "head:cls", "--feature", "chunk:mean"], "f_chunk_mean", "the feature column of that name"),
    (["--level", "token"], "token_ids", "an output column of that name; reserved names are"),
    (["--out-dtype", "int8"], "features_scale", "(--level document writes 'features_scale')"),
    (["--out-dtype", "int8", "--level", "token"], "token_features_scale", "(--level token writes 'token_features_scale')"),
])
def test_colliding_keep_col_is_exit_2_before_the_model_loads(runner, tiny_model_dir, tmp_path, no_model_load,
                                                             flags, col, why):
    src = write_csv(tmp_path / "in.csv", [{"id": "a", "text": words(5), col: "kept"}])
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "-o", tmp_path / "o.parquet",
                             "--keep-col", col, *flags])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"Error: --keep-col {col!r} clashes with ") and why in result.output
    assert "rename the column in the" in result.output and not (tmp_path / "o.parquet").exists()


@pytest.mark.parametrize("level", ["document", "token"])
def test_keep_col_window_is_kept_where_the_run_writes_no_window_column(runner, tiny_model_dir, tmp_path, level):
    src = write_csv(tmp_path / "in.csv", [{"id": "a", "text": words(5), "window": "w-1"},
                                          {"id": "b", "text": words(30, 3), "window": "w-2"}])
    out = tmp_path / "o.parquet"
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "--max-length", ML, "--strategy", "chunk",
                             "-o", out, "--keep-col", "window", "--level", level])
    assert result.exit_code == 0, result.output
    frame = pd.read_parquet(out)
    assert list(frame.columns).count("window") == 1 and frame["window"].tolist() == ["w-1", "w-2"]
    ids, X, meta = load_features(out)
    assert ids.tolist() == ["a", "b"] and X.shape == (2, 32) and meta["kept"]["window"].tolist() == ["w-1", "w-2"]


def test_window_level_output_opens_everywhere_with_unique_columns(runner, tiny_model_dir, tmp_path):
    src = write_csv(tmp_path / "in.csv", [{"id": "a", "text": words(30), "label": "x"}])
    out = tmp_path / "w.parquet"
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "--max-length", ML, "--strategy", "chunk",
                             "--level", "window", "--keep-col", "label", "--with-source", "-o", out])
    assert result.exit_code == 0, result.output
    frame = pd.read_parquet(out)
    cfg = PipelineConfig.from_options(level="window", keep_cols=("label",), with_source=True, strategy="chunk")
    assert list(frame.columns) == output_columns(cfg) == ["id", "label", "source", "window", "spans", "n_tokens",
                                                          "features", "error"]
    assert frame["window"].tolist() == [0, 1, 2] and frame["label"].tolist() == ["x"] * 3   # 30 tokens, C = 14
    assert load_features(out)[2]["window"].tolist() == [0, 1, 2]
