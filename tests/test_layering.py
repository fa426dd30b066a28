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


# The ground: the modules beside the phases (batch, stage, counts, types, errors, plan, columns, texts, chip,
# compact, pieces), every one but the package's entry points (api.py: the stages a user calls alone; __init__).
TOP_LEVEL = ("pipeline", "pipeline.api")
GROUND = tuple(sorted(f"pipeline.{p.stem}" for p in PKG.glob("*.py") if f"pipeline.{p.stem}" not in
                      ("pipeline.__init__", *TOP_LEVEL)))
# The floors, lowest first: a module imports only modules of its own floor or below. cache/ is storage alone,
# below model/ (whose encode stage looks windows up in it).
FLOORS = (("ground",), ("options",), ("read", "text"), ("cache",), ("model",), ("output",), ("engine",), ("classify",),
          ("top",))


def floor_of(module: str) -> int:
    """The floor of a pipeline module (FLOORS' index). Example: pipeline.model.encode_stage -> 4."""
    parts = module.split(".")
    if module in TOP_LEVEL:
        name = "top"
    elif module in GROUND:
        name = "ground"
    else:
        name = parts[1]
    return next(i for i, names in enumerate(FLOORS) if name in names)


def test_the_ground_imports_only_the_ground():
    assert {"pipeline.batch", "pipeline.stage", "pipeline.columns", "pipeline.texts", "pipeline.chip"} <= set(GROUND)
    for name in GROUND:
        path = PKG / f"{name.split('.')[1]}.py"
        mods = [m for _, m in _imports(path) if m.startswith("pipeline")]
        assert all(m in GROUND for m in mods), (name, mods)


def test_no_import_runs_back_up_a_floor():
    """Every run-time import (module level or inside a function; ``if TYPE_CHECKING:`` ones, type hints
    only, are left out) goes to a module of the same floor or a lower one."""
    graph = import_graph()
    assert {m.split(".")[1] for m in graph if m not in GROUND and m not in TOP_LEVEL} == \
        {name for names in FLOORS[1:-1] for name in names}   # every phase has its floor
    up = sorted(f"{m} ({FLOORS[floor_of(m)][0]}) imports {d} ({FLOORS[floor_of(d)][0]})"
                for m, deps in graph.items() for d in deps if floor_of(d) > floor_of(m))
    assert up == []


def test_the_floor_check_finds_an_arrow_back_up():
    assert floor_of("pipeline.options.config") < floor_of("pipeline.output.schema")
    assert floor_of("pipeline.columns") == 0 and floor_of("pipeline.api") == len(FLOORS) - 1
    assert floor_of("pipeline.cache.store") < floor_of("pipeline.model.encode_stage") < floor_of("pipeline.output.rows")


def test_cache_is_storage_alone():
    """cache/ holds the window store and nothing of the model: no torch, no transformers, no model/ module,
    and no stage."""
    bad = [f"{p.relative_to(PKG)}:{line} imports {mod}" for p in sorted((PKG / "cache").rglob("*.py"))
           for line, mod in _imports(p) if mod.split(".")[0] in ("torch", "transformers", "tokenizers")
           or mod.startswith("pipeline.model") or mod == "pipeline.stage"]
    assert bad == []


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


KNOWN_CYCLES: list[list[str]] = []   # Pipeline.run and the engines share pipeline.engine.driver, below both


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


