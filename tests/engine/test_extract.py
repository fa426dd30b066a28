"""End to end through the CLI on a tiny random BERT: vectors equal direct BertModel calls, order, options."""
from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from conftest import extract_cli, invoke, read_features, reference_vectors, words, write_csv

from pipeline.model.encode import plan_batches

ML = 16          # --max-length for most tests: C = 14 content tokens, so windows are quick to check by hand
C = ML - 2


def tiny_windows(tok, text: str, spans) -> list[list[int]]:
    """Independent window construction: tokenizer ids sliced by the documented rule."""
    ids = tok(text, add_special_tokens=False)["input_ids"]
    return [[tok.cls_token_id] + [ids[p] for s, e in w for p in range(s, e)] + [tok.sep_token_id] for w in spans]


def extract(runner, tiny_model_dir, tmp_path, rows, *extra, name="out.parquet"):
    """conftest.extract_cli on ``rows`` written to in.csv, without --overwrite (exit 0): (features, output, Result)."""
    result, out = extract_cli(tmp_path, None, *extra, model=tiny_model_dir, name=name, rows=rows,
                              src=tmp_path / "in.csv", runner=runner, overwrite=False)
    return read_features(out), out, result


@pytest.mark.parametrize("pooling", ["cls", "mean", "max", "pooler"])
def test_single_window_vector_equals_direct_bertmodel_call(runner, tiny_model_dir, tiny_bert, tmp_path, pooling):
    model, tok = tiny_bert
    texts = [words(5), words(9, 3), words(C, 1)]
    df, _, _ = extract(runner, tiny_model_dir, tmp_path, [{"text": t} for t in texts],
                       "--max-length", ML, "--pooling", pooling)
    ref = reference_vectors(model, tok, [tiny_windows(tok, t, [((0, len(t.split())),)])[0] for t in texts], pooling)
    np.testing.assert_allclose(np.stack(df["features"]), ref, atol=1e-5)


@pytest.mark.parametrize("strategy,n,spans", [
    ("head", 30, [((0, 14),)]),
    ("tail", 30, [((16, 30),)]),
    ("head_tail", 30, [((0, 4), (20, 30))]),
    ("chunk", 29, [((0, 14),), ((14, 28),), ((28, 29),)]),
    ("sliding", 30, [((0, 14),), ((10, 24),), ((20, 30),)]),
])
def test_document_vector_is_mean_of_direct_window_vectors(runner, tiny_model_dir, tiny_bert, tmp_path,
                                                          strategy, n, spans):
    model, tok = tiny_bert
    text = words(n)
    df, _, _ = extract(runner, tiny_model_dir, tmp_path, [{"text": text}], "--max-length", ML, "--strategy",
                       strategy, "--head-tokens", 4, "--tail-tokens", 10, "--overlap", 4, "--pooling", "cls")
    ref = reference_vectors(model, tok, tiny_windows(tok, text, spans), "cls").mean(axis=0)
    np.testing.assert_allclose(df["features"][0], ref, atol=1e-5)
    assert df["n_windows"][0] == len(spans) and df["n_tokens"][0] == n
    assert bool(df["truncated"][0]) == (strategy in ("head", "tail", "head_tail"))


def test_weighted_and_max_aggregate(runner, tiny_model_dir, tiny_bert, tmp_path):
    model, tok = tiny_bert
    text = words(20)
    spans = [((0, 14),), ((14, 20),)]
    ref = reference_vectors(model, tok, tiny_windows(tok, text, spans), "mean")
    df, _, _ = extract(runner, tiny_model_dir, tmp_path, [{"text": text}], "--max-length", ML,
                       "--strategy", "chunk", "--aggregate", "weighted")
    np.testing.assert_allclose(df["features"][0], (14 * ref[0] + 6 * ref[1]) / 20, atol=1e-5)
    df, _, _ = extract(runner, tiny_model_dir, tmp_path, [{"text": text}], "--max-length", ML,
                       "--strategy", "chunk", "--aggregate", "max", name="max.parquet")
    np.testing.assert_allclose(df["features"][0], ref.max(axis=0), atol=1e-5)


