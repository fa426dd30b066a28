"""Progress that fits the place it is shown: the tqdm bar on a terminal; elsewhere (a CI log, nohup,
a cluster job's stderr file) one plain line every 30 seconds and a last line.

Both engines open one; pipeline.engine.run.BatchProgress moves either one.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from tqdm import tqdm

PLAIN_INTERVAL_S = 30.0   # seconds between two plain progress lines


def _duration(seconds: float) -> str:
    """'1:02:03' / '2:03' for a number of seconds."""
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class PlainProgress:
    """The tqdm calls the engines make (update, set_postfix, close, ``n``), printed as plain lines:

        progress: 120/1000 documents (12.0%), 5310 tokens/s, ETA 7:20

    at most one every ``interval`` seconds of ``clock`` (a parameter, so tests need not wait), and a
    last line on close: ``progress: 1000/1000 documents in 8:01, 5290 tokens/s``. Tokens/s is the
    ``tokens_s`` postfix the local engine sets after each batch (left out when none was set)."""

    def __init__(self, total: int, initial: int = 0, stream: TextIO | None = None,
                 interval: float = PLAIN_INTERVAL_S, clock: Callable[[], float] = time.monotonic):
        self.total, self.n, self.start = total, float(initial), float(initial)
        self.stream, self.interval, self.clock = stream, interval, clock
        self.t0 = self.last = clock()
        self.tokens_s: str | None = None
        self.closed = False

    def update(self, n: float = 1) -> None:
        """``n`` more documents are done; prints a line when ``interval`` has passed since the last."""
        self.n += n
        now = self.clock()
        if now - self.last >= self.interval:
            self.last = now
            self._print(self.line(now))

    def set_postfix(self, **values) -> None:
        """Keep ``tokens_s`` (tokens per second, as the bar's postfix shows it) for the next line."""
        if "tokens_s" in values:
            self.tokens_s = str(values["tokens_s"])

    def line(self, now: float) -> str:
        """The progress line at time ``now``: documents done, tokens/s, ETA at the rate so far."""
        elapsed = now - self.t0
        share = f" ({100 * self.n / self.total:.1f}%)" if self.total else ""
        text = f"progress: {self.n:.0f}/{self.total} documents{share}"
        if self.tokens_s is not None:
            text += f", {self.tokens_s} tokens/s"
        rate = (self.n - self.start) / elapsed if elapsed > 0 else 0.0
        eta = _duration((self.total - self.n) / rate) if rate > 0 else "unknown"
        return text + f", ETA {eta}"

    def close(self) -> None:
        """Print the last line (documents done, time taken, tokens/s) once."""
        if self.closed:
            return
        self.closed = True
        text = f"progress: {self.n:.0f}/{self.total} documents in {_duration(self.clock() - self.t0)}"
        self._print(text + (f", {self.tokens_s} tokens/s" if self.tokens_s is not None else ""))

    def _print(self, text: str) -> None:
        stream = self.stream or sys.stderr
        print(text, file=stream, flush=True)


def progress_bar(total: int, initial: int, enabled: bool, stream: TextIO | None = None) -> tqdm | PlainProgress:
    """The document progress of a run: a tqdm bar when ``stream`` (default stderr) is a terminal, a
    PlainProgress otherwise; a disabled bar (prints nothing) with --no-progress."""
    stream = stream or sys.stderr
    if enabled and not getattr(stream, "isatty", lambda: False)():
        return PlainProgress(total, initial, stream)
    return tqdm(total=total, initial=initial, unit="doc", disable=not enabled, file=stream,
                dynamic_ncols=True, bar_format="{l_bar}{bar}| {n:.0f}/{total} doc [{elapsed}<{remaining}{postfix}]")
