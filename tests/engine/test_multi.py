"""Several features in one run (issue 13): --feature specs and column names, window de-duplication,
the early layer stop, and each column against the single-feature run with the same options (tiny BERT)."""
from __future__ import annotations

import json
from operator import attrgetter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import extract_cli, invoke, read_features, words, write_csv

from pipeline.options.config import PipelineConfig
from pipeline.options.features_config import Feature, parse_feature
from pipeline.errors import ConfigError, InputError
from pipeline.classify.features import feature_names, load_features
from pipeline.text.segment import window_spans

ML = 16          # --max-length: C = 14 content tokens
C = ML - 2
SEG = ("--max-length", ML, "--head-tokens", 4, "--tail-tokens", 10, "--overlap", 4)
# documents below, at and above C (0, 5, 14, 15, 40 tokens); the empty one gets null features
TEXTS = [words(5), words(C, 1), words(C + 1, 2), "", words(40, 3), words(33, 4)]

# every strategy, every pooling, single and combined layers
FEATURES = ["head:cls", "tail:max", "head_tail:mean", "chunk:mean:-2", "sliding:cls:-3..-1:concat",
            "chunk:pooler", "sliding:max:0,-1:sum"]


def run_extract(runner, model_dir, tmp_path, texts, *extra, name="out.parquet"):
    result, out = extract_cli(tmp_path, texts, *SEG, *extra, model=model_dir, name=name, runner=runner)
    return out, result


def summary_count(output: str, what: str) -> int:
    """The number before ``what`` in the summary line, e.g. 'windows encoded'."""
    line = [x for x in output.splitlines() if "documents," in x][-1]
    before = line.split(what)[0].split()
    return int(before[-1].lstrip("("))


# ---------------------------------------------------------------- specs and names

@pytest.mark.parametrize("spec,name", [
    ("head_tail:mean", "f_head_tail_mean"),
    ("chunk:cls:-4..-1:concat", "f_chunk_cls_L-4..-1_concat"),
    ("chunk:cls:-4,-3,-2,-1:concat", "f_chunk_cls_L-4..-1_concat"),
    ("head:max:-2", "f_head_max_L-2"),
    ("head:max:-2:concat", "f_head_max_L-2"),           # one layer: nothing to combine, no suffix
    ("sliding:mean:-1,-4:sum", "f_sliding_mean_L-1,-4_sum"),
    ("tail:pooler", "f_tail_pooler"),
])
def test_feature_names(spec, name):
    feature = parse_feature(spec)
    assert feature.name == name
    assert parse_feature(feature.spec) == feature  # the spec written back parses to the same feature


@pytest.mark.parametrize("options,message", [
    ({"features": ("chunk",)}, "--feature 'chunk': write STRATEGY:POOLING[:LAYERS[:LAYER_AGG]], e.g. chunk:mean "
                               "or head:cls:-4..-1:concat"),
    ({"features": ("chunk:avg", "head:cls")}, "--feature 'chunk:avg': pooling='avg'; choose one of cls, pooler, "
                                              "mean, max"),
    ({"features": ("chunk:cls:-1..-4", "head:cls")}, "--feature 'chunk:cls:-1..-4': layers '-1..-4' must be "
                                                     "A..B with A <= B, e.g. -4..-1"),
    ({"features": ("head:pooler:-2", "chunk:cls")}, "--feature 'head:pooler:-2': pooling pooler reads the last "
                                                    "layer's [CLS] through the pooler, so layers -2 have no "
                                                    "effect; drop the layers or use cls"),
    ({"features": ("head:cls", "chunk:mean"), "strategy": "chunk"},
     "--feature and --strategy were both given; --strategy is the shorthand for one feature: drop it, or add "
     "that feature as another --feature"),
    ({"features": ("head:cls", "head:cls:-1")}, "--feature asks twice for f_head_cls; give each feature once"),
    ({"features": ("head:cls", "chunk:mean"), "level": "token"},
     "--level token writes the token vectors of one feature, but 2 --feature options were given; give one "
     "feature with --level token"),
])
def test_bad_feature_options(options, message):
    with pytest.raises(ConfigError) as err:
        PipelineConfig.from_options(**options)
    assert str(err.value) == message


