"""Feature: one requested feature column (strategy, pooling, layers, layer_agg), its validation, its
dimension and its pooling key; the --feature / --layers parsers. Used by pipeline.options.config and the stages.

Late chunking is decided here, once, for every phase above: ``is_late`` (is this strategy late),
``late_token_layers`` (which hidden states its token vectors hold); pipeline.options.sections'
``SegmentConfig.for_strategy`` gives a strategy's window options."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import ConfigError
from .values import shown, whole_number

# Each closed set of choices is one tuple, used by click.Choice and by the checks below.
STRATEGIES = ("head", "tail", "head_tail", "chunk", "sliding", "late")
POOLINGS = ("cls", "pooler", "mean", "max")
LAYER_AGGS = ("mean", "sum", "concat")
AGGREGATES = ("first", "last", "mean", "max", "weighted")   # --aggregate takes one, or a comma list of several

# a window option -> the strategies that read it (an option the run's strategies do not read is reported)
STRATEGY_OPTIONS = {"overlap": ("sliding", "late"), "head_tokens": ("head_tail",), "tail_tokens": ("head_tail",),
                    "chunk_tokens": ("late",)}
Strategy = Literal["head", "tail", "head_tail", "chunk", "sliding", "late"]
WINDOW_POOLINGS = ("cls", "pooler")   # read one position of a window: no late chunk has them (pipeline.model.late)
Pooling = Literal["cls", "pooler", "mean", "max"]
PoolKey = tuple[str, tuple[int, ...], str]  # (pooling, layers, layer_agg): one pooled vector per window


def is_late(strategy: str) -> bool:
    """True for late chunking: the strategy whose vectors are pooled from the token vectors of a document's
    windows (pipeline.model.late), not from each window alone. The one place its name is compared."""
    return strategy == "late"


def late_token_layers(features: Sequence[Feature], n_layers: int) -> tuple[int, ...]:
    """The positive hidden-state indices (0..n_layers) whose per-token vectors the late features of
    ``features`` read, ascending; () without a late feature. Example: late (-2, -1), head (-4,), 6 -> (5, 6)."""
    return tuple(sorted({x if x >= 0 else n_layers + 1 + x for f in features if is_late(f.strategy)
                         for x in f.layers}))


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    """Raises ConfigError ``NAME='value'; choose one of a, b, c`` when value is not one of choices."""
    if value not in choices:
        raise ConfigError(f"{name}={value!r}; choose one of {', '.join(choices)}")


def window_dim(pooling: str, layers: tuple[int, ...], layer_agg: str, hidden: int) -> int:
    """D of one pooled window vector: hidden, times len(layers) with layer_agg concat (never for pooler).

    Example: mean, (-4, -3, -2, -1), concat, hidden 384 -> 1536; pooler -> 384.
    """
    return hidden * len(layers) if pooling != "pooler" and layer_agg == "concat" else hidden


def feature_fault(strategy: str, pooling: str, layers: tuple[int, ...], layer_agg: str,
                  shorthand: bool) -> str | None:
    """The first thing wrong with a feature's fields, or None.

    ``shorthand``: the fields came from --strategy/--pooling/--layers/--layer-agg, so the message names
    those flags; otherwise from a --feature spec (the caller prefixes ``--feature 'spec': ``).
    """
    for flag, value, choices in (("strategy", strategy, STRATEGIES), ("pooling", pooling, POOLINGS),
                                 ("layer-agg" if shorthand else "layer_agg", layer_agg, LAYER_AGGS)):
        if value not in choices:
            return f"{'--' if shorthand else ''}{flag}={value!r}; choose one of {', '.join(choices)}"
    if not layers:
        return "--layers is empty; give e.g. -1 or -4,-3,-2,-1" if shorthand else \
            "layers is empty; give e.g. -1 or -4..-1"
    if len(set(layers)) != len(layers):
        return f"--layers={format_layers(layers)} repeats a layer; name each once" if shorthand else \
            f"layers {format_layers(layers)} repeat a layer; name each once"
    if is_late(strategy) and pooling in WINDOW_POOLINGS:
        dash = "--" if shorthand else ""
        return (f"{dash}pooling {pooling} with {dash}strategy late: {pooling} reads a window's [CLS], but a late "
                "chunk is a span of content tokens without one; use mean or max pooling")
    if pooling == "pooler" and layers != (-1,):
        if shorthand:
            return (f"--pooling pooler reads the last layer's [CLS] through the pooler, so "
                    f"--layers={format_layers(layers)} has no effect; drop --layers or use --pooling cls")
        return (f"pooling pooler reads the last layer's [CLS] through the pooler, so layers "
                f"{format_layers(layers)} have no effect; drop the layers or use cls")
    return None


@dataclass(frozen=True)
class Feature:
    """One requested feature column: a window strategy and how each window becomes a vector.

    Written ``STRATEGY:POOLING[:LAYERS[:LAYER_AGG]]`` on the command line (``--feature``), e.g.
    ``chunk:cls:-4..-1:concat``; ``name`` is its output column (README "Several features in one run").
    The shorthand options --strategy/--pooling/--layers/--layer-agg make one Feature
    (``Feature.from_shorthand``).

    Raises:
        ConfigError: a field out of its choices, empty or repeated layers, pooler with layers.
    """

    strategy: Strategy = "head_tail"
    pooling: Pooling = "mean"
    layers: tuple[int, ...] = (-1,)        # hidden-state indices: 0 embeddings, 1..L layers, -1 last
    layer_agg: Literal["mean", "sum", "concat"] = "mean"

    def __post_init__(self) -> None:
        fault = feature_fault(self.strategy, self.pooling, self.layers, self.layer_agg, shorthand=False)
        if fault:
            raise ConfigError(fault)

    @classmethod
    def from_shorthand(cls, strategy: str = "head_tail", pooling: str = "mean", layers: tuple[int, ...] = (-1,),
                       layer_agg: str = "mean") -> Feature:
        """The one feature of --strategy/--pooling/--layers/--layer-agg; a fault's message names those flags."""
        fault = feature_fault(strategy, pooling, layers, layer_agg, shorthand=True)
        if fault:
            raise ConfigError(fault)
        return cls(strategy, pooling, layers, layer_agg)

    def dim(self, hidden: int) -> int:
        """D of this feature's vectors (and of its token vectors) for a model of ``hidden`` size."""
        return window_dim(self.pooling, self.layers, self.layer_agg, hidden)

    @property
    def late(self) -> bool:
        """True when this feature's strategy is late chunking (``is_late``)."""
        return is_late(self.strategy)

    @property
    def pool_key(self) -> PoolKey:
        """(pooling, layers, layer_agg): features with the same key read the same pooled window vector."""
        return (self.pooling, self.layers, self.layer_agg)

    @property
    def name(self) -> str:
        """The output column: ``f_STRATEGY_POOLING``, plus ``_L{layers}`` when the layers are not just -1,
        plus ``_{layer_agg}`` when more than one layer is combined.

        Layers are written as ``A..B`` when they are ascending and consecutive (two or more), else
        comma-separated in the order given. Example: chunk, cls, (-4, -3, -2, -1), concat ->
        ``f_chunk_cls_L-4..-1_concat``; head_tail, mean, (-1,) -> ``f_head_tail_mean``;
        head, max, (-2,) -> ``f_head_max_L-2``.
        """
        name = f"f_{self.strategy}_{self.pooling}"
        if self.layers != (-1,):
            name += f"_L{compact_layers(self.layers)}"
        if len(self.layers) > 1:
            name += f"_{self.layer_agg}"
        return name

    @property
    def spec(self) -> str:
        """The ``--feature`` text that asks for this feature, e.g. ``chunk:cls:-4..-1:concat``."""
        text = f"{self.strategy}:{self.pooling}"
        if self.layers != (-1,) or self.layer_agg != "mean":
            text += f":{compact_layers(self.layers)}"
        if self.layer_agg != "mean":
            text += f":{self.layer_agg}"
        return text

    def extract_options(self) -> str:
        """The one-feature shorthand options of ``longbert extract`` for this feature."""
        layers = [f"--layers={format_layers(self.layers)}"] if self.layers != (-1,) else []
        agg = [f"--layer-agg {self.layer_agg}"] if len(self.layers) > 1 else []
        return " ".join([f"--strategy {self.strategy} --pooling {self.pooling}", *layers, *agg])


