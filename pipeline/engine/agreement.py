"""A pipeline's built-in stages checked against each other when it is built (``Pipeline([...])``), and the
window and pooling settings they describe, from which the file's metadata takes its fields
(pipeline.engine.compose calls both).

A pipeline from parts may hold a ``Segment`` of its own windows, an ``Aggregate`` of its own features or
a ``Tokenize`` of another tokenizer. Pairs that would give wrong or mixed vectors without an error are
refused here, naming both stages and their values; the metadata then describes the stages that ran,
not the options the pipeline was first built with.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..model.encode_stage import Encode
from ..errors import ConfigError
from ..options.config import PipelineConfig, PoolConfig, SegmentConfig, WriteConfig
from ..output.aggregate import Aggregate, TokenAggregate, WindowAggregate
from ..output.rows import Rows, TokenRows, WindowRows
from ..text.rules import as_config
from ..text.segment import Segment
from ..text.tokenize import Tokenize

# The rows stage each aggregate class needs: one row per document, with its tokens, or per window.
ROWS_OF = {Aggregate: Rows, TokenAggregate: TokenRows, WindowAggregate: WindowRows}
# The output level each aggregate class makes (PoolConfig.level).
LEVEL_OF = {Aggregate: "document", TokenAggregate: "token", WindowAggregate: "window"}
KINDS = (Tokenize, Segment, Encode, Aggregate, Rows)


def built_in(steps: Sequence[tuple[str, Any]]) -> dict[type, tuple[str, Any]]:
    """The first stage of each built-in kind in ``steps``: {Tokenize: (name, stage), Segment: ..., ...}."""
    found: dict[type, tuple[str, Any]] = {}
    for name, stage in steps:
        for kind in KINDS:
            if isinstance(stage, kind) and kind not in found:
                found[kind] = (name, stage)
    return found


def check_agreement(steps: Sequence[tuple[str, Any]]) -> None:
    """Refuse built-in stages that disagree with each other (only the kinds present are compared).

    Checked: each Segment window fits the Encode model's positions and begins and ends with its
    special ids; the Tokenize tokenizer has the Encode tokenizer's vocabulary; every Aggregate feature's
    strategy is one the Segment makes; every Aggregate feature reads a pooled vector the Encode stage
    computes (the Aggregate reads where it lies from the encoded batch); the Rows stage is the one for
    the Aggregate's output level.

    Raises:
        ConfigError: naming both stages and the values that differ, and the fix. Example: a Segment of
            max_length=1024 before an Encode of a 512-position model -> "stage 'segment' makes 'chunk'
            windows of max_length=1024 positions, but stage 'encode' (model 'm') serves 512; ...".
    """
    found = built_in(steps)
    tok, seg, enc, agg, rows = (found.get(kind, (None, None)) for kind in KINDS)
    if seg[1] is not None and enc[1] is not None:
        _segment_and_encode(seg, enc)
    if tok[1] is not None and enc[1] is not None:
        _tokenize_and_encode(tok, enc)
    if seg[1] is not None and agg[1] is not None:
        missing = [f.spec for f in agg[1].features if f.strategy not in seg[1].strategies]
        if missing:
            raise ConfigError(f"stage {agg[0]!r} aggregates features {missing}, whose windows stage {seg[0]!r} does "
                              f"not make (its strategies are {list(seg[1].strategies)}); give the Segment those "
                              "strategies or the Aggregate features of its strategies")
    if enc[1] is not None and agg[1] is not None:
        _encode_and_aggregate(enc, agg)
    if agg[1] is not None and rows[1] is not None:
        _aggregate_and_rows(agg, rows)


def _segment_and_encode(seg: tuple[str, Segment], enc: tuple[str, Encode]) -> None:
    (seg_name, segment), (enc_name, encode) = seg, enc
    facts = encode.facts
    limit = facts.positions or facts.max_length
    for strategy, cfg in segment.strategies.items():
        if cfg.max_length is not None and cfg.max_length > limit:
            raise ConfigError(f"stage {seg_name!r} makes {strategy!r} windows of max_length={cfg.max_length} "
                              f"positions, but stage {enc_name!r} (model {facts.name!r}) serves {limit}; give the "
                              f"Segment max_length <= {limit}")
    if (segment.cls_id, segment.sep_id) != (facts.cls_id, facts.sep_id):
        raise ConfigError(f"stage {seg_name!r} wraps windows in ids cls_id={segment.cls_id}, sep_id={segment.sep_id}, "
                          f"but stage {enc_name!r}'s model begins and ends them with {facts.cls_id} and "
                          f"{facts.sep_id}; build the Segment with the model tokenizer's cls_id and sep_id")


def _tokenize_and_encode(tok: tuple[str, Tokenize], enc: tuple[str, Encode]) -> None:
    (tok_name, tokenize), (enc_name, encode) = tok, enc
    mine, theirs = tokenize.tokenizer, encode.tokenizer
    if mine is theirs or mine is None or theirs is None:
        return
    if len(mine) != len(theirs) or mine.get_vocab() != theirs.get_vocab():
        raise ConfigError(f"stage {tok_name!r}'s tokenizer ({getattr(mine, 'name_or_path', '?')!r}, {len(mine)} "
                          f"tokens) is not stage {enc_name!r}'s ({getattr(theirs, 'name_or_path', '?')!r}, "
                          f"{len(theirs)} tokens): its ids would index another vocabulary; build the Tokenize "
                          "with the model's tokenizer (pipe['encode'].tokenizer)")


def _encode_and_aggregate(enc: tuple[str, Encode], agg: tuple[str, Aggregate]) -> None:
    (enc_name, encode), (agg_name, aggregate) = enc, agg
    keys = [p.pool_key for p in encode.spec.pools]
    for feature in aggregate.features:
        if feature.pool_key not in keys:
            raise ConfigError(f"stage {agg_name!r}'s feature {feature.spec!r} reads pooling {feature.pool_key}, which "
                              f"stage {enc_name!r} does not compute (it pools {keys}); build both from one config, "
                              "e.g. longbert.Pipeline.from_options(feature=[...])")


def _aggregate_and_rows(agg: tuple[str, Aggregate], rows: tuple[str, Rows]) -> None:
    (agg_name, aggregate), (rows_name, row_stage) = agg, rows
    wanted = next((r for a, r in ROWS_OF.items() if type(aggregate) is a), None)
    if wanted is not None and type(row_stage) in ROWS_OF.values() and type(row_stage) is not wanted:
        raise ConfigError(f"stage {agg_name!r} is a {type(aggregate).__name__}, whose output rows stage "
                          f"{rows_name!r} ({type(row_stage).__name__}) does not write; use a {wanted.__name__}")


def described_config(cfg: PipelineConfig, steps: Sequence[tuple[str, Any]]
                     ) -> tuple[PipelineConfig, dict[str, SegmentConfig]]:
    """The config the built-in stages in ``steps`` describe, for the file's metadata: ``cfg`` with its
    window settings taken from the Segment stage (the first feature's strategy), the tokens kept per
    document from the Tokenize stage, and the features, aggregates and normalize from the Aggregate.

    Returns:
        (that config, strategy -> SegmentConfig of each strategy the Segment makes; {} without one).
        Example: a Segment of chunk windows of max_length=8 -> cfg.segment.max_length == 8.
    """
    found = built_in(steps)
    pool, segments = cfg.pool, {}
    if Aggregate in found:
        agg = found[Aggregate][1]
        first = agg.features[0]
        shorthand = {} if len(agg.features) > 1 else {"pooling": first.pooling, "layers": tuple(first.layers),
                                                       "layer_agg": first.layer_agg}
        pool = dataclasses.replace(pool, features=tuple(agg.features), aggregate=",".join(agg.aggregates),
                                   normalize=agg.normalize, **shorthand)
    seg = cfg.segment
    if Segment in found:
        segments = {k: as_config(rule, cfg.segment) for k, rule in found[Segment][1].strategies.items()}
        seg = segments.get(pool.features[0].strategy) or next(iter(segments.values()), seg)
    if Tokenize in found:
        kept = found[Tokenize][1].max_tokens_per_doc
        seg = dataclasses.replace(seg, max_tokens_per_doc=kept)
        segments = {k: dataclasses.replace(v, max_tokens_per_doc=kept) for k, v in segments.items()}
    return dataclasses.replace(cfg, segment=seg, pool=pool), segments



def parts_config(steps: Sequence[tuple[str, Any]]) -> PipelineConfig:
    """The config a pipeline built from parts runs with: the Encode stage's model options, features,
    batch limits and store folder, described by the other built-in stages (``described_config``: the
    Segment's windows, the Tokenize's tokens kept, the Aggregate's features, aggregates, normalize and
    level, the Rows' --out-dtype); the read and write options are the defaults (a run gives its own).

    Raises:
        ConfigError: no Encode stage in ``steps``, or values that make no valid config.
    """
    found = built_in(steps)
    if Encode not in found:
        raise ConfigError("this pipeline has no 'encode' stage to take the model's options from; build it "
                          "with Pipeline.from_options(...) or include an Encode stage")
    encode = found[Encode][1]
    write = WriteConfig(cache=encode.store if isinstance(encode.store, str) else None)
    if Rows in found:
        write = dataclasses.replace(write, out_dtype=found[Rows][1].out_dtype)
    base = PipelineConfig(model=encode.model, encode=encode.encode, pool=_encode_pool(encode), write=write)
    cfg, _ = described_config(base, steps)
    if Aggregate in found:
        level = LEVEL_OF.get(type(found[Aggregate][1]), "document")
        cfg = dataclasses.replace(cfg, pool=dataclasses.replace(cfg.pool, level=level))
    return cfg


def _encode_pool(encode: Encode) -> PoolConfig:
    """The PoolConfig of an Encode stage's features (the shorthand fields its first's; token level with_tokens)."""
    first = encode.features[0]
    return PoolConfig(pooling=first.pooling, layers=first.layers, layer_agg=first.layer_agg,
                      level="token" if encode.with_tokens else "document", features=encode.features)
