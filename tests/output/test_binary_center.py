"""--out-dtype binary's centre: taken from an earlier output (--binary-center), so that two files' bits
compare, and small inputs said plainly: one document keeps the signs of x itself (never all zeros), a few
documents are named in the summary. Bits are checked against float32 vectors of the same texts."""
from __future__ import annotations

import json
from pathlib import Path

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


# ---------------------------------------------------------------- a centre must be of this run's features


@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
    """(bert_tiny, bert_other): the handed cases' two tiny BERTs of one width (hidden 32), one tokenizer, two
    seeds (tests/cases/tiny_bert.make_model.py, B109.make_model.py)."""
    from conftest import run_case_script

    folder = tmp_path_factory.mktemp("b109")
    run_case_script("tiny_bert.make_model.py", folder)
    run_case_script("B109.make_model.py", folder)
    return folder / "bert_tiny", folder / "bert_other"


def _meta(path) -> dict:
    return json.loads(pq.read_schema(path).metadata[b"longbert"])


FIX = ("its bits would not compare with this run's; pass the binary output of a run with the same model and "
       "features (--model, --feature or --strategy, --pooling, --layers, --aggregate, --level), or drop "
       "--binary-center to take this run's own centre")
CORPUS = [words(10 + 3 * i, 7 * i) for i in range(6)]


@pytest.mark.parametrize("corpus_args, query_args, difference", [
    ((), (), "model 'bert_other' (sha256 {other}) (this run: 'bert_tiny' (sha256 {tiny}))"),
    (("--pooling", "cls"), (), "features: pooling 'cls' (this run: 'mean')"),
    (("--layers", "-2"), (), "features: layers [1] (this run: [2])"),
    (("--layers", "-1,-2"), ("--layers", "-1,-2", "--layer-agg", "sum"),
     "features: layer_agg 'mean' (this run: 'sum')"),
    (("--aggregate", "max"), (), "features: aggregate 'max' (this run: 'mean')"),
    ((), ("--level", "window"), "level 'document' (this run: 'window'); features: aggregate 'mean' (this run: None)"),
    (("--normalize",), (), "normalize True (this run: False)"),
])
def test_a_centre_of_another_model_or_other_features_is_refused(tmp_path, two_models, corpus_args, query_args,
                                                                difference):
    """B109: an output of another model of the same width, or of another pooling, layer, layer_agg, aggregate,
    level or --normalize: exit 2 naming the difference, before the model loads; nothing written."""
    tiny, other = two_models
    model = other if "bert_other" in difference else tiny
    _, corpus = extract_cli(tmp_path, CORPUS, *COMMON, *corpus_args, "--out-dtype", "binary", model=model,
                            name="c.parquet")
    _, floats = extract_cli(tmp_path, CORPUS[:1], *COMMON, model=tiny, name="f.parquet")
    sha = {"tiny": _meta(floats)["model_sha256"][:12], "other": _meta(corpus)["model_sha256"][:12]}
    result, out = extract_cli(tmp_path, [words(11, 4)], *COMMON, *query_args, "--out-dtype", "binary",
                              "--binary-center", str(corpus), "--progress", model=tiny, name="q.parquet", ok=False)
    assert result.exit_code == 2 and not out.exists()
    assert result.output == (f"Error: --binary-center {str(corpus)!r} holds the centre of other vectors than this "
                             f"run's: {difference.format(**sha)}; {FIX}\n")   # nothing before: no "loading model"


def test_a_centre_of_another_strategy_is_refused(tmp_path, tiny_model_dir):
    _, corpus = extract_cli(tmp_path, CORPUS, *COMMON, "--out-dtype", "binary", model=tiny_model_dir,
                            name="c.parquet")
    result, _ = extract_cli(tmp_path, [words(11, 4)], "--max-length", "16", "--strategy", "head", "--out-dtype",
                            "binary", "--binary-center", str(corpus), model=tiny_model_dir, name="q.parquet", ok=False)
    chunk = {"name": "chunk", "max_length": 16, "content_tokens": 14, "max_tokens_per_doc": None}
    assert result.exit_code == 2 and f"features: strategy {chunk!r} (this run: {{'name': 'head'," in result.output


