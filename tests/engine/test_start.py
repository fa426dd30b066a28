"""Start-up: what a process imports for `longbert --help` and a one-row `extract`, and the garbage
collector's state around the model load (pipeline.model.gc_pause). Module lists, never timings."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import write_csv

from pipeline.model.gc_pause import paused_gc

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "pyarrow", "pandas", "numpy", "yaml", "sklearn", "matplotlib", "ray", "scipy")

# Runs `longbert ARGS` in a fresh process, then prints which HEAVY packages it imported and whether the
# garbage collector is on (the pauses restored it).
SCRIPT = """
import gc, sys
from cli import main
try:
    main(sys.argv[1:])
except SystemExit as end:
    code = end.code
print("RESULT", code, gc.isenabled(), sorted(m for m in {heavy!r} if m in sys.modules))
"""


def _run(*args: str) -> tuple[object, bool, list[str]]:
    proc = subprocess.run([sys.executable, "-c", SCRIPT.format(heavy=HEAVY), *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, proc.stdout + proc.stderr
    _, code, enabled, mods = line.split(" ", 3)
    return code, enabled == "True", eval(mods)  # noqa: S307 - our own print of a list of names


def test_help_imports_no_heavy_package():
    """`--help` and `extract --help` import click and longbert's option tables only."""
    for args in (["--help"], ["extract", "--help"]):
        code, enabled, mods = _run(*args)
        assert code in ("0", "None") and enabled
        assert mods == [], (args, mods)


def test_one_row_extract_imports_only_what_it_uses(tiny_model_dir, tmp_path):
    """A one-row extract loads torch, transformers and pyarrow, never the probe's or Ray's packages, and
    leaves the garbage collector on."""
    src = write_csv(tmp_path / "one.csv", [{"id": 1, "text": "w1 w2"}])
    out = tmp_path / "one.parquet"
    code, enabled, mods = _run("extract", str(src), "-o", str(out), "--model", str(tiny_model_dir), "--no-progress")
    assert code in ("0", "None") and out.is_file()
    assert enabled
    assert {"torch", "transformers", "pyarrow"} <= set(mods)
    assert not {"sklearn", "matplotlib", "ray"} & set(mods), mods


def test_paused_gc_restores_the_collector_state():
    """On inside -> off in the block -> on after (also after an error); off before -> stays off."""
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), paused_gc():
        raise ValueError("boom")
    assert gc.isenabled()

    @paused_gc()
    def inside() -> bool:
        return gc.isenabled()

    assert inside() is False and gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_command_line_lets_openmp_threads_sleep():
    """The CLI sets OMP_WAIT_POLICY=PASSIVE before torch starts OpenMP, and keeps a value the user set."""
    code = "import os, sys; sys.argv = ['longbert']; import cli; print(os.environ.get('OMP_WAIT_POLICY'))"
    for given, expected in ((None, "PASSIVE"), ("ACTIVE", "ACTIVE")):
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        if given is not None:
            env["OMP_WAIT_POLICY"] = given
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                              env={**env, "PYTHONPATH": str(ROOT)})
        assert proc.stdout.strip() == expected, proc.stderr
