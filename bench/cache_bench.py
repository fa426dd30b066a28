"""Issue 18's rows: the window store (``--cache DIR``) in real runs of ``longbert extract``; run by `make bench`.

Each run is ``python cli.py extract`` in its own process (model load, reading and writing included,
as a user's command), timed with a wall clock; the windows encoded and taken from the store are read
from its summary line. Rows:

- cold run without --cache, then the same cold with a new store (the store's overhead);
- the second identical run (all windows from the store);
- the same run with another --aggregate and with --normalize (0 windows encoded);
- the corpus grown by 10% new documents (expected windows counted with longbert's own segmenter);
- optionally (--probe N) ``probe CORPUS --sample N --cache`` and then an extract of a probed feature;
- the store's bytes on disk per 1,000 windows.

Example:
    .venv/bin/python bench/cache_bench.py --docs 100                  # writes bench/results_cache.md
    .venv/bin/python bench/cache_bench.py --docs 40 --strategy chunk --probe 40
"""
from __future__ import annotations

import argparse
import datetime
import os
import random
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from run_bench import DEFAULT_CORPUS, machine, read_corpus  # noqa: E402

RESULTS = ROOT / "bench" / "results_cache.md"


def write_csv(rows: list[tuple[str, str]], path: Path) -> None:
    """Rows (id, text) -> a CSV of columns id,text."""
    import csv
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "text"])
        writer.writerows(rows)


