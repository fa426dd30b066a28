"""What the inputs' re-checks during a run cost (issue 23: "at most 2% of a run on examples/labelled.csv").

The checks: the size and modification time of each block's files, taken before and after the block
is read (``pipeline.read.recheck.check_stamps``), and the sha256 of every input computed again at the
end of the run and compared with the scan's (``verify_inputs``). This runs one whole ``extract`` of
examples/labelled.csv in this process (the default model, on the CPU unless --device says otherwise)
with both functions wrapped by timers, so the figure is their share of that very run; then it times
them alone, best of --repeat, over the same plan.

usage: python bench/input_checks.py [--device cpu] [--block-rows 32] [--repeat 20]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's pipeline, not an installed one

import pipeline.read as read_module
import pipeline.engine.local as local_engine   # the local engine
import pipeline.engine.driver as run_module   # the driver, which checks the inputs
from pipeline.options.config import PipelineConfig
from pipeline.read import scan
from pipeline.read.recheck import check_stamps, verify_inputs

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "examples" / "labelled.csv"


def timed(fn, spent: list[float]):
    """``fn`` that adds its wall seconds to ``spent[0]``."""
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - t0
    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--block-rows", type=int, default=32, help="small blocks: more stamp checks than the default")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    spent = [0.0]
    read_module.check_stamps = timed(check_stamps, spent)      # read_block calls it through the package
    run_module.verify_inputs = timed(verify_inputs, spent)     # the local engine calls it before the commit
    with tempfile.TemporaryDirectory() as tmp:
        cfg = PipelineConfig.from_options(inputs=(str(CORPUS),), output=str(Path(tmp) / "o.parquet"), progress=False,
                                          device=args.device, block_rows=args.block_rows)
        started = time.perf_counter()
        summary = local_engine.run(cfg)
        run_s = time.perf_counter() - started
    plan = scan(cfg.read)
    alone_stamps = alone_verify = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        for spec in plan.blocks:
            check_stamps(spec)
            check_stamps(spec)
        t1 = time.perf_counter()
        verify_inputs(plan.files)
        t2 = time.perf_counter()
        alone_stamps, alone_verify = min(alone_stamps, t1 - t0), min(alone_verify, t2 - t1)
    print(f"# Input re-checks on examples/labelled.csv ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})\n")
    print(f"`python bench/input_checks.py --device {args.device} --block-rows {args.block_rows}`: "
          f"{summary.documents} documents, {CORPUS.stat().st_size / 1e6:.2f} MB, {len(plan.blocks)} blocks; "
          f"{platform.machine()}, {os.cpu_count()} cores.\n")
    print("| what | seconds | share of the run |\n|---|---:|---:|")
    print(f"| whole run (extract, default model) | {run_s:.2f} | 100% |")
    print(f"| re-checks inside that run (stamps per block + sha256 at the end) | {spent[0]:.4f} | "
          f"{100 * spent[0] / run_s:.3f}% |")
    print(f"| stamps alone, {2 * len(plan.blocks)} checks (best of {args.repeat}) | {alone_stamps:.5f} | "
          f"{100 * alone_stamps / run_s:.4f}% |")
    print(f"| sha256 again alone (best of {args.repeat}) | {alone_verify:.5f} | {100 * alone_verify / run_s:.4f}% |")


if __name__ == "__main__":
    main()
