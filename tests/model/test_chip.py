"""The chip's fast paths: detection from CPU flags, --dtype auto's choice, the bfloat16 CPU path's cosines,
the float32 recompute of non-finite windows, the window store's dtype key and int8 without deprecation
warnings."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from conftest import extract_cli, invoke, words, write_csv

import pipeline.chip as chip
from pipeline.options.config import ModelConfig

AMX = "processor : 0\nmodel name : Intel Xeon Platinum 8481C\nflags : fpu sse avx2 avx512f avx512_bf16 " \
      "avx512_vnni amx_bf16 amx_int8 amx_tile\n\nprocessor : 1\nflags : fpu\n"
AVX512_BF16 = "model name : AMD EPYC 9B14\nflags : fpu avx2 avx512f avx512_vnni avx512_bf16\n"
AVX2 = "model name : AMD EPYC 7B13\nflags : fpu sse4_2 avx avx2 fma\n"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def fake_cpu(monkeypatch):
    """fake_cpu(cpuinfo_text): every detect() of this test sees a CPU with those flags."""
    def use(text: str) -> chip.Chip:
        found = chip.cpu_chip(text)
        monkeypatch.setattr(chip, "detect", lambda device="auto": found)
        return found
    return use


@pytest.mark.parametrize("text, name, flags, bf16", [
    (AMX, "Intel Xeon Platinum 8481C", ("amx_bf16", "avx512_bf16", "amx_int8", "avx512_vnni", "avx512f", "avx2"), True),
    (AVX512_BF16, "AMD EPYC 9B14", ("avx512_bf16", "avx512_vnni", "avx512f", "avx2"), True),
    (AVX2, "AMD EPYC 7B13", ("avx2",), False),
])
def test_cpu_flags_name_the_fast_paths(text, name, flags, bf16):
    found = chip.cpu_chip(text)
    assert found.flags == flags and found.bf16_fast is bf16 and found.device == "cpu"
    assert found.recommended_dtype == ("bfloat16" if bf16 else "float32")
    assert found.name == name


def test_no_flags_falls_back_to_torch_capability():
    found = chip.cpu_chip("")
    assert found.flags == () and not found.bf16_fast
    assert found.capability == torch.backends.cpu.get_cpu_capability()
    assert "torch capability" in found.describe()


@pytest.mark.parametrize("text, quantize, expected", [
    (AMX, "none", "bfloat16"), (AVX512_BF16, "none", "bfloat16"), (AVX2, "none", "float32"),
    (AMX, "int8", "float32"),
])
def test_dtype_auto_follows_the_chip(fake_cpu, text, quantize, expected):
    fake_cpu(text)
    assert ModelConfig(device="cpu", dtype="auto", quantize=quantize).dtype == expected
    assert ModelConfig(device="cpu").dtype == "float32"  # the default stays float32 on every chip


def _extract(runner, src: Path, out: Path, *args) -> tuple[str, list[dict], dict]:
    """conftest.extract_cli from ``src`` (as it is) to ``out`` on the CPU (exit 0): (output, rows, metadata)."""
    result, _ = extract_cli(out.parent, None, "--device", "cpu", *args, name=out.name, src=src, runner=runner)
    table = pq.read_table(out)
    return result.output, table.to_pylist(), json.loads(table.schema.metadata[b"longbert"])


@pytest.fixture
def corpus(tmp_path):
    rows = [{"id": f"d{i}", "text": words(n, i)} for i, n in enumerate((1, 37, 510, 511, 1400))]
    return write_csv(tmp_path / "c.csv", rows)


def test_auto_without_fast_bf16_writes_the_same_file_as_no_dtype(runner, tiny_model_dir, corpus, tmp_path, fake_cpu):
    fake_cpu(AVX2)
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    out_a, rows, meta = _extract(runner, corpus, a, "--model", tiny_model_dir, "--strategy", "chunk")
    _extract(runner, corpus, b, "--model", tiny_model_dir, "--strategy", "chunk", "--dtype", "auto")
    assert a.read_bytes() == b.read_bytes()
    assert meta["dtype"] == meta["compute_dtype"] == "float32" and meta["device"] == "cpu"
    assert "AMD EPYC 7B13" in meta["chip"] and "fast bfloat16 path" not in out_a


def test_float32_run_on_a_bf16_cpu_says_so_once(runner, tiny_model_dir, corpus, tmp_path, fake_cpu):
    fake_cpu(AMX)
    out, _, meta = _extract(runner, corpus, tmp_path / "a.parquet", "--model", tiny_model_dir)
    assert out.count("this CPU has a fast bfloat16 path (amx_bf16 avx512_bf16): --dtype auto") == 1
    assert meta["compute_dtype"] == "float32"
    out, _, meta = _extract(runner, corpus, tmp_path / "b.parquet", "--model", tiny_model_dir, "--dtype", "auto")
    assert "fast bfloat16 path" not in out
    assert meta["dtype"] == meta["compute_dtype"] == "bfloat16" and meta["device"] == "cpu"


def _cosines(a: list, b: list) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def _bf16_cosines(runner, src: Path, tmp_path: Path, *args) -> tuple[list[float], list[float]]:
    """Per-document cosines of bfloat16 to float32, and per token with --level token (else [])."""
    _, f32, _ = _extract(runner, src, tmp_path / "f32.parquet", *args)
    _, bf16, meta = _extract(runner, src, tmp_path / "bf16.parquet", "--dtype", "bfloat16", *args)
    assert meta["compute_dtype"] == "bfloat16"
    docs, tokens = [], []
    for x, y in zip(f32, bf16):
        assert x["id"] == y["id"] and x.get("n_windows") == y.get("n_windows") and x.get("window") == y.get("window")
        if x["features"] is None:
            continue
        docs.append(float(_cosines(x["features"], y["features"])))
        if "token_features" in x:
            tokens += _cosines(x["token_features"], y["token_features"]).tolist()
    return docs, tokens


@pytest.mark.parametrize("args", [("--strategy", "head"), ("--strategy", "chunk"),
                                  ("--strategy", "chunk", "--level", "token")])
def test_bf16_on_cpu_keeps_cosine_to_float32_tiny_model(runner, tiny_model_dir, corpus, tmp_path, args):
    docs, tokens = _bf16_cosines(runner, corpus, tmp_path, "--model", tiny_model_dir, "--pooling", "mean", *args)
    assert len(docs) == 5 and min(docs) >= 0.9999, docs
    assert ("--level" in args) == bool(tokens) and min(tokens, default=1) >= 0.999


@pytest.mark.slow
@pytest.mark.parametrize("args", [("--strategy", "head"), ("--strategy", "chunk"),
                                  ("--strategy", "chunk", "--level", "window"),
                                  ("--strategy", "head", "--level", "token")])
def test_bf16_on_cpu_keeps_cosine_to_float32_default_model(runner, tmp_path, args):
    """What --help and docs/hardware.md state: >= 0.9999 per document or window, >= 0.998 per token."""
    import pandas as pd

    frame = pd.read_csv(EXAMPLES / "corpus.csv").head(6)  # a few documents: seconds, not minutes
    src = tmp_path / "few.csv"
    frame.to_csv(src, index=False)
    docs, tokens = _bf16_cosines(runner, src, tmp_path, "--id-col", "id", "--pooling", "mean", *args)
    assert (len(docs) > 6 if "window" in args else len(docs) == 6) and min(docs) >= 0.9999, docs
    assert min(tokens, default=1) >= 0.998  # each token's vector: 0.99948 the lowest measured here


def test_non_finite_bf16_window_is_recomputed_in_float32(tiny_model_dir):
    """A bfloat16 window that comes out NaN (faked by a hook) is encoded again with a float32 copy:
    its vector equals the float32 model's, the other windows keep their bfloat16 vectors."""
    from transformers import BertModel

    from pipeline.options.config import PoolConfig
    from pipeline.model.encode import Encoder
    from pipeline.types import Window

    from pipeline.model.load import load_model

    f32 = BertModel.from_pretrained(tiny_model_dir).eval()
    bf16 = load_model(ModelConfig(model=str(tiny_model_dir), device="cpu", dtype="bfloat16"), False, torch.device("cpu"))

    def poison(module, args, output):  # NaN for the window whose first content id is 7, in bfloat16 only
        if output.dtype == torch.bfloat16:
            output = output.clone()
            output[args[0][:, 1] == 7] = float("nan")
        return output

    bf16.embeddings.word_embeddings.register_forward_hook(poison)
    windows = [Window(doc=i, window_idx=0, n_windows=1, spans=((0, 3),), input_ids=np.array([2, first, 8, 9, 3], dtype=np.int64)) for i, first in enumerate((6, 7, 10))]
    pool = PoolConfig(pooling="mean")
    got = Encoder(bf16, 0, pool, 8, 4096, torch.device("cpu")).encode(windows)
    want = Encoder(f32, 0, pool, 8, 4096, torch.device("cpu")).encode(windows)
    assert got.finite.all()
    np.testing.assert_allclose(got.vectors[1], want.vectors[1], atol=1e-5)
    assert not np.allclose(got.vectors[0], want.vectors[0], atol=1e-6)  # still bfloat16: recompute only the bad one
    assert float(_cosines(got.vectors[0], want.vectors[0])) >= 0.999