def test_one_feature_is_the_shorthand_and_a_config_file_takes_a_list(tmp_path):
    one = PipelineConfig.from_options(features=("chunk:cls:-2..-1:concat",))
    short = PipelineConfig.from_options(strategy="chunk", pooling="cls", layers="-2,-1", layer_agg="concat")
    assert one == short and not one.multi_feature
    cfg_file = tmp_path / "f.yaml"
    cfg_file.write_text("features:\n  - head:cls\n  - strategy: chunk\n    pooling: mean\n    layers: -2\n")
    cfg = PipelineConfig.from_options(config_file=cfg_file)
    assert cfg.feature_list() == (Feature("head", "cls"), Feature("chunk", "mean", (-2,)))
    assert cfg.multi_feature


def test_cli_errors_exit_2(runner, tiny_model_dir, tmp_path):
    src = write_csv(tmp_path / "in.csv", [{"text": words(5), "f_head_cls": "x"}])
    result = invoke(runner, ["extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model_dir,
                             "--feature", "head:cls", "--feature", "chunk:cls", "--keep-col", "f_head_cls"])
    assert result.exit_code == 2
    assert ("Error: --keep-col 'f_head_cls' clashes with the feature column of that name; rename the column in "
            "the CSV or drop that --feature") in result.output
    result = invoke(runner, ["extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model_dir,
                             "--feature", "head:cls", "--feature", "chunk:cls:-4"])
    assert result.exit_code == 2
    assert "Error: --layers contains -4, but the model has 2 layers" in result.output
    result = invoke(runner, ["extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model_dir,
                             "--max-length", ML, "--overlap", C, "--feature", "head:cls", "--feature", "sliding:cls"])
    assert result.exit_code == 2 and f"--overlap={C} must be in [0, {C})" in result.output


# ---------------------------------------------------------------- same values as single runs

def test_each_column_equals_the_single_feature_run(runner, tiny_model_dir, tmp_path):
    args = [x for spec in FEATURES for x in ("--feature", spec)]
    out, result = run_extract(runner, tiny_model_dir, tmp_path, TEXTS, *args, name="multi.parquet")
    table = pq.read_table(out)
    names = [parse_feature(s).name for s in FEATURES]
    assert table.column_names == ["row", "n_tokens", "n_unknown", "n_windows", "truncated", *names, "error"]
    assert feature_names(out) == names
    meta = json.loads(table.schema.metadata[b"longbert"])
    assert meta["strategy"] is None and meta["pooling"] is None
    for spec in FEATURES:
        f = parse_feature(spec)
        single, _ = run_extract(runner, tiny_model_dir, tmp_path, TEXTS, "--strategy", f.strategy, "--pooling",
                                f.pooling, f"--layers={','.join(map(str, f.layers))}", "--layer-agg", f.layer_agg,
                                name=f"{f.name}.parquet")
        ref = read_features(single)
        got = table.column(f.name).to_pylist()
        assert [g is None for g in got] == [r is None for r in ref["features"]] == [t == "" for t in TEXTS]
        np.testing.assert_allclose(np.stack([g for g in got if g is not None]),
                                   np.stack([r for r in ref["features"] if r is not None]), atol=1e-5)
        # load_features picks the column and describes it as the single run's file does
        ids, X, m = load_features(out, feature=f.name)
        ids1, X1, m1 = load_features(single)
        np.testing.assert_allclose(X, X1, atol=1e-5)
        assert ids.tolist() == ids1.tolist() and m["column"] == f.name
        for key in ("strategy", "pooling", "layers", "layer_agg", "feature_dim"):
            assert m[key] == m1[key], key
        entry = [e for e in meta["features"] if e["column"] == f.name][0]
        assert entry["spec"] == f.spec and entry["strategy"] == m1["strategy"]
    # n_windows of a several-feature row: the distinct windows of the document over all strategies
    n = [len(t.split()) for t in TEXTS]
    seg = PipelineConfig.from_options(max_length=ML, head_tokens=4, tail_tokens=10, overlap=4).segment
    expect = [len({w for s in ("head", "tail", "head_tail", "chunk", "sliding")
                   for w in window_spans(k, PipelineConfig.from_options(
                       max_length=ML, head_tokens=4, tail_tokens=10, overlap=4, strategy=s).segment)})
              for k in n]
    assert seg.content_tokens == C
    assert table.column("n_windows").to_pylist() == expect
    assert table.column("truncated").to_pylist() == [False] * len(TEXTS)  # chunk covers every token


