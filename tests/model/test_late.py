"""Late chunking (--strategy late): chunk vectors equal the mean of sliding's token vectors and a direct
AutoModel call with the max-context rule; spans tile the tokens; the cost is sliding's; the window
store serves another --chunk-tokens; cls/pooler are refused before any model loads."""
from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from conftest import extract_cli, invoke, words, write_csv
from transformers import AutoModel, AutoTokenizer

ML, OVERLAP, K = 12, 4, 3    # C = 10 content tokens, step 6, chunks of 3 tokens
C = ML - 2
LENGTHS = [23, 3, 0, 10, 11, 31]   # several windows, one, empty, exactly C, C + 1, long (last chunk short)


@pytest.fixture(scope="module")
def auto(tiny_model_dir):
    """(AutoModel, AutoTokenizer) straight from transformers: the independent reference."""
    return AutoModel.from_pretrained(tiny_model_dir).eval(), AutoTokenizer.from_pretrained(tiny_model_dir)


def sliding_starts(n: int, overlap: int = OVERLAP) -> list[int]:
    """Window starts of sliding with C = 10, written out independently of pipeline.text.segment."""
    starts = [0]
    while starts[-1] + C < n:
        starts.append(starts[-1] + C - overlap)
    return starts


def direct_chunks(auto, text: str, layers=(-1,), agg="mean", pooling="mean", k=K, overlap=OVERLAP) -> np.ndarray:
    """Late chunk vectors from direct AutoModel calls: each window alone, each token's vector from the
    window where min(left, right) context is largest (earlier window on a tie), chunk = mean (or max) of
    its tokens per layer, then the layers combined. -> (n_chunks, D)."""
    model, tok = auto
    ids = tok(text, add_special_tokens=False)["input_ids"]
    n = len(ids)
    best = np.full(n, -1)
    vec = {}
    for s in sliding_starts(n, overlap):
        e = min(s + C, n)
        t = torch.tensor([[tok.cls_token_id] + ids[s:e] + [tok.sep_token_id]])
        with torch.no_grad():
            hs = model(input_ids=t, attention_mask=torch.ones_like(t), token_type_ids=torch.zeros_like(t),
                       output_hidden_states=True).hidden_states
        for j, p in enumerate(range(s, e)):
            score = min(j, e - s - 1 - j)
            if score > best[p]:
                best[p] = score
                vec[p] = [hs[layer][0, j + 1].numpy().astype(np.float64) for layer in layers]
    out = []
    for a in range(0, n, k):
        toks = [vec[p] for p in range(a, min(a + k, n))]
        per_layer = [np.mean([t[i] for t in toks], axis=0) if pooling == "mean" else
                     np.max([t[i] for t in toks], axis=0) for i in range(len(layers))]
        out.append(np.concatenate(per_layer) if agg == "concat" else np.mean(per_layer, axis=0) if agg == "mean"
                   else np.sum(per_layer, axis=0))
    return np.array(out)


def extract(runner, model_dir, tmp_path, texts, *extra, out="out.parquet", overlap=OVERLAP):
    """conftest.extract_cli on ``texts`` with ids in in.csv, with --max-length ML --overlap ``overlap``, to
    ``out`` (exit 0): (the output table, the output)."""
    result, path = extract_cli(tmp_path, texts, "--max-length", ML, "--overlap", overlap, *extra, model=model_dir,
                               name=out, ids=True, src=tmp_path / "in.csv", runner=runner)
    return pq.read_table(path), result.output


TEXTS = [words(n, i) for i, n in enumerate(LENGTHS)]


