"""extract --engine ray keeps the command's SIGTERM handler when it starts Ray: ray.init installs one that
calls sys.exit, which would end the run with exit 15 and no interrupted message instead of 130."""
from __future__ import annotations

import signal
import sys

import pytest

from pipeline.engine.ray_engine import init_keeping_sigterm


class FakeRay:
    """What ray.init does to SIGTERM (ray/_private/worker.py: sigterm_handler calls sys.exit(signum))."""

    def __init__(self, fail: bool = False):
        self.fail, self.kwargs = fail, None

    def init(self, **kwargs):
        self.kwargs = kwargs
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))
        if self.fail:
            raise ConnectionError("no cluster")


@pytest.mark.parametrize("fail", [False, True])
def test_the_sigterm_handler_before_ray_init_is_the_one_after(fail):
    def mine(signum, frame):
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGTERM, mine)
    try:
        ray = FakeRay(fail)
        if fail:
            with pytest.raises(ConnectionError):
                init_keeping_sigterm(ray, address=None, num_cpus=2)
        else:
            init_keeping_sigterm(ray, address=None, num_cpus=2)
        assert ray.kwargs == {"address": None, "num_cpus": 2}
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)