def test_window_store_keys_by_compute_dtype(runner, tiny_model_dir, corpus, tmp_path):
    store = tmp_path / "store"
    args = ("--model", tiny_model_dir, "--strategy", "chunk", "--cache", store)
    _extract(runner, corpus, tmp_path / "a.parquet", *args)
    out, bf16, _ = _extract(runner, corpus, tmp_path / "b.parquet", *args, "--dtype", "bfloat16")
    assert ", 0 from the cache" in out  # float32 vectors are not served to a bfloat16 run
    out, again, _ = _extract(runner, corpus, tmp_path / "c.parquet", *args, "--dtype", "bfloat16")
    assert "0 windows encoded" in out and [r["features"] for r in again] == [r["features"] for r in bf16]


def test_int8_loads_without_deprecation_warnings(runner, tiny_model_dir, corpus, tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, f32, _ = _extract(runner, corpus, tmp_path / "a.parquet", "--model", tiny_model_dir)
        _, int8, meta = _extract(runner, corpus, tmp_path / "b.parquet", "--model", tiny_model_dir,
                                 "--quantize", "int8")
    # PyTorch says "deprecated" in DeprecationWarning, FutureWarning and (quantized tensors) UserWarning
    deprecated = [str(w.message)[:120] for w in caught
                  if issubclass(w.category, (DeprecationWarning, FutureWarning))
                  or "deprecat" in str(w.message).lower()]
    assert deprecated == []
    assert meta["compute_dtype"] == "int8"
    cos = [float(_cosines(a["features"], b["features"])) for a, b in zip(f32, int8)]
    assert min(cos) >= 0.98, cos
    assert all(a["features"] != b["features"] for a, b in zip(f32, int8))  # int8 really ran


def test_stats_names_the_chip_and_the_dtype_it_recommends(runner, tiny_model_dir, corpus, fake_cpu):
    fake_cpu(AMX)
    result = invoke(runner, ["stats", corpus, "--model", tiny_model_dir, "--device", "cpu",
                             "--windows-per-second", "10"])
    assert result.exit_code == 0, result.output
    assert ("chip         cpu (Intel Xeon Platinum 8481C; amx_bf16 avx512_bf16 amx_int8 avx512_vnni avx512f avx2; "
            "fast bfloat16); recommended --dtype bfloat16 (--dtype auto picks it; this run: float32)") in result.output


@pytest.mark.parametrize("text, levels", [(AMX, 127), (AVX512_BF16, 127), (AVX2, 63)])
def test_int8_weight_range_follows_vnni(fake_cpu, text, levels):
    """Without VNNI the int8 kernel sums pairs of products in 16 bits: weights stay within +-63 there."""
    from pipeline.model.int8 import Int8Linear, quantize_int8

    fake_cpu(text)
    torch.manual_seed(0)
    model = quantize_int8(torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.GELU()))
    layer = model[0]
    assert isinstance(layer, Int8Linear) and layer.post_op == "none"   # only BERT-style GELU blocks are fused
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 8)  # the same weights again, in float32
    torch.testing.assert_close(layer.w_scale, lin.weight.abs().amax(dim=1) / levels)
    if levels == 63 or any(f in chip.cpu_chip().flags for f in chip.VNNI_FLAGS):  # the real CPU can run it exactly
        x = torch.randn(5, 16)
        cos = torch.nn.functional.cosine_similarity(layer(x), lin(x), dim=1)
        assert cos.min() >= 0.999  # with +-127 weights on an AVX2 CPU one row fell to 0.69 (16-bit saturation)