@pytest.mark.parametrize("layers,agg", [("-1", "mean"), ("-2,-1", "concat"), ("0,-1", "sum")])
def test_chunks_equal_the_mean_of_sliding_token_vectors_and_a_direct_call(runner, tiny_model_dir, auto, tmp_path,
                                                                         layers, agg):
    opts = ("--layers", layers, "--layer-agg", agg)
    late, _ = extract(runner, tiny_model_dir, tmp_path, TEXTS, "--strategy", "late", "--chunk-tokens", K,
                      "--level", "window", *opts, out="late.parquet")
    tokens, _ = extract(runner, tiny_model_dir, tmp_path, TEXTS, "--strategy", "sliding", "--level", "token", *opts,
                        out="tokens.parquet")
    rows = late.to_pylist()
    docs = tokens.to_pylist()
    for i, (text, n) in enumerate(zip(TEXTS, LENGTHS)):
        mine = [r for r in rows if r["id"] == f"d{i}"]
        if n == 0:
            assert [(r["window"], r["features"], r["error"]) for r in mine] == [(None, None, "empty text")]
            continue
        # the spans tile the document's tokens: every token in exactly one chunk, in order, K each
        assert [r["spans"] for r in mine] == [[[a, min(a + K, n)]] for a in range(0, n, K)]
        assert [r["window"] for r in mine] == list(range(len(mine)))
        assert [r["n_tokens"] for r in mine] == [min(K, n - a) for a in range(0, n, K)]
        got = np.array([r["features"] for r in mine])
        pos = np.array(docs[i]["positions"])
        feats = np.array(docs[i]["token_features"])
        assert pos.tolist() == list(range(n))
        expected = np.array([feats[(pos >= s) & (pos < e)].astype(np.float64).mean(axis=0)
                             for (s, e), in (r["spans"] for r in mine)])
        np.testing.assert_allclose(got, expected, atol=1e-6)
        layer_ids = tuple(int(x) for x in layers.split(","))
        np.testing.assert_allclose(got, direct_chunks(auto, text, layer_ids, agg), atol=1e-5)


@pytest.mark.parametrize("aggregate", ["mean", "weighted", "first,last,mean,max"])
def test_document_vectors_aggregate_the_direct_chunk_vectors(runner, tiny_model_dir, auto, tmp_path, aggregate):
    table, _ = extract(runner, tiny_model_dir, tmp_path, TEXTS, "--feature", "late:mean", "--feature", "late:max:-2",
                       "--chunk-tokens", K, "--aggregate", aggregate)
    suffix = "" if "," not in aggregate else "_agg-first-last-mean-max"
    for i, (text, n) in enumerate(zip(TEXTS, LENGTHS)):
        row = table.slice(i, 1).to_pylist()[0]
        if n == 0:
            assert row[f"f_late_mean{suffix}"] is None and row["error"] == "empty text"
            continue
        for column, chunks in ((f"f_late_mean{suffix}", direct_chunks(auto, text)),
                               (f"f_late_max_L-2{suffix}", direct_chunks(auto, text, (-2,), pooling="max"))):
            sizes = np.array([min(K, n - a) for a in range(0, n, K)], dtype=np.float64)
            parts = {"mean": chunks.mean(0), "weighted": (chunks * sizes[:, None]).sum(0) / sizes.sum(),
                     "first": chunks[0], "last": chunks[-1], "max": chunks.max(0)}
            expected = np.concatenate([parts[a] for a in aggregate.split(",")])
            np.testing.assert_allclose(row[column], expected, atol=1e-5)
        assert row["n_windows"] == len(sliding_starts(n))
    meta = json.loads(table.schema.metadata[b"longbert"])
    assert meta["features"][0]["strategy"] == {"name": "late", "max_length": ML, "content_tokens": C,
                                               "max_tokens_per_doc": None, "overlap": OVERLAP,
                                               "step": C - OVERLAP, "chunk_tokens": K}


def summary_windows(output: str) -> tuple[int, int]:
    """(windows encoded, windows from the cache) of the summary line."""
    import re
    encoded = int(re.search(r"(\d+) windows encoded", output).group(1))
    cached = re.search(r"(\d+) from the cache", output)
    return encoded, int(cached.group(1)) if cached else 0


def test_the_cost_is_slidings_and_a_late_feature_beside_sliding_adds_no_window(runner, tiny_model_dir, tmp_path):
    sliding, out_s = extract(runner, tiny_model_dir, tmp_path, TEXTS, "--strategy", "sliding", out="s.parquet")
    late, out_l = extract(runner, tiny_model_dir, tmp_path, TEXTS, "--strategy", "late", out="l.parquet")
    both, out_b = extract(runner, tiny_model_dir, tmp_path, TEXTS, "--feature", "sliding:mean", "--feature",
                          "late:mean", "--feature", "late:max", out="b.parquet")
    expected = sum(len(sliding_starts(n)) for n in LENGTHS if n)
    assert summary_windows(out_s)[0] == summary_windows(out_l)[0] == summary_windows(out_b)[0] == expected
    assert late.column("n_windows").to_pylist() == sliding.column("n_windows").to_pylist()
    assert both.column("n_windows").to_pylist() == sliding.column("n_windows").to_pylist()
    np.testing.assert_allclose(np.array(both.column("f_late_mean").to_pylist()[:2]),
                               np.array(late.column("features").to_pylist()[:2]), atol=1e-6)


