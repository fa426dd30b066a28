"""The documentation cannot drift from the product: the site builds in strict mode with no network, the
CLI reference is today's --help (cog) and covers every command and option and names no other, every Python block of
docs/python.md runs on a small corpus, every `longbert ...` example names real commands and options,
the README stays short and no user-facing text speaks of internal names."""
from __future__ import annotations

import html
import re
import shlex
import socket
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from conftest import invoke, words, write_csv

from cli import main

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
USER_TEXT = [ROOT / "README.md", ROOT / "CHANGELOG.md", *PAGES]
COMMANDS = ("extract", "stats", "probe", "cache")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def options_of(command: click.Command) -> set[str]:
    """Every option string of a click command: '-o', '--output', '--progress', '--no-progress', '--help'..."""
    names = {"--help", "-h"}
    for param in command.params:
        if isinstance(param, click.Option):
            names.update(param.opts)
            names.update(param.secondary_opts)
    return names


def command_of(name: str) -> click.Command:
    return main.commands[name]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built by `mkdocs build --strict` in this process while every network connection fails."""
    pytest.importorskip("mkdocs")
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    def no_network(*args, **kwargs):
        raise OSError("the docs build tried to use the network")

    site_dir = tmp_path_factory.mktemp("site")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", no_network)
        mp.setattr(socket, "create_connection", no_network)
        mp.setattr(socket, "getaddrinfo", no_network)
        mp.setenv("NO_MKDOCS_2_WARNING", "1")
        cfg = load_config(str(ROOT / "mkdocs.yml"), site_dir=str(site_dir), strict=True)
        build(cfg)          # strict: any warning (a broken link or anchor, a page not in nav) aborts
    return site_dir


def page_text(site: Path, page: str) -> str:
    raw = (site / page / "index.html").read_text(encoding="utf-8")
    return html.unescape(re.sub(r"<[^>]+>", "", raw))


def test_site_builds_strict_and_offline_with_every_page(site):
    for page in PAGES:
        name = "" if page.stem == "index" else page.stem
        assert (site / name / "index.html").is_file(), page.name


def test_cli_reference_is_todays_help():
    """docs/cli.md holds each command's --help as cog wrote it; `cog --check` regenerates it and compares."""
    cogapp = pytest.importorskip("cogapp")
    status = cogapp.Cog().main(["cog", "--check", str(DOCS / "cli.md")])
    assert status == 0, "docs/cli.md differs from --help: run python -m cogapp -r docs/cli.md"


def test_cli_reference_names_every_command_and_option_and_no_other(site):
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert set(main.commands) == set(COMMANDS)       # a new command needs its place in this list (and the docs)
    sections = re.split(r"^### longbert ?(\w*)$", text, flags=re.M)
    rendered = dict(zip(sections[1::2], sections[2::2]))
    assert set(rendered) == {"", *COMMANDS}
    every = {"--version"} | {o for c in COMMANDS for o in options_of(command_of(c))}
    for name in COMMANDS:
        for option in options_of(command_of(name)):
            assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", rendered[name]), (name, option)
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text))
    assert named <= every, named - every
    assert "longbert extract [OPTIONS] INPUTS..." in page_text(site, "cli")     # and the site shows it


def example_commands(text: str, inline: bool = True) -> list[str]:
    """`longbert ...` command lines of a page: in code blocks (continuation lines joined), and with
    ``inline`` in inline code spans too."""
    found = []
    for _, body in FENCE.findall(text):
        for line in body.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            if re.match(r"(longbert|python cli\.py) ", line):
                found.append(line)
    if not inline:
        return found
    spans = re.sub(FENCE, "", text)
    found += re.findall(r"`((?:longbert|python cli\.py) [^`]+)`", spans)
    return found


def test_every_longbert_example_names_a_real_command_and_real_options():
    checked = 0
    for path in [ROOT / "README.md", *PAGES]:
        for line in example_commands(path.read_text(encoding="utf-8")):
            words_ = shlex.split(line.split(" #")[0].replace("[", " ").replace("]", " "))
            words_ = words_[2:] if words_[0] == "python" else words_[1:]
            if not words_ or words_[0] == "...":     # `python cli.py ...`: the same as `longbert ...`
                continue
            if words_[0].startswith("-"):
                assert set(words_) <= {"--help", "-h", "--version"}, (path.name, line)
                continue
            assert words_[0] in main.commands, (path.name, line)
            valid = options_of(command_of(words_[0]))
            for word in words_[1:]:
                if word.startswith("-") and not re.fullmatch(r"-\d.*", word):   # not a negative number
                    assert word.split("=")[0] in valid, (path.name, line, word)
            checked += 1
    assert checked >= 30


