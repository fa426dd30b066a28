"""The product's own cost above the forward pass, against sentence-transformers, in float32 and bfloat16.

Method (the same as the speed issue's): on N documents of a corpus, ``--strategy head`` at 512 positions,
each figure the fastest of ``--rounds`` interleaved rounds, wall seconds:

- ours: ``longbert extract`` (a fresh process, from each ``--tree``) minus a 1-document ``extract``
  (start-up: imports and the model load);
- ceiling: the model's forward pass alone on the same windows (the tokenizer's first 510 tokens plus
  [CLS] and [SEP], as the head window is), length-sorted, batch 16, in this process, model loaded;
- sentence-transformers: ``SentenceTransformer(folder).encode(texts, batch_size=16)`` with
  ``max_seq_length`` 512, model loaded; bfloat16 through ``model_kwargs={"dtype": torch.bfloat16}``.

Usage: python bench/overhead_bench.py --docs 240 --rounds 3 [--tree /path/to/other/checkout ...]
Prints one markdown table (and writes it to --output, default bench/results_overhead.md).
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _cpu() -> str:
    flags = ""
    try:
        text = Path("/proc/cpuinfo").read_text()
        name = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "")
        have = set(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []))
        flags = " ".join(f for f in ("amx_bf16", "avx512_bf16", "avx2") if f in have)
    except OSError:
        name = platform.processor()
    return f"{name} ({flags}), {os.cpu_count()} cores"


def _extract(tree: Path, src: Path, out: Path, dtype: str) -> float:
    """Wall seconds of one ``extract`` process run from ``tree``'s cli.py."""
    cmd = [sys.executable, str(tree / "cli.py"), "extract", str(src), "--id-col", "id", "--strategy", "head",
           "-o", str(out), "--overwrite", "--no-progress", "--dtype", dtype]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _ceiling(model, windows: list[list[int]], pad: int) -> float:
    import torch

    order = sorted(windows, key=len, reverse=True)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(order), 16):
            batch = order[i:i + 16]
            seq = len(batch[0])
            ids = torch.full((len(batch), seq), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), seq), dtype=torch.long)
            for j, w in enumerate(batch):
                ids[j, :len(w)] = torch.tensor(w)
                mask[j, :len(w)] = 1
            model(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids))
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=240)
    ap.add_argument("--corpus", type=Path, default=ROOT / "examples" / "labelled.csv")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--tree", type=Path, action="append", default=[], help="another checkout to time as 'ours'")
    ap.add_argument("--output", type=Path, default=ROOT / "bench" / "results_overhead.md")
    args = ap.parse_args()

    import pandas as pd
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    from pipeline.options.config import DEFAULT_MODEL
    from pipeline.model.facts import resolve_model_path

    folder = resolve_model_path(DEFAULT_MODEL)
    texts = pd.read_csv(args.corpus)["text"].fillna("").astype(str).tolist()[:args.docs]
    work = Path(tempfile.mkdtemp(prefix="overhead_"))
    src, one = work / "docs.csv", work / "one.csv"
    pd.DataFrame({"id": range(len(texts)), "text": texts}).to_csv(src, index=False)
    pd.DataFrame({"id": [0], "text": texts[:1]}).to_csv(one, index=False)
    tok = AutoTokenizer.from_pretrained(folder)
    windows = tok(texts, truncation=True, max_length=512)["input_ids"]
    trees = [ROOT, *[t.resolve() for t in args.tree]]
    rows = []
    for dtype in args.dtypes.split(","):
        torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
        model = AutoModel.from_pretrained(folder, attn_implementation="sdpa", dtype=torch_dtype).eval()
        st = SentenceTransformer(str(folder), device="cpu", model_kwargs={"dtype": torch_dtype})
        st.max_seq_length = 512
        best: dict[str, float] = {}
        for _ in range(args.rounds):
            for k, tree in enumerate(trees):
                whole = _extract(tree, src, work / "o.parquet", dtype)
                start = _extract(tree, one, work / "one.parquet", dtype)
                best[f"ours{k}"] = min(best.get(f"ours{k}", 1e9), whole - start)
            best["ceiling"] = min(best.get("ceiling", 1e9), _ceiling(model, windows, tok.pad_token_id))
            t0 = time.perf_counter()
            st.encode(texts, batch_size=16)
            best["st"] = min(best.get("st", 1e9), time.perf_counter() - t0)
        for k, tree in enumerate(trees):
            ours = best[f"ours{k}"]
            rows.append(f"| {dtype} | {tree.name} | {ours:.2f} | {best['ceiling']:.2f} | {best['st']:.2f} | "
                        f"{best['st'] / ours:.2f} | {best['ceiling'] / ours:.2f} |")
        del model, st
    load = os.getloadavg()[0]
    table = "\n".join([
        f"`python bench/overhead_bench.py --docs {args.docs} --rounds {args.rounds}` on {_cpu()}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, 1-minute load average at the end {load:.1f}; "
        f"fastest of {args.rounds} interleaved rounds, wall seconds, `--strategy head`, {len(texts)} documents "
        f"of {args.corpus.name}.", "",
        "| dtype | tree | ours | ceiling | sentence-transformers | ours vs ST (ST s / ours s) | ours / ceiling speed |",
        "|---|---|---:|---:|---:|---:|---:|", *rows])
    print(table)
    args.output.write_text(table + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
