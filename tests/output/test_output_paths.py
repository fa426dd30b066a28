"""Output paths: ``~`` expanded wherever a path enters (case B50), and what --overwrite may replace (case B51)."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pandas as pd
import pytest
from conftest import CASES, invoke, words, write_csv

from pipeline.options.config import PipelineConfig
from pipeline.errors import ConfigError
from pipeline.options.paths import expand_user


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh HOME, and a working folder elsewhere in which no '~' folder may appear."""
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("LONGBERT_CACHE", raising=False)
    monkeypatch.chdir(work)
    yield home
    assert not (work / "~").exists()


def test_expand_user(home, monkeypatch):
    assert expand_user("~/x/", "--output") == f"{home}/x/"
    assert expand_user("~", "--cache") == str(home)
    assert expand_user("out/~/x.parquet", "--output") == "out/~/x.parquet"   # only a leading ~
    assert expand_user("~draft.parquet", "--output") == "~draft.parquet"      # a file name, no user of that name
    with pytest.raises(ConfigError, match=r"--output '~nobody_here_x/f.parquet': ~nobody_here_x cannot be "
                                          r"expanded \(there is no user 'nobody_here_x'\); write the full path"):
        expand_user("~nobody_here_x/f.parquet", "--output")
    monkeypatch.delenv("HOME")
    monkeypatch.setattr("os.path.expanduser", lambda p: p)  # no HOME and no password entry either
    with pytest.raises(ConfigError, match=r"--output '~/f.parquet': ~ cannot be expanded \(HOME is not set\)"):
        expand_user("~/f.parquet", "--output")


def test_every_path_option_is_expanded_in_the_config(home, monkeypatch):
    monkeypatch.setenv("LONGBERT_CACHE", "~/env-cache")
    from pipeline.options.paths import default_cache

    cfg = PipelineConfig.from_options(config_file=str(CASES / "B50.yaml"), inputs=("~/in.csv", "~/docs/*.txt"),
                                      model="~/models/m", cache="~/c")
    assert cfg.write.output == f"{home}/lb_B50/features.parquet"
    assert cfg.read.inputs == (f"{home}/in.csv", f"{home}/docs/*.txt")
    assert cfg.model.model == f"{home}/models/m" and cfg.write.cache == f"{home}/c"
    assert PipelineConfig.from_options(output="~/x/").write.is_directory
    assert default_cache(None) == f"{home}/env-cache"
    shutil.copy(CASES / "B50.yaml", home / "b50.yaml")
    assert PipelineConfig.from_options(config_file="~/b50.yaml").write.output == cfg.write.output


def test_tilde_in_config_quoted_option_and_environment(runner, tiny_model_dir, home, monkeypatch):
    result = invoke(runner, ["extract", CASES / "B50.csv", "--config", CASES / "B50.yaml", "--model", tiny_model_dir])
    assert result.exit_code == 0, result.output  # the case itself (its words are unknown to the tiny model)
    assert pd.read_parquet(home / "lb_B50" / "features.parquet")["id"].tolist() == ["1", "2"]
    (home / "lb_B50" / "features.parquet").unlink()
    src = write_csv(home / "in.csv", [{"id": "1", "text": words(5)}, {"id": "2", "text": words(9, 4)}])
    shutil.copytree(tiny_model_dir, home / "models" / "tiny")
    plain = home / "plain.parquet"
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "-o", plain])
    assert result.exit_code == 0, result.output
    expected = pd.read_parquet(plain)

    # output: ~/lb_B50/features.parquet in a config file; --model '~/...' quoted
    result = invoke(runner, ["extract", src, "--config", CASES / "B50.yaml", "--model", "~/models/tiny"])
    assert result.exit_code == 0, result.output
    got = pd.read_parquet(home / "lb_B50" / "features.parquet")
    assert got["id"].tolist() == expected["id"].tolist() == ["1", "2"] and got["error"].isna().all()
    assert [list(v) for v in got["features"]] == [list(v) for v in expected["features"]]

    # a quoted -o '~/x/' and --cache '~/c'; then $LONGBERT_CACHE='~/env'
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "-o", "~/x/", "--cache", "~/c"])
    assert result.exit_code == 0, result.output
    assert (home / "x" / "_manifest.parquet").is_file() and (home / "c" / "windows.sqlite3").is_file()
    monkeypatch.setenv("LONGBERT_CACHE", "~/env")
    result = invoke(runner, ["extract", src, "--model", tiny_model_dir, "-o", "~/y.parquet"])
    assert result.exit_code == 0, result.output
    assert (home / "y.parquet").is_file() and (home / "env" / "windows.sqlite3").is_file()
    assert [list(v) for v in pd.read_parquet(home / "y.parquet")["features"]] == \
        [list(v) for v in expected["features"]]


