"""Issue 19's device benchmark, one command (`make bench-gpu`, about 3 minutes on one H200): the GPU's bf16
matrix rate, then real text through the real pipeline in bfloat16 with ``--strategy chunk`` at 512, for the
bundled MiniLM and a BERT-base-size BertModel; writes bench/results_gpu.md.

Steps, each timed after a warm-up:
1. bf16 matrix rate: ``torch.matmul`` of two 8192 x 8192 bfloat16 matrices, 20 times between CUDA events;
   2 * 8192^3 FLOP each.
2. Corpus: examples/labelled.csv (real man pages and docs, 64% over 512 tokens) repeated ``--repeat`` times.
3. For each model, ``pipeline.engine.local.run`` with ``--device cuda --dtype bfloat16 --strategy chunk --max-length
   512``, at the default batch limits (32 windows, 16,384 padded tokens) and at larger ones
   (``--batch-size 256 --max-batch-tokens 131072``). Reported: window tokens/s (real tokens the model sees,
   [CLS] and [SEP] included, padding not), model TFLOP/s from the FLOP count below, its fraction of the
   measured matrix rate, GPU busy time (CUDA events around every forward call: the sum of their elapsed
   times, against the run's wall time), and the time split by stage (bench/feeder.py's seams).
4. FLOP count of an encoder forward, per real token per layer: 24 h^2 (Q, K, V and output projections
   4 h^2 multiply-adds, the feed-forward 2 * 4 h^2, times 2 FLOP) + 4 s h (scores Q K^T and the weighted
   sum of V, s h multiply-adds each, times 2), s = the window's length; times the layers. Embeddings,
   LayerNorms, softmax and padding are not counted (so the rate is a lower bound of the work done).
5. bf16 against float32 on the CPU: ``--sample`` documents through the same pipeline with ``--device cpu``
   float32; the cosine of each document vector to the bf16 one (mean and min; >= 0.999 expected).
6. The feeder alone (bench/feeder.py's stub, forward pass returning zeros) on all cores, on the same corpus:
   the CPU side's own ceiling on this machine.

The BERT-base-size model has random weights from its config (12 layers, hidden 768, 12 heads, intermediate
3072, vocabulary 30,522; no hub is reachable), saved with the bundled model's tokenizer to a temporary
folder; weights do not change the speed.

Without CUDA it prints one line and exits with status 2 (nothing measured, nothing written). ``--smoke``
runs every step on the CPU at toy sizes (a check of this script, not a measurement; results go to
``--output``, by default bench/results_gpu_smoke.md).

Example:
    .venv/bin/python bench/gpu_bench.py                  # on a CUDA machine
    .venv/bin/python bench/gpu_bench.py --smoke --output /tmp/smoke.md
"""
from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

RESULTS = ROOT / "bench" / "results_gpu.md"
CORPUS = ROOT / "examples" / "labelled.csv"
NO_CUDA_EXIT = 2
BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
            intermediate_size=3072, max_position_embeddings=512)
BIG_BATCH = dict(batch_size=256, max_batch_tokens=131072)


def flops_per_window(n_tokens: int, hidden: int, layers: int) -> float:
    """Forward FLOP of one window of ``n_tokens`` real tokens: layers * n * (24 h^2 + 4 n h).

    Example: 512 tokens, h 768, 12 layers -> 12 * 512 * (24 * 768^2 + 4 * 512 * 768) = 9.66e10.
    """
    return layers * n_tokens * (24 * hidden * hidden + 4 * n_tokens * hidden)


def matmul_rate(device, n: int, iters: int) -> float:
    """TFLOP/s of ``torch.matmul`` on two (n, n) bfloat16 matrices: 2 n^3 FLOP a call, timed with CUDA events
    (perf_counter on the CPU) after 3 warm-up calls."""
    import torch

    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        torch.matmul(a, b)
    if device.type == "cuda":
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            torch.matmul(a, b)
        end.record()
        end.synchronize()
        seconds = start.elapsed_time(end) / 1000
    else:
        t = time.perf_counter()
        for _ in range(iters):
            torch.matmul(a, b)
        seconds = time.perf_counter() - t
    return 2 * n ** 3 * iters / seconds / 1e12


def write_corpus(repeat: int, out: Path, limit: int | None = None) -> int:
    """examples/labelled.csv's (id, text) rows repeated ``repeat`` times (ids made unique), first ``limit`` only."""
    csv.field_size_limit(sys.maxsize)
    with CORPUS.open(encoding="utf-8", newline="") as fh:
        rows = [(r["id"], r["text"]) for r in csv.DictReader(fh)]
    rows = [(f"{i}#{k}" if k else i, t) for k in range(repeat) for i, t in rows][:limit]
    with out.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "text"])
        writer.writerows(rows)
    return len(rows)


