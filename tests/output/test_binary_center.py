"""--out-dtype binary's centre: taken from an earlier output (--binary-center), so that two files' bits
compare, and small inputs said plainly: one document keeps the signs of x itself (never all zeros), a few
documents are named in the summary. Bits are checked against float32 vectors of the same texts."""
from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import extract_cli, words

COMMON = ("--max-length", "16", "--strategy", "chunk")


def _floats(tmp_path, model, texts, name):
    _, out = extract_cli(tmp_path, texts, *COMMON, model=model, name=name)
    return np.array(pq.read_table(out).column("features").to_pylist(), dtype=np.float32)   # (n, D)


def _bits(path, dim) -> np.ndarray:
    packed = np.array(pq.read_table(path).column("features").to_pylist(), dtype=np.uint8)
    return np.unpackbits(packed, axis=1, count=dim).astype(bool)                           # (n, D)


def test_one_document_keeps_the_signs_of_x_and_says_so(tmp_path, tiny_model_dir):
    text = [words(12, 3)]
    x = _floats(tmp_path, tiny_model_dir, text, "f.parquet")
    result, out = extract_cli(tmp_path, text, *COMMON, "--out-dtype", "binary", model=tiny_model_dir, name="b.parquet")
    bits = _bits(out, x.shape[1])
    np.testing.assert_array_equal(bits, x > 0)
    assert 0 < bits.sum() < x.shape[1]
    assert "binary: one document has no centre of its own" in result.output and "--binary-center" in result.output


def test_a_few_documents_are_named_in_the_summary(tmp_path, tiny_model_dir):
    texts = [words(12, 3), words(9, 20)]
    x = _floats(tmp_path, tiny_model_dir, texts, "f.parquet")
    result, out = extract_cli(tmp_path, texts, *COMMON, "--out-dtype", "binary", model=tiny_model_dir, name="b.parquet")
    np.testing.assert_array_equal(_bits(out, x.shape[1]), x > x.astype(np.float64).mean(0).astype(np.float32))
    assert "binary: the centre is the mean of 2 documents (fewer than 64)" in result.output


@pytest.mark.parametrize("parts", [False, True])
def test_queries_take_the_corpus_centre(tmp_path, tiny_model_dir, parts):
    corpus = [words(10 + 3 * i, 7 * i) for i in range(5)]
    query = [words(11, 4)]
    center = _floats(tmp_path, tiny_model_dir, corpus, "fc.parquet").astype(np.float64).mean(0).astype(np.float32)
    q = _floats(tmp_path, tiny_model_dir, query, "fq.parquet")
    name = "corpus/" if parts else "corpus.parquet"
    _, corpus_out = extract_cli(tmp_path, corpus, *COMMON, "--out-dtype", "binary", model=tiny_model_dir, name=name)
    result, out = extract_cli(tmp_path, query, *COMMON, "--out-dtype", "binary", "--binary-center",
                              str(corpus_out), model=tiny_model_dir, name="q.parquet")
    np.testing.assert_array_equal(_bits(out, q.shape[1]), q > center)
    assert "binary:" not in result.output   # the centre is the corpus's: no note about this run's documents


def test_binary_center_refusals(tmp_path, tiny_model_dir):
    text = [words(12, 3)]
    _, floats = extract_cli(tmp_path, text, *COMMON, model=tiny_model_dir, name="f.parquet")
    result, _ = extract_cli(tmp_path, text, *COMMON, "--binary-center", str(floats), model=tiny_model_dir,
                            name="x.parquet", ok=False)
    assert result.exit_code == 2
    assert f"--binary-center {str(floats)!r} gives the centre of binary vectors; add --out-dtype binary" in result.output
    result, _ = extract_cli(tmp_path, text, *COMMON, "--out-dtype", "binary", "--binary-center", str(floats),
                            model=tiny_model_dir, name="y.parquet", ok=False)
    assert result.exit_code == 2
    assert f"--binary-center {str(floats)!r} holds no --out-dtype binary output" in result.output
    _, tokens = extract_cli(tmp_path, text, *COMMON, "--out-dtype", "binary", "--level", "token",
                            model=tiny_model_dir, name="t.parquet")
    result, _ = extract_cli(tmp_path, text, "--max-length", "16", "--out-dtype", "binary", "--feature", "head:cls",
                            "--feature", "chunk:mean", "--binary-center", str(tokens),
                            model=tiny_model_dir, name="z.parquet", ok=False)
    assert result.exit_code == 2 and "pass an output of the same features and model" in result.output
    result, _ = extract_cli(tmp_path, text, *COMMON, "--out-dtype", "binary", "--binary-center",
                            str(tmp_path / "missing.parquet"), model=tiny_model_dir, name="m.parquet", ok=False)
    assert result.exit_code == 2 and "cannot be read as a longbert output" in result.output
    assert "Traceback" not in result.output


