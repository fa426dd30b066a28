"""``longbert stats``: token lengths of a corpus and what each window strategy would cost, before a run.
Reads and tokenizes the inputs with the model's tokenizer only (pipeline.read,
pipeline.text.tokenize); windows are counted with pipeline.text.segment.window_spans, the rule extract uses,
so the counts equal the sum of extract's ``n_windows``. The model is loaded only to measure its
speed when none is given.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .. import chip as chips  # chips.detect at call time (tests fake the chip)
from ..options.config import PipelineConfig, SegmentConfig
from ..options.features_config import STRATEGIES, is_late
from ..errors import ConfigError
from ..read import read_blocks
from ..text.segment import prompt_rules, window_spans
from ..text.tokenize import UNKNOWN_WARN_SHARE, tokenize_block, unknown_warning
from .measure import sample_ids, speed_of
from .memory_estimate import format_estimate, largest_call, model_part, peak_estimate

def strategy_cost(n_kept: np.ndarray, seg: SegmentConfig, n_prompt: int = 0) -> dict[str, Any]:
    """Windows and forward tokens of one strategy over a corpus.

    Args:
        n_kept: (N,) int content tokens per document the segmenter sees (after --max-tokens-per-doc).
        seg: segment options with max_length resolved.
        n_prompt: a sentence-transformers folder's prompt tokens in every window (the segment stage's
            prompt_rules: C - n_prompt content tokens); 0: no prompt.

    Returns:
        {"windows_total": int, "windows_mean": float (per document), "forward_tokens": int} where
        forward tokens = positions fed to the model, [CLS] and [SEP] included, padding excluded.
        Example: n_kept [1000], C 510, chunk -> 2 windows, 1000 + 2 * 2 = 1004 forward tokens.
    """
    lengths, counts = np.unique(n_kept, return_counts=True)  # window_spans once per distinct length
    windows = forward = 0
    rules = prompt_rules(seg, n_prompt)
    for n, count in zip(lengths.tolist(), counts.tolist()):
        spans = window_spans(n, rules)
        windows += count * len(spans)
        forward += count * sum(sum(e - s for s, e in w) + 2 + n_prompt for w in spans)
    return {"windows_total": windows, "windows_mean": windows / max(len(n_kept), 1), "forward_tokens": forward}


def largest_batch(n_kept: np.ndarray, cfg: PipelineConfig, n_prompt: int = 0) -> tuple[int, int]:
    """(the most windows one block of ``cfg.read.block_rows`` documents makes, every feature's strategy counted
    before de-duplication; the most positions a window has, specials and prompt included): what bounds a
    run's forward batch. Example: 2 documents of 1,000 and 40 tokens, chunk, C 510 -> (3, 512)."""
    per_doc = np.zeros(len(n_kept), dtype=np.int64)
    longest = 0
    for strategy in dict.fromkeys(f.strategy for f in cfg.feature_list()):
        rules = prompt_rules(cfg.segment.for_strategy(strategy), n_prompt)
        lengths, where = np.unique(n_kept, return_inverse=True)   # window_spans once per distinct length
        spans = [window_spans(int(n), rules) for n in lengths]
        per_doc += np.array([len(w) for w in spans], dtype=np.int64)[where]
        longest = max([longest, *(sum(e - s for s, e in w) + 2 + n_prompt for ws in spans for w in ws)])
    if not len(per_doc):
        return 0, 0
    return int(np.add.reduceat(per_doc, np.arange(0, len(per_doc), cfg.read.block_rows)).max()), longest


def _options_text(seg: SegmentConfig) -> str:
    c = seg.content_tokens
    if seg.strategy == "head_tail":
        return f"{seg.head_tokens} + {seg.tail_tokens} of C={c}"
    if seg.strategy == "sliding":
        return f"C={c}, overlap {seg.overlap}, step {c - seg.overlap}"
    if is_late(seg.strategy):
        return f"C={c}, overlap {seg.late_overlap}, chunks of {seg.chunk_tokens}"
    return f"C={c}"


