"""No run writes over its inputs: an output, a DIR/, the window store or a --plot that is an input file
(through links and ..) or a folder holding one is exit 2 before anything is read (case B69)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import CASES, invoke, words, write_csv

from pipeline.errors import ConfigError


@pytest.fixture
def nothing_read(monkeypatch):
    """Fails the test if the inputs are scanned or a model's weights load."""
    import pipeline.engine.run as run_mod
    import pipeline.model.encode as encode_mod

    def refuse(*args, **kwargs):
        raise AssertionError("the inputs were read or the model loaded")
    monkeypatch.setattr(run_mod, "scan", refuse)
    monkeypatch.setattr(encode_mod, "load_model", refuse)


@pytest.fixture
def b69(tmp_path) -> Path:
    """The case's parquet corpus, copied into tmp_path/data, and its bytes."""
    (tmp_path / "data").mkdir()
    return Path(shutil.copy(CASES / "B69.parquet", tmp_path / "data" / "B69.parquet"))


def _listing(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("how", ["itself", "symlink", "dotdot"])
def test_output_naming_the_input_is_exit_2_and_the_input_is_untouched(runner, tiny_model_dir, tmp_path, b69,
                                                                          nothing_read, monkeypatch, how):
    monkeypatch.chdir(tmp_path)
    if how == "symlink":
        os.symlink(b69, tmp_path / "link.parquet")
    (tmp_path / "sub").mkdir()
    out = {"itself": "data/B69.parquet", "symlink": "link.parquet", "dotdot": "sub/../data/B69.parquet"}[how]
    before = _listing(tmp_path)
    result = invoke(runner, ["extract", "data/B69.parquet", "--model", tiny_model_dir, "-o", out, "--overwrite"])
    assert result.exit_code == 2, result.output
    through = f" (both are {b69})" if how == "symlink" else ""
    assert result.output == (f"Error: --output {out!r} is the input 'data/B69.parquet'{through}; longbert never "
                             "writes over an input, even when told to overwrite: write the features elsewhere, "
                             "e.g. -o data/B69.features.parquet\n")
    assert _listing(tmp_path) == before   # no lock file, no temporary file, the input's bytes as they were
    assert b69.read_bytes() == (CASES / "B69.parquet").read_bytes()


def test_dir_output_holding_the_input_is_exit_2(runner, tiny_model_dir, tmp_path, b69, nothing_read):
    before = _listing(tmp_path)
    for flags in ([], ["--overwrite"], ["--resume"]):
        result = invoke(runner, ["extract", b69, "--model", tiny_model_dir, "-o", f"{tmp_path / 'data'}/", *flags])
        assert result.exit_code == 2, result.output
        assert result.output == (f"Error: --output '{tmp_path / 'data'}' holds the input '{b69}'; longbert never "
                                 "writes into a folder that holds an input, even when told to overwrite: pass "
                                 "--output a new or empty folder that holds no input\n")
    # a folder of text documents given as the input, and the output DIR/ reached through a link to it
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text(words(5))
    os.symlink(docs, tmp_path / "docs_link")
    result = invoke(runner, ["extract", docs, "--model", tiny_model_dir, "-o", f"{tmp_path / 'docs_link'}/"])
    assert result.exit_code == 2, result.output
    assert (f"Error: --output '{tmp_path / 'docs_link'}' holds the input '{docs / 'a.txt'}' ({docs / 'a.txt'} "
            f"is inside {docs}); longbert never writes into a folder") in result.output
    assert _listing(tmp_path) == {**before, "docs": None, "docs/a.txt": words(5).encode(), "docs_link": None}


def test_glob_output_and_window_store_beside_the_inputs(runner, tiny_model_dir, tmp_path, nothing_read):
    """A glob that matches the output of a previous run, and a --cache folder that holds the corpus."""
    src = write_csv(tmp_path / "in.csv", [{"text": words(5)}])
    (tmp_path / "old.parquet").write_bytes(b"an earlier output")
    result = invoke(runner, ["extract", f"{tmp_path}/*.parquet", src, "--model", tiny_model_dir,
                             "-o", tmp_path / "old.parquet", "--overwrite"])
    assert result.exit_code == 2, result.output
    assert f"Error: --output '{tmp_path / 'old.parquet'}' is the input '{tmp_path / 'old.parquet'}';" in result.output
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "-o", tmp_path / "f.parquet",
                             "--cache", tmp_path])
    assert result.exit_code == 2, result.output
    assert result.output == (f"Error: --cache '{tmp_path}' holds the input '{src}'; longbert never writes into a "
                             "folder that holds an input, even when told to overwrite: pass --cache a folder of "
                             "its own\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv", "old.parquet"]


def test_plot_naming_an_input_is_exit_2(runner, tmp_path, b69):
    before = b69.read_bytes()
    result = invoke(runner, ["stats", b69, "--plot", b69])
    assert result.exit_code == 2, result.output
    assert result.output == (f"Error: --plot '{b69}' is the input '{b69}'; longbert never writes over an input, "
                             "even when told to overwrite: pass --plot another path\n")
    assert b69.read_bytes() == before


def test_pipeline_run_refuses_to_write_over_its_input(tiny_model_dir, tmp_path, b69, nothing_read):
    import longbert

    pipe = longbert.Pipeline.from_options(model=str(tiny_model_dir))
    with pytest.raises(ConfigError) as err:
        pipe.run(str(b69), str(tmp_path / "data" / ".." / "data" / "B69.parquet"), overwrite=True)
    assert str(err.value) == (f"output='{tmp_path}/data/../data/B69.parquet' is the input '{b69}'; longbert never "
                              "writes over an input, even when told to overwrite: write the features elsewhere, "
                              f"e.g. output='{tmp_path}/data/B69.features.parquet'")
    assert b69.read_bytes() == (CASES / "B69.parquet").read_bytes()


def test_probe_plot_and_store_naming_an_input_are_exit_2(runner, tiny_model_dir, tmp_path, b69, nothing_read):
    result = invoke(runner, ["probe", b69, "--label-col", "label", "--model", tiny_model_dir, "--plot", b69])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"Error: --plot '{b69}' is the input '{b69}'; longbert never writes over")
    result = invoke(runner, ["probe", b69, "--label-col", "label", "--model", tiny_model_dir,
                             "--cache", tmp_path / "data"])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"Error: --cache '{tmp_path / 'data'}' holds the input '{b69}'; longbert never")
    assert b69.read_bytes() == (CASES / "B69.parquet").read_bytes()
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["B69.parquet"]   # no store made there


def test_an_earlier_output_inside_a_folder_of_documents_is_not_an_input(runner, tiny_model_dir, tmp_path):
    """A folder input is its .txt and .md files: a features file beside them may be replaced."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text(words(5))
    args = ["extract", docs, "--model", tiny_model_dir, "--no-progress", "-o", docs / "features.parquet"]
    assert invoke(runner, args).exit_code == 0
    result = invoke(runner, [*args, "--overwrite"])
    assert result.exit_code == 0, result.output
