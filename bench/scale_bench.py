"""Scale evidence on one machine: a generated corpus of long documents through the local engine and 1 and 2 Ray
workers with a tiny model (hidden 64), into a DIR/ output. Per run: documents per second, the peak memory of the
driver and of the workers, the bytes that pass through the driver (the pickled records the workers hand back,
and for the local engine the rows it writes itself) and the parts' bytes.

With ``--s3`` the corpus is JSON Lines objects on a local S3 server (moto's server mode in this process,
tests/cache/s3_server.py, which counts every request and body byte) and the output an ``s3://`` prefix: the
workers read their blocks and write their parts there themselves; the table adds S3 requests and MB each way
per 1,000 documents.

    python bench/scale_bench.py --docs 500 --tokens 4000          # make bench-scale (SCALE_ARGS=...)
    python bench/scale_bench.py --docs 10000 --tokens 2000 --s3 --levels document

Each run is a child process (``--child``): ``longbert extract`` in-process, the driver's stream watched
(pipeline.engine.driver._write_all) to count what reaches it. Writes a markdown table to stdout and to
``--out`` (bench/results_scale.md), with the command, the CPU flags and the load.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORDS = [f"w{i}" for i in range(200)]


def make_model(folder: Path) -> Path:
    """A random 2-layer BERT of hidden 64 whose vocabulary holds WORDS (one word, one token)."""
    from transformers import BertConfig, BertModel, BertTokenizerFast
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    tok = BertTokenizerFast.from_pretrained(folder)
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=128, max_position_embeddings=512)
    BertModel(cfg).eval().save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def make_corpus(path: Path, docs: int, tokens: int) -> Path:
    """``docs`` documents of ``tokens`` words each (+-25%), ids d0..., as JSON Lines."""
    rng = random.Random(0)
    with path.open("w") as f:
        for i in range(docs):
            n = int(tokens * rng.uniform(0.75, 1.25))
            f.write(json.dumps({"id": f"d{i}", "text": " ".join(rng.choice(WORDS) for _ in range(n))}) + "\n")
    return path


def child(args: list[str]) -> None:
    """Run extract with ``args`` in this process; print what the driver saw as JSON."""
    import pipeline.engine.driver as driver
    from click.testing import CliRunner

    from cli import main
    from pipeline.engine.run import peak_memory

    seen = {"records": 0, "record_bytes": 0, "row_bytes": 0, "worker_peak": 0, "part_bytes": 0}
    real = driver._write_all

    def spy(stream, *rest):
        def watched():
            for item in stream:
                if type(item).__name__ == "PartDone":
                    seen["records"] += 1
                    seen["record_bytes"] += len(pickle.dumps(item))
                    seen["worker_peak"] = max(seen["worker_peak"], item.peak_bytes)
                    seen["part_bytes"] += item.part["bytes"]
                elif item.out.table is not None:
                    seen["row_bytes"] += item.out.table.nbytes
                yield item
        return real(watched(), *rest)

    driver._write_all = spy
    started = time.perf_counter()
    result = CliRunner().invoke(main, ["extract", *args], catch_exceptions=False)
    seen["seconds"] = time.perf_counter() - started
    seen["driver_peak"] = peak_memory()
    seen["exit"] = result.exit_code
    seen["summary"] = result.output.strip().splitlines()[-1] if result.output.strip() else ""
    print("SCALE " + json.dumps(seen))


def s3_corpus(server, corpus: Path, shards: int) -> tuple[str, dict]:
    """``corpus`` split into ``shards`` JSON Lines objects in a new bucket of ``server``: (their glob, the AWS
    variables that reach them)."""
    import boto3

    bucket = f"scale-{os.getpid()}"
    env = {"AWS_ENDPOINT_URL": server.url, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
           "AWS_REGION": "us-east-1"}
    s3 = boto3.client("s3", endpoint_url=server.url, aws_access_key_id="bench", aws_secret_access_key="bench",
                      region_name="us-east-1")
    s3.create_bucket(Bucket=bucket)
    lines = corpus.read_text().splitlines(keepends=True)
    per = -(-len(lines) // shards)
    for i in range(shards):
        s3.put_object(Bucket=bucket, Key=f"corpus/part-{i:04d}.jsonl", Body="".join(lines[i * per:(i + 1) * per]).encode())
    return f"s3://{bucket}/corpus/*.jsonl", env


def run_one(corpus: Path | str, model: Path, out: Path | str, engine: str, workers: int, level: str, timeout: int,
            env: dict | None = None) -> dict:
    args = [str(corpus), "--model", str(model), "--strategy", "chunk", "--level", level, "--block-rows", "50",
            "--no-progress", "-o", f"{out}/", "--overwrite"]
    if engine == "ray":
        args += ["--engine", "ray", "--workers", str(workers), "--cpus-per-worker", "1"]
    env = {**os.environ, **(env or {}), "PYTHONPATH": str(REPO), "RAY_AUTH_MODE": "disabled"}
    done = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=REPO)
    line = next((x for x in done.stdout.splitlines() if x.startswith("SCALE ")), None)
    if line is None:
        raise SystemExit(f"run failed ({engine}, {workers}): {done.stderr[-2000:]}")
    seen = json.loads(line[len("SCALE "):])
    from pipeline.output.write import read_manifest

    remote = str(out).startswith("s3://")   # read with the run's AWS variables (env), set in this process too
    os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")} if remote else {})
    seen["part_bytes"] = sum(p["bytes"] for p in read_manifest(f"{out}/" if remote else out)["parts"])
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--tokens", type=int, default=4000, help="words per document (+-25%%)")
    parser.add_argument("--levels", default="document,token")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per run")
    parser.add_argument("--out", help="markdown file (default bench/results_scale.md; with --s3 results_scale_s3.md)")
    parser.add_argument("--s3", action="store_true", help="inputs and output on a local S3 server (moto)")
    parser.add_argument("--shards", type=int, default=20, help="--s3: JSON Lines objects the corpus is cut into")
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
        return
    opts = parser.parse_args()
    opts.out = opts.out or str(REPO / "bench" / ("results_scale_s3.md" if opts.s3 else "results_scale.md"))
    work = Path(tempfile.mkdtemp(prefix="lbscale"))
    model = make_model(work / "model")
    corpus = make_corpus(work / "corpus.jsonl", opts.docs, opts.tokens)
    server, env, where = None, None, work
    if opts.s3:
        sys.path.insert(0, str(REPO / "tests" / "cache"))
        from s3_server import CountedMotoServer

        server = CountedMotoServer()
        server.start()
        corpus, env = s3_corpus(server, corpus, opts.shards)
        where = corpus.rsplit("/corpus/", 1)[0]
    rows = []
    for level in opts.levels.split(","):
        for engine, workers in (("local", 1), ("ray", 1), ("ray", 2)):
            if server is not None:
                server.counted.reset()
            r = run_one(corpus, model, f"{where}/out-{level}-{engine}{workers}", engine, workers, level, opts.timeout,
                        env)
            if server is not None:
                c, k = server.counted, 1000 / opts.docs
                r["requests"] = {m: c.count(m, ok_only=False) * k for m in ("GET", "PUT", "POST", "LIST", "DELETE", "HEAD")}
                r["mb_read"], r["mb_written"] = c.bytes_out * k / 1e6, c.bytes_in * k / 1e6
            rows.append((level, engine, workers, r))
            print(level, engine, workers, json.dumps(r), flush=True)
    flags = subprocess.run("lscpu | grep -o 'amx_bf16\\|avx512_bf16\\|avx2' | sort -u | tr '\\n' ' '", shell=True,
                           capture_output=True, text=True).stdout.strip()
    lines = [f"`python bench/scale_bench.py --docs {opts.docs} --tokens {opts.tokens} --levels {opts.levels}"
             f"{' --s3' if opts.s3 else ''}` on "
             f"{os.cpu_count()} cores ({platform.processor() or platform.machine()}; {flags}), load "
             f"{os.getloadavg()[0]:.2f} at the end; tiny model (hidden 64), chunk windows of 512, --block-rows 50, "
             + (f"inputs (JSON Lines, {opts.shards} objects) and output (s3:// prefix) on moto's S3 server in the "
                "benchmark's process" if opts.s3 else "DIR/ output")
             + "; the seconds include starting a local Ray.", "",
             "| level | engine | workers | docs/s | driver peak MB | worker peak MB | bytes through the driver | "
             "parts MB | exit |" + (" S3 requests per 1,000 docs (GET/PUT/POST/LIST/DELETE/HEAD) | MB read / written "
                                     "per 1,000 docs |" if opts.s3 else ""),
             "|---|---|---|---|---|---|---|---|---|" + ("---|---|" if opts.s3 else "")]
    for level, engine, workers, r in rows:
        through = r["record_bytes"] if engine == "ray" else r["row_bytes"]
        what = f"{through:,} ({r['records']} records)" if engine == "ray" else f"{through:,} (rows)"
        worker = r["worker_peak"] if engine == "ray" else r["driver_peak"]   # local: the driver is the worker
        lines.append(f"| {level} | {engine} | {workers} | {opts.docs / r['seconds']:.1f} | {r['driver_peak'] / 1e6:.0f} | "
                     f"{worker / 1e6:.0f} | {what} | {r['part_bytes'] / 1e6:.1f} | {r['exit']} |"
                     + (f" {sum(r['requests'].values()):.0f} ({'/'.join(f'{v:.0f}' for v in r['requests'].values())}) | "
                        f"{r['mb_read']:.1f} / {r['mb_written']:.1f} |" if opts.s3 else ""))
    text = "\n".join(lines) + "\n"
    print(text)
    if server is not None:
        server.stop()
    Path(opts.out).write_text(text)


if __name__ == "__main__":
    main()
