"""PipelineConfig: every option of a run, validated once; built by cli.py, passed down whole to the stages.
Its sections, one record per stage, are in pipeline.options.sections (re-exported here)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config_file import coerce, load_yaml
from .defaults import DECLARABLE, DEFAULT_MODEL, FOLDER_SETTINGS  # noqa: F401 - re-exported
from ..columns import check_keep_cols, column_names
from ..errors import ConfigError
from .ray_config import ENGINES, RayConfig  # noqa: F401 - re-exported: the config's sections are all here
from .features_config import STRATEGIES, Feature, Pooling, Strategy, feature_fault, fold_features  # noqa: F401
from .sections import (DTYPES, FORMATS, LEVELS, ON_BAD_LINES, OUT_DTYPES, QUANTIZE, EncodeConfig,  # noqa: F401
                       ModelConfig, PoolConfig, ReadConfig, SegmentConfig, WriteConfig)


@dataclass(frozen=True)
class PipelineConfig:
    read: ReadConfig = field(default_factory=ReadConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    segment: SegmentConfig = field(default_factory=SegmentConfig)
    encode: EncodeConfig = field(default_factory=EncodeConfig)
    pool: PoolConfig = field(default_factory=PoolConfig)
    write: WriteConfig = field(default_factory=WriteConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    # the DECLARABLE options the user set (CLI, --config, Python), recorded by from_options, so a model
    # folder's declared settings fill only the others; None (a config built field by field): all of them
    user_set: tuple[str, ...] | None = None

    @classmethod
    def from_options(cls, config_file: str | Path | None = None, **options: Any) -> PipelineConfig:
        """Build the config from flat option names (those of the CLI, underscored), YAML values under them.

        Args:
            config_file: a YAML file of the same option names (``strategy: chunk``); values given in
                ``options`` (not None) win over the file's.
            **options: flat options, e.g. ``strategy="sliding", overlap=64, inputs=("a.csv",)``.

        Raises:
            ConfigError: an unknown option name, a value of the wrong type, or a value out of range.
        """
        merged: dict[str, Any] = {}
        if config_file is not None:
            merged.update(load_yaml(config_file))
        merged.update({k: v for k, v in options.items() if v is not None})
        keys = {k.replace("-", "_") for k in merged} | ({"pooling"} if "features" in merged else set())
        user_set = tuple(k for k in DECLARABLE if k in keys)   # --feature names its pooling
        fold_features(merged)
        if "overlap" in merged:  # --overlap sets late's overlap too (its own default: 256)
            merged.setdefault("late_overlap", merged["overlap"])
        sections: dict[str, dict[str, Any]] = {name: {} for name in _SECTIONS}
        for key, value in merged.items():
            key = key.replace("-", "_")
            if key not in _OPTION_SECTION:
                raise ConfigError(f"unknown option {key!r}; known options are {', '.join(sorted(_OPTION_SECTION))}")
            sections[_OPTION_SECTION[key]][key] = coerce(key, value)
        try:
            return cls(**{name: _SECTIONS[name](**values) for name, values in sections.items()}, user_set=user_set)
        except TypeError as err:  # a value of the wrong type reached a dataclass
            raise ConfigError(f"bad option value: {err}") from None

    def __post_init__(self) -> None:
        if not self.pool.features:
            raise ConfigError("a run needs at least one feature; give --feature or --strategy/--pooling")
        if self.pool.per_token and (self.write.dims is not None or self.write.projection_file is not None):
            flag = "--dims" if self.write.dims is not None else "--projection"
            raise ConfigError(f"{flag} projects document or window vectors, not --level token's per-token vectors; "
                              f"drop {flag}, or write --level document or window")
        aggregates = self.pool.aggregates if self.pool.parts > 1 else ()
        check_keep_cols(self.read.keep_cols, self.pool.level, column_names(self.feature_list(), aggregates),
                        self.write.out_dtype)

    def feature_list(self) -> tuple[Feature, ...]:
        """Every feature of the run (``pool.features``): the --feature list, or the one feature of
        --strategy/--pooling/--layers/--layer-agg."""
        return self.pool.features

    @property
    def multi_feature(self) -> bool:
        """True when the run writes one column per feature (two or more --feature)."""
        return len(self.pool.features) > 1

    def to_dict(self) -> dict[str, Any]:
        """The config as nested plain data (JSON-able), as written to the parquet metadata.

        A one-feature run lists no ``pool.features`` (its feature is the shorthand fields), as the
        metadata and the --resume fingerprint have always had it.
        """
        d = dataclasses.asdict(self)
        if not self.multi_feature:
            d["pool"]["features"] = ()
        return d

    def fingerprint(self) -> str:
        """sha256 of the options that change output values or row layout (not output path or progress)."""
        return hashlib.sha256(json.dumps(self.fingerprint_options(), sort_keys=True).encode()).hexdigest()

    def fingerprint_options(self) -> dict[str, Any]:
        """The options fingerprint() hashes, as nested plain data (a DIR/ manifest keeps them, so --resume
        can name the option that differs)."""
        d = self.to_dict()
        d.pop("user_set")   # the values it let a model folder fill are compared themselves
        later = {"folder_settings": "auto", "prompt_name": None}   # added later: runs without them keep their fingerprint
        d["model"] = {k: v for k, v in d["model"].items() if k not in later or v != later[k]}
        for key in ("output", "overwrite", "resume", "progress", "strict", "cache", "binary_center_file",
                    "projection_file"):
            d["write"].pop(key)   # the centre's and projection's files: read back from the parts a resumed run finishes
        for key, default in (("dims", None), ("dims_method", "auto")):
            if d["write"][key] == default:   # added later: a run without --dims keeps its fingerprint (resume)
                d["write"].pop(key)
        d.pop("ray")
        d["read"].pop("inputs")  # inputs are compared by content, not by name (pipeline.read)
        for key, default in (("format", None), ("delimiter", None), ("with_source", False)):
            if d["read"][key] == default:  # added later: a run without them keeps its fingerprint (resume)
                d["read"].pop(key)
        d["model"].pop("threads")
        if self.model.quantize == "none":   # int8's activation scale is per forward batch: pieces change its vectors
            d["encode"].pop("block_tokens")   # else where a block is cut into pieces changes no row or vector
        if not any(f.late for f in self.feature_list()):  # added later: other runs keep their fingerprint
            for key in ("chunk_tokens", "late_overlap"):
                d["segment"].pop(key)
        return d


_SECTIONS = {"read": ReadConfig, "model": ModelConfig, "segment": SegmentConfig, "encode": EncodeConfig,
             "pool": PoolConfig, "write": WriteConfig, "ray": RayConfig}
_OPTION_SECTION = {f.name: section for section, klass in _SECTIONS.items() for f in dataclasses.fields(klass)}


def option_sections() -> dict[str, str]:
    """Option name -> its config section ("read", "model", "segment", "encode", "pool", "write", "ray")."""
    return dict(_OPTION_SECTION)