def test_token_level_rows_without_any_token_vector_keep_the_signs_of_x(tmp_path, tiny_model_dir):
    """Two blank texts give the centre no per-token vector: token_features keeps the signs of x, no error."""
    result, out = extract_cli(tmp_path, [" ", " "], *COMMON, "--out-dtype", "binary", "--level", "token",
                              model=tiny_model_dir, name="t.parquet")
    assert pq.read_table(out).column("error").to_pylist() == ["empty text", "empty text"]


def test_a_given_centre_must_be_the_one_of_the_run_a_resume_finishes(tmp_path, tiny_model_dir, monkeypatch):
    import longbert
    from conftest import run_cut_at_part, write_csv
    from pipeline.errors import ConfigError

    src = write_csv(tmp_path / "in.csv", [{"id": f"d{i}", "text": words(9 + 3 * i, i)} for i in range(6)])
    common = dict(model=str(tiny_model_dir), strategy="chunk", max_length=16, out_dtype="binary")
    out = tmp_path / "parts"
    run_cut_at_part(monkeypatch, 2, longbert.Pipeline.from_options(**common), src, out, block_rows=2)
    other = longbert.Pipeline.from_options(**common, binary_center=np.full(32, 0.5, np.float32))
    with pytest.raises(ConfigError, match="binary_center is not the centre of the run being resumed"):
        other.run(str(src), f"{out}/", resume=True, block_rows=2)
    longbert.Pipeline.from_options(**common).run(str(src), f"{out}/", resume=True, block_rows=2)   # its own: goes on
    assert pq.read_table(out).num_rows == 6


def test_the_token_centre_is_the_mean_of_the_first_documents_tokens_found_in_pieces(tmp_path, tiny_model_dir,
                                                                                    monkeypatch):
    """Calibration runs the model in pieces of --block-tokens, as a run does: 12 documents of 60-170 tokens in
    windows of 16 make several pieces of 512 window tokens, and the token centre equals the float64 mean
    of every token vector of a float32 run of the same texts; no piece holds more than 512 window tokens."""
    import pipeline.engine.block_loop as block_loop   # the one block loop, which calibration runs too
    from pipeline.pieces import window_tokens

    texts = [words(60 + 10 * i, i) for i in range(12)]
    args = (*COMMON, "--level", "token", "--block-tokens", "512")
    _, floats = extract_cli(tmp_path, texts, *args, model=tiny_model_dir, name="f.parquet")
    tokens = np.concatenate([np.array(t, dtype=np.float32) for t in
                             pq.read_table(floats).column("token_features").to_pylist()])   # (all tokens, D)
    held = []
    real = block_loop.pieces

    def watched(batch, budget):
        for piece in real(batch, budget):
            held.append(int(window_tokens(piece).sum()))
            yield piece

    monkeypatch.setattr(block_loop, "pieces", watched)
    _, out = extract_cli(tmp_path, texts, *args, "--out-dtype", "binary", model=tiny_model_dir, name="b.parquet")
    meta = json.loads(pq.read_schema(out).metadata[b"longbert"])
    center = next(c["center"] for c in meta["compact"]["columns"] if c["column"] == "token_features")
    np.testing.assert_allclose(center, tokens.astype(np.float64).mean(0), rtol=1e-6, atol=1e-7)
    assert len(held) > 2 and max(held) <= 512
