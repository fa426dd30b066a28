"""bfloat16 against float32 at each level: the minimum (and mean) cosine of document, window and token
vectors of `longbert extract --dtype bfloat16` to the same run in float32.

Usage: python bench/bf16_levels.py CORPUS.csv [--docs 100] [--strategy chunk] [--max-tokens-per-doc 2048]
Runs extract four times (token level: documents and tokens; window level), in fresh processes, and prints
one markdown table with the CPU's flags. Token vectors are compared token by token (the same ids and
positions in both runs, checked).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two (n, D) float arrays (float64 arithmetic)."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--docs", type=int, default=100)
    ap.add_argument("--strategy", default="chunk")
    ap.add_argument("--max-tokens-per-doc", type=int, default=2048)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from bench.overhead_bench import _cpu

    work = Path(tempfile.mkdtemp(prefix="bf16_levels_"))
    df = pd.read_csv(args.corpus)
    df = df[df["text"].astype(str).str.strip() != ""].head(args.docs)
    src = work / "docs.csv"
    df[["text"]].to_csv(src, index=False)
    out = {}
    for level in ("token", "window"):
        for dtype in ("float32", "bfloat16"):
            path = work / f"{level}-{dtype}.parquet"
            subprocess.run([sys.executable, str(ROOT / "cli.py"), "extract", str(src), "-o", str(path), "--no-progress",
                            "--strategy", args.strategy, "--level", level, "--dtype", dtype,
                            "--max-tokens-per-doc", str(args.max_tokens_per_doc)], check=True, cwd=ROOT,
                           env={**os.environ, "PYTHONWARNINGS": "ignore"}, stdout=subprocess.DEVNULL)
            out[level, dtype] = pq.read_table(path)
    rows = []
    for level, column in (("document", "features"), ("window", "features"), ("token", "token_features")):
        f32, b16 = (out["window" if level == "window" else "token", d] for d in ("float32", "bfloat16"))
        if column == "token_features":
            assert f32.column("token_ids").to_pylist() == b16.column("token_ids").to_pylist()
            x = np.concatenate([np.asarray(v, np.float32) for v in f32.column(column).to_pylist() if v])
            y = np.concatenate([np.asarray(v, np.float32) for v in b16.column(column).to_pylist() if v])
        else:
            x = np.stack([np.asarray(v, np.float32) for v in f32.column(column).to_pylist() if v is not None])
            y = np.stack([np.asarray(v, np.float32) for v in b16.column(column).to_pylist() if v is not None])
        c = cosines(x, y)
        rows.append(f"| {level} | {len(c):,} | {c.min():.5f} | {c.mean():.6f} |")
    print(f"`python bench/bf16_levels.py {' '.join(sys.argv[1:])}` on {_cpu()}: {len(df)} documents of "
          f"{args.corpus.name}, `--strategy {args.strategy} --max-tokens-per-doc {args.max_tokens_per_doc}`, "
          "bfloat16 (`--dtype bfloat16`) against float32\n")
    print("| level | vectors | cosine min | cosine mean |\n|---|---:|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