def test_load_features_needs_a_feature_name_for_several(runner, tiny_model_dir, tmp_path):
    out, _ = run_extract(runner, tiny_model_dir, tmp_path, TEXTS[:2], "--feature", "head:cls", "--feature",
                         "chunk:mean")
    with pytest.raises(InputError) as err:
        load_features(out)
    assert str(err.value) == (f"{out} holds 2 feature columns (f_head_cls, f_chunk_mean); pick one with "
                              "load_features(path, feature=NAME), e.g. feature='f_head_cls'")
    with pytest.raises(InputError) as err:
        load_features(out, feature="f_tail_cls")
    assert str(err.value) == f"{out}: no feature column 'f_tail_cls'; its feature columns are f_head_cls, f_chunk_mean"


# ---------------------------------------------------------------- de-duplication

@pytest.fixture
def encoded_windows(monkeypatch):
    """Records the input ids of every window the encoder receives."""
    from pipeline.model.encode import Encoder
    seen: list[list[int]] = []
    real = Encoder.encode

    def spy(self, windows, with_tokens=False, **kw):
        seen.extend(w.input_ids.tolist() for w in windows)
        return real(self, windows, with_tokens, **kw)

    monkeypatch.setattr(Encoder, "encode", spy)
    return seen


def test_chunk_and_head_encode_exactly_chunks_windows(runner, tiny_model_dir, tiny_bert, tmp_path, encoded_windows):
    _, tok = tiny_bert
    texts = [words(5), words(40, 1), words(29, 2)]
    _, result = run_extract(runner, tiny_model_dir, tmp_path, texts, "--feature", "chunk:mean", "--feature", "head:cls")
    expect = []
    for t in texts:  # chunk's windows, built by hand: [kC, (k+1)C)
        ids = tok(t, add_special_tokens=False)["input_ids"]
        expect += [[tok.cls_token_id, *ids[s:s + C], tok.sep_token_id] for s in range(0, len(ids), C)]
    assert sorted(encoded_windows) == sorted(expect)
    assert summary_count(result.output, "windows encoded") == len(expect) == 1 + 3 + 3
    assert summary_count(result.output, "windows saved") == 3    # head's window is chunk's first


def test_duplicate_documents_share_a_pass(runner, tiny_model_dir, tmp_path, encoded_windows):
    a, b = words(40, 5), words(9, 7)
    boiler = words(C, 11)                  # the same 14-token window at the start of two other documents
    texts = [a, b, a, boiler + " " + words(6, 1), a, boiler + " " + words(3, 2), b]
    out, result = run_extract(runner, tiny_model_dir, tmp_path, texts, "--strategy", "chunk", "--pooling", "mean")
    unique = {tuple(w) for w in encoded_windows}
    assert len(encoded_windows) == len(unique) == 3 + 1 + 3       # a: 3 chunks, b: 1, boiler + 2 tails
    assert summary_count(result.output, "windows saved") == 6 + 1 + 1
    dup = np.stack(read_features(out)["features"])
    # the same documents one per block (each encoded on its own, nothing shared)
    apart, _ = run_extract(runner, tiny_model_dir, tmp_path, texts, "--strategy", "chunk", "--pooling", "mean",
                           "--block-rows", 1, name="apart.parquet")
    np.testing.assert_allclose(dup, np.stack(read_features(apart)["features"]), atol=1e-5)
    np.testing.assert_array_equal(dup[0], dup[2])
    assert read_features(out)["n_windows"].tolist() == [3, 1, 3, 2, 3, 2, 1]


# ---------------------------------------------------------------- early layer stop