@pytest.mark.parametrize("overlap", [5, 7])
def test_ties_of_context_go_to_the_earlier_window(runner, tiny_model_dir, auto, tmp_path, overlap):
    # overlap 5: position 7 has context 2 in windows [0, 10) and [5, 15); overlap 7 has ties as well
    table, _ = extract(runner, tiny_model_dir, tmp_path, TEXTS, "--strategy", "late", "--chunk-tokens", 1,
                       "--level", "window", overlap=overlap)
    rows = table.to_pylist()
    for i, (text, n) in enumerate(zip(TEXTS, LENGTHS)):
        if n:
            got = np.array([r["features"] for r in rows if r["id"] == f"d{i}"])
            np.testing.assert_allclose(got, direct_chunks(auto, text, k=1, overlap=overlap), atol=1e-5)


def test_late_default_overlap_is_256_and_overlap_sets_it(runner, tiny_model_dir, tmp_path):
    from pipeline.options.config import PipelineConfig
    from pipeline.text.segment import window_spans

    cfg = PipelineConfig.from_options(strategy="late", max_length=512)
    assert (cfg.segment.late_overlap, cfg.segment.chunk_tokens, cfg.segment.overlap) == (256, 128, 128)
    assert window_spans(1000, cfg.segment) == [((0, 510),), ((254, 764),), ((508, 1000),)]
    assert PipelineConfig.from_options(strategy="late", overlap=64).segment.late_overlap == 64


def test_the_store_serves_a_second_run_and_another_chunk_size(runner, tiny_model_dir, tmp_path):
    cache = ("--cache", tmp_path / "store", "--strategy", "late")
    first, out1 = extract(runner, tiny_model_dir, tmp_path, TEXTS, *cache, "--chunk-tokens", K, out="1.parquet")
    again, out2 = extract(runner, tiny_model_dir, tmp_path, TEXTS, *cache, "--chunk-tokens", K, out="2.parquet")
    other, out3 = extract(runner, tiny_model_dir, tmp_path, TEXTS, *cache, "--chunk-tokens", 5, "--aggregate",
                          "weighted", out="3.parquet")
    fresh, _ = extract(runner, tiny_model_dir, tmp_path, TEXTS, "--strategy", "late", "--chunk-tokens", 5,
                       "--aggregate", "weighted", out="4.parquet")
    pooled, out5 = extract(runner, tiny_model_dir, tmp_path, TEXTS, "--cache", tmp_path / "store", "--feature",
                           "late:max", "--feature", "late:mean", "--chunk-tokens", 5, out="5.parquet")
    n = sum(len(sliding_starts(x)) for x in LENGTHS if x)
    assert summary_windows(out1) == (n, 0)
    assert summary_windows(out2) == (0, n) and summary_windows(out3) == (0, n) and summary_windows(out5) == (0, n)
    alone, _ = extract(runner, tiny_model_dir, tmp_path, TEXTS, "--strategy", "late", "--chunk-tokens", 5,
                       out="6.parquet")
    assert pooled.column("f_late_mean").to_pylist() == alone.column("features").to_pylist()
    assert again.column("features").to_pylist() == first.column("features").to_pylist()
    assert other.column("features").to_pylist() == fresh.column("features").to_pylist()


@pytest.mark.parametrize("args,message", [
    (("--strategy", "late", "--pooling", "cls"), "--pooling cls with --strategy late: cls reads a window's [CLS]"),
    (("--feature", "late:pooler", "--feature", "chunk:mean"), "pooling pooler with strategy late"),
    (("--strategy", "late", "--chunk-tokens", 0), "--chunk-tokens=0 must be >= 1"),
])
def test_window_poolings_and_bad_chunk_sizes_are_refused_before_the_model_loads(runner, tmp_path, args, message):
    src = write_csv(tmp_path / "in.csv", [{"text": "a b c"}])
    result = invoke(runner, ["extract", src, "-o", tmp_path / "o.parquet", "--model", tmp_path / "no-such-model",
                             *args])
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "o.parquet").exists()


