"""Issue 19's feeder benchmark: the whole local pipeline with the forward pass stubbed, against the raw batch
tokenizer on the same texts, on 1 core and on all cores; run by `make bench` (the "feeder" section).

The corpus is real text: the ``text`` column of every examples/*.csv, cycled to ``--docs`` documents and
written to a temporary parquet file. Each contender runs in its own subprocess (this file with
``--worker``), so environment (``TOKENIZERS_PARALLELISM``), CPU affinity and the CPU-time counters are
its own:

- raw tokenizer: ``tokenizer(texts, add_special_tokens=False)`` on all texts in one call, texts in memory;
- feeder: ``pipeline.engine.local.run`` (parquet scan to parquet written) with the model replaced, inside this
  benchmark only, by a stub whose call returns zeros of the right shape (an expanded view: no memory
  written), so batching, padding, pooling, aggregation and writing run for real.

"1 core" pins the process to one CPU (``os.sched_setaffinity``), with ``--threads 1`` and
``TOKENIZERS_PARALLELISM=false``; "all cores" leaves both at their defaults. Tokens are the documents'
content tokens (``Summary.tokens``), the same count as the raw tokenizer's ids.

Example:
    .venv/bin/python bench/feeder.py --docs 2000     # about 2 minutes on 2 cores
"""
from __future__ import annotations

import argparse
import csv
import datetime
import functools
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # `pipeline` importable when run as bench/feeder.py

RESULTS = ROOT / "bench" / "results_feeder.md"
TIMEOUT_S = 900
# (label, worker, cores, feed workers): None = the pipeline default (feed_workers(): one), -1 = one per core
CONTENDERS = (
    ("raw tokenizer, 1 core", "raw", 1, None),
    ("raw tokenizer, all cores", "raw", 0, None),
    ("feeder (forward stubbed), 1 core", "feeder", 1, None),
    ("feeder, all cores, 1 feed thread (the default)", "feeder", 0, None),
    ("feeder, all cores, one feed thread per core", "feeder", 0, -1),
)
STAGES = ("scan", "model load", "read", "tokenize", "segment", "dedup", "encode (less the forward)", "forward stub",
          "aggregate", "rows", "write")


