"""Reading speed of the plan's blocks (issue 10: "reading never limits speed"), per input format.

Writes examples/corpus.csv and examples/labelled.csv (356 real documents, 3.1 MB of CSV) in every
format to a temporary folder, then times ``scan`` and ``read_block`` over every block, in one process
and one thread. MB/s is always the CSV's size over the time, so the formats compare on the same text.

usage: python bench/read_speed.py [--repeat 3] [--out bench/read_results.md]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.options.config import PipelineConfig
from pipeline.read import read_block, scan

REPO = Path(__file__).resolve().parents[1]


def write_formats(frame: pd.DataFrame, root: Path) -> dict[str, Path]:
    """The same documents as CSV, TSV, JSON Lines (plain and gzip), parquet and a folder of .txt files."""
    paths = {"csv": root / "c.csv", "tsv": root / "c.tsv", "jsonl": root / "c.jsonl", "jsonl.gz": root / "c.jsonl.gz",
             "parquet": root / "c.parquet", "text folder": root / "txt"}
    frame.to_csv(paths["csv"], index=False)
    frame.to_csv(paths["tsv"], index=False, sep="\t")
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in frame.to_dict("records"))
    paths["jsonl"].write_text(lines, encoding="utf-8")
    with gzip.open(paths["jsonl.gz"], "wt", encoding="utf-8") as fh:
        fh.write(lines)
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), paths["parquet"], row_group_size=256)
    paths["text folder"].mkdir()
    for doc_id, text in zip(frame["id"], frame["text"]):
        (paths["text folder"] / f"{doc_id}.txt").write_text(text, encoding="utf-8")
    return paths


def time_format(path: Path, repeat: int) -> tuple[float, float, int, int]:
    """(best scan seconds, best read seconds over all blocks, rows, blocks)."""
    cfg = PipelineConfig.from_options(inputs=(str(path),))
    best_scan = best_read = float("inf")
    rows = blocks = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        plan = scan(cfg.read)
        t1 = time.perf_counter()
        rows = sum(read_block(spec).num_rows for spec in plan.blocks)
        t2 = time.perf_counter()
        best_scan, best_read = min(best_scan, t1 - t0), min(best_read, t2 - t1)
        blocks = len(plan.blocks)
    return best_scan, best_read, rows, blocks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "read_results.md")
    args = parser.parse_args()
    frames = [pd.read_csv(REPO / "examples" / name, dtype=str, keep_default_na=False)[["id", "text"]]
              for name in ("corpus.csv", "labelled.csv")]
    frame = pd.concat(frames, ignore_index=True)
    frame["id"] = [f"d{i:04d}" for i in range(len(frame))]  # unique file names for the text folder
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_formats(frame, Path(tmp))
        csv_mb = paths["csv"].stat().st_size / 1e6
        lines = [f"# read_block speed ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
                 f"`python bench/read_speed.py`: {len(frame)} documents of examples/corpus.csv and labelled.csv, "
                 f"{csv_mb:.2f} MB as CSV; one process, one thread, best of {args.repeat}; "
                 f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores.", "",
                 "| format | rows | blocks | scan s | read_block s (all blocks) | MB/s of CSV text (read_block) |",
                 "|---|---:|---:|---:|---:|---:|"]
        for name, path in paths.items():
            scan_s, read_s, rows, blocks = time_format(path, args.repeat)
            assert rows == len(frame), (name, rows)
            lines.append(f"| {name} | {rows} | {blocks} | {scan_s:.3f} | {read_s:.3f} | {csv_mb / read_s:.0f} |")
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