def run_cli(args: list[str]) -> tuple[float, int, int, str]:
    """(wall seconds, windows encoded, windows from the cache (0 without --cache), summary line)."""
    cmd = [sys.executable, str(ROOT / "cli.py"), *map(str, args)]
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{shlex.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    line = [x for x in done.stdout.splitlines() if "windows encoded" in x][-1]
    encoded = int(line.split(" windows encoded")[0].split()[-1])
    cached = int(line.split(" from the cache")[0].split()[-1]) if "from the cache" in line else 0
    return seconds, encoded, cached, line


def new_windows(old: list[str], new: list[str], strategy: str) -> int:
    """Distinct windows of ``new`` that ``old`` does not make (the default model, longbert's segmenter)."""
    from pipeline.engine.resolved import resolve_config
    from pipeline.options.config import PipelineConfig
    from pipeline.text.segment import segment
    from pipeline.text.tokenize import tokenize_block

    cfg, tok, facts = resolve_config(PipelineConfig.from_options(strategy=strategy))
    seg = cfg.segment

    def windows(texts: list[str]) -> set[tuple[int, ...]]:
        docs = tokenize_block(texts, tok, None)
        return {tuple(w.input_ids.tolist()) for d in docs if d.error is None
                for w in segment(d, seg, facts.cls_id, facts.sep_id)}

    return len(windows(new) - windows(old))


def store_share(texts: list[str], strategy: str) -> tuple[float, float, int]:
    """In this process, a cold run's blocks with a new store: (seconds in all blocks, seconds of those in
    the store's lookups and puts, windows). The store's own cost, apart from the machine's load."""
    import pipeline.model.window_cache as wc
    from pipeline.engine.compose import Pipeline
    from pipeline.options.config import PipelineConfig
    from pipeline.read import block_from_texts

    spent = [0.0]
    for name in ("lookup", "put"):
        real = getattr(wc.WindowCache, name)

        def timed(self, *a, _real=real):
            t = time.perf_counter()
            try:
                return _real(self, *a)
            finally:
                spent[0] += time.perf_counter() - t
        setattr(wc.WindowCache, name, timed)
    pipe = Pipeline.from_config(PipelineConfig.from_options(strategy=strategy, cache=tempfile.mkdtemp(), progress=False))
    pipe.encode_stage().load()
    started = time.perf_counter()
    blocks = (block_from_texts(texts[start:start + 256]) for start in range(0, len(texts), 256))
    windows = sum(out.counts.windows for out in pipe.map(blocks))
    return time.perf_counter() - started, spent[0], windows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=100, help="documents in the corpus (default 100)")
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="CSV with columns id,text")
    ap.add_argument("--strategy", default="head_tail", help="extract's --strategy (default head_tail)")
    ap.add_argument("--repeats", type=int, default=1,
                    help="cold runs with and without --cache, alternated; the fastest of each is reported")
    ap.add_argument("--probe", type=int, default=0, help="also time probe --sample N, then extract (0: skip)")
    ap.add_argument("--output", type=Path, default=RESULTS, help=f"markdown file (default {RESULTS.name})")
    args = ap.parse_args(argv)
    rows = read_corpus(args.corpus, "text", "id")
    grow = max(1, args.docs // 10)
    picked = random.Random(0).sample(range(len(rows)), min(len(rows), args.docs + grow))
    base, extra = [rows[i] for i in picked[:args.docs]], [rows[i] for i in picked[args.docs:]]
    work = Path(tempfile.mkdtemp(prefix="lbcache"))
    write_csv(base, work / "base.csv")
    write_csv(base + extra, work / "grown.csv")
    store = work / "store"
    common = ["--strategy", args.strategy, "--no-progress", "--overwrite"]

    def extract(csv_name: str, out: str, *more) -> tuple[float, int, int, str]:
        return run_cli(["extract", work / csv_name, "-o", work / out, *common, *more])

    table = []
    plain, cold = [], []
    for k in range(max(1, args.repeats)):  # alternated, so a load change on the machine hits both
        plain.append(extract("base.csv", "plain.parquet"))
        cold.append(extract("base.csv", "cold.parquet", "--cache", store if k == 0 else work / f"store{k}"))
    (t_plain, n_plain, _, _), (t_cold, n_cold, _, _) = min(plain), min(cold)
    from pipeline.cache.store import WindowStore
    with WindowStore.open(store) as opened:
        stats = opened.stats()
    t_second, n_second, c_second, _ = extract("base.csv", "second.parquet", "--cache", store)
    t_agg, n_agg, _, _ = extract("base.csv", "agg.parquet", "--cache", store, "--aggregate", "max")
    t_norm, n_norm, _, _ = extract("base.csv", "norm.parquet", "--cache", store, "--normalize")
    want = new_windows([t for _, t in base], [t for _, t in extra], args.strategy)
    t_grown, n_grown, c_grown, _ = extract("grown.csv", "grown.parquet", "--cache", store)
    table += [
        ("first run, no --cache", t_plain, n_plain, 0, "1.00x"),
        ("first run, cold store (--cache)", t_cold, n_cold, 0, f"{t_cold / t_plain:.2f}x of no --cache"),
        ("second identical run", t_second, n_second, c_second, f"{t_second / t_cold:.2f}x of the first"),
        ("another --aggregate (max)", t_agg, n_agg, n_cold - n_agg, f"{t_agg / t_cold:.2f}x of the first"),
        ("--normalize", t_norm, n_norm, n_cold - n_norm, f"{t_norm / t_cold:.2f}x of the first"),
        (f"grown corpus (+{len(extra)} documents; {want} new windows expected)", t_grown, n_grown, c_grown,
         f"{t_grown / t_cold:.2f}x of the first"),
    ]
    if args.probe:
        pstore = work / "pstore"
        labelled = work / "labelled.csv"
        import csv
        with args.corpus.open(encoding="utf-8", newline="") as src, labelled.open("w", newline="") as dst:
            reader = csv.DictReader(src)
            writer = csv.DictWriter(dst, fieldnames=["id", "text", "label"])
            writer.writeheader()
            keep = {doc_id for doc_id, _ in base}
            for row in reader:
                if row["id"] in keep:
                    writer.writerow({k: row[k] for k in ("id", "text", "label")})
        started = time.perf_counter()
        run_probe = subprocess.run([sys.executable, str(ROOT / "cli.py"), "probe", str(labelled), "--label-col",
                                    "label", "--sample", str(args.probe), "--cache", str(pstore)],
                                   capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        t_probe = time.perf_counter() - started
        if run_probe.returncode != 0:
            raise SystemExit(f"probe failed:\n{run_probe.stderr[-2000:]}")
        t_after, n_after, c_after, _ = run_cli(["extract", labelled, "-o", work / "after.parquet", *common,
                                                "--pooling", "mean", "--cache", pstore])
        table += [(f"probe --sample {args.probe} --cache", t_probe, 0, 0, "(every strategy x pooling)"),
                  (f"then extract --strategy {args.strategy} (all {args.docs} documents)", t_after, n_after, c_after,
                   f"{t_after / t_cold:.2f}x of a first run")]
    t_blocks, t_store, n_store = store_share([t for _, t in base], args.strategy)
    table.append((f"in one process: a cold run's blocks, of which {t_store * 1000:.0f} ms in the store", t_blocks,
                  n_store, 0, f"store {t_store / t_blocks * 100:.2f}% of block time"))
    per_1000 = stats["bytes_per_1000"] or 0.0
    lines = [f"# Window store (issue 18), {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC", "",
             f"Command: `{shlex.join(['python', 'bench/cache_bench.py', *(argv or sys.argv[1:])])}`  ",
             f"Corpus: {args.docs} documents of {args.corpus.name}, --strategy {args.strategy}, default model.  ",
             f"Machine: {machine()}", "",
             "| run | wall s | windows encoded | from the store | ratio |", "|---|---:|---:|---:|---|"]
    lines += [f"| {name} | {t:.1f} | {n:,} | {c:,} | {ratio} |" for name, t, n, c, ratio in table]
    lines += ["", f"Store after the first run: {stats['size_bytes']:,} bytes for {stats['entries']:,} windows = "
              f"{per_1000 / 1e6:.2f} MB per 1,000 windows ({stats['models'][0]['dim']} float32 values each).",
              f"Targets: second run <= 0.15x the first ({t_second / t_cold:.2f}x); cold store <= 5% slower "
              f"({(t_cold / t_plain - 1) * 100:+.1f}% in wall time on this machine's load; the store's lookups and puts "
              f"{t_store / t_blocks * 100:.2f}% of the block time); grown corpus encodes exactly the new windows "
              f"({n_grown} of {want} expected)."]
    text = "\n".join(lines) + "\n"
    print(text)
    args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