def cpu_seconds() -> float:
    """User + system CPU seconds of this process (all threads) and of its waited-for children."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    return total


def build_corpus(n_docs: int, out: Path) -> int:
    """Write ``n_docs`` rows (id, text) cycled from the text column of examples/*.csv to ``out`` (parquet)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    csv.field_size_limit(sys.maxsize)
    texts: list[str] = []
    for path in sorted((ROOT / "examples").glob("*.csv")):
        with path.open(encoding="utf-8", newline="") as fh:
            texts += [row["text"] for row in csv.DictReader(fh) if row.get("text")]
    rows = [texts[i % len(texts)] for i in range(n_docs)]
    pq.write_table(pa.table({"id": [f"d{i:06d}" for i in range(n_docs)], "text": rows}), out)
    return len(texts)


# ---------------------------------------------------------------------------------------------------
# Workers (one subprocess each)


class Clock:
    """Per stage, wall seconds and CPU seconds of the calling thread (``time.thread_time``), summed over the
    threads that ran it: worker threads overlap, so wall seconds may sum to more than the run's wall time,
    and a stage's CPU seconds miss the work of threads it hands off to (the tokenizer's own Rust threads
    when TOKENIZERS_PARALLELISM is on)."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self.lock = threading.Lock()
        self.encode = None   # the timed pipeline's encode stage (timed_pipeline)

    def timed(self, fn, stage: str):
        """``fn`` as a timed call of itself: its seconds are added to ``stage``."""
        @functools.wraps(fn)
        def timed(*a, **kw):
            t, c = time.perf_counter(), time.thread_time()
            try:
                return fn(*a, **kw)
            finally:
                with self.lock:
                    self.seconds[stage] += time.perf_counter() - t
                    self.cpu[stage] += time.thread_time() - c

        return timed

    def wrap(self, owner, name: str, stage: str) -> None:
        """Replace ``owner.name`` by a timed call of itself (for the reading and writing around the stages)."""
        setattr(owner, name, self.timed(getattr(owner, name), stage))


class ZeroModel:
    """The forward-pass stub: called as the encoder calls a transformers model, it returns zeros of the model's
    output shapes, (b, seq, hidden) for last_hidden_state and every hidden state, (b, hidden) for the pooler."""

    def __init__(self, model):
        self.hidden = int(model.config.hidden_size)
        self.layers = int(model.config.num_hidden_layers)
        self.inner = model

    def parameters(self):
        return self.inner.parameters()

    def __call__(self, input_ids, attention_mask=None, output_hidden_states=False, **_):
        import torch
        from transformers.modeling_outputs import BaseModelOutputWithPooling

        b, seq = input_ids.shape
        zeros = torch.zeros(1, 1, self.hidden).expand(b, seq, self.hidden)       # (b, seq, h), no memory
        states = (zeros,) * (self.layers + 1) if output_hidden_states else None
        return BaseModelOutputWithPooling(last_hidden_state=zeros, pooler_output=zeros[:, 0], hidden_states=states)


def work_raw(args) -> dict:
    """The raw batch tokenizer on the corpus's texts (already in memory): one call on all of them."""
    import pyarrow.parquet as pq

    from pipeline.options.config import PipelineConfig
    from pipeline.model.facts import load_tokenizer

    texts = pq.read_table(args.corpus, columns=["text"]).column("text").to_pylist()
    tok = load_tokenizer(PipelineConfig.from_options(inputs=(args.corpus,)).model)
    tok(texts[:8], add_special_tokens=False)  # warm-up (the Rust side's first call)
    c0, t0 = cpu_seconds(), time.perf_counter()
    ids = tok(texts, add_special_tokens=False)["input_ids"]
    seconds, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    return {"seconds": seconds, "cpu": cpu, "tokens": sum(len(x) for x in ids), "stages": {}}


def timed_pipeline(clock: Clock, cfg, stub: bool = True):
    """The built-in pipeline for ``cfg`` with each stage timed (``pipe.replace``), its weights loaded and,
    with ``stub``, the model's forward pass replaced by ZeroModel. Reading and writing are not stages: the
    run's read_block, scan and the file sink are timed where the local engine (engine/local.py) calls them. bench/gpu_bench.py
    uses it without the stub (``clock.encode``: the encode stage, its encoder hooked there)."""
    import pipeline.engine.run as run
    import pipeline.engine.local as stream   # the local engine: its reader and feeder threads
    import pipeline.output.write as write
    from pipeline.engine.compose import Pipeline

    for owner, name, stage in ((run, "scan", "scan"), (stream, "read_block", "read"), (write.FileSink, "write", "write"),
                               (write.FileSink, "commit", "write")):
        clock.wrap(owner, name, stage)
    pipe = Pipeline.from_config(cfg)
    clock.encode = encode = pipe.encode_stage()   # the stage itself, before the timing wrappers hide it
    for name in pipe.names:
        pipe = pipe.replace(name, clock.timed(pipe[name], name))
    clock.timed(encode.load, "model load")()
    if stub:
        encoder = encode.encoder
        encoder.model = ZeroModel(encoder.model)   # Encoder._run hands self.model to _forward, which calls it
        clock.wrap(ZeroModel, "__call__", "forward stub")
    return pipe


def stage_split(clock: Clock) -> tuple[dict[str, float], dict[str, float]]:
    """(wall, CPU) seconds per stage; the encode stage's time less the model call is reported apart
    (batching, padding, pooling, host-device copies, the copy back)."""
    stages, stage_cpu = dict(clock.seconds), dict(clock.cpu)
    for split in (stages, stage_cpu):
        model = split.get("forward stub", 0.0) + split.get("forward", 0.0)
        split["encode (less the forward)"] = split.pop("encode", 0.0) - model
    return stages, stage_cpu


def work_feeder(args) -> dict:
    """pipeline.engine.local.run on the corpus with the model stubbed; stage seconds from the timed stages."""
    import pipeline.engine.local as local
    import pipeline.engine.local as stream   # the local engine: its reader and feeder threads
    from pipeline.options.config import PipelineConfig

    clock = Clock()
    if args.feed_workers:
        stream.feed_workers = lambda: args.feed_workers  # the one-feed-thread row (the local engine asks it)
    cfg = PipelineConfig.from_options(inputs=(args.corpus,), id_col="id", strategy=args.strategy, progress=False,
                                      output=str(Path(args.workdir) / f"{args.tag}.parquet"), overwrite=True,
                                      threads=args.threads)
    import transformers.models.bert.modeling_bert  # noqa: F401 - imported before the clock, as run_bench does
    c0, t0 = cpu_seconds(), time.perf_counter()
    pipe = timed_pipeline(clock, cfg)
    summary = local.run(cfg, pipe=pipe)
    seconds, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    stages, stage_cpu = stage_split(clock)
    return {"seconds": seconds, "cpu": cpu, "tokens": summary.tokens, "stages": stages, "stage_cpu": stage_cpu,
            "documents": summary.documents, "windows": summary.windows}


def worker_main(args) -> None:
    import warnings

    from pipeline.engine.feed import passive_omp_wait

    passive_omp_wait()   # as the command line does, before torch is imported
    warnings.simplefilter("ignore")
    if args.cores == 1:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    result = (work_raw if args.worker == "raw" else work_feeder)(args)
    Path(args.result).write_text(json.dumps(result))


# ---------------------------------------------------------------------------------------------------
# Parent


def run_worker(worker: str, cores: int, feed: int | None, corpus: Path, work: Path, tag: str,
               strategy: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if cores == 1:
        env["TOKENIZERS_PARALLELISM"] = "false"
        env["OMP_NUM_THREADS"] = "1"
    else:
        env["TOKENIZERS_PARALLELISM"] = "true"
    result = work / f"{tag}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", worker, "--corpus", str(corpus),
           "--workdir", str(work), "--tag", tag, "--result", str(result), "--cores", str(cores),
           "--strategy", strategy]
    if cores == 1:
        cmd += ["--threads", "1"]
    if feed:
        cmd += ["--feed-workers", str(len(os.sched_getaffinity(0)) if feed == -1 else feed)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}")
    return json.loads(result.read_text())


def table(results: dict[str, dict]) -> str:
    """The markdown table: one row per contender, then the stage split of the feeder rows."""
    raw1, rawn = results.get("raw tokenizer, 1 core"), results.get("raw tokenizer, all cores")
    lines = ["| run | tokens | wall s | CPU s | tokens/s | tokens per CPU-s | per CPU-s vs raw (same cores) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for label, r in results.items():
        base = raw1 if "1 core" in label else rawn
        vs = f"{(r['tokens'] / r['cpu']) / (base['tokens'] / base['cpu']):.2f}x" if base and base is not r else ""
        lines.append(f"| {label} | {r['tokens']:,} | {r['seconds']:.2f} | {r['cpu']:.2f} | {r['tokens'] / r['seconds']:,.0f} "
                     f"| {r['tokens'] / r['cpu']:,.0f} | {vs} |")
    feeders = [(label, r) for label, r in results.items() if r["stages"]]
    if feeders:
        lines += ["", "Time split per stage, CPU s / wall s, each summed over the threads that ran it (Clock's "
                  "docstring: worker threads overlap the main thread, so wall seconds may sum to more than the run's):",
                  "", "| stage | " + " | ".join(label for label, _ in feeders) + " |",
                  "|---|" + "---:|" * len(feeders)]
        for stage in STAGES:
            lines.append(f"| {stage} | " + " | ".join(f"{r['stage_cpu'].get(stage, 0.0):.2f} / {r['stages'].get(stage, 0.0):.2f}"
                                                     for _, r in feeders) + " |")
        lines.append("| whole run | " + " | ".join(f"{r['cpu']:.2f} / {r['seconds']:.2f}" for _, r in feeders) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=2000, help="documents in the corpus (default 2000)")
    ap.add_argument("--strategy", default="chunk", help="window strategy of the feeder runs (default chunk)")
    ap.add_argument("--output", type=Path, default=RESULTS, help="markdown file written (bench/results_feeder.md)")
    ap.add_argument("--worker", choices=("raw", "feeder"), help=argparse.SUPPRESS)
    for name in ("--corpus", "--workdir", "--tag", "--result"):
        ap.add_argument(name, help=argparse.SUPPRESS)
    ap.add_argument("--cores", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--feed-workers", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker_main(args)
        return 0
    if args.docs < 1:
        ap.error(f"--docs={args.docs} must be >= 1")
    when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    host = f"{platform.processor() or platform.machine()}, {len(os.sched_getaffinity(0))} cores, Python {platform.python_version()}"
    command = "bench/feeder.py " + " ".join(argv if argv is not None else sys.argv[1:])
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="longbert-feeder-") as tmp:
        work = Path(tmp)
        corpus = work / "corpus.parquet"
        n_texts = build_corpus(args.docs, corpus)
        print(f"# feeder benchmark, {when}: {args.docs} documents cycled from {n_texts} texts of examples/*.csv, "
              f"--strategy {args.strategy}", flush=True)
        for k, (label, worker, cores, feed) in enumerate(CONTENDERS):
            print(f"{label} ...", end=" ", flush=True)
            try:
                results[label] = r = run_worker(worker, cores, feed, corpus, work, f"{worker}{k}", args.strategy)
            except (RuntimeError, subprocess.TimeoutExpired) as err:
                print(f"FAILED {err}", flush=True)
                continue
            print(f"{r['seconds']:.2f} s wall, {r['cpu']:.2f} CPU s, {r['tokens']:,} tokens", flush=True)
    md = table(results)
    notes = []
    one, many = results.get("feeder (forward stubbed), 1 core"), results.get("feeder, all cores, 1 feed thread (the default)")
    if one and many:
        notes.append(f"all cores against one (feeder, tokens/s): {many['seconds'] and one['seconds'] / many['seconds']:.2f}x "
                     f"on {len(os.sched_getaffinity(0))} cores.")
    load = os.getloadavg()[0]
    notes.append(f"1-minute load average at the end: {load:.2f} on {os.cpu_count()} cores"
                 + (" (above the core count: other jobs shared the CPUs, so wall times and tokens/s are not the "
                    "machine's; CPU seconds are less affected)." if load > (os.cpu_count() or 1) else "."))
    counts = {r["tokens"] for r in results.values()}
    if len(counts) > 1:
        notes.append(f"warning: the runs counted different tokens: {sorted(counts)}")
    text = (f"# Feeder benchmark (issue 19)\n\nCommand: `{command.strip()}`  \nDate: {when}  \nMachine: {host}\n\n"
            f"Corpus: {args.docs} documents cycled from the {n_texts} texts of examples/*.csv (parquet), "
            f"`--strategy {args.strategy}`, forward pass stubbed (zeros).\n\n{md}\n\n" + "".join(f"{n}\n" for n in notes))
    print("\n" + md + "\n\n" + "\n".join(notes))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}")
    return 0 if len(results) == len(CONTENDERS) else 1


if __name__ == "__main__":
    sys.exit(main())
