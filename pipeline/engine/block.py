"""The run's options checked against the model's config and tokenizer (no weights load), and the
heap given back once per block."""
from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import functools

import pyarrow as pa

from ..options.config import PipelineConfig
from ..errors import ConfigError
from ..model.facts import check_pooler, model_facts, resolve_model_path
from ..model.prompts import run_prompt
from ..model.st_folder import apply_settings, lowercases
from ..text.segment import prompt_rules
from ..types import ModelFacts
from ..output.schema import output_schema


def resolve_config(cfg: PipelineConfig, tokenizer=None) -> tuple[PipelineConfig, object, ModelFacts]:
    """Fill what depends on the model (max_length) and check the options that need it; no weights load.

    Returns:
        (config with segment.max_length set, the fast tokenizer, the model's facts: family, hidden
        size, the positions it serves, special tokens, hash...).

    Raises:
        ConfigError: --max-length above the model's positions, overlap/head+tail too large for the
            window, a layer index the model lacks, a prompt name or size (check_prompt). ModelError: a
            family that cannot be served, the tokenizer/config cannot be loaded, --pooling pooler without
            pooler weights, a folder's module that cannot be applied (pipeline.model.st_folder.apply_settings).
    """
    facts, tok = model_facts(cfg.model, tokenizer)
    cfg = apply_settings(cfg, facts)   # a sentence-transformers folder's pooling, Normalize, max_seq_length
    model_max, n_layers = facts.max_length, facts.num_hidden_layers
    if any(f.pooling == "pooler" for f in cfg.feature_list()):
        check_pooler(facts, cfg.model.model)
    seg = cfg.segment
    check_max_length(seg.max_length, facts, cfg.model.model)
    if seg.max_length is None:  # re-validated with the model's size; tail_tokens resolves to C - head
        seg = dataclasses.replace(seg, max_length=model_max)
    check_features(cfg, seg)
    cfg.pool.check_layers(n_layers)
    check_prompt(cfg, seg, tok, facts)
    return dataclasses.replace(cfg, segment=seg), tok, facts


def check_prompt(cfg: PipelineConfig, seg, tokenizer, facts: ModelFacts) -> None:
    """Check --prompt-name against the folder's prompts, and that every strategy's windows hold the prompt.

    Raises:
        ConfigError: as pipeline.model.prompts.run_prompt (an unknown prompt name, a prompt for a model
            without prompts) and pipeline.text.segment.prompt_rules (a prompt the windows cannot hold).
    """
    prompt = run_prompt(cfg.model, facts, tokenizer, lowercases(cfg, facts))
    if prompt is None:
        return
    for strategy in dict.fromkeys(f.strategy for f in cfg.feature_list()):
        prompt_rules(seg if strategy == seg.strategy else dataclasses.replace(seg, strategy=strategy), len(prompt.ids))


def check_max_length(max_length: int | None, facts: ModelFacts, name: str) -> None:
    """Refuse --max-length beyond what the model serves, naming the limit's source.

    The position table is the hard limit. A tokenizer's model_max_length below it caps the window too,
    except in a sentence-transformers folder, which writes its max_seq_length there as a declared default.
    Example: 512 for a 512-position BERT whose tokenizer_config.json says 128 -> refused, naming that file.

    Raises:
        ConfigError: max_length above that limit, with how to pass the model's real limit.
    """
    positions = facts.positions or facts.max_length
    cap = positions if facts.settings is not None else facts.max_length
    if max_length is None or max_length <= cap:
        return
    if cap < positions:
        folder = resolve_model_path(name)
        raise ConfigError(f"--max-length={max_length} exceeds the {cap} positions that the tokenizer allows "
                          f"(model_max_length in {folder}/tokenizer_config.json; the model's position table serves "
                          f"{positions}); use --max-length {cap} or less, or, to pass up to the model's {positions} "
                          f"positions, set \"model_max_length\": {positions} in that tokenizer_config.json")
    raise ConfigError(f"--max-length={max_length} exceeds the model's {cap} positions; "
                      f"use --max-length {cap} or less")


def check_features(cfg: PipelineConfig, seg) -> None:
    """With several --feature: each strategy's window options against the window size, and one strategy
    at --level window (a --keep-col named like a feature column: pipeline.output.schema.check_keep_cols).

    Raises:
        ConfigError: as SegmentConfig.check_window for that strategy, or features of several strategies
            at --level window (a row per window of one strategy).
    """
    if not cfg.multi_feature:
        return
    strategies = list(dict.fromkeys(f.strategy for f in cfg.feature_list()))
    if cfg.pool.per_window and len(strategies) > 1:
        raise ConfigError(f"--level window writes one row per window of one strategy, but the features use "
                          f"{', '.join(strategies)}; give features of one strategy (e.g. --feature chunk:cls "
                          "--feature chunk:mean), and run once per strategy")
    for strategy in strategies:
        dataclasses.replace(seg, strategy=strategy)  # __post_init__ runs check_window for this strategy


def feature_dim(cfg: PipelineConfig, hidden: int) -> tuple[int, int]:
    """(D of ``features``, D of ``token_features``) of a one-feature run: Feature.dim for the token
    vectors (pooled as the feature's layers are; pooler takes only the last layer), times the
    --aggregate parts for ``features``."""
    dim = cfg.feature_list()[0].dim(hidden)
    return dim * cfg.pool.parts, dim


def output_for(cfg: PipelineConfig, tokenizer, id_type: pa.DataType) -> tuple[PipelineConfig, pa.Schema]:
    """(config with max_length resolved, the output schema) without loading weights: what a driver
    needs to open the sink before any worker has loaded the model.

    Raises:
        As resolve_config.
    """
    cfg, _, facts = resolve_config(cfg, tokenizer)
    dim, token_dim = feature_dim(cfg, facts.hidden_size)
    return cfg, output_schema(cfg, id_type, facts, dim, token_dim)


@functools.cache
def _malloc_trim():
    """glibc's malloc_trim, or None (another C library: musl, macOS, Windows)."""
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


def release_free_heap() -> None:
    """Give freed heap pages back to the OS once per block: glibc ``malloc_trim(0)`` (malloc_trim(3)).

    Why: after torch frees its large activation buffers, glibc raises its dynamic mmap threshold and
    serves later ones from the heap, which then fragments; peak RSS crept up with the number of blocks
    (1,440 MB after 3,000 documents against 1,248 MB with this call, default model, 256-row blocks).
    A no-op where the C library is not glibc.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
