"""``Pipeline``: stages in order, built from parts or from options, composable (insert, replace,
without), with ``map``, the one loop that runs stages over blocks.

``longbert extract`` is pipeline.engine.local.run(cfg), the same loop as ``Pipeline.run``. The design follows
scikit-learn's ``Pipeline`` (a list of steps, each rebuilt from ``get_params``), spaCy's
``add_pipe(before=/after=)`` with each component's ``requires``, and sentence-transformers' module
list (each module built alone from its own arguments).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

from ..batch import Batch, with_dropped
from ..options.config import PipelineConfig
from ..errors import ConfigError
from ..stage import INPUT_FIELDS, check_chain, describe, stage_label
from ..model.encode_stage import Encode
from .agreement import check_agreement, described_config, parts_config
from .columns import added_columns, checked_table, declared_label
from .block_loop import block_pieces
from .params import StepsByName, pipeline_params, set_step_params, step_item, with_io_options
from .resolved import Resolved
from .text_runs import TextRuns
from ..output.rows import Rows

StageFn = Callable[[Batch], Batch]
BUILT_IN_NAMES = ("tokenize", "segment", "dedup", "encode", "aggregate", "rows")


class Pipeline(TextRuns):   # run_texts: an iterable of texts, in bounded memory
    """The stages of a run in order; ``pipe(batch)`` runs them all and returns the output table.

    Build from parts, as scikit-learn's ``Pipeline``: ``Pipeline([stage, ...])`` names each stage by its
    ``name`` (or takes ``(name, stage)`` pairs); or with ``Pipeline.from_options(**extract_options)`` /
    ``Pipeline.from_config(cfg)``, which resolve the options against the model once (no weights load)
    and build the built-in stages. Nothing mutable is shared with another pipeline but the loaded
    weights; ``insert``, ``replace`` and ``without`` return new pipelines.

    scikit-learn's protocol: ``get_params``, ``set_params``, ``sklearn.base.clone``, ``named_steps``,
    ``pipe["segment"]``, ``pipe[1:3]``. It pickles and deep-copies before and after its weights load: an
    unpickled one (a worker's) loads them again from the model's folder, a deep copy shares them.

    Args:
        steps: stages (any callable ``Batch -> Batch``; a built-in one, or one with a ``name``) or
            (name, stage) pairs, in order.
        resolved: the pipeline.engine.resolved.Resolved record of the options (None: taken from the
            encode stage's config when ``run`` needs it).

    Raises:
        ConfigError: two stages of one name, a stage placed before a field it reads is filled
            (pipeline.stage.check_chain), or built-in stages that disagree with each other, naming both
            (a Segment's windows longer than the Encode model serves, Aggregate features of a strategy the
            Segment does not make, another tokenizer than the model's: pipeline.engine.agreement).

    Example:
        >>> pipe = Pipeline.from_options(model="default", strategy="chunk")
        >>> pipe.names
        ('tokenize', 'segment', 'dedup', 'encode', 'aggregate', 'rows')
        >>> lower = pipe.insert(lambda b: b.with_texts([t.lower() for t in b.texts]), before="tokenize", name="lower")
        >>> table = lower(Batch.from_texts(["A Long Report ..."]))
    """

    def __init__(self, steps: Iterable[StageFn | tuple[str, StageFn]], resolved: Resolved | None = None,
                 fills: dict[str, tuple[str, ...]] | None = None, given: Iterable[str] = INPUT_FIELDS):
        named = [s if isinstance(s, tuple) else (describe(s), s) for s in steps]
        self.steps: tuple[tuple[str, StageFn], ...] = tuple(named)
        self.resolved = resolved
        self.given = tuple(given)   # the fields a batch holds when it comes in (a slice: what the stages before filled)
        names = [n for n, _ in self.steps]
        if len(set(names)) != len(names):
            raise ConfigError(f"stage names must be unique; got {names}")
        # public: stage name -> what it fills, for a replacement that declares no ``fills`` (it fills what the
        # stage it replaced filled); pipeline.engine.params reads it to slice a pipeline
        self.inherited_fills = {n: f for n, f in (fills or {}).items() if n in names}
        check_chain(self.steps, self.given, fills=self.inherited_fills)
        check_agreement(self.steps)
        self.added = added_columns(self.steps, self.given, self.inherited_fills)   # (stage, field) of columns of one's own

    @classmethod
    def from_config(cls, cfg: PipelineConfig, tokenizer=None, model=None, store=None) -> Pipeline:
        """The built-in stages for ``cfg``, resolved against its model.

        Args:
            cfg: a PipelineConfig (PipelineConfig.from_options, or a config file's).
            tokenizer, model: already loaded ones for cfg.model (not loaded again). store: an open
                pipeline.cache.store_api.Store (None: cfg's --cache folder or s3:// URI, or none).

        Raises:
            ConfigError / ModelError: options the model cannot serve, a model that cannot be read.
        """
        resolved = Resolved.from_config(cfg, tokenizer)
        return cls(resolved.stages(model=model, store=store), resolved)

    @classmethod
    def from_options(cls, binary_center: Any = None, projection: Any = None, **options: Any) -> Pipeline:
        """As from_config, with ``extract``'s options by their Python names (``model``, ``strategy``,
        ``feature``, ``pooling``, ``layers``, ``aggregate``, ``level``, ``normalize``, ``dtype``,
        ``out_dtype``, ``cache``...). ``progress`` defaults to False.

        ``binary_center`` (``out_dtype="binary"``), so queries and a corpus share one: a (D,) array for the
        column ``features``, {column: (D,) array}, or an earlier binary output's path (``--binary-center``).
        ``projection`` (``dims``'s fitted state, shared the same way): a (mean (D,), components (N, D)) pair or a
        pipeline.projection.Projection for ``features``, {column: either}, or an earlier --dims output's path.

        Raises:
            ConfigError: an unknown option or a value out of range, a centre of another form, not finite, not
                fitting the columns, or of other features (Resolved.given_centre); ModelError as from_config.
        """
        from ..options.python_api import config_from_python, python_names

        if isinstance(binary_center, str) or hasattr(binary_center, "__fspath__"):   # an earlier output, as --binary-center FILE
            options["binary_center_file"], binary_center = str(binary_center), None
        with python_names():   # the options and the centre checked against the model: messages name the arguments
            pipe = cls.from_config(config_from_python(**options))
            if projection is not None:   # an earlier output's (read now: pipe(batch) projects as a run does) or arrays
                pipe = pipe.with_projection(projection, given=True)
            return pipe._rebuilt(pipe.resolution().given_centre(binary_center))

    @property
    def cfg(self) -> PipelineConfig:
        """The resolved config (max_length set from the model)."""
        return self.resolution().cfg

    def resolution(self) -> Resolved:
        """The options resolved against the model: the record given, else the encode stage's. Raises
        ConfigError for a pipeline built from parts without an encode stage."""
        if self.resolved is None:   # built from parts: resolved once, on first need, then kept
            cfg = parts_config(self.steps)   # ConfigError without an encode stage
            self.resolved = Resolved.from_config(cfg, self.encode_stage().tokenizer)
        return self.resolved

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.steps)   # the stage names, in order

    def __iter__(self):
        """The stages, in order (``Pipeline([type(s)(**s.get_params()) for s in pipe])`` rebuilds it)."""
        return iter(stage for _, stage in self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, key: str | int | slice) -> StageFn | Pipeline:
        """A stage by name (``pipe["segment"]``) or position (``pipe[0]``); a slice (``pipe[1:3]``): a
        Pipeline of those stages, checked from where it begins (pipeline.engine.params.step_item).

        Raises:
            KeyError: no stage of that name. IndexError: a position out of range. ValueError: a slice's step is not 1.
        """
        return step_item(self, key)

    @property
    def named_steps(self) -> StepsByName:
        """The stages by name, as scikit-learn's ``named_steps``: ``pipe.named_steps["segment"]`` or
        ``pipe.named_steps.segment`` (a copy: changing it changes nothing here)."""
        return StepsByName(self.steps)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """scikit-learn's parameters: ``steps`` (the constructor's argument: ``deep=False`` gives it alone, as
        scikit-learn's Pipeline does), and with ``deep`` each stage by its name and each stage's own
        parameters as ``name__param`` (e.g. ``segment__strategies``), for a stage with ``get_params``."""
        return pipeline_params(self.steps, deep)

    def __sklearn_clone__(self) -> Pipeline:
        """``sklearn.base.clone(pipe)``: a new pipeline of the same names, each stage cloned (a stage with
        ``get_params`` rebuilt from its parameters, an equal stage that shares the loaded weights; any
        other callable deep-copied), with this one's options record and declared fields. Changing the
        clone (``set_params``) leaves this pipeline as it is."""
        from sklearn.base import clone

        return Pipeline([(name, clone(stage, safe=False)) for name, stage in self.steps], self.resolved,
                        self.inherited_fills, self.given)

    def set_params(self, **params: Any) -> Pipeline:
        """Set parameters by scikit-learn's names, in place (``steps``, ``segment=...``,
        ``segment__strategies=...``; pipeline.engine.params.set_step_params), the chain checked again; returns self.

        Raises:
            ParamError (a ConfigError and a ValueError): an unknown stage or parameter name, naming it and the valid
                ones; ConfigError: a chain whose order no longer holds (this pipeline is then unchanged).
        """
        steps = set_step_params(self.steps, params)
        check_chain(steps, self.given, fills=self.inherited_fills)
        check_agreement(steps)
        self.added = added_columns(steps, self.given, self.inherited_fills)
        self.steps = tuple(steps)
        return self

    def __repr__(self) -> str:
        return f"Pipeline({' -> '.join(self.names)})"

    def _with_steps(self, steps: list[tuple[str, StageFn]], fills: dict | None = None) -> Pipeline:
        return Pipeline(steps, self.resolved, {**self.inherited_fills, **(fills or {})}, self.given)

    def insert(self, stage: StageFn, *, before: str | None = None, after: str | None = None,
               name: str | None = None) -> Pipeline:
        """A new pipeline with ``stage`` (any callable Batch -> Batch) before or after the stage named.

        Raises:
            ConfigError: neither or both of before/after, an unknown stage name, a name already used,
                or a place before the fields the stage reads (its ``requires``) are filled.
        """
        if (before is None) == (after is None):
            raise ConfigError("give exactly one of before= or after=, e.g. insert(clean, before='tokenize')")
        at = self._index(before if before is not None else after) + (after is not None)
        steps = list(self.steps)
        steps.insert(at, (name or describe(stage), stage))
        return self._with_steps(steps)

    def replace(self, name: str, stage: StageFn) -> Pipeline:
        """A new pipeline with the stage ``name`` replaced by ``stage`` (it keeps the name).

        Raises:
            ConfigError: an unknown name, or a stage that reads a field no stage before it fills.
        """
        steps = list(self.steps)
        i = self._index(name)
        old = steps[i][1]
        steps[i] = (name, stage)
        inherited = {} if hasattr(stage, "fills") else {name: getattr(old, "fills", None) or self.inherited_fills.get(name, ())}
        return self._with_steps(steps, inherited)

    def without(self, name: str) -> Pipeline:
        """A new pipeline without the stage ``name``.

        Raises:
            ConfigError: an unknown name, or a later stage that reads what this one filled.
        """
        i = self._index(name)
        return self._with_steps(list(self.steps[:i] + self.steps[i + 1:]))

    def encode_stage(self) -> Encode | None:
        """The built-in encode stage (the one that loads weights), or None."""
        return next((s for _, s in self.steps if isinstance(s, Encode)), None)

    def _index(self, name: str) -> int:
        if name not in self.names:
            raise ConfigError(f"no stage {name!r}; the stages are {list(self.names)}")
        return self.names.index(name)

    def process(self, batch: Batch, start: int = 0, stop: int | None = None) -> Batch:
        """Run the stages [start, stop) on ``batch`` and return the batch they filled.

        A stage after ``rows`` that appends columns to the table must declare them (``adds_columns``,
        pipeline.engine.columns); the rows each stage drops are counted in the batch's ``dropped``.

        Raises:
            ConfigError: a stage returned something other than a Batch, or added output columns it did
                not declare (or declared columns its table lacks), naming the stage and the columns.
        """
        for name, stage in self.steps[start:stop]:
            before = batch
            batch = stage(batch)
            if not isinstance(batch, Batch):
                raise ConfigError(f"stage {describe(stage)!r} returned {type(batch).__name__}, not a Batch; "
                                  "a stage returns the batch it was given, or batch.replace(...) / batch.with_texts(...)")
            if before.table is not None and batch.table is not None:   # a stage after 'rows'
                table = checked_table(name, stage, before.table, batch.table)
                batch = batch if table is batch.table else batch.replace(table=table)
            batch = with_dropped(before, batch, name)
        return batch

    @property
    def split(self) -> int:
        """Where the model's part begins: the index of ``encode`` (the engines run the stages before it
        ahead, in feeder threads); len(steps) when there is no ``encode``."""
        return self.names.index("encode") if "encode" in self.names else len(self.steps)

    def prepare(self, batch: Batch | pa.Table) -> Batch:
        """The stages before ``encode`` (CPU only)."""
        return self.process(_as_batch(batch), 0, self.split)

    def finish(self, batch: Batch) -> Batch:
        """``encode`` and the stages after it."""
        return self.process(batch, self.split)

    def map(self, items: Iterable[Any], read: Callable[[Any], Batch | pa.Table] | None = None, workers: int = 0,
            on_prepared: Callable[[Batch], None] | None = None) -> Iterator[Batch]:
        """Run every stage over blocks, in order: the one loop of every engine.

        Args:
            items: blocks (Batch or pa.Table), or what ``read`` turns into one (e.g. block specs).
            read: item -> block (None: the items are blocks).
            workers: threads that read and run the stages before ``encode`` ahead of the model, at most
                that many blocks ahead (pipeline.engine.feed.ordered_map); 0: all in this thread.
            on_prepared: called with each prepared block before its ``encode`` (progress bars).

        Yields:
            Each block's finished Batch (``table`` and ``counts`` filled by ``rows``), in input order.

        Raises:
            ConfigError: a stage returned no Batch; whatever a stage raises.
        """
        for _, out, _ in self.map_pieces(items, read, workers, on_prepared, max_tokens=None):
            yield out

    def map_pieces(self, items: Iterable[Any], read: Callable[[Any], Batch | pa.Table] | None = None,
                   workers: int = 0, on_prepared: Callable[[Batch], None] | None = None,
                   max_tokens: int | None = None) -> Iterator[tuple[Any, Batch, bool]]:
        """As ``map``, with each prepared block's model part (``encode`` and the stages after it) run in
        pieces of whole documents of at most ``max_tokens`` window tokens (pipeline.pieces), so that
        memory holds one piece's vectors and output rows, never a whole block's: the engines write each
        piece as it comes (--block-tokens).

        Args:
            items, read, workers, on_prepared: as ``map`` (on_prepared gets the whole prepared block).
            max_tokens: window tokens per piece, at most (a document of more is a piece alone); None:
                one piece per block.

        Yields:
            (item, piece, last): each piece's finished Batch, in row order within its block, blocks in
            input order; ``last`` is True for a block's last piece. Every block yields at least one.

        Raises:
            ConfigError: a stage returned no Batch; whatever a stage raises.
        """
        return block_pieces(self.prepare, self.finish, items, read, workers, on_prepared, max_tokens)

    def for_run(self, cfg: PipelineConfig) -> Pipeline:
        """A new pipeline for a run with ``cfg``'s read and write options (kept columns, --out-dtype,
        --cache): the built-in stages they change are rebuilt, the others are this pipeline's own
        objects (the encode stage keeps its loaded encoder and open store); this pipeline is not changed.

        Raises:
            ConfigError: a --keep-col that clashes with a column of this run.
        """
        resolved = self.resolution().with_io(cfg, next((s for _, s in self.steps if isinstance(s, Rows)), None))
        plain = dataclasses.replace(resolved, stage_labels=None)
        built = {type(s).name: s for s in plain.stages()}   # what the options build, each stage compared with it
        labels = tuple(stage_label(n, s, built.get(n)) + declared_label(s) for n, s in self._rebuilt(plain).steps)
        if labels != BUILT_IN_NAMES:   # the file and the --resume fingerprint name this pipeline's stages
            described, segments = described_config(resolved.cfg, self.steps)   # the metadata: what runs
            resolved = dataclasses.replace(resolved, stage_labels=labels, described=described,
                                           segments=tuple(segments.items()), added=self.added)
        return self._rebuilt(resolved)

    def with_binary_center(self, centre: Any, given: bool = False) -> Pipeline:
        """A new pipeline whose rows stage packs --out-dtype binary's bits around ``centre`` (a (D,) array for
        the one column ``features``, or {column: (D,) array or None}), which the file's metadata records. Raises
        ConfigError as Resolved.centred."""
        return self._rebuilt(self.resolution().centred(centre, given))

    def with_projection(self, projection: Any, given: bool = False) -> Pipeline:
        """A new pipeline whose rows stage projects each feature column with ``projection`` (--dims' fitted state,
        as Pipeline.from_options takes it), which the file's metadata records. Raises ConfigError as Resolved.projected."""
        return self._rebuilt(self.resolution().projected(projection, given))

    def with_facts(self, facts) -> Pipeline:
        """A new pipeline whose built-in stages use ``facts`` (a hub model's, its sha256 known after the load)."""
        resolved = dataclasses.replace(self.resolution(), facts=facts)
        return self._rebuilt(resolved)

    def _rebuilt(self, resolved: Resolved) -> Pipeline:
        """This pipeline, its built-in stages rebuilt from ``resolved`` (Resolved.io_stage)."""
        return Pipeline([(n, resolved.io_stage(s)) for n, s in self.steps], resolved, self.inherited_fills, self.given)

    def __call__(self, batch: Batch | pa.Table) -> pa.Table:
        """Every stage on ``batch``; returns its output table (the schema ``extract`` writes). Raises ConfigError:
        a stage returned no Batch, no stage made a table (``rows`` removed), ``dims`` without a projection."""
        if self.resolved is not None:
            self.resolved.check_projected()
        out = self.finish(self.prepare(batch))
        if out.table is None:
            raise ConfigError("no stage made the output table; keep the 'rows' stage, or call pipe.process(batch)")
        return out.table

    def run(self, inputs: str | Iterable[str], output: str, echo: Callable[[str], None] | None = None,
            overwrite: bool = False, **options: Any):
        """Run the pipeline over a corpus as ``longbert extract`` does (the output lock, ``DIR/`` parts,
        ``resume``, progress, the summary), inserted or replaced stages included, on either engine; the run's
        options go to a copy of this pipeline. Returns the run's pipeline.engine.run.Summary.

        Args:
            inputs: a file, folder or glob, or several. output: a .parquet file or a folder ending in "/".
            echo: where notes go (None: nowhere). overwrite: replace an existing output (never an input).
            **options: extract's read and write options (``id_col``, ``text_col``, ``keep_cols``, ``resume``,
                ``dims``...) and engine options (``engine="ray"``, ``workers``, ``ray_address``, ``cpus_per_worker``,
                ``gpus_per_worker``: each Ray worker gets this pipeline itself, pickled).

        Raises:
            ConfigError / InputError / ModelError (exit 2 in the CLI), RunError (exit 1): as ``extract``, naming
            this call's arguments (``resume=True``) where extract names flags.
        """
        from ..options.python_api import python_names
        paths = (inputs,) if isinstance(inputs, str) else tuple(str(p) for p in inputs)
        with python_names():   # messages name this call's arguments (overwrite=True), not extract's flags
            cfg = with_io_options(self.cfg, inputs=paths, output=str(output), overwrite=overwrite, **options)
            from ..output.api_outputs import check_run_output
            from .driver import drive   # the one driver, on the engine the options name, over these stages
            check_run_output(cfg)   # the CLI's output rules, in the words of these arguments
            return drive(cfg, echo, build=self.for_run)


def _as_batch(batch: Batch | pa.Table) -> Batch:
    return batch if isinstance(batch, Batch) else Batch(rows=batch)