@pytest.mark.parametrize("layers,depth", [("-2", 1), ("0", 1), ("1,-3", 1), ("-1", 2), ("-2,-1", 2)])
def test_early_layer_stop_equals_the_full_pass(runner, tiny_model_dir, tiny_bert, tmp_path, layers, depth):
    from pipeline.engine.compose import Pipeline

    model, tok = tiny_bert
    text = words(11)
    cfg = PipelineConfig.from_options(model=str(tiny_model_dir), max_length=ML, pooling="mean", layers=layers)
    encoder = Pipeline.from_config(cfg)["encode"].encoder
    assert len(encoder.model.encoder.layer) == depth
    assert encoder.model.pooler is None and encoder.full_model.pooler is not None  # nobody pools with it
    df = read_features(run_extract(runner, tiny_model_dir, tmp_path, [text], "--pooling", "mean",
                                   f"--layers={layers}")[0])
    ids = torch.tensor([[tok.cls_token_id, *tok(text, add_special_tokens=False)["input_ids"], tok.sep_token_id]])
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=torch.ones_like(ids), token_type_ids=torch.zeros_like(ids),
                       output_hidden_states=True).hidden_states
    ref = torch.stack([hidden[int(i)][0].mean(0) for i in layers.split(",")]).mean(0).numpy()
    np.testing.assert_allclose(df["features"][0], ref, atol=1e-5)


# ---------------------------------------------------------------- probe

LABELLED = [{"text": words(6 + (i * 7) % 30, 20 * (i % 2) + i % 5), "label": "ab"[i % 2]} for i in range(24)]


def test_stratified_sample_keeps_class_shares():
    from pipeline.classify.probe import stratified_sample

    labels = np.array(["a"] * 60 + ["b"] * 40)
    picked = stratified_sample(labels, 10, seed=0)
    assert sorted(labels[picked].tolist()) == ["a"] * 6 + ["b"] * 4
    assert picked.tolist() == sorted(set(picked.tolist()))
    assert stratified_sample(labels, 10, seed=0).tolist() == picked.tolist()
    assert stratified_sample(labels, 500, seed=0).tolist() == list(range(100))


def test_probe_corpus_one_pass_agrees_with_single_feature_files(runner, tiny_model_dir, tmp_path):
    from pipeline.classify.probe_files import probe_files

    src = write_csv(tmp_path / "labelled.csv", LABELLED)
    plot = tmp_path / "probe.png"
    result = invoke(runner, ["probe", src, "--label-col", "label", "--model", tiny_model_dir, *SEG, "--folds", 3,
                             "--sample", 1000, "--plot", plot])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"loading model {tiny_model_dir} ..."       # as extract prints it (stderr)
    lines = lines[lines.index([x for x in lines if x.startswith("rank ")][0]):]
    assert lines[0].split() == ["rank", "feature", "layers", "aggregate", "windows/doc", "dim", "bytes/doc", "accuracy",
                                "macro-F1"]
    summary_at = next(i for i, line in enumerate(lines) if line.startswith("24 documents (stratified sample), 186 "))
    table = [line.split() for line in lines[1:summary_at] if line.split()[1].startswith("f_") and ":" not in
             line.split()[1] and not line.split()[1].startswith("hybrid")]
    # 5 strategies x (cls, mean, max) x (-1, -2, -2..-1 mean: the tiny model has 2 layers) + 5 pooler, and
    # late x (mean, max) x the same layers, each with the mean; chunk and sliding's 20 and late's 6 also with
    # first, last, max, mean,max and first,last,mean,max
    assert len({row[1] for row in table}) == 186 == len(table)
    assert sum(row[1].endswith("_pooler") for row in table) == 5 and sum("_pooler" in row[1] for row in table) == 15
    assert sorted({(row[2], row[3]) for row in table if row[1].startswith("f_chunk_cls")}) == sorted(
        (layers, agg) for agg in ("first", "first,last,mean,max", "last", "max", "mean", "mean,max")
        for layers in ("-1", "-2", "mean(-2..-1)"))
    assert {row[5] for row in table if row[3] == "first,last,mean,max"} == {"128"}
    assert all(int(row[6]) == 4 * int(row[5]) for row in table)   # bytes/doc: float32, as extract writes it
    table = [[row[0], row[1], *row[4:6], *row[7:]] for row in table]    # without layers, aggregate, bytes, as below
    accuracy = [float(row[4]) for row in table]
    assert accuracy == sorted(accuracy, reverse=True)
    n = np.array([len(r["text"].split()) for r in LABELLED])
    windows = {"head": 1, "tail": 1, "head_tail": 1, "chunk": np.ceil(n / C).mean(),
               "sliding": np.mean([1 + max(0, int(np.ceil((k - C) / (C - 4)))) for k in n])}
    windows["late"] = windows["sliding"]     # --overlap 4 sets late's overlap too: the same windows
    for row in table:
        strategy = next(s for s in ("head_tail", "head", "tail", "chunk", "sliding", "late")
                        if row[1].startswith(f"f_{s}_"))
        assert float(row[2]) == pytest.approx(windows[strategy], abs=0.005), row
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the named feature and its command; the same feature extracted alone probes the same accuracy
    best, cheap = [x for x in lines if x.startswith("best: ")][0], lines[lines.index(
        [x for x in lines if x.startswith("best: ")][0]) + 1]
    name = best.split("cheapest within one sd of it: ")[1].split()[0]
    assert cheap.startswith(f"  longbert extract {src} --model {tiny_model_dir} --max-length {ML}")
    assert "--keep-col label" in cheap and lines[lines.index(cheap) + 1] == "  longbert probe features.parquet --label-col label"
    options = cheap.split(f"--max-length {ML}")[1].split(" -o ")[0].split()
    row = [r for r in table if r[1] == name][0]
    top = table[0]
    assert float(row[4]) >= float(top[4]) - float(top[6]) - 1e-9
    assert float(row[2]) == min(float(r[2]) for r in table if float(r[4]) >= float(top[4]) - float(top[6]) - 1e-9)
    keep = write_csv(tmp_path / "again.csv", LABELLED)
    out = tmp_path / "kept.parquet"
    assert invoke(runner, ["extract", keep, "-o", out, "--model", tiny_model_dir, "--no-progress", *SEG,
                           *options]).exit_code == 0          # options hold --keep-col label (and --aggregate)
    (r,) = probe_files([out], label_col="label", folds=3)
    assert r["feature"] == "features" and abs(r["accuracy_mean"] - float(row[4])) <= 0.02


