"""A run's options resolved against the model once: the checks that need the model's config and
tokenizer (``resolve_config``, no weights load), the frozen record they give (``Resolved``), and the
one builder that turns that record into the built-in stages (the level's classes chosen here, once).
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..errors import ConfigError
from ..model.facts import check_pooler, model_facts, resolve_model_path
from ..options.config import PipelineConfig, SegmentConfig
from ..output.aggregate import Aggregate, TokenAggregate, WindowAggregate
from ..output.rows import Rows, TokenRows, WindowRows
from ..output.schema import TOKEN_FEATURES, feature_columns, output_schema, passthrough_columns
from ..text.dedup import Dedup
from ..text.segment import Segment, prompt_rules
from ..text.tokenize import Tokenize
from ..types import ModelFacts
from ..model.prompts import run_prompt
from ..model.st_folder import apply_settings, lowercases
from .centre_file import file_centers


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
        prompt_rules(seg.for_strategy(strategy), len(prompt.ids))


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
    at --level window (a --keep-col named like a feature column: pipeline.columns.check_keep_cols).

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
        seg.for_strategy(strategy)  # __post_init__ runs check_window for this strategy


def feature_dim(cfg: PipelineConfig, hidden: int) -> tuple[int, int]:
    """(D of ``features``, D of ``token_features``) of a one-feature run: Feature.dim for the token
    vectors (pooled as the feature's layers are; pooler takes only the last layer), times the
    --aggregate parts for ``features``."""
    dim = cfg.feature_list()[0].dim(hidden)
    return dim * cfg.pool.parts, dim


def output_for(cfg: PipelineConfig, tokenizer, id_type: pa.DataType, binary_center: Mapping[str, Any] | None = None,
               projection: Mapping[str, Any] | None = None) -> tuple[PipelineConfig, pa.Schema]:
    """(config with max_length resolved, the output schema) without loading weights: what a driver
    needs to open the sink before any worker has loaded the model. ``binary_center``: the rows
    stage's {column: centre or None} of an --out-dtype binary run, for the metadata; ``projection``:
    its {column: Projection} of a --dims run.

    Raises:
        As resolve_config.
    """
    cfg, _, facts = resolve_config(cfg, tokenizer)
    dim, token_dim = feature_dim(cfg, facts.hidden_size)
    return cfg, output_schema(cfg, id_type, facts, dim, token_dim, binary_center=binary_center, projection=projection)


# Per output level: its aggregate and rows classes.
LEVEL_STAGES = {"document": (Aggregate, Rows), "token": (TokenAggregate, TokenRows),
                "window": (WindowAggregate, WindowRows)}


@dataclass(frozen=True)
class Resolved:
    """The options resolved against the model (its config and tokenizer; no weights).

    Fields:
        cfg: the config, segment.max_length set from the model.
        tokenizer: the model's fast tokenizer. facts: the model's facts (hidden size, layers,
            special ids, sha256...).
        columns: per feature (output column name, D). dim, token_dim: D of ``features`` and of
            ``token_features`` in a one-feature run. stage_labels: the labels of a pipeline's own
            stage list (written to the file's metadata, compared by --resume); None: the built-in stages.
        added: (stage name, pyarrow field) of each column a stage after 'rows' declares (file_schema).
        described, segments: the config a pipeline's own stages describe and its Segment stage's
            windows per strategy (pipeline.engine.agreement.described_config): the file's metadata takes
            its window and pooling fields from them; None / (): from ``cfg``.
        binary_center: the rows stage's fitted centre of an --out-dtype binary run ({column: (D,)
            values or None}, pipeline.output.rows.Rows), recorded in the file's metadata; None: none.
        projection: the rows stage's fitted --dims projection ({column: pipeline.projection.Projection}),
            recorded in the file's metadata, its N the stored columns' D; None: none.
    """

    cfg: PipelineConfig
    tokenizer: Any
    facts: ModelFacts
    columns: tuple[tuple[str, int], ...]
    dim: int
    token_dim: int
    stage_labels: tuple[str, ...] | None = None   # a pipeline's own stage list (pipeline.stage.stage_label); None: built-in
    described: PipelineConfig | None = None       # what the stages that run say (metadata only); None: cfg
    segments: tuple[tuple[str, SegmentConfig], ...] = ()   # the Segment stage's strategies, in its order
    added: tuple[tuple[str, pa.Field], ...] = ()  # (stage, field): columns stages after 'rows' declare
    binary_center: Mapping[str, Any] | None = None   # the rows stage's fitted centre (metadata); None: none
    projection: Mapping[str, Any] | None = None      # the rows stage's fitted --dims projection; None: none

    @classmethod
    def from_config(cls, cfg: PipelineConfig, tokenizer=None) -> Resolved:
        """Resolve ``cfg`` against its model (reads the model's config and tokenizer, loads no weights).

        Raises:
            ConfigError / ModelError: as pipeline.engine.resolved.resolve_config.
        """
        cfg, tokenizer, facts = resolve_config(cfg, tokenizer)
        hidden = facts.hidden_size
        dim, token_dim = feature_dim(cfg, hidden)
        return cls(cfg, tokenizer, facts, tuple(feature_columns(cfg, hidden)), dim, token_dim)

    @property
    def features(self) -> tuple:
        """The run's features, in column order."""
        return self.cfg.feature_list()

    def with_io(self, cfg: PipelineConfig, rows: Rows | None = None) -> Resolved:
        """This record with ``cfg``'s read, write and engine options (inputs, output, --keep-col, --out-dtype,
        --cache, --engine...); what was resolved against the model stays. ``rows``: a pipeline's rows stage, whose
        binary centre (if any) the record takes for the metadata of an --out-dtype binary run.

        Raises:
            ConfigError: a --keep-col that clashes with a column of this run.
        """
        out = dataclasses.replace(self, cfg=dataclasses.replace(self.cfg, read=cfg.read, write=cfg.write, ray=cfg.ray))
        if rows is not None and rows.binary_center is not None and cfg.write.out_dtype == "binary":
            out = dataclasses.replace(out, binary_center=rows.binary_center)
        if rows is not None and rows.projection is not None:
            out = dataclasses.replace(out, projection=rows.projection)
        return out

    def schema(self, id_type: pa.DataType) -> pa.Schema:
        """The output schema for ids of ``id_type`` (pa.int64(): a ``row`` column; pa.string(): ``id``)."""
        schema = output_schema(self.cfg, id_type, self.facts, self.dim, self.token_dim, self.described,
                               dict(self.segments), self.binary_center, self.projection)
        if self.stage_labels is None:
            return schema
        meta = json.loads(schema.metadata[b"longbert"])
        meta["stages"] = list(self.stage_labels)   # beside the options: a reader can tell two pipelines' files apart
        return schema.with_metadata({**schema.metadata, b"longbert": json.dumps(meta).encode()})

    def file_schema(self, id_type: pa.DataType) -> pa.Schema:
        """The schema the file is written with: ``schema(id_type)`` and, after its columns, those the
        stages after 'rows' declare (pipeline.engine.columns.with_added; the rows stage builds ``schema``).

        Raises:
            ConfigError: an added column that takes one of the output's names.
        """
        from .columns import with_added

        return with_added(self.schema(id_type), self.added)

    def stages(self, model=None, store=None) -> list:
        """The built-in stages in order: tokenize, segment, dedup, encode, aggregate, rows (with this record's
        binary centre and projection).

        Args:
            model: an already loaded model, or the pipeline.model.encode_stage.Weights of another
                pipeline's encode stage (shared, not loaded again); None: loaded on first encode.
            store: an open window store (the vectorizer's in-memory one), or None.
        """
        from ..model.encode_stage import Encode

        cfg, facts, pool = self.cfg, self.facts, self.cfg.pool
        seg = cfg.segment
        strategies = {s: seg.for_strategy(s) for s in dict.fromkeys(f.strategy for f in self.features)}
        aggregate, rows = LEVEL_STAGES[pool.level]
        lower = lowercases(cfg, facts)
        prompt = run_prompt(cfg.model, facts, self.tokenizer, lower)   # a sentence-transformers folder's, in every window
        return [Tokenize(self.tokenizer, seg.max_tokens_per_doc, with_offsets=pool.per_token,
                         vocab_rows=facts.vocab_rows, lowercase=lower),
                Segment(strategies, facts.cls_id, facts.sep_id, prompt.ids if prompt else ()),
                Dedup(),
                Encode.from_config(cfg, self.tokenizer, facts, model, store, with_tokens=pool.per_token),
                aggregate(self.features, cfg.pool.aggregates, cfg.pool.normalize, seg.chunk_tokens),
                self.rows_stage(rows)]

    def rows_stage(self, kind: type = Rows, centre: Mapping[str, Any] | None = None,
                   projection: Mapping[str, Any] | None = None) -> Rows:
        """The rows stage of class ``kind`` for this record: the run's kept columns and --out-dtype, the
        binary centre (this record's, else ``centre``; none unless --out-dtype binary) and the --dims
        projection (this record's, else ``projection``)."""
        out_dtype = self.cfg.write.out_dtype
        centre = (self.binary_center if self.binary_center is not None else centre) if out_dtype == "binary" else None
        projection = self.projection if self.projection is not None else projection
        return kind(tuple(passthrough_columns(self.cfg)), out_dtype, centre, projection)

    def stored_columns(self) -> dict[str, int]:
        """{column: D} of the feature columns as stored: each column's N with a --dims projection, else its D."""
        return {c: (self.projection[c].dim if self.projection and c in self.projection else d) for c, d in self.columns}

    def check_projected(self) -> None:
        """Raise ConfigError when the options ask for ``dims`` but the rows stage holds no fitted projection: a
        pipeline called on a batch (not a run, which fits one on its first documents) would write all D."""
        if self.cfg.write.dims is not None and self.projection is None:
            raise ConfigError(f"dims={self.cfg.write.dims} needs a fitted projection, which a run finds on its first "
                              "documents (pipe.run, longbert extract --dims); to call the pipeline on a batch, pass "
                              "projection=(mean, components) or an earlier --dims output's path")

    def projected(self, projection: Any, given: bool = False) -> Resolved:
        """This record with ``projection`` as the rows stage's --dims projection (pipeline.output.rows.projections_of),
        or the projection of the earlier --dims output at that path (pipeline.engine.calibrate.file_projection).

        Raises:
            ConfigError: a projection of another form, or, with ``given`` (a user's), one whose columns or D
                differ from this run's, naming the fix.
        """
        if isinstance(projection, str) or hasattr(projection, "__fspath__"):   # an earlier --dims output, as --projection FILE
            from .calibrate import file_projection

            projection = file_projection(str(projection), dict(self.columns), self.facts, self.cfg.write.dims)
        rows = Rows(out_dtype=self.cfg.write.out_dtype, projection=projection)
        if given and rows.projection is not None:
            have = dict(self.columns)
            for name, p in rows.projection.items():
                if have.get(name) != p.input_dim or set(rows.projection) != set(have):
                    raise ConfigError(f"projection takes columns {({c: q.input_dim for c, q in rows.projection.items()})}"
                                      f", this run writes {have}; pass the projection of this model and features")
        return dataclasses.replace(self, projection=rows.projection)

    def binary_columns(self) -> dict[str, int]:
        """{column: D} of the columns --out-dtype binary packs: each feature column (its --dims N when projected)
        and, per token, token_features."""
        columns = self.stored_columns()
        if self.cfg.pool.per_token:
            columns[TOKEN_FEATURES] = self.token_dim
        return columns

    def centred(self, centre: Any, given: bool = False) -> Resolved:
        """This record with ``centre`` as the rows stage's binary centre (pipeline.output.rows.centers_of).

        Raises:
            ConfigError: a centre without --out-dtype binary, of another form, or, with ``given`` (a user's),
                one whose columns or D differ from this run's (``binary_columns``), naming the fix.
        """
        try:
            rows = Rows(out_dtype=self.cfg.write.out_dtype, binary_center=centre)
            if given:
                rows.check_centers(self.binary_columns())
        except ConfigError as err:
            if not given:
                raise
            raise ConfigError(str(err).removeprefix("Rows: ")) from None   # the caller's argument, no stage of theirs
        return dataclasses.replace(self, binary_center=rows.binary_center)

    def given_centre(self, centre: Any) -> Resolved:
        """This record with a user's ``binary_center`` (Pipeline.from_options): an array or {column: array}
        checked as ``centred(centre, given=True)``; None: as it is. The --binary-center file the config names
        (binary_center_file) is checked now, so a wrong one is refused before any model loads (it is read
        again when the run starts: pipeline.engine.calibrate).

        Raises:
            ConfigError: as ``centred`` and pipeline.engine.centre_file.file_centers.
        """
        write = self.cfg.write
        if write.out_dtype == "binary" and write.binary_center_file is not None:
            file_centers(write.binary_center_file, self)
        return self if centre is None else self.centred(centre, given=True)

    def io_stage(self, stage: Any) -> Any:
        """``stage`` for a run with this record's read and write options: a built-in encode or rows
        stage rebuilt with the run's --cache, --out-dtype and kept columns (the same weights; a rows
        stage keeps its own binary centre, else takes this record's); ``stage`` itself when those leave
        it as it is (another output path, --progress...), and any other stage as it is."""
        from ..model.encode_stage import Encode

        if isinstance(stage, Encode):
            return stage.with_io(self.cfg, self.facts)
        if isinstance(stage, Rows):
            rows = self.rows_stage(type(stage), stage.binary_center, stage.projection)
            return stage if rows == stage else rows
        return stage
