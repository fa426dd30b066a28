"""No document lost: every bad-input kind of ../shared/cases (and its relatives), with the exact result."""
from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from conftest import CASES, invoke, words, write_csv

from pipeline.options.config import PipelineConfig
from pipeline.read import read_blocks, scan


def run_ok(runner, model, *args):
    result = invoke(runner, ["extract", *args, "--model", model, "--no-progress"])
    assert result.exit_code == 0, result.output
    return result


def errors(path) -> list:
    """The error column as Python values (None, not NaN)."""
    return pq.read_table(path).column("error").to_pylist()


def case(tmp_path, name: str):
    """Copy a shared case next to the test (the shared folder is read-only)."""
    if not (CASES / name).exists():
        pytest.skip(f"{CASES / name} is not here")
    return shutil.copy(CASES / name, tmp_path / name)


def test_numeric_looking_texts_and_ids_stay_text(runner, tiny_model_dir, tmp_path):
    src = case(tmp_path, "B10.csv")  # "42", "", "3.50", "007"
    out = tmp_path / "o.parquet"
    run_ok(runner, tiny_model_dir, src, "--id-col", "id", "-o", out)
    df = pd.read_parquet(out)
    assert df["id"].tolist() == ["1", "2", "3", "4"]
    # the tiny vocabulary has no digits: each numeric text is all [UNK] ("3.50" is 3, "." and 50)
    assert df["error"].tolist() == ["only unknown tokens", "empty text", "only unknown tokens", "only unknown tokens"]
    assert df["n_unknown"].tolist() == df["n_tokens"].tolist() == [1, 0, 3, 1]
    assert df["features"].isna().tolist() == [True, True, True, True]
    cfg = PipelineConfig.from_options(inputs=(str(src),), id_col="id")
    (block,) = read_blocks(scan(cfg.read))
    assert block.column("text").to_pylist() == ["42", "", "3.50", "007"]


@pytest.mark.parametrize("text", ["NA", "null", "None", "nan", "TRUE", "1e5", "-0", "2024-01-01", "#N/A"])
def test_missing_value_words_are_text(tmp_path, text):
    src = write_csv(tmp_path / "in.csv", [{"id": "000123", "text": text}])
    cfg = PipelineConfig.from_options(inputs=(str(src),), id_col="id")
    (block,) = read_blocks(scan(cfg.read))
    assert block.column("text").to_pylist() == [text] and block.column("id").to_pylist() == ["000123"]


def test_empty_and_whitespace_rows_are_kept_with_a_reason(runner, tiny_model_dir, tmp_path):
    src = case(tmp_path, "B12.csv")  # "", "   ", "\t", "\n\n", "ok text"
    out = tmp_path / "o.parquet"
    result = run_ok(runner, tiny_model_dir, src, "--id-col", "id", "-o", out)
    df = pd.read_parquet(out)
    assert df["id"].tolist() == ["1", "2", "3", "4", "5"]
    # "ok text": neither word is in the tiny vocabulary, so its 2 tokens are [UNK]
    assert errors(out) == ["empty text"] * 4 + ["only unknown tokens"]
    assert "5 documents" in result.output and "5 rows with errors" in result.output