def test_probe_each_column_of_a_several_feature_file(runner, tiny_model_dir, tmp_path):
    from pipeline.classify.probe_files import probe_files

    src = write_csv(tmp_path / "labelled.csv", LABELLED)
    out = tmp_path / "many.parquet"
    assert invoke(runner, ["extract", src, "-o", out, "--model", tiny_model_dir, "--no-progress", *SEG,
                           "--keep-col", "label", "--feature", "head:cls", "--feature", "chunk:mean:-2"]).exit_code == 0
    results = probe_files([out], label_col="label", folds=3)
    assert [r["file"] for r in results] == [f"{out}:f_head_cls", f"{out}:f_chunk_mean_L-2"]
    for r, opts in zip(results, (["--strategy", "head", "--pooling", "cls"],
                                 ["--strategy", "chunk", "--pooling", "mean", "--layers=-2"])):
        alone = tmp_path / f"{r['feature']}.parquet"
        assert invoke(runner, ["extract", src, "-o", alone, "--model", tiny_model_dir, "--no-progress", *SEG,
                               "--keep-col", "label", *opts]).exit_code == 0
        (a,) = probe_files([alone], label_col="label", folds=3)
        np.testing.assert_allclose(r["accuracy"], a["accuracy"])
        assert (r["strategy"], r["pooling"], r["windows_per_doc"]) == (a["strategy"], a["pooling"], a["windows_per_doc"])
    result = invoke(runner, ["probe", out, src, "--label-col", "label"])
    assert result.exit_code == 2 and ("Error: probe takes either a corpus (CSV, TSV, JSON Lines, parquet table...) "
                                      "or extract's outputs (parquet with longbert metadata, DIR/), not both; run it "
                                      "once for each") in result.output
    result = invoke(runner, ["probe", out, "--label-col", "label", "--sample", 10])
    assert result.exit_code == 2 and ("Error: --sample applies only to a corpus, not to extract's outputs; the "
                                      "features files were extracted already: drop them") in result.output
    # how probe tells them apart: longbert metadata (or a manifest) means extract's output
    from cli import _is_features_output
    plain = tmp_path / "table.parquet"
    pq.write_table(pq.read_table(out).select(["label"]).append_column("text", pa.array(["x"] * len(LABELLED))).replace_schema_metadata(None), plain)
    parts = tmp_path / "parts"
    assert invoke(runner, ["extract", src, "-o", f"{parts}/", "--model", tiny_model_dir, "--no-progress", *SEG,
                           "--keep-col", "label", "--feature", "head:cls", "--feature", "chunk:mean:-2",
                           "--block-rows", 10]).exit_code == 0
    assert [_is_features_output(str(p)) for p in (out, parts, plain, src)] == [True, True, False, False]
    assert feature_names(parts) == ["f_head_cls", "f_chunk_mean_L-2"]
    for r, d in zip(probe_files([parts], label_col="label", folds=3), results):  # a DIR/ of parts: the same
        np.testing.assert_allclose(r["accuracy"], d["accuracy"])


