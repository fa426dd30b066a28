"""--level window: one row per window; vectors equal direct AutoModel calls, spans the window rules, order,
empty documents, DIR/ + --resume, load_features."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import disk_full_at_part, extract_cli, invoke, words
from transformers import AutoModel, AutoTokenizer

from pipeline.errors import InputError
from pipeline.classify.features import load_features
from pipeline.output.write import PartsSink, read_manifest

ML = 16    # C = 14 content tokens
C = ML - 2


@pytest.fixture(scope="module")
def auto(tiny_model_dir):
    """(AutoModel, AutoTokenizer) straight from transformers: the independent reference."""
    return AutoModel.from_pretrained(tiny_model_dir).eval(), AutoTokenizer.from_pretrained(tiny_model_dir)


def direct(auto, text: str, spans, pooling: str) -> np.ndarray:
    """One direct model call on the window's token ids ([CLS] + the spans' ids + [SEP]) -> (h,)."""
    model, tok = auto
    ids = tok(text, add_special_tokens=False)["input_ids"]
    window = [tok.cls_token_id] + [ids[p] for s, e in spans for p in range(s, e)] + [tok.sep_token_id]
    t = torch.tensor([window])
    with torch.no_grad():
        h = model(input_ids=t, attention_mask=torch.ones_like(t), token_type_ids=torch.zeros_like(t)).last_hidden_state[0]
    return {"cls": h[0], "mean": h.mean(0), "max": h.max(0).values}[pooling].numpy()


def rules(strategy: str, n: int) -> list[list[list[int]]]:
    """The window rules (README), written out independently of pipeline.text.segment: C = 14, head 4 + tail
    10, overlap 4 (step 10)."""
    if n == 0:
        return []
    if n <= C:
        return [[[0, n]]]
    if strategy == "head":
        return [[[0, C]]]
    if strategy == "tail":
        return [[[n - C, n]]]
    if strategy == "head_tail":
        return [[[0, 4], [n - 10, n]]]
    step = C if strategy == "chunk" else C - 4
    out, start = [], 0
    while True:
        out.append([[start, min(start + C, n)]])
        if start + C >= n:
            return out
        start += step


def run(runner, model_dir, tmp_path, rows, *extra, out="out.parquet"):
    """conftest.extract_cli on ``rows`` in in.csv at --level window, without --overwrite and any exit code allowed:
    (click's Result, the output path)."""
    return extract_cli(tmp_path, None, "--max-length", ML, "--level", "window", "--head-tokens", 4, "--tail-tokens",
                       10, "--overlap", 4, *extra, model=model_dir, name=out, rows=rows, src=tmp_path / "in.csv",
                       runner=runner, overwrite=False, ok=False)


LENGTHS = [29, 3, 0, 14, 15, 40]   # several windows, one, an empty document, exactly C, C + 1, long


@pytest.mark.parametrize("strategy", ["head", "tail", "head_tail", "chunk", "sliding"])
def test_each_window_equals_a_direct_model_call_and_the_window_rules(runner, tiny_model_dir, auto, tmp_path,
                                                                     strategy):
    texts = [words(n, i) for i, n in enumerate(LENGTHS)]
    rows = [{"id": f"d{i}", "text": t, "label": f"L{i}"} for i, t in enumerate(texts)]
    result, out = run(runner, tiny_model_dir, tmp_path, rows, "--keep-col", "label", "--feature",
                      f"{strategy}:cls", "--feature", f"{strategy}:mean", "--feature", f"{strategy}:max")
    assert result.exit_code == 0, result.output
    table = pq.read_table(out)
    assert table.column_names == ["id", "label", "window", "spans", "n_tokens", f"f_{strategy}_cls",
                                  f"f_{strategy}_mean", f"f_{strategy}_max", "error"]
    assert table.schema.field("window").type == pa.int32() and table.schema.field("n_tokens").type == pa.int32()
    got = table.to_pylist()
    expected_ids = []
    for i, (text, n) in enumerate(zip(texts, LENGTHS)):
        expected_ids += [f"d{i}"] * max(len(rules(strategy, n)), 1)
    assert [r["id"] for r in got] == expected_ids                     # document order, input order
    k = 0
    for i, (text, n) in enumerate(zip(texts, LENGTHS)):
        if n == 0:                                                     # the empty document keeps one row
            assert got[k] == {"id": f"d{i}", "label": f"L{i}", "window": None, "spans": None, "n_tokens": None,
                              f"f_{strategy}_cls": None, f"f_{strategy}_mean": None, f"f_{strategy}_max": None,
                              "error": "empty text"}
            k += 1
            continue
        for w, spans in enumerate(rules(strategy, n)):
            row = got[k]
            assert (row["window"], row["spans"], row["label"], row["error"]) == (w, spans, f"L{i}", None)
            assert row["n_tokens"] == sum(e - s for s, e in spans)
            for pooling in ("cls", "mean", "max"):
                np.testing.assert_allclose(row[f"f_{strategy}_{pooling}"], direct(auto, text, spans, pooling),
                                           atol=1e-5)
            k += 1
    assert k == len(got)
    meta = json.loads(table.schema.metadata[b"longbert"])
    assert meta["level"] == "window" and meta["aggregate"] is None
    assert [f["feature_dim"] for f in meta["features"]] == [32, 32, 32]


def test_load_features_gives_ids_windows_and_a_matrix(runner, tiny_model_dir, auto, tmp_path):
    texts = [words(n, i) for i, n in enumerate(LENGTHS)]
    result, out = run(runner, tiny_model_dir, tmp_path, [{"text": t} for t in texts], "--strategy", "chunk",
                      "--pooling", "mean", "--normalize")
    assert result.exit_code == 0, result.output
    ids, X, meta = load_features(out)
    spans = [rules("chunk", n) for n in LENGTHS]
    assert ids.tolist() == [i for i, s in enumerate(spans) for _ in s]          # "row" numbers, per window
    assert meta["window"].dtype == np.int32 and meta["window"].tolist() == [w for s in spans for w in range(len(s))]
    assert meta["spans"] == [w for s in spans for w in s]
    assert X.shape == (sum(len(s) for s in spans), 32) and X.dtype == np.float32
    assert meta["left_out"] == [{"id": 2, "error": "empty text", "window": None}] and meta["n_rows"] == len(X) + 1
    ref = np.stack([direct(auto, words(n, i), w, "mean") for i, n in enumerate(LENGTHS) for w in rules("chunk", n)])
    np.testing.assert_allclose(X, ref / np.linalg.norm(ref, axis=1, keepdims=True), atol=1e-5)  # --normalize: each
    assert meta["rows"]["n_tokens"].tolist() == [sum(e - s for s, e in w) for w in meta["spans"]]


def test_dir_and_resume_equal_a_single_run(runner, tiny_model_dir, tmp_path, monkeypatch):
    lengths = [29, 0, 40, 3, 15, 50, 1, 33, 0, 20]
    rows = [{"id": f"d{i}", "text": words(n, i)} for i, n in enumerate(lengths)]
    extra = ("--strategy", "sliding", "--block-rows", 3)
    result, single = run(runner, tiny_model_dir, tmp_path, rows, *extra)
    assert result.exit_code == 0, result.output
    reference = pq.read_table(single)

    write = disk_full_at_part(monkeypatch, 3)
    result, parts = run(runner, tiny_model_dir, tmp_path, rows, *extra, out="parts/")
    assert result.exit_code == 1 and "kept for --resume" in result.output
    kept = read_manifest(parts)["parts"]
    assert [p["block"] for p in kept] == [0, 1] and all(p["rows"] > p["documents"] for p in kept)
    inodes = [(parts / p["file"]).stat().st_ino for p in kept]
    monkeypatch.setattr(PartsSink, "write", write)
    result, parts = run(runner, tiny_model_dir, tmp_path, rows, *extra, "--resume", out="parts/")
    assert result.exit_code == 0, result.output
    assert "resuming" in result.output and "2 of 4 blocks (6 of 10 rows) are done" in result.output
    # the two finished parts were kept (renamed to their final names at commit), not redone
    assert [(parts / f"part-{i:05d}.parquet").stat().st_ino for i in (0, 1)] == inodes
    ids, X, meta = load_features(parts)
    ref_ids, ref_X, ref_meta = load_features(single)
    assert ids.tolist() == ref_ids.tolist() and meta["window"].tolist() == ref_meta["window"].tolist()
    np.testing.assert_array_equal(X, ref_X)
    manifest = read_manifest(parts)
    assert manifest["rows"] == reference.num_rows and [p["documents"] for p in manifest["parts"]] == [3, 3, 3, 1]
    again = invoke(runner, ["extract", tmp_path / "in.csv", "-o", f"{parts}/", "--model", tiny_model_dir, "--no-progress",
                            "--max-length", ML, "--level", "window", "--head-tokens", 4, "--tail-tokens", 10,
                            "--overlap", 4, *extra, "--resume"])
    assert again.exit_code == 0 and "already complete" in again.output


def test_several_strategies_refused_and_aggregate_warned(runner, tiny_model_dir, tmp_path):
    result, _ = run(runner, tiny_model_dir, tmp_path, [{"text": words(5)}], "--feature", "head:cls", "--feature",
                    "chunk:mean")
    assert result.exit_code == 2
    assert ("Error: --level window writes one row per window of one strategy, but the features use head, chunk; "
            "give features of one strategy (e.g. --feature chunk:cls --feature chunk:mean), and run once per "
            "strategy") in result.output
    result, out = run(runner, tiny_model_dir, tmp_path, [{"text": words(20)}], "--strategy", "chunk", "--aggregate",
                      "first,max")
    assert result.exit_code == 0, result.output
    assert ("Warning: --aggregate first,max has no effect: it applies only to --level document and token (this "
            "run: window, one vector per window)") in result.output
    assert pq.read_table(out).column("features").type.list_size == 32      # no parts at window level


def test_strict_names_the_document_of_a_window_row(runner, tiny_model_dir, tmp_path):
    rows = [{"text": words(30)}, {"text": words(20)}, {"text": ""}]
    result, _ = run(runner, tiny_model_dir, tmp_path, rows, "--strategy", "chunk", "--strict")
    assert result.exit_code == 1
    # the 6th output row (after 3 + 2 windows) is the third document, line 4 of the CSV
    assert f"Error: row 2 ({tmp_path / 'in.csv'} line 4): empty text; --strict stops" in result.output


def test_probe_refuses_a_window_output(runner, tiny_model_dir, tmp_path):
    from pipeline.classify.probe_files import probe_files

    result, out = run(runner, tiny_model_dir, tmp_path, [{"text": words(20), "label": "a"}], "--keep-col", "label")
    assert result.exit_code == 0, result.output
    with pytest.raises(InputError, match="is a --level window output"):
        probe_files([out], label_col="label")