def test_layers_concat_and_mean(runner, tiny_model_dir, tiny_bert, tmp_path):
    model, tok = tiny_bert
    text = words(7)
    ids = torch.tensor(tiny_windows(tok, text, [((0, 7),)]))
    with torch.no_grad():
        hs = model(input_ids=ids, output_hidden_states=True).hidden_states
    df, _, _ = extract(runner, tiny_model_dir, tmp_path, [{"text": text}], "--pooling", "cls",
                       "--layers=-2,-1", "--layer-agg", "concat")
    np.testing.assert_allclose(df["features"][0], torch.cat([hs[-2][0, 0], hs[-1][0, 0]]).numpy(), atol=1e-5)
    df, _, _ = extract(runner, tiny_model_dir, tmp_path, [{"text": text}], "--pooling", "mean",
                       "--layers", "0,2", "--layer-agg", "mean", name="m.parquet")
    np.testing.assert_allclose(df["features"][0], ((hs[0][0] + hs[2][0]) / 2).mean(0).numpy(), atol=1e-5)


def test_order_kept_and_batch_size_changes_nothing(runner, tiny_model_dir, tmp_path):
    # documents of very different lengths, batched together (shared cases B08, B21)
    lengths = [3, 200, 1, 57, 14, 15, 400, 2, 29, 0, 88]
    rows = [{"id": f"d{i:03d}", "text": words(n, i)} for i, n in enumerate(lengths)]
    base, _, _ = extract(runner, tiny_model_dir, tmp_path, rows, "--id-col", "id", "--max-length", ML,
                         "--strategy", "sliding", "--overlap", 3, "--batch-size", 1)
    assert base["id"].tolist() == [r["id"] for r in rows]
    assert base["n_tokens"].tolist() == lengths
    expected_windows = [0 if n == 0 else 1 if n <= C else -(-(n - C) // (C - 3)) + 1 for n in lengths]
    assert base["n_windows"].tolist() == expected_windows
    for extra in (["--batch-size", 64], ["--batch-size", 7, "--max-batch-tokens", 40], ["--block-rows", 3]):
        other, _, _ = extract(runner, tiny_model_dir, tmp_path, rows, "--id-col", "id", "--max-length", ML,
                              "--strategy", "sliding", "--overlap", 3, *extra, name="o.parquet", )
        (tmp_path / "o.parquet").unlink()
        assert other["id"].tolist() == base["id"].tolist()
        for a, b in zip(base["features"], other["features"]):
            if a is None:
                assert b is None
            else:
                assert np.isfinite(a).all()
                np.testing.assert_allclose(a, b, atol=1e-5)


def test_plan_batches_longest_first_within_budget():
    assert plan_batches([3, 512, 10, 500], 8, 1024) == [[1, 3], [2, 0]]
    batches = plan_batches([5] * 10, 4, 10_000)
    assert batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert plan_batches([600, 2], 8, 100) == [[0], [1]]


def test_the_default_token_budget_is_the_devices_and_an_explicit_one_wins(tiny_model_dir):
    from pipeline.model.encode import EncodeSpec, Encoder
    from pipeline.model.facts import load_tokenizer
    from pipeline.options.config import EncodeConfig, Feature, ModelConfig

    assert (EncodeConfig().token_budget_on("cpu"), EncodeConfig().token_budget_on("cuda")) == (8192, 16384)
    assert EncodeConfig(max_batch_tokens=40).token_budget_on("cpu") == 40
    model = ModelConfig(model=str(tiny_model_dir), device="cpu")
    encoder = Encoder.from_config(EncodeSpec(model, (Feature("head", "mean"),)), load_tokenizer(model))
    assert encoder.token_budget == 8192
    # 20 full windows of 512 positions: 16 to a pass on a CPU (32 windows would be 16,384 tokens)
    assert plan_batches([512] * 20, encoder.batch_size, encoder.token_budget) == [list(range(16)), list(range(16, 20))]


def test_plan_batches_closes_a_full_enough_batch_before_a_much_shorter_window():
    # 4 x 512 = 2,048 padded tokens: 400 (22% shorter) starts a new batch; 470 (8% shorter) would not
    assert plan_batches([512] * 4 + [400] * 4, 8, 8192) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert plan_batches([512] * 4 + [470] * 4, 8, 8192) == [list(range(8))]
    # 3 x 512 = 1,536 tokens is not yet worth closing: the first 400 joins; then 4 x 512 is, and the next starts anew
    assert plan_batches([512] * 3 + [400] * 2, 8, 8192) == [[0, 1, 2, 3], [4]]
    # short windows are never split by it: 32 x 60 = 1,920 tokens
    assert plan_batches(list(range(60, 28, -1)), 32, 16384) == [list(range(32))]


def test_empty_rows_get_null_features_and_error(runner, tiny_model_dir, tmp_path):
    rows = [{"text": ""}, {"text": "   "}, {"text": "\u200b\u200b"}, {"text": words(3)}]
    df, _, result = extract(runner, tiny_model_dir, tmp_path, rows)
    assert df["error"].tolist()[:3] == ["empty text", "empty text", "no tokens after normalisation"]
    assert df["features"].isna().tolist() == [True, True, True, False]
    assert df["n_windows"].tolist() == [0, 0, 0, 1]
    assert "4 documents, 3 tokens, 1 windows encoded, 3 rows with errors" in result.output


def test_token_level_positions_offsets_and_max_context(runner, tiny_model_dir, tiny_bert, tmp_path):
    model, tok = tiny_bert
    text = words(30)
    df, _, _ = extract(runner, tiny_model_dir, tmp_path, [{"text": text}, {"text": "w1 w2"}], "--max-length", ML,
                       "--strategy", "sliding", "--overlap", 4, "--level", "token", "--pooling", "mean")
    spans = [((0, 14),), ((10, 24),), ((20, 30),)]
    with torch.no_grad():
        hidden = [model(input_ids=torch.tensor([w])).last_hidden_state[0, 1:-1].numpy()
                  for w in tiny_windows(tok, text, spans)]
    # max context: position p in window [s, e) has context min(p - s, e - 1 - p); the earlier window wins ties
    expected = []
    for p in range(30):
        best = max(((min(p - s, e - 1 - p), -i, i, p - s) for i, ((s, e),) in enumerate(spans) if s <= p < e))
        expected.append(hidden[best[2]][best[3]])
    row = df.iloc[0]
    assert row["positions"].tolist() == list(range(30))
    assert row["token_ids"].tolist() == tok(text, add_special_tokens=False)["input_ids"]
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    assert [tuple(o) for o in row["offsets"]] == [tuple(o) for o in enc["offset_mapping"]]
    np.testing.assert_allclose(np.stack(row["token_features"]), np.stack(expected), atol=1e-5)
    assert [text[s:e] for s, e in row["offsets"]][:3] == ["w0", "w1", "w2"]
    assert len(df.iloc[1]["token_features"]) == 2


def test_token_level_head_tail_positions(runner, tiny_model_dir, tmp_path):
    df, _, _ = extract(runner, tiny_model_dir, tmp_path, [{"text": words(30)}], "--max-length", ML,
                       "--strategy", "head_tail", "--head-tokens", 4, "--tail-tokens", 10, "--level", "token")
    assert df.iloc[0]["positions"].tolist() == [0, 1, 2, 3] + list(range(20, 30))


def test_metadata_and_schema(runner, tiny_model_dir, tmp_path):
    _, out, _ = extract(runner, tiny_model_dir, tmp_path, [{"text": words(3), "label": "x"}], "--keep-col", "label",
                        "--strategy", "chunk", "--layers=-2,-1", "--layer-agg", "concat", "--pooling", "cls")
    schema = pq.read_schema(out)
    assert schema.names == ["row", "label", "n_tokens", "n_unknown", "n_windows", "truncated", "features", "error"]
    assert str(schema.field("features").type) == "fixed_size_list<element: float>[64]"
    meta = json.loads(schema.metadata[b"longbert"])
    assert meta["strategy"]["name"] == "chunk" and meta["layers"] == [-2, -1] and meta["feature_dim"] == 64
    assert meta["max_length"] == 512 and meta["hidden_size"] == 32 and meta["pooling"] == "cls"


def test_config_file_values_and_command_line_wins(runner, tiny_model_dir, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("strategy: chunk\nmax_length: 16\npooling: cls\n")
    df, out, _ = extract(runner, tiny_model_dir, tmp_path, [{"text": words(20)}], "--config", cfg,
                         "--pooling", "max")
    meta = json.loads(pq.read_schema(out).metadata[b"longbert"])
    assert meta["strategy"]["name"] == "chunk" and meta["pooling"] == "max" and df["n_windows"][0] == 2


@pytest.mark.parametrize("args,message", [
    (["--strategy", "sliding", "--overlap", "510"],
     "Error: --overlap=510 must be in [0, 510) for windows of 510 content tokens"),
    (["--head-tokens", "200", "--tail-tokens", "382"], "Error: --head-tokens 200 + --tail-tokens 382 = 582 exceeds the 510 content tokens"),
    (["--text-col", "body"], "column 'body' not found; columns are ['text']; pass --text-col with one of them"),
    (["--max-length", "1024"], "Error: --max-length=1024 exceeds the model's 512 positions"),
    (["--layers", "-9"], "Error: --layers contains -9, but the model has 2 layers"),
    (["--resume"], "Error: --resume needs a directory output of numbered parts"),
    (["--engine", "spark"], "'spark' is not one of 'local', 'ray'"),
    (["--workers", "2", "--ray-address", "auto"], "--ray-address, --workers apply only to --engine ray"),
])
def test_bad_options_exit_2_and_write_nothing(runner, tiny_model_dir, tmp_path, args, message):
    src = write_csv(tmp_path / "in.csv", [{"text": "w1"}])
    out = tmp_path / "out.parquet"
    result = invoke(runner, ["extract", src, "-o", out, "--model", tiny_model_dir, *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert list(tmp_path.iterdir()) == [src]


def test_unknown_strategy_is_a_usage_error(runner, tmp_path):
    src = write_csv(tmp_path / "in.csv", [{"text": "w1"}])
    result = invoke(runner, ["extract", src, "--strategy", "middle"])
    assert result.exit_code == 2
    assert "Invalid value for '--strategy': 'middle' is not one of 'head', 'tail', 'head_tail'" in result.output


def test_a_killed_runs_partial_file_is_removed_by_the_next_run(runner, tiny_model_dir, tmp_path):
    """A SIGKILL leaves .NAME.PID.partial; the next run removes it when that PID is gone, not while it lives."""
    import os
    src = write_csv(tmp_path / "in.csv", [{"text": "w1 w2"}])
    dead = tmp_path / ".out.parquet.999999999.partial"       # above pid_max: no such process
    alive = tmp_path / f".out.parquet.{os.getppid()}.partial"  # a live process's
    for stale in (dead, alive):
        stale.write_bytes(b"PAR1")
    result = invoke(runner, ["extract", src, "-o", tmp_path / "out.parquet", "--model", tiny_model_dir, "--no-progress"])
    assert result.exit_code == 0, result.output
    assert not dead.exists() and alive.exists()
    assert (tmp_path / "out.parquet").exists()