def test_features_preset_names_its_columns():
    from pathlib import Path

    cfg = PipelineConfig.from_options(config_file=Path(__file__).resolve().parents[2] / "configs" / "features.yaml")
    assert [f.name for f in cfg.feature_list()] == ["f_head_mean", "f_head_mean_L-2", "f_head_tail_mean",
                                                    "f_chunk_mean", "f_chunk_cls_L-4..-1_concat"]


@pytest.mark.parametrize("family", ["bert", "roberta", "xlm-roberta", "camembert", "distilbert", "electra", "albert",
                                    "mpnet", "deberta", "deberta-v2", "modernbert"])
def test_early_layer_stop_on_every_family(tmp_path, family):
    """The truncated view's hidden state 1 equals the full pass's. ModernBERT normalises its last
    layer's output, so it keeps one layer more; ALBERT (one shared layer, no list of layers) runs whole."""
    from families import build_family
    from transformers import AutoModel

    from pipeline.options.config import PoolConfig
    from pipeline.model.load import _layer_list, stop_early

    path = build_family(family, tmp_path / family)
    model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    n_layers = model.config.num_hidden_layers
    view, pools = stop_early(model, (PoolConfig(pooling="mean", layers=(1,)),))
    torch.manual_seed(1)
    ids = torch.randint(5, 40, (2, 12))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        short = view(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    kept = {"albert": n_layers, "modernbert": 2}.get(family, 1)
    assert len(full) == n_layers + 1 and len(short) == kept + 1
    if family != "albert":
        assert len(attrgetter(_layer_list(view, kept))(view)) == kept  # the view's own layer list
    torch.testing.assert_close(short[1], full[1], atol=1e-5, rtol=0)


def test_option_warnings_look_at_every_feature_strategy():
    from pipeline.options.option_warnings import option_warnings

    cfg = PipelineConfig.from_options(features=("head:cls", "sliding:mean"), overlap=64, head_tokens=64)
    assert option_warnings(cfg, {"overlap", "head_tokens"}, False, 512) == [
        "--head-tokens 64 has no effect: it applies only to --strategy head_tail (this run: head, sliding)"]


@pytest.mark.parametrize("family", ["bert", "roberta", "albert", "mpnet"])
def test_whole_model_view_drops_the_pooler_nobody_reads(tmp_path, family):
    """Every layer runs (mean of the last layer), yet no pool reads the pooler: the view has none, its last
    hidden state equals the full model's, and the full model keeps its pooler. Asked for, the pooler stays
    and its output equals the full model's."""
    from families import build_family
    from transformers import AutoModel

    from pipeline.options.config import PoolConfig
    from pipeline.model.load import stop_early

    model = AutoModel.from_pretrained(build_family(family, tmp_path / family), attn_implementation="eager").eval()
    assert model.pooler is not None
    view, _ = stop_early(model, (PoolConfig(pooling="mean", layers=(-1,)),))
    kept, _ = stop_early(model, (PoolConfig(pooling="pooler"),))
    assert view.pooler is None and model.pooler is not None and kept.pooler is model.pooler
    torch.manual_seed(2)
    ids = torch.randint(5, 40, (2, 12))
    mask = torch.ones_like(ids)
    mask[0, 7:] = 0
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        short = view(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        pooled = kept(input_ids=ids, attention_mask=mask).pooler_output
    assert short.pooler_output is None and len(short.hidden_states) == len(full.hidden_states)
    torch.testing.assert_close(short.last_hidden_state, full.last_hidden_state, atol=0, rtol=0)
    for mine, theirs in zip(short.hidden_states, full.hidden_states):   # every layer, once each
        torch.testing.assert_close(mine, theirs, atol=0, rtol=0)
    torch.testing.assert_close(pooled, full.pooler_output, atol=0, rtol=0)
