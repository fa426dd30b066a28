"""The package's layering: the batch and the stage contract at the bottom; no phase imports the engine or
classify; text/ runs without torch; modules and functions stay small enough to hold one idea."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "pipeline"
PHASES = ("options", "read", "text", "cache", "model", "output")   # lowest first: each imports only those before it
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
    for name in ("batch.py", "stage.py", "counts.py", "types.py", "errors.py", "plan.py"):
        mods = [m for _, m in _imports(PKG / name) if m.startswith("pipeline.")]
        assert all(m in ("pipeline.batch", "pipeline.errors", "pipeline.types", "pipeline.plan",
                         "pipeline.texts", "pipeline.columns", "pipeline.chip") for m in mods), (name, mods)


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
    """The level's names are read where the option is checked (options/sections.py: per_window, per_token)
    and where the vectorizer refuses a level it cannot give; every stage gets its level's class instead."""
    import re

    pattern = re.compile(r"level\s*(==|!=|in\s*\()")
    modules = sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py") if pattern.search(p.read_text(encoding="utf-8")))
    assert modules == ["classify/vectorizer.py", "options/sections.py"]


def _module_name(path: Path) -> str:
    parts = ["pipeline", *path.relative_to(PKG).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(path: Path) -> list[tuple[ast.ImportFrom | ast.Import, str]]:
    """(node, absolute module) of every import in ``path`` that runs: module level and inside functions,
    not those under ``if TYPE_CHECKING:`` (type hints only)."""
    package = ["pipeline", *path.relative_to(PKG).parent.parts]

    def walk(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            yield child
            yield from walk(child)

    out = []
    for node in walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            out.append((node, ".".join([*base, node.module] if node.module else base)))
        elif isinstance(node, ast.Import):
            out += [(node, alias.name) for alias in node.names]
    return out


def import_graph() -> dict[str, set[str]]:
    """pipeline module -> the pipeline modules it imports at run time (``from .x import y`` counts as
    module x.y when that is a module, else as x)."""
    modules = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        deps = set()
        for node, mod in _runtime_imports(path):
            names = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else []
            subs = {f"{mod}.{n}" for n in names} & modules.keys()
            deps |= subs or ({mod} & modules.keys())
        graph[name] = deps - {name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of two or more modules (Tarjan): each one is an import cycle."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(groups)


def test_the_cycle_finder_finds_a_cycle_and_its_members_only():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert import_cycles(graph) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


KNOWN_CYCLES: list[list[str]] = []   # Pipeline.run and the local engine share pipeline.engine.stream, below both


def test_no_import_cycle_among_pipeline_modules():
    """Deferred (function-level) imports count: an import inside a function is still an arrow between
    modules; only ``if TYPE_CHECKING:`` imports, which never run, are left out."""
    assert [c for c in import_cycles(import_graph()) if c not in KNOWN_CYCLES] == []


def test_no_module_imports_a_private_name_of_another_pipeline_module():
    """Every import counts, type-hint ones too: a name shared across modules is public."""
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        package = ["pipeline", *path.relative_to(PKG).parent.parts]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = package[:len(package) - node.level + 1] if node.level else []
            mod = ".".join([*base, node.module] if node.module else base)
            if mod.startswith("pipeline"):
                bad += [f"{path.relative_to(PKG)}:{node.lineno} takes {mod}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert bad == []