def test_python_blocks_of_the_python_page_run(runner, tiny_model_dir, tmp_path, monkeypatch):
    """Each ```python block of docs/python.md, in order, in one namespace, in a folder holding a small
    examples/labelled.csv; the page's `longbert extract` lines run first (with the tiny model), and
    MODEL = "default" becomes the tiny model."""
    text = (DOCS / "python.md").read_text(encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").mkdir()
    write_csv(tmp_path / "examples" / "labelled.csv",
              [{"id": f"d{i}", "label": "ab"[i % 2], "text": words(20 + 9 * i, i)} for i in range(20)])
    for line in example_commands(text, inline=False):
        args = shlex.split(line)[1:] + ["--model", str(tiny_model_dir), "--max-length", "64"]
        result = invoke(runner, args)
        assert result.exit_code == 0, (line, result.output)
    blocks = [body for lang, body in FENCE.findall(text) if lang == "python"]
    assert len(blocks) >= 4
    assert 'MODEL = "default"' in blocks[0]
    namespace: dict = {}
    for block in blocks:
        exec(compile(block.replace('MODEL = "default"', f"MODEL = {str(tiny_model_dir)!r}"), "python.md", "exec"),
             namespace)
    assert namespace["X"].dtype == "float32" and len(namespace["ids"]) == namespace["X"].shape[0]
    assert namespace["meta"]["level"] == "window" and len(set(namespace["ids"])) == 20


def test_readme_is_short_and_pages_fit_a_few_screens():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 150
    for page in PAGES:   # the CLI reference is every command's --help, as cog writes it: its length is theirs
        limit = 450 if page.name == "cli.md" else 400
        assert len(page.read_text(encoding="utf-8").splitlines()) <= limit, page.name


INTERNAL = [r"issue \d", r"B\d\d", r"\.\./shared", r"farm-bench", r"a user's trial", r"No GPU was lent",
            r"pipeline\.load_features"]


def help_texts() -> str:
    return "\n".join(invoke(CliRunner(), [*cmd, "--help"]).output
                     for cmd in ([], *([c] for c in COMMANDS)))


def test_no_user_facing_text_names_internal_things():
    texts = {path.name: path.read_text(encoding="utf-8") for path in USER_TEXT}
    texts["--help"] = help_texts()
    for name, text in texts.items():
        for pattern in INTERNAL:
            assert not re.search(pattern, text), (name, pattern, re.search(pattern, text))


def test_readme_first_snippet_uses_the_public_api():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    python = [body for lang, body in FENCE.findall(readme) if lang == "python"]
    assert any("longbert.load_features" in b for b in python)


def test_readme_says_that_make_tests_time_grows_with_the_load():
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert ("Its time grows with the machine's load: the same suite took about 25 minutes on those 2 cores at a "
            "load average of 7-15") in text
    assert "make run # creates .venv" in text and "make test # installs the test dependencies" in text


def test_the_pipeline_from_the_six_constructors_gives_the_models_own_mean(tiny_model_dir):
    """The python.md block that builds a pipeline from Tokenize, Segment, Dedup, Encode, Aggregate and Rows
    with a filter, public names only: its vector of a text that fits one window is the mean of the model's
    last layer over that window ([CLS] and [SEP] included), by a direct transformers AutoModel call."""
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    import longbert

    text = (DOCS / "python.md").read_text(encoding="utf-8")
    block = next(body for lang, body in FENCE.findall(text) if lang == "python" and "longbert.Rows(" in body)
    for name in ("Tokenize", "Segment", "Dedup", "Encode", "Aggregate", "Rows"):
        assert f"longbert.{name}(" in block, name
    assert "import" not in block and len(block.strip().splitlines()) <= 12   # public names only, about 11 lines
    namespace = {"longbert": longbert, "MODEL": str(tiny_model_dir), "texts": [words(30, 1)] * 4}
    exec(compile(block, "python.md", "exec"), namespace)
    short, fits = words(5, 2), words(40, 3)    # 5 tokens: the filter drops it; 40 fit one window of 64 positions
    table = namespace["mine"](longbert.Batch.from_texts([short, fits], ids=["short", "fits"]))
    assert table.column("id").to_pylist() == ["fits"] and table.column("n_windows").to_pylist() == [1]
    tok, model = AutoTokenizer.from_pretrained(tiny_model_dir), AutoModel.from_pretrained(tiny_model_dir).eval()
    enc = tok(fits, return_tensors="pt")
    assert enc["input_ids"].shape[1] == 42
    with torch.no_grad():
        want = model(**enc).last_hidden_state[0].mean(dim=0).numpy()     # (hidden,) over every position
    got = np.array(table.column("features").to_pylist()[0], dtype=np.float32)
    np.testing.assert_allclose(got, want, atol=1e-6)