def test_encode_and_the_vectorizer_take_late(tiny_model_dir, tmp_path, runner):
    import longbert
    from pipeline.classify.vectorizer import LongBertVectorizer

    table, _ = extract(runner, tiny_model_dir, tmp_path, TEXTS[:2], "--strategy", "late", "--chunk-tokens", K)
    expected = np.array(table.column("features").to_pylist())
    X = longbert.encode(TEXTS[:2], model=str(tiny_model_dir), strategy="late", chunk_tokens=K, max_length=ML,
                        overlap=OVERLAP, cache=None)
    np.testing.assert_allclose(X, expected, atol=1e-6)
    vec = LongBertVectorizer(model=str(tiny_model_dir), strategy="late", chunk_tokens=K, max_length=ML, overlap=OVERLAP)
    np.testing.assert_allclose(vec.fit_transform(TEXTS[:2]), expected, atol=1e-6)


def test_stats_counts_late_windows(runner, tiny_model_dir, tmp_path):
    from pipeline.options.config import PipelineConfig
    from pipeline.engine.stats import strategy_cost
    from pipeline.text.segment import window_spans  # noqa: F401 - the rule strategy_cost applies

    seg = PipelineConfig.from_options(strategy="late", max_length=ML, overlap=OVERLAP).segment
    cost = strategy_cost(np.array([n for n in LENGTHS]), seg)
    assert cost["windows_total"] == sum(len(sliding_starts(n)) for n in LENGTHS if n)
    src = write_csv(tmp_path / "in.csv", [{"text": t} for t in TEXTS])
    result = invoke(runner, ["stats", src, "--model", tiny_model_dir, "--max-length", ML, "--overlap", OVERLAP])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.lstrip(" *").startswith("late "))
    assert f"C={C}, overlap {OVERLAP}, chunks of 128" in line


def test_the_pure_functions_on_hand_made_vectors():
    from pipeline.model.late import chunk_bounds, chunk_spans, chunk_vectors, max_context

    # windows over positions 0..4 and 2..6; each token's vector is 10 x window + position
    pos = [np.arange(0, 5), np.arange(2, 7)]
    vecs = [np.array([[10.0 + p] for p in range(0, 5)], np.float32), np.array([[20.0 + p] for p in range(2, 7)], np.float32)]
    every, out = max_context(pos, vecs)
    assert every.tolist() == list(range(7))
    assert out[:, 0].tolist() == [10, 11, 12, 13, 24, 25, 26]       # position 3: context 1 in both, the earlier wins
    assert chunk_bounds(7, 3) == [(0, 3), (3, 6), (6, 7)] and chunk_bounds(0, 3) == []
    assert chunk_spans(np.arange(7), 3) == [(0, 3), (3, 6), (6, 7)]
    tokens = np.array([[1, 10], [3, 30], [5, 50]], np.float32)         # two layers of width 1
    cols = [(0, 1), (1, 2)]
    assert chunk_vectors(tokens, [(0, 2), (2, 3)], "mean", cols, "concat").tolist() == [[2, 20], [5, 50]]
    assert chunk_vectors(tokens, [(0, 2), (2, 3)], "mean", cols, "sum").tolist() == [[22], [55]]
    assert chunk_vectors(tokens, [(0, 3)], "max", cols, "mean").tolist() == [[27.5]]


@pytest.mark.parametrize("at_once", [1, 2, 64])
def test_doc_chunks_merge_a_few_chunks_at_a_time_as_the_whole_document_would(monkeypatch, at_once):
    """A long document's chunk vectors are made CHUNKS_AT_ONCE chunks at a time without its whole (m, W) array,
    and equal pooling the whole max-context merge: overlapping windows of 100 tokens, step 60, over 1,000."""
    import pipeline.model.late as late
    from pipeline.options.features_config import Feature

    rng = np.random.default_rng(0)
    positions = [np.arange(s, min(s + 100, 1000)) for s in range(0, 941, 60)]
    layers = [rng.normal(size=(len(p), 8)).astype(np.float32) for p in positions]     # 2 layers x hidden 4
    features = [Feature("late", "mean", layers=(-1,)), Feature("late", "max", layers=(-2, -1), layer_agg="concat")]
    _, whole = late.max_context(positions, layers)                                    # (1000, 8)
    want = {f: late.late_vectors(whole, 32, f.pooling, late.layer_columns(f.layers, (5, 6), 6, 4), f.layer_agg)
            for f in features}
    monkeypatch.setattr(late, "CHUNKS_AT_ONCE", at_once)
    got = late.doc_chunks(positions, layers, features, 32, (5, 6), 6, 4)
    for f in features:
        np.testing.assert_array_equal(got[f][0], want[f][0])
        np.testing.assert_array_equal(got[f][1], want[f][1])
    assert got[features[0]][0].shape == (32, 4) and got[features[1]][0].shape == (32, 8)   # ceil(1000 / 32) chunks
