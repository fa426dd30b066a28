"""``Pipeline``: the stages in order, composable (insert, replace, without), and ``run``, the local engine
that runs one over a corpus.

``longbert extract`` is ``run(cfg)``, the same loop as ``Pipeline.run``; the vectorizer, ``encode``,
``probe`` and the Ray workers call the same stages through ``Extractor``. The design follows scikit-learn's
``Pipeline`` (named steps), spaCy's ``add_pipe(before=/after=)`` and sentence-transformers' module
list (each module ``features -> features``).
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa

from .batch import Batch
from .block import BlockCounts
from ..options.config import DEFAULT_MODEL, PipelineConfig
from ..errors import ConfigError, RunError
from ..output.lock import holds_output
from ..model.facts import model_label
from ..read import verify_inputs
from .run import BatchProgress, Summary, fail_on_row_error, open_run, prefetch, run_fingerprint, scan_inputs, writing
from .stages import BUILT_IN, STAGE_NAMES, Context, describe
from ..output.write import check_resume

StageFn = Callable[[Batch], Batch]


class Pipeline:
    """The stages of a run in order; ``pipe(batch)`` runs them all and returns the output table.

    Build with ``Pipeline.from_options(**extract_options)`` or ``Pipeline.from_config(cfg)``. Building
    resolves the options against the model once (no weights load) and loads the tokenizer; the
    weights load at the first ``encode``.

    Example:
        >>> pipe = Pipeline.from_options(model="default", strategy="chunk")
        >>> pipe.names
        ('tokenize', 'segment', 'dedup', 'encode', 'aggregate', 'rows')
        >>> lower = pipe.insert(lambda b: b.with_texts([t.lower() for t in b.texts]), before="tokenize", name="lower")
        >>> table = lower(Batch.from_texts(["A Long Report ..."]))
    """

    def __init__(self, context: Context, steps: Iterable[tuple[str, StageFn]]):
        self.context = context
        self.steps: tuple[tuple[str, StageFn], ...] = tuple(steps)
        names = [n for n, _ in self.steps]
        if len(set(names)) != len(names):
            raise ConfigError(f"stage names must be unique; got {names}")

    @classmethod
    def from_config(cls, cfg: PipelineConfig, tokenizer=None, model=None, store=None) -> Pipeline:
        """The built-in stages for ``cfg``, resolved against its model.

        Args:
            cfg: a PipelineConfig (PipelineConfig.from_options, or a config file's).
            tokenizer, model: already loaded ones for cfg.model (not loaded again). store: an open
                pipeline.cache.store.WindowStore (None: cfg's --cache folder, or none).

        Raises:
            ConfigError / ModelError: options the model cannot serve, a model that cannot be read.
        """
        ctx = Context(cfg, tokenizer, model=model, store=store)
        return cls(ctx, [(name, BUILT_IN[name](ctx)) for name in STAGE_NAMES])

    @classmethod
    def from_options(cls, **options: Any) -> Pipeline:
        """As from_config, with ``extract``'s options by their Python names (``model``, ``strategy``,
        ``feature``, ``pooling``, ``layers``, ``aggregate``, ``level``, ``normalize``, ``dtype``,
        ``cache``...). ``progress`` defaults to False.

        Raises:
            ConfigError: an unknown option or a value out of range; ModelError as from_config.
        """
        options.setdefault("progress", False)
        if "feature" in options:   # the CLI's repeated --feature is the config's `features`
            feature = options.pop("feature")
            options["features"] = (feature,) if isinstance(feature, str) else tuple(feature)
        return cls.from_config(PipelineConfig.from_options(**options))

    @property
    def cfg(self) -> PipelineConfig:
        """The resolved config (max_length set from the model)."""
        return self.context.cfg

    @property
    def names(self) -> tuple[str, ...]:
        """The stage names, in order."""
        return tuple(n for n, _ in self.steps)

    def __getitem__(self, name: str) -> StageFn:
        for n, stage in self.steps:
            if n == name:
                return stage
        raise KeyError(f"no stage {name!r}; the stages are {list(self.names)}")

    def __repr__(self) -> str:
        return f"Pipeline({' -> '.join(self.names)})"

    def insert(self, stage: StageFn, *, before: str | None = None, after: str | None = None,
               name: str | None = None) -> Pipeline:
        """A new pipeline with ``stage`` (any callable Batch -> Batch) before or after the stage named.

        Raises:
            ConfigError: neither or both of before/after, an unknown stage name, or a name already used.
        """
        if (before is None) == (after is None):
            raise ConfigError("give exactly one of before= or after=, e.g. insert(clean, before='tokenize')")
        at = self._index(before if before is not None else after) + (after is not None)
        steps = list(self.steps)
        steps.insert(at, (name or describe(stage), stage))
        return Pipeline(self.context, steps)

    def replace(self, name: str, stage: StageFn) -> Pipeline:
        """A new pipeline with the stage ``name`` replaced by ``stage`` (it keeps the name)."""
        steps = list(self.steps)
        steps[self._index(name)] = (name, stage)
        return Pipeline(self.context, steps)

    def without(self, name: str) -> Pipeline:
        """A new pipeline without the stage ``name``."""
        i = self._index(name)
        return Pipeline(self.context, self.steps[:i] + self.steps[i + 1:])

    def _index(self, name: str) -> int:
        if name not in self.names:
            raise ConfigError(f"no stage {name!r}; the stages are {list(self.names)}")
        return self.names.index(name)

    def process(self, batch: Batch, start: int = 0, stop: int | None = None) -> Batch:
        """Run the stages [start, stop) on ``batch`` and return the batch they filled."""
        for _, stage in self.steps[start:stop]:
            batch = stage(batch)
            if not isinstance(batch, Batch):
                raise ConfigError(f"stage {describe(stage)!r} returned {type(batch).__name__}, not a Batch; "
                                  "a stage returns the batch it was given, or batch.replace(...) / batch.with_texts(...)")
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

    def __call__(self, batch: Batch | pa.Table) -> pa.Table:
        """Every stage on ``batch``; returns its output table (the schema ``extract`` writes).

        Raises:
            ConfigError: a stage returned no Batch, or no stage made a table (``rows`` removed).
        """
        out = self.finish(self.prepare(batch))
        if out.table is None:
            raise ConfigError("no stage made the output table; keep the 'rows' stage, or call pipe.process(batch)")
        return out.table

    def run(self, inputs: str | Iterable[str], output: str, echo: Callable[[str], None] | None = None,
            overwrite: bool = False, **options: Any):
        """Run the pipeline over a corpus, as ``longbert extract`` does: the output lock, ``DIR/`` parts,
        ``resume``, progress, the summary; inserted or replaced stages included.

        Args:
            inputs: a file, folder or glob, or several. output: a .parquet file or a folder ending in "/".
            echo: where notes go (None: nowhere). overwrite: replace an existing output (never an input).
            **options: extract's read and write options (``id_col``, ``text_col``, ``keep_cols``,
                ``resume``, ``progress``...).

        Returns:
            The run's pipeline.engine.run.Summary.

        Raises:
            ConfigError / InputError / ModelError (exit 2 in the CLI), RunError (exit 1): as ``extract``.
        """
        paths = (inputs,) if isinstance(inputs, str) else tuple(str(p) for p in inputs)
        cfg = with_io_options(self.cfg, inputs=paths, output=str(output), overwrite=overwrite, **options)
        from ..output.api_outputs import check_run_output
        check_run_output(cfg)   # the CLI's output rules, in the words of these arguments
        before = self.cfg
        try:
            return run(cfg, echo, pipe=self)
        finally:
            self.context.set_io(before)   # the run's read and write options do not outlive it


@holds_output
def run(cfg: PipelineConfig, echo: Callable[[str], None] | None = None, pipe=None) -> Summary:
    """Run the whole job on the local engine: inputs in, parquet out.

    Args:
        cfg: the validated config (cli.py builds it; Pipeline.run passes its own).
        echo: where to print notes (e.g. a resumed run); None prints nothing.
        pipe: the Pipeline to run (inserted or replaced stages included); None: the
            built-in stages for ``cfg``, resolved against the model once, after the inputs are scanned.

    Returns:
        The Summary of the run.

    Raises:
        ConfigError / InputError / ModelError (exit 2): before anything is written.
        RunError (exit 1): part-way; the output path then holds no file that looks complete.
    """
    started = time.perf_counter()
    cfg, plan = scan_inputs(cfg)
    if pipe is None:
        pipe = Pipeline.from_config(cfg)
    else:
        pipe.context.set_io(cfg)   # the caller's read and write options, with the id column found
    cfg, ctx = pipe.cfg, pipe.context
    check_resume(cfg, run_fingerprint(cfg, plan))
    if echo and cfg.write.progress:
        name = cfg.model.model
        echo(f"loading model {model_label(name) if name == DEFAULT_MODEL else name} ...")
    ctx.load()
    sink, summary, todo, bar = open_run(cfg, ctx.schema(plan.id_type), plan, echo)
    progress = BatchProgress(bar)
    ctx.encoder.on_batch = progress.batch
    with writing(sink, cfg, bar):
        for spec, batch in prefetch(todo, pipe.prepare):
            progress.start_block(spec.n_rows, sum(len(w.input_ids) for w in batch.unique))
            out = pipe.finish(batch)
            if out.table is None:
                raise RunError(f"no stage made the output table (stages: {', '.join(pipe.names)}); keep 'rows'")
            summary.add(out.counts or BlockCounts())
            if cfg.write.strict:
                fail_on_row_error(out.table, spec)
            sink.write(spec, out.table)
            progress.end_block()
        verify_inputs(plan.files)  # the inputs are still what the scan hashed (RunError, exit 1)
        summary.n_bytes = sink.commit()
    summary.seconds = time.perf_counter() - started
    return summary


def _as_batch(batch: Batch | pa.Table) -> Batch:
    return batch if isinstance(batch, Batch) else Batch(rows=batch)


def with_io_options(cfg: PipelineConfig, **options: Any) -> PipelineConfig:
    """``cfg`` with read and write options replaced (validated as the CLI's).

    Raises:
        ConfigError: an option of another section (those are the pipeline's: build another), or a bad value.
    """
    from ..options.config import option_sections
    from ..options.config_file import coerce

    read, write = {}, {}
    for key, value in options.items():
        key = key.replace("-", "_")
        section = option_sections().get(key)
        if section not in ("read", "write"):
            raise ConfigError(f"{key!r} is not a read or write option; options of the model, windows or pooling "
                              "are the pipeline's own: build it with Pipeline.from_options(...)")
        (read if section == "read" else write)[key] = coerce(key, value)   # as the CLI's values
    try:
        return dataclasses.replace(cfg, read=dataclasses.replace(cfg.read, **read),
                                   write=dataclasses.replace(cfg.write, **write))
    except TypeError as err:
        raise ConfigError(f"bad option value: {err}") from None


class Extractor:
    """The whole block function in one object, for the engines: ``extractor(table) -> table``.

    The built-in pipeline for ``cfg`` with its weights loaded (not lazily), and the halves the local
    engine runs apart: ``prepare`` (before encode, in feeder threads) and ``finish`` (the rest).

    Args:
        cfg, tokenizer, model, store: as Pipeline.from_config.
        id_type: kept for callers that name it; the schema follows each block's id column.

    Raises:
        ConfigError / ModelError: as Pipeline.from_config and Context.load.
    """

    def __init__(self, cfg: PipelineConfig, tokenizer=None, id_type: pa.DataType | None = None, model=None,
                 store=None, pipe: Pipeline | None = None):
        self.pipe = pipe or Pipeline.from_config(cfg, tokenizer, model=model, store=store)
        ctx = self.pipe.context
        ctx.load()
        self.cfg, self.tokenizer, self.facts, self.stats = ctx.cfg, ctx.tokenizer, ctx.facts, ctx.stats
        self.dim, self.hidden, self.features, self.columns = ctx.dim, ctx.hidden, ctx.features, ctx.columns
        self.encoder = ctx.encoder
        if id_type is None:
            id_type = pa.int64() if cfg.read.id_col is None else pa.string()
        self.schema = ctx.schema(id_type)

    def __call__(self, block: pa.Table) -> pa.Table:
        """Rows in (columns id, text, keep columns) -> output rows, same order."""
        return self.finish(self.prepare(block))[0]

    def prepare(self, block: pa.Table | Batch) -> Batch:
        """The stages before encode (CPU only; the local engine runs them ahead of the model)."""
        return self.pipe.prepare(block)

    def finish(self, batch: Batch) -> tuple[pa.Table, Any]:
        """The rest: (the output rows, the block's pipeline.engine.block.BlockCounts)."""
        out = self.pipe.finish(batch)
        return out.table, out.counts