def _checked(cfg: PipelineConfig) -> tuple[PipelineConfig, object, object, bool, int, int]:
    """pipeline.engine.run.check's (config, tokenizer, plan), whether extract lowercases the texts (a
    sentence-transformers folder's do_lower_case), its prompt's tokens per window (0: none) and the
    values of a token vector at --level token."""
    from ..model.prompts import run_prompt
    from ..model.st_folder import lowercases
    from .resolved import feature_dim, resolve_config
    from .run import scan_inputs

    cfg, plan = scan_inputs(cfg)
    cfg, tokenizer, facts = resolve_config(cfg)
    lower = lowercases(cfg, facts)
    prompt = run_prompt(cfg.model, facts, tokenizer, lower)
    return cfg, tokenizer, plan, lower, len(prompt.ids) if prompt else 0, feature_dim(cfg, facts.hidden_size)[1]


def _lengths(corpus, tokenizer, lowercase: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(N,) int64 each: the tokens, unknown tokens and characters of every document of ``corpus``, in order.
    Whole documents (exact lengths even with --max-tokens-per-doc, which corpus_stats applies), and no
    character offsets: they are never used here and took more memory than the ids."""
    n_tokens: list[int] = []
    n_unknown: list[int] = []
    n_chars: list[int] = []
    for block in read_blocks(corpus):
        texts = block.column("text").to_pylist()
        for doc in tokenize_block(texts, tokenizer, None, with_offsets=False, lowercase=lowercase):
            n_tokens.append(doc.n_tokens)
            n_unknown.append(doc.n_unknown)
        n_chars += [len(t) for t in texts]
    return tuple(np.asarray(x, dtype=np.int64) for x in (n_tokens, n_unknown, n_chars))


def corpus_stats(cfg: PipelineConfig, windows_per_second: float | None = None) -> dict[str, Any]:
    """Token statistics of cfg.read.inputs and the cost of every strategy with the chosen options.

    Args:
        cfg: the config (inputs, text column, model for its tokenizer, window options).
        windows_per_second: forward speed in full-size windows per second; None: measured with
            ``measure_speed`` (pipeline.engine.measure; loads the model).

    Returns:
        A dict: documents, empty (documents with 0 tokens), tokens {total, mean, median, p90, p99,
        max} (whole documents, numpy's linear-interpolation percentiles), lengths ((N,) int64 tokens
        per document, for plot_stats), unknown (unknown_stats: share of unknown tokens, overall and per
        document quantile), max_length, content_tokens (C), over_window (documents with
        more than C tokens) and over_window_share, selected (cfg's strategy), speed {windows_per_second,
        source}, and strategies {name: {options, windows_total, windows_mean, forward_tokens,
        seconds} or {options: None, error: str}} for head, tail, head_tail, chunk and sliding.
        seconds = forward_tokens / max_length / windows_per_second (model forward only; tokenizing
        and writing not counted). memory: the run's estimated peak in bytes and its parts
        (pipeline.engine.memory_estimate.peak_estimate), None when the speed was given; level and
        block_tokens: the run's, which the memory line names.

    Raises:
        ConfigError, ModelError, InputError: as pipeline.engine.run.check (bad options, unreadable inputs,
            no rows).
    """
    cfg, tokenizer, corpus, lowercase, n_prompt, token_dim = _checked(cfg)
    seg = cfg.segment
    # the model part measured first: its peak is the process's before the corpus's whole documents are tokenized
    speed, source, measured = speed_of(cfg, tokenizer, sample_ids(corpus, tokenizer, seg.content_tokens, lowercase),
                                     windows_per_second)
    lengths, unknown, n_chars = _lengths(corpus, tokenizer, lowercase)
    kept = lengths if seg.max_tokens_per_doc is None else np.minimum(lengths, seg.max_tokens_per_doc)  # (N,)
    c = seg.content_tokens
    windows, positions = largest_batch(kept, cfg, n_prompt)   # short or few documents: never a full batch
    memory = None if not measured or not measured[1] else peak_estimate(
        model_part(measured, windows, positions, seg.max_length), kept, cfg.pool.per_token, token_dim,
        cfg.read.block_rows, cfg.encode.block_tokens, c, largest_call(lengths, n_chars, seg.max_tokens_per_doc))
    strategies: dict[str, dict[str, Any]] = {}
    for name in STRATEGIES:
        try:
            s_seg = seg.for_strategy(name)
            cost = strategy_cost(kept, s_seg, n_prompt)
        except ConfigError as err:  # e.g. --overlap too large for sliding (or with the prompt's tokens)
            strategies[name] = {"options": None, "error": str(err)}
            continue
        cost["options"] = _options_text(s_seg)
        cost["seconds"] = cost["forward_tokens"] / seg.max_length / speed
        strategies[name] = cost
    over = int((lengths > c).sum())
    return {
        "documents": int(lengths.size),
        "empty": int((lengths == 0).sum()),
        "tokens": {"total": int(lengths.sum()), "mean": float(lengths.mean()), "median": float(np.median(lengths)),
                   "p90": float(np.percentile(lengths, 90)), "p99": float(np.percentile(lengths, 99)),
                   "max": int(lengths.max())},
        "lengths": lengths,
        "unknown": unknown_stats(unknown, lengths),
        "max_length": seg.max_length,
        "content_tokens": c,
        "max_tokens_per_doc": seg.max_tokens_per_doc,
        "over_window": over,
        "over_window_share": over / lengths.size,
        "selected": seg.strategy,
        "speed": {"windows_per_second": speed, "source": source},
        "chip": chip_stats(cfg),
        "strategies": strategies,
        "memory": memory,
        "level": cfg.pool.level,
        "block_tokens": cfg.encode.block_tokens,
    }


def chip_stats(cfg: PipelineConfig) -> dict[str, Any]:
    """The device of the run and what it offers (pipeline.chip.detect; no weights load).

    Returns:
        {"device": "cpu", "describe": "cpu (...; avx2; no fast bfloat16 path)", "flags": ["avx2"],
        "bf16_fast": False, "recommended_dtype": "float32", "dtype": the run's compute dtype}.
    """
    chip = chips.detect(cfg.model.device)
    return {"device": chip.device, "describe": chip.describe(), "flags": list(chip.flags), "bf16_fast": chip.bf16_fast,
            "recommended_dtype": chip.recommended_dtype, "dtype": cfg.model.dtype}


def unknown_stats(unknown: np.ndarray, lengths: np.ndarray) -> dict[str, Any]:
    """Unknown tokens of a corpus: the overall share and its quantiles over documents.

    Args:
        unknown: (N,) int unknown tokens per document; lengths: (N,) int tokens per document.

    Returns:
        {"total": int, "share": float (of all tokens; 0 for no tokens), "per_document": {median, p90,
        p99, max} shares of documents with at least one token (numpy's linear interpolation; all 0
        when there is none)}. Example: unknown [0, 5], lengths [10, 10] -> share 0.25, max 0.5.
    """
    has = lengths > 0
    shares = unknown[has] / lengths[has] if has.any() else np.zeros(1)   # (N_nonempty,)
    total = int(unknown.sum())
    return {"total": total, "share": total / int(lengths.sum()) if lengths.sum() else 0.0,
            "per_document": {"median": float(np.median(shares)), "p90": float(np.percentile(shares, 90)),
                             "p99": float(np.percentile(shares, 99)), "max": float(shares.max())}}


def _duration(seconds: float) -> str:
    """12.3 -> '12 s', 250 -> '4.2 min', 9000 -> '2.5 h'."""
    if seconds < 120:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def format_stats(result: dict[str, Any]) -> str:
    """The report ``longbert stats`` prints: corpus lines, then one table row per strategy."""
    t = result["tokens"]
    c = result["content_tokens"]
    lines = [
        f"documents    {result['documents']:,}" + (f" ({result['empty']} with no tokens)" if result["empty"] else ""),
        f"tokens       total {t['total']:,}; per document mean {t['mean']:.1f}, median {t['median']:.0f}, "
        f"p90 {t['p90']:.0f}, p99 {t['p99']:.0f}, max {t['max']:,}",
        _unknown_line(result),
        f"window       max_length {result['max_length']} -> C = {c} content tokens",
        f"over C       {result['over_window']:,} of {result['documents']:,} documents "
        f"({100 * result['over_window_share']:.1f}%) have more than {c} tokens",
    ]
    if result["unknown"]["share"] >= UNKNOWN_WARN_SHARE:
        lines.append(f"{'':13}{unknown_warning(result['unknown']['total'], result['tokens']['total'])}")
    if result["max_tokens_per_doc"] is not None:
        lines.append(f"capped       windows count the first {result['max_tokens_per_doc']:,} tokens of each document "
                     "(--max-tokens-per-doc)")
    speed = result["speed"]
    lines.append(f"speed        {speed['windows_per_second']:.1f} full windows/s ({speed['source']})")
    chip = result["chip"]
    lines.append(f"chip         {chip['describe']}; recommended --dtype {chip['recommended_dtype']} "
                 f"(--dtype auto picks it; this run: {chip['dtype']})")
    lines.append("memory       " + (format_estimate(result["memory"], result["level"], result["block_tokens"])
                                     if result["memory"] else "not estimated: the model was not run "
                                     "(--windows-per-second given, or the system does not report memory)"))
    lines.append("")
    rows = [("strategy", "options", "windows/doc", "windows", "forward tokens", "est. time")]
    for name, s in result["strategies"].items():
        mark = "*" if name == result["selected"] else " "
        if s.get("error"):
            rows.append((f"{mark}{name}", "n/a: " + s["error"], "", "", "", ""))
            continue
        rows.append((f"{mark}{name}", s["options"], f"{s['windows_mean']:.2f}", f"{s['windows_total']:,}",
                     f"{s['forward_tokens']:,}", _duration(s["seconds"])))
    widths = [max(len(r[i]) for r in rows if not r[1].startswith("n/a")) for i in range(6)]
    for r in rows:
        if r[1].startswith("n/a"):
            lines.append(f"{r[0]:<{widths[0]}}  {r[1]}")
            continue
        cells = [r[0].ljust(widths[0]), r[1].ljust(widths[1])] + [r[k].rjust(widths[k]) for k in range(2, 6)]
        lines.append("  ".join(cells).rstrip())
    lines.append(f"* = --strategy {result['selected']}; est. time = model forward only, forward tokens / "
                 f"{result['max_length']} / speed")
    return "\n".join(lines)


def _unknown_line(result: dict[str, Any]) -> str:
    u = result["unknown"]
    q = u["per_document"]
    return (f"unknown      {u['total']:,} tokens ({100 * u['share']:.1f}%) unknown to the vocabulary; per document "
            f"median {100 * q['median']:.1f}%, p90 {100 * q['p90']:.1f}%, p99 {100 * q['p99']:.1f}%, "
            f"max {100 * q['max']:.1f}%")


def pyplot():
    """matplotlib.pyplot on the Agg backend (files only, no display). Raises ConfigError if missing."""
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("--plot needs matplotlib: pip install matplotlib (or pip install -e '.[plot]' in a clone of longbert), or drop --plot") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | Path, rect: tuple[float, float, float, float] = (0, 0, 1, 1)) -> None:
    """Lay out ``fig`` (within ``rect``), write it to ``path`` (folders made as needed) and close it."""
    fig.tight_layout(rect=rect)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    pyplot().close(fig)


def plot_stats(result: dict[str, Any], path: str | Path):
    """The ``stats --plot`` PNG at ``path``: three panels, top to bottom.

    1. Document lengths: histogram of tokens per document, x-axis from the shortest document to the
       longest (log scale when they span more than 20x), a dashed line at C; documents with 0
       tokens are counted in the title, not drawn.
    2. Windows per strategy: total windows the model would run, value on each bar.
    3. Estimated time per strategy: model forward time at the report's speed, value on each bar.
    The selected --strategy is drawn dark; a strategy the options do not allow is marked n/a.

    Returns:
        The matplotlib Figure (already saved and closed; its ``axes`` are the three panels).

    Raises:
        ConfigError: matplotlib is not installed.
    """
    plt = pyplot()
    lengths = result["lengths"]
    c = result["content_tokens"]
    positive = lengths[lengths > 0]
    fig, (ax_len, ax_win, ax_time) = plt.subplots(3, 1, figsize=(7, 9.5), dpi=120,
                                                  gridspec_kw={"height_ratios": [1.3, 1, 1]})
    # 1. lengths
    if positive.size:
        lo, hi = int(positive.min()), int(positive.max())
        log = hi > 20 * lo
        edges = (np.geomspace(lo, hi + 1, 41) if log else np.linspace(lo, hi + 1, 41)) if hi > lo else \
            np.array([lo - 0.5, lo + 0.5])
        ax_len.hist(positive, bins=edges, color="#4c72b0", edgecolor="white", linewidth=0.3)
        if log:
            ax_len.set_xscale("log")
        right = max(edges[-1], c * 1.05) if c <= 4 * hi else edges[-1]  # show C unless far off the data
        ax_len.set_xlim(edges[0], right)                                   # starts at the shortest document
    ax_len.axvline(c, color="#c44e52", linestyle="--", label=f"C = {c} content tokens")
    ax_len.set_xlabel("tokens per document" + (" (log scale)" if ax_len.get_xscale() == "log" else ""))
    ax_len.set_ylabel("documents")
    empty = f", {result['empty']} empty not shown" if result["empty"] else ""
    ax_len.set_title(f"Lengths: {result['documents']:,} documents, {100 * result['over_window_share']:.0f}% "
                     f"over C{empty}")
    ax_len.legend(loc="best", frameon=False)
    # 2 and 3. per strategy
    names = list(result["strategies"])
    usable = [n for n in names if not result["strategies"][n].get("error")]
    colors = ["#2a4d7a" if n == result["selected"] else "#8fb0d8" for n in names]
    y = np.arange(len(names))
    panels = ((ax_win, "windows_total", lambda v: f"{int(v):,}", "windows (model inputs)",
               "Windows per strategy"),
              (ax_time, "seconds", _duration, f"seconds at {result['speed']['windows_per_second']:.1f} full windows/s",
               "Estimated model time per strategy"))
    for ax, key, fmt, xlabel, title in panels:
        values = [result["strategies"][n][key] if n in usable else 0 for n in names]
        bars = ax.barh(y, values, color=colors)
        ax.bar_label(bars, labels=[fmt(v) if n in usable else "n/a" for n, v in zip(names, values)], padding=3,
                     fontsize=8)
        ax.set_yticks(y, [f"{n} *" if n == result["selected"] else n for n in names])
        ax.invert_yaxis()
        ax.set_xlim(0, max(values + [1e-9]) * 1.25)  # room for the labels
        ax.set_xlabel(xlabel)
        ax.set_title(title)
    fig.text(0.01, 0.005, f"* = --strategy {result['selected']}; time = model forward only "
             f"({result['speed']['source']})", fontsize=7, color="grey")
    save_figure(fig, path, rect=(0, 0.02, 1, 1))
    return fig
