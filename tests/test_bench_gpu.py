"""Issue 19's device benchmark: its FLOP count against torch's own counter, and its one-line exit without CUDA."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import BertConfig, BertModel

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from gpu_bench import flops_per_window  # noqa: E402


@pytest.mark.parametrize("n_tokens", [7, 64])
def test_flop_formula_matches_torch_flop_counter(n_tokens):
    """layers * n * (24 h^2 + 4 n h) equals the matmul FLOP torch counts in a BertModel forward of one
    unpadded window (no pooler: it is not part of the encoder's per-token work). Eager attention, whose
    Q K^T and weights x V are matmuls the counter sees (it has no CPU SDPA kernel registered)."""
    cfg = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=128, attn_implementation="eager")
    model = BertModel(cfg, add_pooling_layer=False).eval()
    ids = torch.arange(n_tokens).unsqueeze(0) % 49 + 1                          # (1, n)
    counter = FlopCounterMode(display=False)
    with counter, torch.inference_mode():
        model(input_ids=ids, attention_mask=torch.ones_like(ids))
    assert counter.get_total_flops() == flops_per_window(n_tokens, 32, 3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the benchmark would run")
def test_gpu_bench_without_cuda_prints_one_line_and_exits_2():
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_bench.py")], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == (f"gpu_bench: no CUDA device visible to torch {torch.__version__} (CUDA build: none); "
                           "nothing measured, bench/results_gpu.md not written (exit 2)\n")
    assert proc.stderr == ""


def test_feeder_benchmark_runs_every_row(tmp_path):
    """bench/feeder.py on 20 documents: every row of its table runs (a row that fails prints FAILED and
    is left out; an import moved by a refactor once broke both raw-tokenizer rows without a failing test),
    and each run counts the same tokens as the raw tokenizer."""
    out = tmp_path / "feeder.md"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "feeder.py"), "--docs", "20", "--output", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr   # a failed row prints FAILED on stdout
    assert "FAILED" not in proc.stdout, proc.stdout
    rows = [line.split("|") for line in out.read_text().splitlines() if line.startswith(("| raw", "| feeder"))]
    labels = [r[1].strip() for r in rows if len(r) > 8]
    assert labels[:2] == ["raw tokenizer, 1 core", "raw tokenizer, all cores"], labels
    assert len({r[2].strip() for r in rows if len(r) > 8}) == 1, rows   # the same token count in every run
