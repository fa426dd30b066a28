"""Warnings about options that do nothing in a run, or cost far more than a user may expect: printed on
stderr by cli.py, the run goes on (a --config file may carry options for several strategies).
"""
from __future__ import annotations

from typing import Any

from .config import PipelineConfig
from .features_config import STRATEGY_OPTIONS, is_late


SMALL_STEP = 32  # sliding: a step (C - overlap) under this many tokens gets a warning


def sliding_windows(n_tokens: int, content: int, overlap: int) -> int:
    """Windows ``sliding`` makes for a document of n_tokens: 1 + ceil((n - C) / (C - overlap)) when n > C.

    Example: n 1,000, C 510, overlap 509 (step 1) -> 491.
    """
    step = content - overlap
    return 1 if n_tokens <= content else 1 + -(-(n_tokens - content) // step)


def option_warnings(cfg: PipelineConfig, given: set[str], cpu_only: bool, max_length: int) -> list[str]:
    """Why options of this run will do nothing, or cost far more than the user may expect.

    The CLI prints them on stderr and runs anyway (a warning, not a usage error, because a --config
    file may carry options for several strategies, e.g. ``--config configs/sliding.yaml --strategy
    chunk``): an option without effect is reported only when given on the command line (``given``,
    option names with underscores), not when it came from the config file.

    Args:
        cfg: the built config. given: the options set on the command line.
        cpu_only: the model will run on a CPU (--device cpu, or auto on a machine without CUDA).
        max_length: the window size in positions (the model's when --max-length is not given).

    Returns:
        One line per warning, in option order; [] when nothing is wrong.
        Example: strategy chunk with --overlap 64 given ->
        ["--overlap 64 has no effect: it applies only to --strategy sliding (this run: chunk)"].
    """
    seg = cfg.segment
    strategies = list(dict.fromkeys(f.strategy for f in cfg.feature_list()))  # several with --feature
    this_run = ", ".join(strategies)
    out = []
    for name, owners in STRATEGY_OPTIONS.items():
        if name in given and not set(owners) & set(strategies):
            flag = "--" + name.replace("_", "-")
            out.append(f"{flag} {getattr(seg, name)} has no effect: it applies only to --strategy "
                       f"{' and '.join(owners)} (this run: {this_run})")
    if "aggregate" in given and cfg.pool.per_window:
        out.append(f"--aggregate {cfg.pool.aggregate} has no effect: it applies only to --level document and "
                   "token (this run: window, one vector per window)")
    if "dtype" in given and cfg.model.dtype == "float16" and cpu_only:
        out.append("--dtype float16 on the CPU: CPUs have no fast float16 matrix product, so the model runs "
                   "several times slower than in float32 and less exact; drop --dtype (or use --dtype bfloat16, "
                   "fast on CPUs that support it), or run on a GPU")
    content = max_length - 2
    overlap = seg.overlap if "sliding" in strategies else seg.late_overlap if any(map(is_late, strategies)) else content
    if 0 <= overlap < content and content - overlap < SMALL_STEP:
        step = content - overlap
        w1, w10 = sliding_windows(1_000, content, overlap), sliding_windows(10_000, content, overlap)
        out.append(f"--overlap {overlap} leaves a step of {step} token{'s' if step > 1 else ''} (C = {content}): "
                   f"a 1,000-token document makes {w1:,} windows and a 10,000-token one {w10:,} (chunk: "
                   f"{-(-1_000 // content)} and {-(-10_000 // content)}); lower --overlap for a step of "
                   f">= {SMALL_STEP} tokens unless that cost is meant")
    return out


_FLAGS = {"keep_cols": "--keep-col", "features": "--feature", "config_file": "--config"}


def no_effect_warnings(given: dict[str, Any], names: Any, why: str) -> list[str]:
    """The standard warning for options a command accepts but does not use, one per given option.

    Args:
        given: the command's options (underscored names; None or () when not given).
        names: the option names without effect there, in the order to report them.
        why: what the command does instead, e.g. "stats counts tokens and windows and writes no vectors".

    Returns:
        e.g. ["--id-col doc has no effect: stats counts tokens ...", "--resume has no effect: ..."].
    """
    out = []
    for name in names:
        value = given.get(name)
        if value is None or value == ():
            continue
        flag = _FLAGS.get(name, "--" + name.replace("_", "-"))
        if value is False and name == "progress":
            flag = "--no-progress"
        text = flag if isinstance(value, bool) else \
            f"{flag} {' '.join(map(str, value)) if isinstance(value, tuple) else value}"
        out.append(f"{text} has no effect: {why}")
    return out