def test_the_same_features_named_another_way_are_taken(tmp_path, tiny_model_dir):
    """Layer 2 of a 2-layer model is layer -1, and the float dtype rounds the same features: the centre is
    taken, and the query's bits are x > that centre (numpy on a float32 run of the query)."""
    _, corpus = extract_cli(tmp_path, CORPUS, *COMMON, "--layers", "2", "--out-dtype", "binary",
                            "--dtype", "bfloat16", model=tiny_model_dir, name="c.parquet")
    center = np.array(_meta(corpus)["compact"]["columns"][0]["center"], np.float32)
    q = _floats(tmp_path, tiny_model_dir, [words(11, 4), words(30, 2)], "fq.parquet")
    _, out = extract_cli(tmp_path, [words(11, 4), words(30, 2)], *COMMON, "--out-dtype", "binary", "--binary-center",
                         str(corpus), model=tiny_model_dir, name="q.parquet")
    np.testing.assert_array_equal(_bits(out, q.shape[1]), q > center)


def _nan_centre(tmp_path, model) -> str:
    """B110: a binary output whose stored centre holds a NaN at dimension 0 (tests/cases/B110.make_nan_center.py)."""
    import runpy
    import sys

    _, corpus = extract_cli(tmp_path, CORPUS, *COMMON, "--out-dtype", "binary", model=model, name="c.parquet")
    nan = tmp_path / "nan.parquet"
    argv, sys.argv = sys.argv, ["B110.make_nan_center.py", str(corpus), str(nan)]
    try:
        runpy.run_path(str(Path(__file__).resolve().parents[1] / "cases" / "B110.make_nan_center.py"))
    finally:
        sys.argv = argv
    assert np.isnan(_meta(nan)["compact"]["columns"][0]["center"][0])
    return str(nan)


def test_a_centre_holding_nan_is_refused_naming_the_file_and_the_flag(tmp_path, tiny_model_dir):
    nan = _nan_centre(tmp_path, tiny_model_dir)
    result, out = extract_cli(tmp_path, [words(11, 4)], *COMMON, "--out-dtype", "binary", "--binary-center", nan,
                              "--progress", model=tiny_model_dir, name="q.parquet", ok=False)
    assert result.exit_code == 2 and not out.exists()
    assert result.output == (f"Error: --binary-center {nan!r}: the centre of column 'features' in its metadata holds "
                             "NaN at dimension 0 (of 32); the file was damaged or edited after longbert wrote it: pass "
                             "a binary output as `longbert extract` wrote it, or drop --binary-center to take this "
                             "run's own centre\n")


def test_python_centres_are_checked_in_python_words(tmp_path, two_models):
    """Pipeline.from_options(binary_center=...): another model's output, a NaN centre in a file and in an
    array are refused at once, naming the argument; the right file is taken."""
    import longbert
    from pipeline.errors import ConfigError

    tiny, other = two_models
    opts = dict(model=str(tiny), strategy="chunk", max_length=16, out_dtype="binary")
    _, theirs = extract_cli(tmp_path, CORPUS, *COMMON, "--out-dtype", "binary", model=other, name="o.parquet")
    with pytest.raises(ConfigError) as err:
        longbert.Pipeline.from_options(**opts, binary_center=theirs)
    assert str(err.value).startswith(f"binary_center={str(theirs)!r} holds the centre of other vectors than this "
                                     "run's: model 'bert_other' (sha256 ")
    assert str(err.value).endswith("(model, feature or strategy, pooling, layers, aggregate, level), or drop "
                                   "binary_center to take this run's own centre")
    nan = _nan_centre(tmp_path, tiny)
    with pytest.raises(ConfigError, match=r"^binary_center='.*nan\.parquet': the centre of column 'features' in its "
                                          r"metadata holds NaN at dimension 0 \(of 32\)"):
        longbert.Pipeline.from_options(**opts, binary_center=nan)
    centre = np.zeros(32, np.float32)
    centre[3] = np.nan
    with pytest.raises(ConfigError) as err:
        longbert.Pipeline.from_options(**opts, binary_center=centre)
    assert str(err.value) == ("binary_center holds NaN at dimension 3 (of 32); give a centre of finite numbers, "
                              "e.g. X.mean(axis=0) of a corpus's float32 vectors")
    with pytest.raises(ConfigError, match=r"^binary_center\['features'\] holds inf at dimension 0 \(of 32\)"):
        longbert.Pipeline.from_options(**opts, binary_center={"features": [np.inf] + [0.0] * 31})
    _, ours = extract_cli(tmp_path, CORPUS, *COMMON, "--out-dtype", "binary", model=tiny, name="t.parquet")
    assert longbert.Pipeline.from_options(**opts, binary_center=ours).cfg.write.binary_center_file == str(ours)