def compact_layers(layers: tuple[int, ...]) -> str:
    """(-4, -3, -2, -1) -> '-4..-1'; (-2,) -> '-2'; (-1, -4) -> '-1,-4' (order kept when not a run)."""
    run = len(layers) > 1 and all(b == a + 1 for a, b in zip(layers, layers[1:]))
    return f"{layers[0]}..{layers[-1]}" if run else format_layers(layers)


def format_layers(layers: tuple[int, ...]) -> str:
    """(-4, -1) -> '-4,-1', the form --layers takes."""
    return ",".join(str(x) for x in layers)


def parse_layers(value: str | int | list[int] | tuple[int, ...]) -> tuple[int, ...]:
    """'-4,-3,-2,-1' (or a YAML list, or one number) -> (-4, -3, -2, -1); an integral float is its int
    (-1.0 -> -1, as every whole-number option: pipeline.options.values.whole_number).

    Raises:
        ConfigError: a layer that is not a whole number (-1.5, True, 'x'), naming --layers and the value.
    """
    if isinstance(value, (list, tuple)):
        items = list(value)
    elif isinstance(value, str):
        items = [x.strip() for x in value.split(",") if x.strip()]
    else:
        items = [value]
    try:
        return tuple(whole_number("layers", x) for x in items)
    except ConfigError:
        raise ConfigError(f"--layers={shown(value)} must be comma-separated integers, e.g. -4,-3,-2,-1") from None


