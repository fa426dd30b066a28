"""Speed by chip: `longbert extract` in float32, bfloat16, --dtype auto and --quantize int8 on one corpus,
rounds interleaved, CPU seconds (user + system of the child) and cosines to float32; run by `make bench`.

Then the bare forward pass of the model on one batch, three ways to compute in bfloat16 on a CPU:
the weights in bfloat16 (what --dtype bfloat16 does), torch.autocast, and oneDNN's bfloat16 math for
float32 matrices (torch.backends.mkldnn.matmul.fp32_precision = "bf16"), each with its cosine to float32.
Speed-ups need a CPU with AMX-BF16 or AVX-512 BF16; elsewhere bfloat16 is emulated and slower.

Writes one markdown table with the CPU, its flags and the model in the header to bench/results_chip.md.

Example:
    .venv/bin/python bench/chip_bench.py --docs 40 --rounds 3
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results_chip.md"
ROWS = {"float32": [], "bfloat16": ["--dtype", "bfloat16"], "auto": ["--dtype", "auto"], "int8": ["--quantize", "int8"]}


def child_cpu(cmd: list[str]) -> float:
    """Run ``cmd``; CPU seconds (user + system) it used. Raises CalledProcessError on failure."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(n, d), (n, d) -> (n,) cosine of each row pair."""
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def extract_rows(src: Path, args: argparse.Namespace, out: Path) -> list[str]:
    """The table rows of the extract runs: CPU s (min over rounds), vs float32, cosines."""
    import pyarrow.parquet as pq

    from pipeline.classify.features import load_features

    base = [sys.executable, str(ROOT / "cli.py"), "extract", str(src), "--id-col", "id", "--strategy", args.strategy,
            "--threads", str(args.threads), "--no-progress", "--overwrite"]
    one = out / "one.csv"
    one.write_text("id,text\n1,a\n")
    rows = {name: ROWS[name] for name in ["float32", *(n for n in args.rows if n != "float32")]}
    seconds = {name: [] for name in rows}
    start = []
    for _ in range(args.rounds):  # interleaved: each round runs every row once, so load drifts hit all alike
        start.append(child_cpu(base[:3] + [str(one)] + base[4:] + ["-o", str(out / "one.parquet")]))
        for name, extra in rows.items():
            seconds[name].append(child_cpu(base + extra + ["-o", str(out / f"{name}.parquet")]))
    ref = load_features(out / "float32.parquet")[1]
    overhead = min(start)
    f32 = min(seconds["float32"]) - overhead
    lines = []
    for name, extra in rows.items():
        meta = json.loads(pq.read_schema(out / f"{name}.parquet").metadata[b"longbert"])
        cos = cosines(ref.astype(np.float64), load_features(out / f"{name}.parquet")[1].astype(np.float64))
        model_s = min(seconds[name]) - overhead
        lines.append(f"| `{' '.join(extra) or '(none)'}` | {meta['compute_dtype']} | {min(seconds[name]):.1f} | "
                     f"{model_s:.1f} | {f32 / model_s:.2f}x | {cos.mean():.5f} | {cos.min():.5f} |")
    return [f"Start-up and reading (a one-row run): {overhead:.1f} CPU s, subtracted for the model part.", "",
            "| options | compute dtype | CPU s, whole run | CPU s, model part | vs float32 | cosine mean | "
            "cosine min |", "|---|---|---:|---:|---:|---:|---:|", *lines]


def forward_rows(args: argparse.Namespace) -> list[str]:
    """The bare forward pass on one batch of ``args.batch`` x ``args.seq`` tokens: three bfloat16 ways,
    then --quantize int8's model (pipeline.model.int8)."""
    import copy

    import torch
    from transformers import AutoModel

    from pipeline.model.facts import resolve_model_path

    torch.set_num_threads(args.threads)
    model = AutoModel.from_pretrained(resolve_model_path("default"), attn_implementation="sdpa").eval()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 20000, (args.batch, args.seq), generator=gen)
    mask = torch.ones_like(ids)

    def timed(m, setup=None) -> tuple[float, np.ndarray]:
        best, out = float("inf"), None
        for _ in range(args.rounds):
            with torch.inference_mode(), (setup() if setup else torch.autocast("cpu", enabled=False)):
                t = time.process_time()
                out = m(input_ids=ids, attention_mask=mask).last_hidden_state.float().mean(1)
                best = min(best, time.process_time() - t)
        return best, out.numpy().astype(np.float64)

    base_s, ref = timed(model)
    from pipeline.model.int8 import quantize_int8

    ways = {"float32": (model, None), "weights in bfloat16": (copy.deepcopy(model).to(torch.bfloat16), None),
            "torch.autocast bfloat16": (model, lambda: torch.autocast("cpu", dtype=torch.bfloat16)),
            "int8 (`--quantize int8`)": (quantize_int8(copy.deepcopy(model)), None)}
    lines = []
    for name, (m, setup) in ways.items():
        s, vec = timed(m, setup)
        lines.append(f"| {name} | {args.batch * args.seq / s:,.0f} | {base_s / s:.2f}x | {cosines(ref, vec).min():.5f} |")
    mkl = torch.backends.mkldnn.matmul
    if hasattr(mkl, "fp32_precision"):
        old = mkl.fp32_precision
        mkl.fp32_precision = "bf16"
        try:
            s, vec = timed(model)
        finally:
            mkl.fp32_precision = old
        lines.append(f"| oneDNN bf16 math, float32 weights | {args.batch * args.seq / s:,.0f} | {base_s / s:.2f}x | "
                     f"{cosines(ref, vec).min():.5f} |")
    return [f"Bare forward pass, one batch of {args.batch} x {args.seq} tokens, {args.threads} thread(s), "
            "best of the rounds:", "", "| way | tokens per CPU s | vs float32 | cosine min |", "|---|---:|---:|---:|",
            *lines]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=ROOT / "examples" / "labelled.csv")
    parser.add_argument("--docs", type=int, default=150)
    parser.add_argument("--strategy", default="head")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=lambda v: v.split(","), default=list(ROWS),
                        help=f"extract rows to run, comma-separated; float32 always runs (default: {','.join(ROWS)})")
    parser.add_argument("--no-forward", action="store_true", help="skip the bare forward-pass table")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=512)
    args = parser.parse_args()
    import pandas as pd

    from pipeline.chip import detect

    chip = detect("cpu")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "docs.csv"
        pd.read_csv(args.corpus).head(args.docs).to_csv(src, index=False)
        rows = extract_rows(src, args, Path(tmp))
    lines = [f"# Speed by chip ({datetime.date.today()})", "",
             f"CPU: {chip.name or platform.processor()}; flags: {' '.join(chip.flags) or 'none found'}; "
             f"bfloat16 fast here: {'yes' if chip.bf16_fast else 'no (bfloat16 rows are emulated: correctness only)'}; "
             f"--dtype auto -> {chip.recommended_dtype}. Model: the bundled default (all-MiniLM-L6-v2).", "",
             f"Command: `python bench/chip_bench.py {' '.join(sys.argv[1:])}` ({args.docs} documents of "
             f"{args.corpus.name}, `extract --strategy {args.strategy} --threads {args.threads}`, {args.rounds} "
             "rounds interleaved, the fastest; cosines per document to the float32 run).", "", *rows, "",
             *([] if args.no_forward else forward_rows(args)), ""]
    text = "\n".join(lines)
    print(text)
    RESULTS.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