def base_model_dir(folder: Path, layers: int) -> Path:
    """A BERT-base-size BertModel with random weights (seed 0) and the bundled model's tokenizer, saved."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from pipeline.model.facts import resolve_model_path

    torch.manual_seed(0)
    BertModel(BertConfig(**{**BASE, "num_hidden_layers": layers})).save_pretrained(folder)
    AutoTokenizer.from_pretrained(resolve_model_path("default")).save_pretrained(folder)
    return folder


# ---------------------------------------------------------------------------------------------------
# One embedding run (in a subprocess: its own CUDA context, counters and thread settings)


def work_embed(args) -> dict:
    """pipeline.engine.local.run on ``args.csv``; forward calls bracketed by CUDA events; stage split; vectors saved."""
    import numpy as np
    import pyarrow.parquet as pq
    import torch

    import feeder
    import pipeline.engine.local as local
    from pipeline.options.config import PipelineConfig

    clock = feeder.Clock()
    events: list = []
    marks: dict = {}
    options = dict(inputs=(args.csv,), id_col="id", strategy="chunk", max_length=512, progress=False,
                   output=str(Path(args.workdir) / f"{args.tag}.parquet"), overwrite=True, model=args.model,
                   device=args.device, dtype=args.dtype)
    if args.big_batch:
        options.update(BIG_BATCH)
    cfg = PipelineConfig.from_options(**options)
    import transformers.models.bert.modeling_bert  # noqa: F401 - imported before the clock
    t0 = time.perf_counter()
    pipe = feeder.timed_pipeline(clock, cfg, stub=False)
    encoder = clock.encode.encoder

    def before(_module, _args, _kwargs):
        marks["t"] = time.perf_counter()
        if encoder.device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            marks["event"] = start

    def after(_module, _args, _kwargs, _out):
        if encoder.device.type == "cuda":
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            events.append((marks["event"], end))
        with clock.lock:
            clock.seconds["forward"] += time.perf_counter() - marks["t"]

    encoder.model.register_forward_pre_hook(before, with_kwargs=True)
    encoder.model.register_forward_hook(after, with_kwargs=True)
    summary = local.run(cfg, pipe=pipe)
    seconds = time.perf_counter() - t0
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    busy = sum(s.elapsed_time(e) for s, e in events) / 1000
    out = pq.read_table(cfg.write.output, columns=["id", "features"])
    vecs = np.asarray(out.column("features").combine_chunks().values.to_numpy(zero_copy_only=False),
                      dtype=np.float32).reshape(out.num_rows, -1)
    np.save(Path(args.workdir) / f"{args.tag}.npy", vecs)
    stages, _ = feeder.stage_split(clock)
    mem = torch.cuda.max_memory_allocated() / 2 ** 30 if args.device.startswith("cuda") else 0.0
    return {"seconds": seconds, "busy": busy, "stages": stages, "documents": summary.documents,
            "windows": summary.windows, "ids": out.column("id").to_pylist(), "peak_gib": mem}


def window_lengths(csv_path: str, model: str) -> list[int]:
    """Lengths ([CLS] and [SEP] included) of the chunk windows of the corpus at 512, from longbert's own stages."""
    from pipeline.engine.resolved import resolve_config
    from pipeline.options.config import PipelineConfig
    from pipeline.read import read_block, scan
    from pipeline.text.segment import segment
    from pipeline.text.tokenize import tokenize_block

    cfg = PipelineConfig.from_options(inputs=(csv_path,), id_col="id", strategy="chunk", max_length=512,
                                      model=model, progress=False)
    cfg, tok, facts = resolve_config(cfg)
    lengths = []
    for block in map(read_block, scan(cfg.read).blocks):
        for doc in tokenize_block(block.column("text").to_pylist(), tok, with_offsets=False):
            if doc.error is None:
                lengths += [int(w.input_ids.shape[0]) for w in segment(doc, cfg.segment, facts.cls_id, facts.sep_id)]
    return lengths


