"""A pytest plugin (registered by conftest.py): Ctrl-C (SIGINT) and SIGTERM stop the test run with
pytest's summary, even where the code under test handles them itself.

Why the run went on without it: many tests run ``longbert extract`` in-process (click's CliRunner), and
the command turns Ctrl-C and SIGTERM into its own interrupted message and exit code 130, as a command
should; the test then fails on that exit code and pytest goes on to the next test, because it never sees
a KeyboardInterrupt. And ``ray.init`` (the Ray tests' fixture) replaces the SIGTERM handler with one that
calls ``sys.exit``, which a test catches as one more failure. So this plugin listens where no handler can
hide a signal: Python's wakeup file descriptor (``signal.set_wakeup_fd``), to which the interpreter writes
the number of every signal that has a Python handler, whichever handler that is. After each test, a
SIGINT or SIGTERM seen there stops the session (``session.shouldstop``: pytest prints its summary and
exits 2, "Interrupted"). Before each test the plugin's own handlers are put back where something
replaced them (SIGTERM would otherwise kill pytest with no summary); they raise KeyboardInterrupt, as
Python's default SIGINT handler does, so a test that does not catch it stops at once.
"""
from __future__ import annotations

import os
import signal

import pytest

SIGNALS = {signal.SIGINT: "SIGINT (Ctrl-C)", signal.SIGTERM: "SIGTERM"}
_STATE: dict = {"pipe": None, "previous": {}, "wakeup": -1, "seen": None}


def _interrupt(signum, frame) -> None:
    """The plugin's SIGINT and SIGTERM handler: unwind the running code, as Ctrl-C does."""
    raise KeyboardInterrupt


def _arm() -> None:
    """Put back the plugin's handlers and wakeup descriptor where something replaced them (main thread only)."""
    if _STATE["pipe"] is None:
        return
    for signum in SIGNALS:
        if signal.getsignal(signum) is not _interrupt:
            signal.signal(signum, _interrupt)
    signal.set_wakeup_fd(_STATE["pipe"][1], warn_on_full_buffer=False)


def _seen() -> str | None:
    """The first SIGINT or SIGTERM written to the wakeup descriptor since the run began, else None."""
    if _STATE["pipe"] is None:
        return None
    try:
        data = os.read(_STATE["pipe"][0], 4096)
    except BlockingIOError:
        data = b""
    for number in data:
        if number in SIGNALS and _STATE["seen"] is None:
            _STATE["seen"] = SIGNALS[number]
    return _STATE["seen"]


def pytest_configure(config) -> None:
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    _STATE["pipe"] = (read, write)
    _STATE["previous"] = {s: signal.getsignal(s) for s in SIGNALS}
    _STATE["wakeup"] = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    _arm()


def pytest_unconfigure(config) -> None:
    if _STATE["pipe"] is None:
        return
    signal.set_wakeup_fd(_STATE["wakeup"])
    for signum, handler in _STATE["previous"].items():
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    for fd in _STATE["pipe"]:
        os.close(fd)
    _STATE["pipe"] = None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item) -> None:
    _arm()   # after the fixtures: a fixture's ray.init replaced SIGTERM's handler


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _arm()
    result = yield
    signame = _seen()
    if signame is not None:
        item.session.shouldstop = f"{signame} received"
    return result
