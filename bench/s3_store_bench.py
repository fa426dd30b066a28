"""The window store in S3-compatible storage against the SQLite store, in real runs of ``longbert extract``;
run by ``make bench-store``.

A local S3 server (moto's server mode on 127.0.0.1, in this process: tests/cache/s3_server.py) counts every
request and body byte. Each run is ``python cli.py extract`` in its own process (model load, reading and
writing included), timed with a wall clock; windows encoded and taken from the store come from its summary
line. For each store: a first run (every window encoded and stored), then the same run again (every
window from the store; the fastest of --repeats). Printed as one markdown table, also written to
bench/results_s3.md, with the machine.

Example:
    .venv/bin/python bench/s3_store_bench.py --docs 100 --strategy chunk
"""
from __future__ import annotations

import argparse
import datetime
import os
import random
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "cache"))
from cache_bench import run_cli, write_csv  # noqa: E402
from run_bench import DEFAULT_CORPUS, machine, read_corpus  # noqa: E402
from s3_server import CountedMotoServer  # noqa: E402

RESULTS = ROOT / "bench" / "results_s3.md"


def per_1000(counted, windows: int) -> dict:
    """The server's counts since its last reset, per 1,000 windows: requests by method, bytes each way."""
    k = 1000 / max(1, windows)
    return {m: counted.count(m, ok_only=False) * k for m in ("PUT", "LIST", "GET", "DELETE")} | {
        "sent": counted.bytes_in * k, "received": counted.bytes_out * k}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=100, help="documents in the corpus (default 100)")
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="CSV with columns id,text")
    ap.add_argument("--strategy", default="chunk", help="extract's --strategy (default chunk)")
    ap.add_argument("--repeats", type=int, default=3, help="second runs per store; the fastest is reported")
    ap.add_argument("--block-rows", type=int, default=None,
                    help="extract's --block-rows (rows per block: one object per block and pooling); default its own")
    ap.add_argument("--output", type=Path, default=RESULTS, help=f"markdown file (default {RESULTS.name})")
    args = ap.parse_args(argv)
    rows = read_corpus(args.corpus, "text", "id")
    picked = sorted(random.Random(0).sample(range(len(rows)), min(len(rows), args.docs)))
    work = Path(tempfile.mkdtemp(prefix="lbs3"))
    write_csv([rows[i] for i in picked], work / "corpus.csv")
    server = CountedMotoServer()
    server.start()
    bucket = f"bench-{uuid.uuid4().hex[:8]}"
    os.environ.update(AWS_ENDPOINT_URL=server.url, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_REGION="us-east-1")
    import boto3
    boto3.client("s3", endpoint_url=server.url, region_name="us-east-1").create_bucket(Bucket=bucket)
    common = ["extract", work / "corpus.csv", "--strategy", args.strategy, "--no-progress", "--overwrite",
              *(["--block-rows", args.block_rows] if args.block_rows else [])]
    stores = {"SQLite folder": work / "store", "S3 (local server)": f"s3://{bucket}/bench"}
    firsts, seconds, io = {}, {name: [] for name in stores}, {}
    for name, store in stores.items():
        server.counted.reset()
        firsts[name] = run_cli([*common, "-o", work / "first.parquet", "--cache", store])
        io[name] = per_1000(server.counted, firsts[name][1])
    for _ in range(max(1, args.repeats)):   # alternated, so a change in the machine's load hits both stores
        for name, store in stores.items():
            server.counted.reset()
            seconds[name].append(run_cli([*common, "-o", work / "second.parquet", "--cache", store]))
            io[name, 2] = per_1000(server.counted, seconds[name][-1][2])
    found = {name: (firsts[name], io[name], min(seconds[name]), io[name, 2]) for name in stores}
    from pipeline.cache.stores import open_store
    with open_store(f"s3://{bucket}/bench") as opened:
        stored = opened.stats()
    server.stop()
    blocks = f" --block-rows {args.block_rows}" if args.block_rows else ""
    lines = [f"{args.docs} documents of {args.corpus.name}, --strategy {args.strategy}{blocks}, the default model; "
             f"{datetime.date.today()}; {machine()}", "",
             "| store | first run | windows encoded | second run | windows from the store | first run: PUT / LIST / "
             "GET per 1,000 windows | second run: PUT / LIST / GET per 1,000 | bytes sent / received per 1,000 "
             "windows (first; second) |", "|---|---:|---:|---:|---:|---|---|---|"]
    for name, (first, fio, second, sio) in found.items():
        io = (f"{fio['PUT']:.1f} / {fio['LIST']:.1f} / {fio['GET']:.1f}", f"{sio['PUT']:.1f} / {sio['LIST']:.1f} / "
              f"{sio['GET']:.1f}", f"{fio['sent'] / 1e6:.2f} MB / {fio['received'] / 1e6:.2f} MB; "
              f"{sio['sent'] / 1e6:.2f} MB / {sio['received'] / 1e6:.2f} MB")
        if name.startswith("SQLite"):
            io = ("-", "-", "- (a local file)")
        lines.append(f"| {name} | {first[0]:.1f} s | {first[1]:,} | {second[0]:.1f} s | {second[2]:,} | "
                     f"{io[0]} | {io[1]} | {io[2]} |")
    ratio = found["S3 (local server)"][2][0] / found["SQLite folder"][2][0]
    lines += ["", f"Second run, S3 / SQLite: {ratio:.2f}x. Stored in S3: {stored['size_bytes']:,} bytes in "
              f"{stored['objects']} objects, {stored['bytes_per_1000'] / 1e6:.2f} MB per 1,000 windows.",
              f"Command: .venv/bin/python bench/s3_store_bench.py --docs {args.docs} --strategy {args.strategy} "
              f"--repeats {args.repeats}{blocks}"]
    text = "\n".join(lines)
    print(text)
    args.output.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
