"""The package's layering: the batch and the stage contract at the bottom; no phase imports the engine or
classify; text/ runs without torch; modules and functions stay small enough to hold one idea."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "pipeline"
PHASES = ("options", "read", "text", "model", "cache", "output")
TOP = ("engine", "classify")


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in ``path``, function-level ones included."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ["pipeline", *path.relative_to(PKG).parent.parts]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            out.append((node.lineno, ".".join([*base, node.module] if node.module else base)))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
    return out


@pytest.mark.parametrize("phase", PHASES)
def test_no_phase_imports_the_engine_or_classify(phase):
    bad = [f"{p.relative_to(PKG)}:{line} imports {mod}" for p in sorted((PKG / phase).rglob("*.py"))
           for line, mod in _imports(p) if any(mod == f"pipeline.{t}" or mod.startswith(f"pipeline.{t}.") for t in TOP)]
    assert bad == []


def test_the_batch_and_the_stage_contract_import_no_phase_but_text_helpers():
    for name in ("batch.py", "stage.py", "counts.py", "types.py", "errors.py"):
        mods = [m for _, m in _imports(PKG / name) if m.startswith("pipeline.")]
        assert all(m in ("pipeline.batch", "pipeline.errors", "pipeline.types", "pipeline.text.texts",
                         "pipeline.text.dedup") for m in mods), (name, mods)


def test_text_stages_import_without_torch():
    code = ("import sys, pipeline.text.tokenize, pipeline.text.segment, pipeline.text.dedup, pipeline.batch, "
            "pipeline.stage; print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=PKG.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_modules_and_functions_stay_small():
    long_modules, long_functions = [], []
    for path in sorted(PKG.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) > 400:
            long_modules.append(str(path.relative_to(PKG)))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 80:
                long_functions.append(f"{path.relative_to(PKG)}:{node.name}")
    assert long_modules == [] and long_functions == []


def test_the_output_level_is_compared_by_name_in_at_most_two_modules():
    """The level's names are read where the option is checked (options/config.py: per_window, per_token)
    and where the vectorizer refuses a level it cannot give; every stage gets its level's class instead."""
    import re

    pattern = re.compile(r"level\s*(==|!=|in\s*\()")
    modules = sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py") if pattern.search(p.read_text(encoding="utf-8")))
    assert modules == ["classify/vectorizer.py", "options/config.py"]
