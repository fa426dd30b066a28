"""Ctrl-C (SIGINT) and SIGTERM stop a test run with pytest's summary: a pytest run of a dummy test that
runs the real ``longbert extract`` in-process (its run stubbed to sleep), as many tests do, is sent the
signal while the command runs; the command turns it into its own exit 130, and the run must still stop
there (exit 2, "Interrupted") without starting the next test. Without the plugin it does not."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
DUMMY = '''
import signal, sys, time
from pathlib import Path
import pytest
from click.testing import CliRunner
import cli
import pipeline.engine.local as local

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def ray_like():
    """As ray.init does: SIGTERM's handler becomes sys.exit."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))
    yield


def slow_run(cfg, echo=None):
    (HERE / "started").write_text("yes")
    time.sleep(60)


def test_extract_in_process(ray_like, monkeypatch):
    monkeypatch.setattr(local, "run", slow_run)
    result = CliRunner().invoke(cli.main, ["extract", str(HERE / "in.csv"), "-o", str(HERE / "out.parquet")])
    assert result.exit_code == 0, result.output


def test_later():
    (HERE / "later").write_text("yes")
'''


def _run(tmp_path: Path, signum: int, plugin: bool) -> tuple[int, str, float]:
    (tmp_path / "test_dummy.py").write_text(DUMMY)
    (tmp_path / "in.csv").write_text("text\na b\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)])}
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *(["-p", "stop_on_signal"] if plugin else []),
            "test_dummy.py"]
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "started").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.1)
        sent = time.monotonic()
        proc.send_signal(signum)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return proc.returncode, out, time.monotonic() - sent


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_the_run_with_pytests_summary(tmp_path, signum):
    rc, out, waited = _run(tmp_path, signum, plugin=True)
    name = "SIGINT (Ctrl-C)" if signum == signal.SIGINT else "SIGTERM"
    assert rc == 2, out                                              # pytest's ExitCode.INTERRUPTED
    assert f"Interrupted: {name} received" in out
    assert "1 failed in" in out                                      # the summary: the interrupted test, no other
    assert not (tmp_path / "later").exists()
    assert waited < 30


def test_without_the_plugin_the_run_goes_on(tmp_path):
    """The cause: the command in-process turns the signal into exit 130, a failed test, and the run goes on."""
    rc, out, _ = _run(tmp_path, signal.SIGINT, plugin=False)
    assert rc == 1 and "1 failed, 1 passed" in out and (tmp_path / "later").exists(), out