def test_whitespace_only_line_in_single_column_file_is_a_row(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text('text\n""\n   \n\u200b\nok\n\n')  # the last empty line is no record
    cfg = PipelineConfig.from_options(inputs=(str(src),))
    (block,) = read_blocks(scan(cfg.read))
    assert block.column("text").to_pylist() == ["", "   ", "\u200b", "ok"]
    assert block.column("id").to_pylist() == [0, 1, 2, 3]


def test_control_and_zero_width_only_texts(runner, tiny_model_dir, tmp_path):
    src = write_csv(tmp_path / "in.csv", [{"text": "\x07\x01"}, {"text": "\u200b\u200d"}, {"text": "w1 \U0001F600 w2"}])
    out = tmp_path / "o.parquet"
    run_ok(runner, tiny_model_dir, src, "-o", out)
    df = pd.read_parquet(out)
    assert errors(out) == ["no tokens after normalisation", "no tokens after normalisation", None]
    assert df["n_tokens"][2] == 3  # w1, [UNK] for the emoji, w2


def test_stray_quote_is_an_error_with_file_and_line(runner, tiny_model_dir, tmp_path):
    src = case(tmp_path, "B14.csv")
    out = tmp_path / "o.parquet"
    result = invoke(runner, ["extract", src, "--id-col", "id", "-o", out, "--model", tiny_model_dir])
    assert result.exit_code == 2
    assert f"Error: {src}: line 5: a quoted field starts here and never ends (unbalanced \"); close the quote, " \
           "or pass --on-bad-lines skip to drop such lines" in result.output
    assert not out.exists()


def test_stray_quote_skipped_and_counted(runner, tiny_model_dir, tmp_path):
    src = case(tmp_path, "B14.csv")
    out = tmp_path / "o.parquet"
    result = run_ok(runner, tiny_model_dir, src, "--id-col", "id", "-o", out, "--on-bad-lines", "skip")
    df = pd.read_parquet(out)
    assert df["id"].tolist() == ["1", "2", "4", "5"]
    assert "1 bad lines skipped" in result.output
    cfg = PipelineConfig.from_options(inputs=(str(src),), id_col="id", on_bad_lines="skip")
    (block,) = read_blocks(scan(cfg.read))
    assert block.column("text").to_pylist()[:2] == ['He said "hi" and left', "multi\nline, with comma"]


def test_wrong_field_count_and_quote_in_unquoted_field(tmp_path, runner, tiny_model_dir):
    src = tmp_path / "in.csv"
    src.write_text('id,text\n1,a\n2,b,c\n3,"x"y"\n4,d\n')
    result = invoke(runner, ["extract", src, "--id-col", "id", "--model", tiny_model_dir])
    assert result.exit_code == 2 and "in.csv: line 3: expected 2 fields, saw 3; fix the line" in result.output
    cfg = PipelineConfig.from_options(inputs=(str(src),), id_col="id", on_bad_lines="skip")
    corpus = scan(cfg.read)
    (block,) = read_blocks(corpus)
    assert block.column("id").to_pylist() == ["1", "4"] and corpus.n_bad_lines == 2


def test_bom_and_windows_line_ends(tmp_path):
    src = case(tmp_path, "B16_bom.csv")
    cfg = PipelineConfig.from_options(inputs=(str(src),), id_col="id")
    (block,) = read_blocks(scan(cfg.read))
    assert block.column("id").to_pylist() == ["1"] and block.column("text").to_pylist() == ["café au lait"]


def test_crlf_inside_quoted_field_is_kept_as_written(tmp_path):
    src = tmp_path / "in.csv"
    src.write_bytes(b'id,text\r\n1,"a\r\nb"\r\n')
    cfg = PipelineConfig.from_options(inputs=(str(src),), id_col="id")
    (block,) = read_blocks(scan(cfg.read))
    assert block.column("text").to_pylist() == ["a\r\nb"]


def test_non_utf8_bytes_name_file_offset_and_fix(runner, tiny_model_dir, tmp_path):
    src = tmp_path / "latin.csv"
    src.write_bytes("id,text\n1,ok\n2,caf\xe9\n".encode("latin-1"))
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 2
    assert f"Error: {src}: byte offset 18 (line 3) is not valid utf-8 (bytes e9 0a); the bytes look like cp1252" \
        in result.output and "pass --encoding cp1252 if that is right" in result.output
    cfg = PipelineConfig.from_options(inputs=(str(src),), encoding="cp1252")   # the advice, followed
    (block,) = read_blocks(scan(cfg.read))
    assert block.column("text").to_pylist() == ["ok", "café"]


def test_field_larger_than_stdlib_csv_limit(tmp_path):
    big = "w1 " * 100_000   # 300 kB: over csv's default 128 kB field limit
    src = write_csv(tmp_path / "in.csv", [{"text": big}, {"text": "w2"}])
    cfg = PipelineConfig.from_options(inputs=(str(src),))
    (block,) = read_blocks(scan(cfg.read))
    assert block.column("text").to_pylist() == [big, "w2"]


def test_missing_column_lists_columns(runner, tiny_model_dir, tmp_path):
    src = write_csv(tmp_path / "in.csv", [{"body": "w1", "key": "1"}])
    result = invoke(runner, ["extract", src, "--id-col", "key", "--model", tiny_model_dir])
    assert result.exit_code == 2
    assert "column 'text' not found; columns are ['body', 'key']; pass --text-col with one of them" in result.output


def test_duplicate_ids_warn_and_keep_every_row(runner, tiny_model_dir, tmp_path):
    src = write_csv(tmp_path / "in.csv", [{"id": "a", "text": "w1"}, {"id": "a", "text": "w2"}, {"id": "b", "text": "w3"}])
    out = tmp_path / "o.parquet"
    result = run_ok(runner, tiny_model_dir, src, "--id-col", "id", "-o", out)
    assert pd.read_parquet(out)["id"].tolist() == ["a", "a", "b"]
    assert "warning: 1 duplicate ids (all rows kept)" in result.output


def test_many_small_files_and_globs(runner, tiny_model_dir, tmp_path):
    for i in range(12):
        write_csv(tmp_path / f"part{i:02d}.csv", [{"text": words(i + 1)}, {"text": words(2)}])
    out = tmp_path / "o.parquet"
    run_ok(runner, tiny_model_dir, str(tmp_path / "part*.csv"), "-o", out, "--block-rows", "5")
    df = pd.read_parquet(out)
    assert df["row"].tolist() == list(range(24))   # no id column in the inputs: row numbers, named row
    assert df["n_tokens"].tolist() == [x for i in range(12) for x in (i + 1, 2)]
    result = invoke(runner, ["extract", str(tmp_path / "nothing*.csv"), "--model", tiny_model_dir])
    assert result.exit_code == 2 and "matches no file" in result.output


def test_megabyte_documents_with_and_without_whitespace(runner, tiny_model_dir, tmp_path):
    spaced = words(300_000)            # ~1.5 MB, 300k tokens
    solid = "a" * 2_000_000            # one 2 MB "word": a single [UNK], so "only unknown tokens"
    src = write_csv(tmp_path / "in.csv", [{"text": spaced}, {"text": solid}, {"text": "w1"}])
    out = tmp_path / "o.parquet"
    run_ok(runner, tiny_model_dir, src, "-o", out, "--strategy", "chunk", "--max-tokens-per-doc", "5000")
    df = pd.read_parquet(out)
    # the spaced text is cut before tokenizing (pipeline.text.cut.first_tokens): its n_tokens counts the
    # part's tokens known to be the text's: 5000 * 8 + 256 characters at most, one token per "wN " word of 3-4
    assert 5000 < df["n_tokens"][0] <= (5000 * 8 + 256) // 3 and df["n_tokens"].tolist()[1:] == [1, 1]
    assert df["n_windows"].tolist() == [10, 0, 1]     # 5000 kept tokens / 510 per window
    assert df["error"].isna().tolist() == [True, False, True]
    assert df["error"][1] == "only unknown tokens" and df["n_unknown"].tolist() == [0, 1, 0]
    assert df["truncated"].tolist() == [True, True, False]   # the [UNK] row made no window


def test_existing_output_needs_overwrite(runner, tiny_model_dir, tmp_path):
    src = write_csv(tmp_path / "in.csv", [{"text": "w1"}])
    out = tmp_path / "o.parquet"
    out.write_bytes(b"previous")
    result = invoke(runner, ["extract", src, "-o", out, "--model", tiny_model_dir])
    assert result.exit_code == 2 and "exists; pass --overwrite to replace it" in result.output
    assert out.read_bytes() == b"previous"
    run_ok(runner, tiny_model_dir, src, "-o", out, "--overwrite")
    assert len(pd.read_parquet(out)) == 1


def test_strict_exits_1_and_leaves_no_output(runner, tiny_model_dir, tmp_path):
    src = write_csv(tmp_path / "in.csv", [{"id": "x", "text": "w1"}, {"id": "y", "text": " "}])
    out = tmp_path / "o.parquet"
    result = invoke(runner, ["extract", src, "--id-col", "id", "-o", out, "--model", tiny_model_dir, "--strict"])
    assert result.exit_code == 1
    assert f"Error: row with id 'y' ({src} line 3): empty text; --strict stops" in result.output
    assert list(tmp_path.iterdir()) == [src]


def test_yaml_config_cannot_run_code(runner, tmp_path):
    cfg = tmp_path / "evil.yaml"
    cfg.write_text("strategy: !!python/object/apply:os.system ['echo pwned > pwned.txt']\n")
    src = write_csv(tmp_path / "in.csv", [{"text": "w1"}])
    result = invoke(runner, ["extract", src, "--config", cfg])
    assert result.exit_code == 2 and "is not valid YAML" in result.output
    assert not (tmp_path / "pwned.txt").exists()


def test_pickle_only_checkpoint_needs_allow_pickle(runner, tiny_model_dir, tiny_bert, tmp_path):
    import torch
    model, tok = tiny_bert
    pickled = tmp_path / "pickled"
    model.config.save_pretrained(pickled)
    tok.save_pretrained(pickled)
    torch.save(model.state_dict(), pickled / "pytorch_model.bin")
    src = write_csv(tmp_path / "in.csv", [{"text": "w1"}])
    result = invoke(runner, ["extract", src, "--model", pickled, "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 2 and "has only pickle weights (no .safetensors)" in result.output
    assert not (tmp_path / "o.parquet").exists()
    result = invoke(runner, ["extract", src, "--model", pickled, "-o", tmp_path / "o.parquet", "--allow-pickle",
                             "--no-progress"])
    assert result.exit_code == 0, result.output


def test_missing_model_directory_says_pass_a_local_path(runner, tmp_path):
    src = write_csv(tmp_path / "in.csv", [{"text": "w1"}])
    result = invoke(runner, ["extract", src, "--model", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "is not a directory" in result.output


def test_half_precision_overflow_is_recomputed_in_float32(tiny_model_dir, tmp_path):
    """A float16 model whose activations overflow: the windows are recomputed with the float32 weights
    loaded again from the folder (not upcast from the rounded ones), so they equal the float32 run."""
    import shutil

    import torch
    from transformers import BertModel

    from pipeline.engine.compose import Pipeline
    from pipeline.read import block_from_texts
    folder = tmp_path / "overflowing"
    shutil.copytree(tiny_model_dir, folder)
    model = BertModel.from_pretrained(folder)
    with torch.no_grad():  # last-layer activations near 1e6: over float16's 65504 (weights up to 30000 fit)
        layer = model.encoder.layer[-1]
        layer.intermediate.dense.bias.fill_(10.0)
        layer.output.dense.weight.mul_(30000.0 / float(layer.output.dense.weight.abs().max()))
    model.save_pretrained(folder)
    ext = Pipeline.from_config(PipelineConfig.from_options(model=str(folder), dtype="float16", pooling="mean"))
    ref = Pipeline.from_config(PipelineConfig.from_options(model=str(folder), pooling="mean"))
    out = ext(block_from_texts(["w1 w2 w3", "w4"]))
    expected = ref(block_from_texts(["w1 w2 w3", "w4"]))
    feats = np.stack(out.column("features").to_pylist())
    assert np.isfinite(feats).all() and ext["encode"].encoder.stats.fp32_recomputed >= 1
    np.testing.assert_allclose(feats, np.stack(expected.column("features").to_pylist()), atol=1e-5)


def test_out_of_memory_splits_the_batch(tiny_model_dir, monkeypatch):
    import torch

    from pipeline.engine.compose import Pipeline
    from pipeline.read import block_from_texts
    ext = Pipeline.from_config(PipelineConfig.from_options(model=str(tiny_model_dir), batch_size=8))
    texts = [words(n) for n in (5, 9, 12, 3)]
    expected = np.stack(ext(block_from_texts(texts)).column("features").to_pylist())
    real = ext["encode"].encoder._forward

    def flaky(model, windows, batch, *args):
        if len(batch) > 1:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(model, windows, batch, *args)

    monkeypatch.setattr(ext["encode"].encoder, "_forward", flaky)
    got = np.stack(ext(block_from_texts(texts)).column("features").to_pylist())
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert ext["encode"].encoder.stats.oom_splits == 3