def test_int8_layer_passes_a_non_finite_input_through():
    """A batch holding inf or NaN has no activation scale: the layer computes in float32 with its int8
    weights, so the result is non-finite (the window gets a row error), not a crash."""
    from pipeline.model.int8 import Int8Linear

    torch.manual_seed(0)
    layer = Int8Linear(torch.nn.Linear(4, 3), levels=63)
    x = torch.randn(2, 4)
    x[1, 2] = float("inf")
    y = layer(x)
    assert y.shape == (2, 3) and torch.isfinite(y[0]).all() and not torch.isfinite(y[1]).all()


def test_int8_input_quantization_reuses_its_buffers_and_matches_the_formula():
    """QuantizedInput writes into scratch buffers kept between calls (no fresh 50 MB tensor per layer):
    the codes equal round-half-up of x / scale + zero clamped to [0, 255], a smaller input reuses the
    storage, the same tensor object returns the kept result, and a larger one grows the buffers."""
    from pipeline.model.int8 import QuantizedInput

    def expected(x):
        lo, hi = min(float(x.min()), 0.0), max(float(x.max()), 0.0)
        scale = (hi - lo) / 255.0
        zero = round(-lo / scale)
        return torch.floor(x.reshape(-1, x.shape[-1]) / scale + zero + 0.5).clamp(0, 255).to(torch.uint8), scale, zero

    torch.manual_seed(0)
    shared = QuantizedInput()
    big, small, bigger = torch.randn(4, 6, 8) * 3, torch.randn(5, 8) + 1, torch.randn(40, 8)
    q, scale, zero = shared.quantize(big)
    want, want_scale, want_zero = expected(big)
    assert q.shape == (24, 8) and (scale, zero) == (pytest.approx(want_scale), want_zero)
    assert (q.int() - want.int()).abs().max() <= 1  # the one-pass reciprocal may round a tie the other way
    assert shared.quantize(big)[0] is q                                     # query, key, value: one pass
    storage = q.untyped_storage().data_ptr()
    q2, _, _ = shared.quantize(small)
    assert q2.untyped_storage().data_ptr() == storage and (q2.int() - expected(small)[0].int()).abs().max() <= 1
    q3, _, _ = shared.quantize(bigger)
    assert q3.shape == (40, 8) and (q3.int() - expected(bigger)[0].int()).abs().max() <= 1


