"""Options are declared once, grouped by config section (issue 16): the three commands compose the same
groups, --help shows the dataclass defaults, and stats / probe accept extract's input and window options
with the same meaning."""
from __future__ import annotations

import dataclasses

import click
import pytest
from conftest import invoke, words

import cli
from pipeline.options.config import EncodeConfig, PoolConfig, RayConfig, ReadConfig, SegmentConfig, WriteConfig

INPUT_AND_WINDOW = {"text_col", "id_col", "keep_cols", "format", "delimiter", "with_source", "encoding",
                    "on_bad_lines", "block_rows", "config_file", "strategy", "max_length", "head_tokens",
                    "tail_tokens", "overlap", "chunk_tokens", "max_tokens_per_doc"}


def params(command: click.Command) -> dict[str, click.Parameter]:
    return {p.name: p for p in command.params}


def test_the_three_commands_compose_the_same_option_groups():
    extract, stats, probe = (params(cli.main.commands[n]) for n in ("extract", "stats", "probe"))
    # stats takes the whole extract command line, plus its own two options
    assert set(stats) - set(extract) == {"plot", "windows_per_second"}
    assert set(extract) <= set(stats)
    # probe: every input and window option, the model and the batch options, plus its own
    assert INPUT_AND_WINDOW <= set(probe)
    assert set(probe) - set(extract) == {"label_col", "folds", "seed", "plot", "sample", "out"}
    assert set(probe) & set(extract) == {"inputs"} | INPUT_AND_WINDOW | {
        "model", "device", "dtype", "quantize", "threads", "allow_pickle", "folder_settings", "prompt_name", "batch_size",
        "max_batch_tokens", "block_tokens", "progress", "cache"}
    # one declaration: each shared option is the same object, with the same flags, type and help
    for name in set(stats) & set(extract) - {"inputs"}:
        assert same(stats[name], extract[name]), name
    for name in set(probe) & set(extract) - {"inputs"}:
        assert same(probe[name], extract[name]), name


def same(a: click.Parameter, b: click.Parameter) -> bool:
    """Same flags, type, default, help and flag/multiple kind: one declaration applied twice."""
    return (a.opts, a.secondary_opts, repr(a.type), a.default, a.help, a.is_flag, a.multiple) == \
        (b.opts, b.secondary_opts, repr(b.type), b.default, b.help, b.is_flag, b.multiple)


@pytest.mark.parametrize("section, name, flag", [
    (ReadConfig, "text_col", "--text-col"), (ReadConfig, "encoding", "--encoding"),
    (ReadConfig, "block_rows", "--block-rows"), (SegmentConfig, "overlap", "--overlap"),
    (EncodeConfig, "batch_size", "--batch-size"), (PoolConfig, "aggregate", "--aggregate"),
    (WriteConfig, "out_dtype", "--out-dtype"), (WriteConfig, "output", "--output"), (RayConfig, "workers", "--workers")])
def test_help_defaults_are_the_dataclass_fields(section, name, flag):
    field = next(f for f in dataclasses.fields(section) if f.name == name)
    option = params(cli.main.commands["extract"])[name]
    assert flag in option.opts and option.default is None
    assert option.help.endswith(f"  [default: {field.default}]")   # workers: 1, not True's "on"


def test_probe_reads_a_semicolon_corpus(runner, tiny_model_dir, tmp_path):
    rows = [f"{words(3 + i % 5, i)};{'ab'[i % 2]}" for i in range(12)]
    src = tmp_path / "c.csv"
    src.write_text("text;L\n" + "\n".join(rows) + "\n")
    result = invoke(runner, ["probe", src, "--delimiter", ";", "--label-col", "L", "--model", tiny_model_dir,
                             "--max-length", 16, "--overlap", 4, "--folds", 2, "--on-bad-lines", "error",
                             "--max-tokens-per-doc", 40])
    assert result.exit_code == 0, result.output
    assert "12 documents (stratified sample)" in result.output
    # without --delimiter the one column 'text;L' has no label column: the option is what made it work
    plain = invoke(runner, ["probe", src, "--label-col", "L", "--model", tiny_model_dir, "--max-length", 16,
                            "--overlap", 4, "--folds", 2])
    assert plain.exit_code == 2


def test_stats_accepts_the_whole_extract_command_line(runner, tiny_model_dir, tmp_path):
    src = tmp_path / "c.csv"
    src.write_text("doc,text,label\n" + "\n".join(f"d{i},{words(5 + 7 * i, i)},x" for i in range(4)) + "\n")
    line = [src, "--id-col", "doc", "--keep-col", "label", "--model", tiny_model_dir, "--max-length", 16,
            "--feature", "chunk:mean", "--feature", "head:cls", "--overlap", 4, "--batch-size", 8, "--normalize",
            "--out-dtype", "float16", "-o", tmp_path / "out.parquet", "--no-progress", "--block-rows", 2]
    extract = invoke(runner, ["extract", *line])
    assert extract.exit_code == 0, extract.output
    stats = invoke(runner, ["stats", *line, "--windows-per-second", 10])
    assert stats.exit_code == 0, stats.output
    warnings = [x for x in stats.output.splitlines() if x.startswith("Warning: ")]
    why = "has no effect: stats counts tokens and windows and writes no vectors"
    assert warnings == [f"Warning: {x} {why}" for x in (
        "--id-col doc", "--keep-col label", "--normalize", "--out-dtype float16", f"--output {tmp_path / 'out.parquet'}", "--no-progress")]
    assert "tokens       total 62;" in stats.output   # 5 + 12 + 19 + 26 tokens
    assert not (tmp_path / "stats.parquet").exists()
