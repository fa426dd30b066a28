"""Peak memory against corpus size: ``longbert extract`` run as its own process on 1x, 4x and 16x a corpus, at
document, window and token level, float32 and int8 output, with the default model and a tiny one; each run's
peak resident set (the child's ru_maxrss, from os.wait4) and CPU seconds. ``make bench-memory``. Linux keeps
ru_maxrss across execve, so a child's figure is at least this process's size when it forked: the tiny model
is made in a process of its own, and this one never imports torch (about 30 MB, not 0.5 GB).

    python bench/memory_bench.py --corpus out/man_corpus.csv --sizes 30,120,480
    python bench/memory_bench.py --models tiny --sizes 50,200,800 --levels token      # shorter

The tiny model is a random BertModel (hidden 64, 2 layers) saved with the default model's tokenizer, so it
reads the same tokens. Without --corpus, the corpus is made of this machine's man pages (bench/make_man_corpus.py).
The 4x and 16x corpora repeat the 1x documents, each copy with its own id and a number in front of its
text (so no two windows are the same): the corpus grows, its documents' lengths stay the same (what one
long document costs is measured apart, docs/performance.md). Prints one markdown table; writes it to bench/results_memory.md.
"""
from __future__ import annotations

import argparse
import csv
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
csv.field_size_limit(1 << 30)


def cpu_name() -> str:
    """The CPU's model name and its bfloat16/AMX flags (lscpu)."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return platform.processor()
    name = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Model name")), "?")
    flags = sorted({f for f in ("amx_bf16", "avx512_bf16", "avx2") if f in text})
    return f"{name} ({', '.join(flags)})"


def tiny_model(folder: Path) -> str:
    """A random BERT of hidden size 64 with the default model's tokenizer, saved in ``folder``."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    sys.path.insert(0, str(ROOT))
    import longbert

    tok = AutoTokenizer.from_pretrained(longbert.model_path("default"))
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=128, max_position_embeddings=512)
    BertModel(cfg).eval().save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def tiny_model_apart(folder: Path) -> str:
    """``tiny_model(folder)`` run in a child process, so that torch never loads in this one (see the docstring)."""
    code = f"import sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); import memory_bench; memory_bench.tiny_model({str(folder)!r})"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    return str(folder)


def subset(rows: list[dict], n: int, path: Path) -> Path:
    """``n`` documents cycling through ``rows`` (each copy after the first with its own id and a number in
    front of its text, so that no window repeats) as a CSV."""
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "text"])
        for i in range(n):
            row, copy = rows[i % len(rows)], i // len(rows)
            w.writerow([f"{row['id']}~{copy}", row["text"] if copy == 0 else f"copy {copy}. {row['text']}"])
    return path


def run_once(tree: Path, corpus: Path, out: Path, model: str, level: str, out_dtype: str, extra: list[str]) -> tuple[int, float, float]:
    """One extract in its own process: (peak RSS bytes, CPU seconds, wall seconds)."""
    args = [sys.executable, str(tree / "cli.py"), "extract", str(corpus), "--id-col", "id", "--strategy", "chunk",
            "--level", level, "--out-dtype", out_dtype, "--model", model, "--no-progress", "--overwrite",
            "-o", str(out), *extra]
    start = time.perf_counter()
    proc = subprocess.Popen(args, cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    text = proc.stdout.read().decode(errors="replace")
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(args)}\n{text}")
    return usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, help="CSV with id and text columns (default: man pages, made once)")
    ap.add_argument("--sizes", default="30,120,480", help="documents per run: 1x, 4x, 16x")
    ap.add_argument("--levels", default="document,window,token")
    ap.add_argument("--out-dtypes", default="float32,int8")
    ap.add_argument("--models", default="default,tiny")
    ap.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose cli.py runs (another one: compare)")
    ap.add_argument("--extra", default="", help="more extract options, e.g. '--block-rows 4096'")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results_memory.md")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="longbert-memory-"))
    corpus = args.corpus
    if corpus is None:
        corpus = work / "man.csv"
        subprocess.run([sys.executable, str(ROOT / "bench" / "make_man_corpus.py"), "-o", str(corpus)], check=True)
    with corpus.open(encoding="utf-8", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("text")]
    random.Random(0).shuffle(rows)   # the 1x documents: a fixed sample of every section of the corpus
    sizes = [int(s) for s in args.sizes.split(",")]
    models = {"default": "default", "tiny": None}
    lines = [f"CPU: {cpu_name()}; {os.cpu_count()} cores; tree {args.tree}; extra options: {args.extra or 'none'}",
             f"`python bench/memory_bench.py --sizes {args.sizes} --levels {args.levels} --out-dtypes {args.out_dtypes} "
             f"--models {args.models}`; `extract --strategy chunk`, peak RSS of the whole process",
             "",
             "| model | level | out-dtype | " + " | ".join(f"{n} docs" for n in sizes) +
             " | 4x / 1x | 16x / 1x | CPU s (" + " / ".join(map(str, sizes)) + ") |",
             "|---|---|---|" + "---:|" * (len(sizes) + 3)]
    print("\n".join(lines), flush=True)
    for model_name in args.models.split(","):
        model = models[model_name] or tiny_model_apart(work / "tiny")
        for level in args.levels.split(","):
            for dtype in args.out_dtypes.split(","):
                peaks, cpus = [], []
                for n in sizes:   # 4x and 16x repeat the 1x documents: the same lengths, 4 and 16 times over
                    data = subset(rows[:sizes[0]], n, work / f"c{n}.csv")
                    peak, cpu, _ = run_once(args.tree, data, work / "out.parquet", model, level, dtype,
                                            args.extra.split())
                    peaks.append(peak)
                    cpus.append(cpu)
                ratios = [f"{peaks[k] / peaks[0]:.2f}" if len(peaks) > k else "-" for k in (1, 2)]
                line = (f"| {model_name} | {level} | {dtype} | " + " | ".join(f"{p / 1e9:.2f} GB" for p in peaks) +
                        f" | {ratios[0]} | {ratios[1]} | " + " / ".join(f"{c:.0f}" for c in cpus) + " |")
                lines.append(line)
                print(line, flush=True)
    args.results.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