def _own_names(tree: ast.Module) -> set[str]:
    """The private names a module defines itself: its functions, classes and module-level names, and
    the attributes it assigns on any object (``self._x = ...``, ``out._y = ...``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name) \
                and node.value.id in ("self", "cls"):
            names.add(node.attr)
    return {n for n in names if n.startswith("_")}


# Private attributes of libraries that have no public way to do the same (see the module's comment).
LIBRARY_INTERNALS = {
    ("model/load.py", "_modules"),        # torch: a shallow copy of a module with a child table of its own
}


def private_reads_across_modules() -> list[str]:
    """``x._name`` where x is not ``self``/``cls`` and ``_name`` is not defined in this module: a private
    attribute of another module's object (dunders aside)."""
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        own = _own_names(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            where = str(path.relative_to(PKG))
            if node.attr not in own and (where, node.attr) not in LIBRARY_INTERNALS:
                bad.append(f"{where}:{node.lineno} reads {ast.unparse(node)}")
    return bad


def test_no_module_reads_a_private_attribute_of_another_module():
    assert private_reads_across_modules() == []


def _names_late(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value == "late"
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_names_late(e) for e in node.elts)


def late_by_name() -> list[str]:
    """The modules that compare a strategy to "late" by name: ``s == "late"``, ``"late" in x``,
    ``s in ("sliding", "late")``, or a set operation with such a literal."""
    found = set()
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and any(_names_late(x) for x in (node.left, *node.comparators)) or \
                    isinstance(node, ast.BinOp) and (_names_late(node.left) or _names_late(node.right)):
                found.add(str(path.relative_to(PKG)))
    return sorted(found)


def test_late_chunking_is_decided_in_at_most_three_modules():
    """pipeline.options.features_config answers "is this late" (is_late, Feature.late) and "which token
    layers" (late_token_layers); pipeline.options.sections.SegmentConfig.for_strategy gives a strategy's
    window options. The aggregate stage still reads its late windows by name."""
    modules = late_by_name()
    assert "options/features_config.py" in modules and len(modules) <= 3, modules


def _defined_names(tree: ast.Module) -> set[str] | None:
    """The names a module binds anywhere (functions, classes, assignments, imports, for and with targets);
    None when it has a module ``__getattr__`` (any name may resolve)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == "__getattr__" and node in tree.body:
                return None
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def dead_imports(pkg: Path = PKG) -> list[str]:
    """The imports of the package at ``pkg`` that resolve to nothing: a ``pipeline`` module that does not
    exist, or a name that the module neither defines nor has as a submodule. Every import counts (function
    level and ``if TYPE_CHECKING:`` ones too: a hint that names nothing misleads as much). Example: a
    ``from .stores import open_store`` in pipeline/model/x.py with no pipeline/model/stores.py ->
    ["model/x.py:3 imports pipeline.model.stores, which does not exist"]."""
    files = {".".join(["pipeline", *p.relative_to(pkg).with_suffix("").parts]).removesuffix(".__init__"): p
             for p in pkg.rglob("*.py")}
    trees = {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in files.items()}
    bad = []
    for name, path in sorted(files.items()):
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        where = path.relative_to(pkg)
        for node in ast.walk(trees[name]):
            if isinstance(node, ast.ImportFrom):
                base = package[:len(package) - node.level + 1] if node.level else []
                mod = ".".join([*base, node.module] if node.module else base)
                names = [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                mod, names = None, []
                bad += [f"{where}:{node.lineno} imports {a.name}, which does not exist" for a in node.names
                        if a.name.startswith("pipeline.") and a.name not in files]
            if not isinstance(node, ast.ImportFrom) or not (mod == "pipeline" or mod.startswith("pipeline.")):
                continue
            if mod not in files:
                bad.append(f"{where}:{node.lineno} imports {mod}, which does not exist")
                continue
            defined = _defined_names(trees[mod])
            bad += [f"{where}:{node.lineno} imports {n} from {mod}, which has no such name" for n in names
                    if n != "*" and defined is not None and n not in defined and f"{mod}.{n}" not in files]
    return bad


def test_every_import_resolves():
    """An import of a module or name that does not exist fails only when its line runs (a function-level one
    perhaps never in the tests): here it fails at once."""
    assert dead_imports() == []


def test_the_dead_import_finder_finds_a_missing_module_and_a_missing_name(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "model" / "__init__.py").write_text("")
    (tmp_path / "model" / "real.py").write_text("def here():\n    return 1\n")
    (tmp_path / "model" / "user.py").write_text(
        "from .real import here\n"
        "def f():\n"
        "    from .stores import open_store\n"
        "    from .real import gone\n"
        "    from . import real\n"
        "    import pipeline.model.nothing\n"
        "    return open_store, gone, real, here\n")
    assert dead_imports(tmp_path) == [
        "model/user.py:3 imports pipeline.model.stores, which does not exist",
        "model/user.py:4 imports gone from pipeline.model.real, which has no such name",
        "model/user.py:6 imports pipeline.model.nothing, which does not exist"]