def parse_feature(value: str | dict | Feature) -> Feature:
    """'chunk:cls:-4..-1:concat' (or a YAML mapping of strategy/pooling/layers/layer_agg) -> Feature.

    LAYERS is comma-separated (``-4,-1``) or a range ``A..B`` (both ends included, ascending).

    Raises:
        ConfigError: naming the spec and what is wrong with it.
    """
    if isinstance(value, Feature):
        return value
    if isinstance(value, dict):
        unknown = set(value) - {"strategy", "pooling", "layers", "layer_agg"}
        if unknown or "strategy" not in value:
            raise ConfigError(f"feature {value!r}: give strategy and optionally pooling, layers, layer_agg "
                              f"(unknown keys: {sorted(unknown)})")
        parts = [value["strategy"], value.get("pooling", "mean"), value.get("layers", -1),
                 value.get("layer_agg", "mean")]
        text = repr(value)
    else:
        text = str(value)
        parts = text.split(":")
        if not 2 <= len(parts) <= 4 or not all(p.strip() for p in parts):
            raise ConfigError(f"--feature {text!r}: write STRATEGY:POOLING[:LAYERS[:LAYER_AGG]], "
                              "e.g. chunk:mean or head:cls:-4..-1:concat")
        parts = [p.strip() for p in parts]
    try:
        layers = (-1,) if len(parts) < 3 else _parse_layer_range(parts[2])
        return Feature(strategy=parts[0], pooling=parts[1], layers=layers,
                       layer_agg=parts[3] if len(parts) > 3 else "mean")
    except ConfigError as err:
        raise ConfigError(f"--feature {text!r}: {err}") from None


def _parse_layer_range(value: Any) -> tuple[int, ...]:
    """'-4..-1' -> (-4, -3, -2, -1); anything else as parse_layers."""
    if isinstance(value, str) and ".." in value:
        lo, _, hi = value.partition("..")
        try:
            a, b = int(lo), int(hi)
        except ValueError:
            raise ConfigError(f"layers {value!r} must be A..B with integers A <= B, e.g. -4..-1") from None
        if a > b:
            raise ConfigError(f"layers {value!r} must be A..B with A <= B, e.g. -4..-1")
        return tuple(range(a, b + 1))
    return parse_layers(value)