def test_unexpandable_home_is_exit_2_before_anything(tmp_path, tiny_model_dir):
    """In a real process without HOME (expanduser then falls back to the password file, so also give a
    user that does not exist): exit 2 naming the option, no '~' folder, no traceback."""
    cmd = [sys.executable, "-m", "cli", "extract", str(CASES / "B50.csv"), "--model", str(tiny_model_dir),
           "-o", "~nobody_here_x/out.parquet"]
    root = CASES.parent.parent
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)})
    assert done.returncode == 2, done.stderr
    assert "Error: --output '~nobody_here_x/out.parquet': ~nobody_here_x cannot be expanded" in done.stderr
    assert "Traceback" not in done.stderr and not list(tmp_path.iterdir())


def _make_b51(folder) -> object:
    subprocess.run([sys.executable, str(CASES / "B51.make_folder.py"), str(folder)], check=True, capture_output=True)
    return folder / "B51_shared"


@pytest.fixture
def no_model_load(monkeypatch):
    """Fails the test if a model's weights load (pipeline.model.encode.load_model)."""
    import pipeline.model.encode as encode_mod

    def refuse(*args, **kwargs):
        raise AssertionError("the model loaded")
    monkeypatch.setattr(encode_mod, "load_model", refuse)


@pytest.mark.parametrize("flags", [["--overwrite"], [], ["--resume"]])
def test_overwrite_never_writes_into_a_users_folder(runner, tiny_model_dir, tmp_path, no_model_load, flags):
    shared = _make_b51(tmp_path)
    before = {p.name: p.read_bytes() for p in shared.iterdir()}
    result = invoke(runner, ["extract", CASES / "B51.csv", "--model", tiny_model_dir, "-o", f"{shared}/", *flags])
    assert result.exit_code == 2, result.output
    assert (f"Error: --output '{shared}' is a non-empty directory that holds no longbert run (README.txt, "
            "labels.parquet); longbert writes only into an empty directory or one of its own runs (--overwrite "
            "replaces only a longbert output): pick an empty or new directory, or move those files out") in result.output
    assert {p.name: p.read_bytes() for p in shared.iterdir()} == before
    assert pd.read_parquet(shared / "labels.parquet")["label"].tolist() == ["flood", "drought"]


def test_overwrite_replaces_a_run_folder_only_while_it_holds_nothing_else(runner, tiny_model_dir, tmp_path):
    src = write_csv(tmp_path / "in.csv", [{"id": "a", "text": words(5)}, {"id": "b", "text": words(8, 2)}])
    out = tmp_path / "parts"
    args = ["extract", src, "--model", tiny_model_dir, "-o", f"{out}/", "--block-rows", "1"]
    assert invoke(runner, args).exit_code == 0
    first = pd.read_parquet(out)
    assert invoke(runner, [*args, "--overwrite"]).exit_code == 0   # its own run: replaced
    pd.testing.assert_frame_equal(pd.read_parquet(out), first)
    (out / "notes.txt").write_text("mine\n")
    (out / "extra").mkdir()
    for flags in (["--overwrite"], ["--resume"], []):
        result = invoke(runner, [*args, *flags])
        assert result.exit_code == 2, result.output
        assert (f"Error: --output '{out}' also holds files that are not part of its longbert run (extra/, "
                "notes.txt); longbert writes only into an empty directory") in result.output
    assert (out / "notes.txt").read_text() == "mine\n"
    (out / "notes.txt").unlink()
    (out / "extra").rmdir()
    pd.testing.assert_frame_equal(pd.read_parquet(out), first)  # the run itself was left as it was
