"""Requests and bytes of reading inputs from S3: the scan (on the driver), then every block (as a worker reads
it), for one object as JSON Lines, gzip-compressed JSON Lines and parquet.

A local S3 server (moto's server mode on 127.0.0.1, in this process: tests/cache/s3_server.py) counts every
request and body byte; the counts depend on the corpus and --block-rows only, not on the CPU or the load.
Prints one markdown table (docs/inputs.md, "Inputs on S3").

Example:
    .venv/bin/python bench/s3_input_bench.py --docs 5000 --block-rows 256
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "cache"))
from s3_server import CountedMotoServer  # noqa: E402

from pipeline.options.config import PipelineConfig  # noqa: E402
from pipeline.read import read_block, scan  # noqa: E402


def objects(n_docs: int) -> dict[str, bytes]:
    """The man pages of examples/corpus.csv, repeated to ``n_docs`` rows, as three objects."""
    texts = pd.read_csv(ROOT / "examples" / "corpus.csv", dtype=str, keep_default_na=False)["text"].tolist()
    rows = [{"id": f"d{i}", "text": texts[i % len(texts)]} for i in range(n_docs)]
    lines = "".join(json.dumps(r) + "\n" for r in rows).encode()
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows), sink, row_group_size=1024)
    return {"c.jsonl": lines, "c.jsonl.gz": gzip.compress(lines), "c.parquet": sink.getvalue().to_pybytes()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=5000)
    parser.add_argument("--block-rows", type=int, default=256)
    args = parser.parse_args()
    import boto3

    server = CountedMotoServer()
    server.start()
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_REGION="us-east-1",
                      AWS_ENDPOINT_URL=server.url)
    client = boto3.client("s3", endpoint_url=server.url, region_name="us-east-1")
    client.create_bucket(Bucket="bench")
    print("| object | documents | stored MB | blocks | scan: requests, MB | blocks: requests, MB | "
          "requests per 1,000 documents |\n|---|---|---|---|---|---|---|")
    for key, body in objects(args.docs).items():
        client.put_object(Bucket="bench", Key=key, Body=body)
        server.counted.reset()
        plan = scan(PipelineConfig.from_options(inputs=(f"s3://bench/{key}",), block_rows=args.block_rows).read)
        scan_requests, scan_bytes = sum(server.counted.requests.values()), server.counted.bytes_out
        server.counted.reset()
        for spec in plan.blocks:
            read_block(spec)
        block_requests, block_bytes = sum(server.counted.requests.values()), server.counted.bytes_out
        per_k = (scan_requests + block_requests) / plan.n_rows * 1000
        print(f"| `{key}` | {plan.n_rows:,} | {len(body) / 1e6:.1f} | {len(plan.blocks)} | {scan_requests}, "
              f"{scan_bytes / 1e6:.1f} | {block_requests}, {block_bytes / 1e6:.1f} | {per_k:.1f} |")
    server.stop()


if __name__ == "__main__":
    main()
