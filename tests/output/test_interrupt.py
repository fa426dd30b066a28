"""Ctrl-C and SIGTERM end a run the same way: exit 130 and one line that says what the output keeps
(for a DIR/, how many parts) and how to go on."""
from __future__ import annotations

import math
import signal

import pandas as pd
import pytest
from conftest import invoke, words, write_csv
from test_resume import _listed_parts, cli, wait_for

import cli as cli_mod
import pipeline.output.write as write_mod
from pipeline.options.config import PipelineConfig
from pipeline.output.interrupted import interrupted_message


def test_ctrl_c_after_8_of_10_parts_counts_them_and_resume_finishes(runner, tiny_model_dir, tmp_path, monkeypatch):
    src = write_csv(tmp_path / "in.csv", [{"id": f"d{i}", "text": words(5 + i, i)} for i in range(10)])
    out = tmp_path / "parts"
    args = ["extract", src, "--model", tiny_model_dir, "--block-rows", "1", "--no-progress", "-o", f"{out}/"]
    real, calls = write_mod.PartsSink.write, []

    def interrupted_at_the_ninth(self, spec, table, last=True):
        calls.append(spec.index)
        if len(calls) == 9:
            raise KeyboardInterrupt
        return real(self, spec, table, last)

    monkeypatch.setattr(write_mod.PartsSink, "write", interrupted_at_the_ninth)
    result = invoke(runner, args)
    assert result.exit_code == 130, result.output
    assert result.output == (f"Interrupted: 8 of 10 parts of {out}/ were kept; run the same command with --resume "
                             "to do the other 2.\n")
    assert _listed_parts(out) == 8
    monkeypatch.setattr(write_mod.PartsSink, "write", real)
    result = invoke(runner, [*args, "--resume"])
    assert result.exit_code == 0, result.output
    assert pd.read_parquet(out)["id"].tolist() == [f"d{i}" for i in range(10)]


def test_interrupt_messages_for_each_output(tmp_path):
    file_cfg = PipelineConfig.from_options(output=str(tmp_path / "f.parquet"))
    assert interrupted_message(file_cfg) == (
        f"Interrupted: no output was written ({tmp_path / 'f.parquet'} is moved into place only when the run "
        "completes; a file already there is left as it was); run the command again.")
    dir_cfg = PipelineConfig.from_options(output=f"{tmp_path / 'parts'}/")
    assert interrupted_message(dir_cfg) == (f"Interrupted: no part of {tmp_path / 'parts'}/ was finished; run the "
                                            "command again.")
    assert interrupted_message(None) == "Interrupted before the run started: nothing was written."


def test_sigterm_handler_raises_keyboard_interrupt():
    with pytest.raises(KeyboardInterrupt):
        cli_mod._interrupt(signal.SIGTERM, None)


def test_sigterm_ends_a_dir_run_as_ctrl_c_does(tmp_path):
    """A real process (the default model) sent SIGTERM after two parts: exit 130, not 143, and the parts
    the manifest lists are counted in the message."""
    rows = 400
    src = write_csv(tmp_path / "in.csv", [{"text": words(200, i)} for i in range(rows)])
    out = tmp_path / "parts"
    args = [src, "-o", f"{out}/", "--block-rows", "4", "--strategy", "chunk", "--no-progress"]
    proc = cli(*args)
    assert wait_for(lambda: _listed_parts(out) >= 2, proc), proc.stderr.read()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=300) == 130
    kept, total = _listed_parts(out), math.ceil(rows / 4)
    assert 2 <= kept < total
    assert proc.stderr.read().splitlines()[-1] == (
        f"Interrupted: {kept} of {total} parts of {out}/ were kept; run the same command with --resume to do the "
        f"other {total - kept}.")
    assert not list(tmp_path.glob(".parts.longbert-lock"))     # the lock was released