def test_the_int8_weight_levels_are_part_of_the_store_key_and_the_resume_record(runner, tiny_model_dir, corpus,
                                                                                 tmp_path, fake_cpu):
    """The same --quantize int8 gives other vectors with +-63 weights (no VNNI) than with +-127: a window
    store keeps them apart and --resume refuses to finish one CPU's run on the other."""
    from pipeline.cache.store_keys import pool_key
    from pipeline.model.int8 import quantize_label

    labels = {}
    for text in (AVX2, AMX):
        fake_cpu(text)
        labels[text] = quantize_label("int8")
    assert labels == {AVX2: "int8-w63", AMX: "int8-w127"} and quantize_label("none") == "none"
    assert pool_key("a" * 64, "float32", labels[AVX2], "p") != pool_key("a" * 64, "float32", labels[AMX], "p")
    out = tmp_path / "parts"
    args = ["extract", corpus, "--model", tiny_model_dir, "--device", "cpu", "--dtype", "float32", "--quantize",
            "int8", "-o", f"{out}/", "--no-progress", "--block-rows", "2"]
    fake_cpu(AVX2)
    assert invoke(runner, args).exit_code == 0
    result = invoke(runner, [*args, "--resume"])
    assert result.exit_code == 0 and "already complete" in result.output
    fake_cpu(AMX)
    result = invoke(runner, [*args, "--resume"])
    assert result.exit_code == 2
    assert ("the int8 weight levels (this CPU's int8 kernel) differ from the run that wrote "
            f"{out} (int8-w63 then, int8-w127 now)") in result.output
