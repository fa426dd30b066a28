"""Shared cases B01, B03, B17 and B18 through the real CLI with the real default model, each against an
independent reference (a direct transformers call on the windows the README's rules give)."""
from __future__ import annotations

import csv
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from conftest import CASES, invoke
from transformers import AutoModel, AutoTokenizer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference(default_model_dir):
    """(model, tokenizer) loaded straight with transformers, eager attention: the independent reference."""
    model = AutoModel.from_pretrained(default_model_dir, attn_implementation="eager").eval()
    return model, AutoTokenizer.from_pretrained(default_model_dir)


def direct(model, ids: list[int], pooling: str = "mean") -> np.ndarray:
    """One window, alone (no padding): the mean over [CLS]..[SEP] or the per-token states, float32."""
    with torch.no_grad():
        t = torch.tensor([ids])
        h = model(input_ids=t, attention_mask=torch.ones_like(t), token_type_ids=torch.zeros_like(t)).last_hidden_state[0]
    return (h.mean(0) if pooling == "mean" else h).numpy()


def content_ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def test_long_document_next_to_a_short_one_chunked(runner, reference, tmp_path):
    model, tok = reference
    out = tmp_path / "o.parquet"
    result = invoke(runner, ["extract", CASES / "B01.csv", "--strategy", "chunk", "--no-progress", "-o", out])
    assert result.exit_code == 0, result.output
    table = pq.read_table(out)
    with open(CASES / "B01.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert table.column("id").to_pylist() == [r["id"] for r in rows]
    for row, n_tokens, n_windows, vec in zip(rows, table.column("n_tokens").to_pylist(),
                                             table.column("n_windows").to_pylist(), table.column("features").to_pylist()):
        ids = content_ids(tok, row["text"])
        assert n_tokens == len(ids) and n_windows == -(-len(ids) // 510)
        windows = [[tok.cls_token_id, *ids[k:k + 510], tok.sep_token_id] for k in range(0, len(ids), 510)]
        expected = np.mean([direct(model, w) for w in windows], axis=0)      # chunk and average
        np.testing.assert_allclose(np.asarray(vec, np.float32), expected, atol=1e-5)
    assert max(table.column("n_tokens").to_pylist()) > 510 and min(table.column("n_tokens").to_pylist()) < 20


def test_overlap_as_large_as_the_window_exits_2_before_loading(runner, tmp_path, monkeypatch):
    import pipeline.engine.resolved as block

    params = json.loads((CASES / "B03.params.json").read_text())
    monkeypatch.setattr(block, "model_facts", lambda *a, **k: pytest.fail("the model was read"))
    result = invoke(runner, ["extract", CASES / params["input"], "--strategy", params["strategy"], "--max-length",
                             params["max_length"], "--overlap", params["overlap"], "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 2
    assert ("Error: --overlap=510 must be in [0, 510) for windows of 510 content tokens (max_length 512 - [CLS] - "
            "[SEP]); lower --overlap") in result.output
    assert not (tmp_path / "o.parquet").exists()


def test_half_precision_features(runner, reference, tmp_path):
    model, tok = reference
    out = tmp_path / "o.parquet"
    result = invoke(runner, ["extract", CASES / "B17.csv", "--dtype", "float16", "--out-dtype", "float16",
                             "--device", "cpu", "--no-progress", "-o", out])
    assert result.exit_code == 0, result.output
    table = pq.read_table(out)
    assert str(table.schema.field("features").type) == "fixed_size_list<element: halffloat>[384]"
    meta = json.loads(table.schema.metadata[b"longbert"])
    assert meta["dtype"] == "float16" and meta["out_dtype"] == "float16"
    for text, vec in zip(["float16 output check", "second row"], table.column("features").to_pylist()):
        expected = direct(model, [tok.cls_token_id, *content_ids(tok, text), tok.sep_token_id])
        np.testing.assert_allclose(np.asarray(vec, np.float32), expected, atol=5e-3)   # half precision compute


def test_token_features_for_documents_of_different_lengths(runner, reference, tmp_path):
    model, tok = reference
    out = tmp_path / "o.parquet"
    result = invoke(runner, ["extract", CASES / "B18.csv", "--level", "token", "--no-progress", "-o", out])
    assert result.exit_code == 0, result.output
    rows = pq.read_table(out).to_pylist()
    with open(CASES / "B18.csv", newline="", encoding="utf-8") as fh:
        texts = [r["text"] for r in csv.DictReader(fh)]
    assert len({len(r["positions"]) for r in rows}) == len(rows)            # different lengths
    for row, text in zip(rows, texts):
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        ids = enc["input_ids"]
        assert len(ids) <= 510
        assert row["token_ids"] == ids and row["positions"] == list(range(len(ids)))
        assert row["offsets"] == [list(o) for o in enc["offset_mapping"]]
        states = direct(model, [tok.cls_token_id, *ids, tok.sep_token_id], pooling="tokens")
        np.testing.assert_allclose(np.asarray(row["token_features"], np.float32), states[1:-1], atol=1e-5)