def run_sub(argv: list[str], timeout: float) -> dict:
    """This file with ``--worker ...`` in a subprocess; its JSON result."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), *argv], env=env, capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-3:] if proc.stderr.strip() else [f"exit {proc.returncode}"]
        raise RuntimeError(" | ".join(tail))
    return json.loads(Path(argv[argv.index("--result") + 1]).read_text())


# ---------------------------------------------------------------------------------------------------
# Parent


def cosines(a, b):
    """Row-wise cosine of two (n, D) arrays: (mean, min)."""
    import numpy as np

    num = (a * b).sum(axis=1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    cos = num / np.maximum(den, 1e-12)
    return float(cos.mean()), float(cos.min())


def measure(args, work: Path, device: str, peak: float) -> tuple[str, list[str]]:
    """Every model row and the bf16-vs-float32 check; returns (markdown table, notes)."""
    import numpy as np

    corpus = work / "corpus.csv"
    n_docs = write_corpus(args.repeat, corpus, limit=6 if args.smoke else None)
    sample = work / "sample.csv"
    write_corpus(1, sample, limit=args.sample)
    warm = work / "warm.csv"
    write_corpus(1, warm, limit=8)
    layers = 2 if args.smoke else BASE["num_hidden_layers"]
    models = [("MiniLM-L6 (bundled)", "default", 384, 6),
              (f"BERT-base size ({layers} layers, random)", str(base_model_dir(work / "bert-base", layers)), 768, layers)]
    lengths = window_lengths(str(corpus), "default")
    tokens = sum(lengths)
    notes = [f"corpus: {n_docs:,} documents (examples/labelled.csv x {args.repeat}), {len(lengths):,} chunk windows, "
             f"{tokens:,} window tokens ([CLS] and [SEP] included, padding not)."]
    lines = ["| model | batch limits | wall s | window tokens/s | model TFLOP/s | of matrix rate | GPU busy s (share "
             "of wall) | peak GiB | split (s): read / tokenize / segment / encode less forward / forward / aggregate / rows / write |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    dtype = "bfloat16"
    for name, path, hidden, n_layers in models:
        flop = sum(flops_per_window(n, hidden, n_layers) for n in lengths)
        run_sub(["--worker", "embed", "--csv", str(warm), "--workdir", str(work), "--tag", "warm", "--model", path,
                 "--device", device, "--dtype", dtype, "--result", str(work / "warm.json")], args.timeout)
        for big in (False, True):
            tag = f"{'base' if hidden == 768 else 'mini'}-{'big' if big else 'default'}"
            argv = ["--worker", "embed", "--csv", str(corpus), "--workdir", str(work), "--tag", tag, "--model", path,
                    "--device", device, "--dtype", dtype, "--result", str(work / f"{tag}.json")]
            try:
                r = run_sub(argv + (["--big-batch"] if big else []), args.timeout)
            except (RuntimeError, subprocess.TimeoutExpired) as err:
                lines.append(f"| {name} | {'256 / 131,072' if big else '32 / 16,384'} | FAILED: {str(err)[:200]} |")
                continue
            s = r["stages"]
            split = " / ".join(f"{s.get(k, 0.0):.1f}" for k in ("read", "tokenize", "segment", "encode (less the forward)",
                                                                "forward", "aggregate", "rows", "write"))
            rate = flop / r["seconds"] / 1e12
            lines.append(f"| {name} | {'256 windows / 131,072 tokens' if big else '32 windows / 16,384 tokens'} | "
                         f"{r['seconds']:.1f} | {tokens / r['seconds']:,.0f} | {rate:.3g} | {rate / peak:.0%} | "
                         f"{r['busy']:.1f} ({r['busy'] / r['seconds']:.0%}) | {r['peak_gib']:.1f} | {split} |")
        ref = f"{'base' if hidden == 768 else 'mini'}-cpu"
        try:
            r32 = run_sub(["--worker", "embed", "--csv", str(sample), "--workdir", str(work), "--tag", ref, "--model",
                           path, "--device", "cpu", "--dtype", "float32", "--result", str(work / f"{ref}.json")],
                          args.timeout)
            bf = f"{'base' if hidden == 768 else 'mini'}-big"
            bf_ids = json.loads((work / f"{bf}.json").read_text())["ids"]
            at = {doc_id: k for k, doc_id in enumerate(bf_ids)}
            v16 = np.load(work / f"{bf}.npy")[[at[i] for i in r32["ids"]]]
            mean, low = cosines(v16, np.load(work / f"{ref}.npy"))
            notes.append(f"{name}: bf16 on {device} against float32 on the CPU, {len(r32['ids'])} documents: "
                         f"cosine mean {mean:.5f}, min {low:.5f} ({'ok' if low >= 0.999 else 'BELOW 0.999'}).")
        except (RuntimeError, subprocess.TimeoutExpired, FileNotFoundError, KeyError) as err:
            notes.append(f"{name}: the bf16-vs-float32 check failed: {str(err)[:200]}")
    try:
        f = run_sub(["--worker", "feeder", "--csv", str(corpus), "--workdir", str(work), "--tag", "feeder",
                     "--result", str(work / "feeder.json")], args.timeout)
        notes.append(f"feeder alone (forward stubbed, all {len(os.sched_getaffinity(0))} cores, same corpus): "
                     f"{f['tokens'] / f['seconds']:,.0f} document tokens/s ({f['seconds']:.1f} s wall).")
    except (RuntimeError, subprocess.TimeoutExpired) as err:
        notes.append(f"feeder alone failed: {str(err)[:200]}")
    return "\n".join(lines), notes


def work_feeder(args) -> dict:
    """bench/feeder.py's stubbed pipeline on ``args.csv`` (chunk, default threads)."""
    import feeder

    ns = argparse.Namespace(corpus=args.csv, workdir=args.workdir, tag=args.tag, strategy="chunk", threads=None,
                            feed_workers=None)
    return feeder.work_feeder(ns)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=None, help="copies of examples/labelled.csv (default 10; smoke 1)")
    ap.add_argument("--sample", type=int, default=None, help="documents of the float32 CPU check (default 24; smoke 2)")
    ap.add_argument("--output", type=Path, default=None, help="markdown written (bench/results_gpu.md)")
    ap.add_argument("--smoke", action="store_true", help="run every step on the CPU at toy sizes (checks the script)")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per subprocess (default 240)")
    ap.add_argument("--worker", choices=("embed", "feeder"), help=argparse.SUPPRESS)
    for name in ("--csv", "--workdir", "--tag", "--result", "--model", "--device", "--dtype"):
        ap.add_argument(name, help=argparse.SUPPRESS)
    ap.add_argument("--big-batch", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        import warnings

        warnings.simplefilter("ignore")
        result = (work_embed if args.worker == "embed" else work_feeder)(args)
        Path(args.result).write_text(json.dumps(result))
        return 0
    try:
        import torch
    except ImportError:
        print(f"gpu_bench: {sys.executable} has no torch; run it with the python that holds a CUDA torch "
              "(make bench-gpu GPU_PYTHON=...); nothing measured (exit 2)")
        return NO_CUDA_EXIT
    if not args.smoke and not torch.cuda.is_available():
        print(f"gpu_bench: no CUDA device visible to torch {torch.__version__} (CUDA build: "
              f"{torch.version.cuda or 'none'}); nothing measured, {RESULTS.relative_to(ROOT)} not written (exit 2)")
        return NO_CUDA_EXIT
    args.repeat = args.repeat or (1 if args.smoke else 10)
    args.sample = args.sample or (2 if args.smoke else 24)
    output = args.output or (RESULTS.with_name("results_gpu_smoke.md") if args.smoke else RESULTS)
    device = torch.device("cpu" if args.smoke else "cuda")
    started = time.perf_counter()
    peak = matmul_rate(device, 512 if args.smoke else 8192, 3 if args.smoke else 20)
    gpu = torch.cuda.get_device_name(0) if device.type == "cuda" else "CPU (smoke run, not a measurement)"
    print(f"bf16 matmul: {peak:.3g} TFLOP/s on {gpu}", flush=True)
    with tempfile.TemporaryDirectory(prefix="longbert-gpu-") as tmp:
        md, notes = measure(args, Path(tmp), device.type, peak)
    when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    host = f"{gpu}, {len(os.sched_getaffinity(0))} CPU cores, torch {torch.__version__}, Python {platform.python_version()}"
    n = 512 if args.smoke else 8192
    text = (f"# Device benchmark (issue 19)\n\nCommand: `make bench-gpu` (bench/gpu_bench.py "
            f"{' '.join(argv if argv is not None else sys.argv[1:])})  \nDate: {when}  \nMachine: {host}  \n"
            f"Total wall time: {time.perf_counter() - started:.0f} s\n\n"
            f"Measured bf16 matrix rate: {peak:.3g} TFLOP/s (torch.matmul {n}x{n}x{n}, CUDA events after warm-up).\n\n"
            f"`--strategy chunk --max-length 512 --dtype bfloat16`, real pipeline (parquet written); model FLOP = "
            f"layers x tokens x (24 h^2 + 4 s h) per window of s tokens.\n\n{md}\n\n" + "".join(f"- {x}\n" for x in notes))
    print("\n" + text)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