SHORTHAND = ("strategy", "pooling", "layers", "layer_agg")


def fold_features(merged: dict[str, Any]) -> None:
    """Fold the feature options of flat merged options (CLI or YAML) into ``features``, in place, once.

    The shorthand (--strategy/--pooling/--layers/--layer-agg) becomes one Feature; a --feature list is
    parsed. One feature also sets the shorthand fields (the segment and pool stages' own parameters,
    and what the metadata and --resume fingerprint have always recorded); two or more leave them at
    their defaults.

    Raises:
        ConfigError: a bad spec or shorthand value, or --feature together with the shorthand options.
    """
    specs = merged.pop("features", None)
    if specs is None or specs == () or specs == []:
        layers = parse_layers(merged["layers"]) if "layers" in merged else (-1,)
        f = Feature.from_shorthand(merged.get("strategy", "head_tail"), merged.get("pooling", "mean"), layers,
                                   merged.get("layer_agg", "mean"))
        merged.update(strategy=f.strategy, pooling=f.pooling, layers=f.layers, layer_agg=f.layer_agg,
                      features=(f,))
        return
    if isinstance(specs, (str, dict)):
        specs = [specs]
    if not isinstance(specs, (list, tuple)):
        raise ConfigError(f"features must be a list of STRATEGY:POOLING[:LAYERS[:LAYER_AGG]] specs, got {specs!r}")
    features = tuple(parse_feature(s) for s in specs)
    both = [k for k in SHORTHAND if k in merged]
    if both:
        flags = ", ".join("--" + k.replace("_", "-") for k in both)
        raise ConfigError(f"--feature and {flags} were both given; {flags} is the shorthand for one feature: "
                          "drop it, or add that feature as another --feature")
    merged["features"] = features
    if len(features) == 1:
        f = features[0]
        merged.update(strategy=f.strategy, pooling=f.pooling, layers=f.layers, layer_agg=f.layer_agg)


def check_aggregate(value: str) -> str:
    """The canonical --aggregate text: parts stripped, joined by commas (" first, max" -> "first,max").

    Raises:
        ConfigError: an empty list, a part not in AGGREGATES, or a part given twice (names --aggregate).
    """
    parts = [p.strip() for p in str(value).split(",")]
    if not any(parts):
        raise ConfigError(f"--aggregate={value!r} is empty; give one or more of {', '.join(AGGREGATES)}, "
                          "e.g. mean or first,last,mean,max")
    for part in parts:
        check_choice("--aggregate", part, AGGREGATES)
    repeated = sorted({p for p in parts if parts.count(p) > 1}, key=parts.index)
    if repeated:
        raise ConfigError(f"--aggregate={value!r} repeats {', '.join(repeated)}; name each part once, "
                          "e.g. first,last,mean,max")
    return ",".join(parts)


def check_late(chunk_tokens: int, overlap: int, max_length: int | None) -> None:
    """Check late's options: chunk_tokens >= 1, overlap in [0, C) for windows of C = max_length - 2.

    Raises:
        ConfigError: naming the option and the fix. ``max_length`` None checks only what needs no model.
    """
    if chunk_tokens < 1:
        raise ConfigError(f"--chunk-tokens={chunk_tokens} must be >= 1 (content tokens per late chunk)")
    if overlap < 0:
        raise ConfigError(f"--overlap={overlap} must be >= 0")
    if max_length is not None and not overlap < max_length - 2:
        c = max_length - 2
        raise ConfigError(f"--overlap={overlap} must be in [0, {c}) for late's windows of {c} content tokens "
                          f"(max_length {max_length} - [CLS] - [SEP]); lower --overlap (late's default is 256)")
