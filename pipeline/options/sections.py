"""Each stage's options, one frozen record per config section: ReadConfig, ModelConfig, SegmentConfig,
EncodeConfig, PoolConfig, WriteConfig, with the closed sets of choices they are checked against.
PipelineConfig (pipeline.options.config) holds one of each."""
from __future__ import annotations

import codecs
import dataclasses
from pathlib import Path
from typing import Literal

from .defaults import DEFAULT_MODEL, FOLDER_SETTINGS
from ..errors import ConfigError
from .paths import check_output_uri, check_store_uri, expand_user, store_scheme
from .values import config_section
from .features_config import (STRATEGIES, Feature, Pooling, Strategy, check_aggregate, check_choice, check_late, is_late,
                              feature_fault, window_dim)


# Each closed set of choices is one tuple, used by click.Choice and by the checks below.
LEVELS = ("document", "token", "window")
DTYPES = ("float32", "float16", "bfloat16", "auto")  # auto: bfloat16 where the device has a fast path (pipeline.chip)
OUT_DTYPES = ("float32", "float16", "int8", "binary")  # int8, binary: pipeline.compact (per-vector forms)
DIMS_METHODS = ("auto", "pca", "truncate")  # --dims: auto = truncate where the model folder declares N (Matryoshka), else pca
QUANTIZE = ("none", "int8")
ON_BAD_LINES = ("error", "skip")
FORMATS = ("csv", "tsv", "jsonl", "parquet", "text")

@config_section
class ReadConfig:
    inputs: tuple[str, ...] = ()           # files, directories of .txt/.md files, or globs, read in this order
    text_col: str = "text"
    id_col: str | None = None              # None: an input column named "id" if every tabular input has one,
                                           # else the 0-based row number across all inputs (column "row")
    keep_cols: tuple[str, ...] = ()        # copied to the output as written (strings)
    encoding: str = "utf-8"                # a UTF-8 byte-order mark is accepted and dropped
    on_bad_lines: Literal["error", "skip"] = "error"
    block_rows: int = 256                  # documents per block (one row group / one part file)
    format: str | None = None              # csv | tsv | jsonl | parquet | text; None: from each input's extension
    delimiter: str | None = None           # csv field separator; None: "," (tab for tsv)
    with_source: bool = False              # add a "source" column: each row's file, relative to the inputs' parent

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(expand_user(str(p), "input") for p in self.inputs))
        check_choice("--on-bad-lines", self.on_bad_lines, ON_BAD_LINES)
        if self.format is not None:
            check_choice("--format", self.format, FORMATS)
        if self.delimiter is not None:
            if len(self.delimiter) != 1 or self.delimiter in "\r\n\"":
                raise ConfigError(f"--delimiter={self.delimiter!r} must be one character other than a quote or "
                                  "a line break, e.g. ',' ';' or a tab ($'\\t' in bash)")
            if self.format not in (None, "csv", "tsv"):
                raise ConfigError(f"--delimiter applies to csv and tsv inputs only, not --format {self.format}; "
                                  "drop --delimiter")
        if self.block_rows < 1:
            raise ConfigError(f"--block-rows={self.block_rows} must be >= 1")
        seen: set[str] = set()
        for col in self.keep_cols:  # a name the output already has: PipelineConfig (pipeline.columns)
            if col in seen:
                raise ConfigError(f"--keep-col {col!r} is given twice; name each column once")
            seen.add(col)
        if self.text_col in self.keep_cols:
            raise ConfigError(f"--keep-col {self.text_col!r} is the text column; keep other columns only")
        try:
            "".encode(self.encoding)
        except LookupError:
            raise ConfigError(f"--encoding {self.encoding!r} is not a known text encoding; "
                              "try utf-8, cp1252, cp1251 or gb18030") from None
        utf_16_32 = codecs.lookup(self.encoding).name.startswith(("utf-16", "utf-32"))  # read as UTF-8 (pipeline.read)
        if not utf_16_32 and not "\n,\ra".encode(self.encoding).endswith(b"\n,\ra"):  # a BOM prefix (utf-8-sig) is fine
            raise ConfigError(f"--encoding {self.encoding!r} is not ASCII-compatible (lines cannot be split on "
                              "bytes); convert the files to UTF-8, e.g. iconv -f utf-16 -t utf-8")


@config_section
class ModelConfig:
    """Which encoder (a folder, a hub id, or "default": the bundled one, see ``longbert.model_path``), where
    and how it computes. ConfigError: a value out of its choices. Example: ModelConfig(model="~/bert")."""
    model: str = DEFAULT_MODEL             # local directory or hub name of a BERT-family encoder
    device: str = "auto"                   # auto | cpu | cuda | cuda:N | mps
    dtype: Literal["float32", "float16", "bfloat16", "auto"] = "float32"   # compute dtype of the model; auto is
                                           # resolved here, once, to bfloat16 or float32 (pipeline.chip.auto_dtype)
    quantize: Literal["none", "int8"] = "none"                      # int8: dynamic quantization, CPU
    threads: int | None = None             # CPU threads for torch; None: all cores
    allow_pickle: bool = False             # load a pickle-only (.bin) checkpoint
    folder_settings: Literal["auto", "declared", "ignore"] = "auto"   # FOLDER_SETTINGS
    prompt_name: str | None = None         # a key of the folder's prompts, or none; None: its default_prompt_name

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", expand_user(str(self.model), "--model"))  # frozen: set once, here
        check_choice("--folder-settings", self.folder_settings, FOLDER_SETTINGS)
        check_choice("--dtype", self.dtype, DTYPES)
        check_choice("--quantize", self.quantize, QUANTIZE)
        dev = self.device
        if not (dev in ("auto", "cpu", "cuda", "mps") or (dev.startswith("cuda:") and dev[5:].isdigit())):
            raise ConfigError(f"--device={dev!r}; choose auto, cpu, cuda, cuda:N or mps")
        if self.dtype == "auto":  # frozen: set once, here, so the store key, resume and metadata see the real dtype
            from ..chip import auto_dtype

            object.__setattr__(self, "dtype", auto_dtype(self.device, self.quantize))
        if self.quantize == "int8" and self.dtype != "float32":
            raise ConfigError(f"--quantize int8 works on a float32 model; drop --dtype {self.dtype}")
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"--threads={self.threads} must be >= 1")


@config_section
class SegmentConfig:
    """One strategy's window rule (the Segment stage takes {strategy: SegmentConfig}): windows of <= max_length
    positions, [CLS] and [SEP] included, so C = max_length - 2 content tokens. ConfigError: a value out of range,
    naming the option and its bounds. Example: SegmentConfig(strategy="chunk", max_length=64): 62-token windows."""
    strategy: Strategy = "head_tail"
    max_length: int | None = None          # positions per window, [CLS] and [SEP] included; None: the model's
    head_tokens: int | None = None         # head_tail only; None: 128 for C = 510, else round(C * 128 / 510)
    tail_tokens: int | None = None         # head_tail only; None: C - head_tokens (382 for C = 510)
    overlap: int = 128                     # sliding only: tokens shared by neighbouring windows
    max_tokens_per_doc: int | None = None  # content tokens kept per document; the rest is dropped
    chunk_tokens: int = 128                # late only: content tokens per chunk (pipeline.model.late)
    late_overlap: int = 256                # late only: the windows' overlap; --overlap sets it when given

    def __post_init__(self) -> None:
        check_choice("--strategy", self.strategy, STRATEGIES)
        if self.max_length is not None and self.max_length < 3:
            raise ConfigError(f"--max-length={self.max_length} must be >= 3 ([CLS], one token, [SEP])")
        if (self.head_tokens or 0) < 0 or (self.tail_tokens or 0) < 0:
            raise ConfigError(f"--head-tokens={self.head_tokens} and --tail-tokens={self.tail_tokens} "
                              "must be >= 0")
        if self.strategy == "head_tail" and self.head_tokens == 0 and self.tail_tokens == 0:
            raise ConfigError("--head-tokens 0 with --tail-tokens 0 keeps nothing; raise one of them")
        if self.overlap < 0:
            raise ConfigError(f"--overlap={self.overlap} must be >= 0")
        check_late(self.chunk_tokens, self.late_overlap, None)
        if self.max_tokens_per_doc is not None and self.max_tokens_per_doc < 1:
            raise ConfigError(f"--max-tokens-per-doc={self.max_tokens_per_doc} must be >= 1")
        if self.max_length is not None:
            self.check_window(self.max_length)
            head, tail = self.head_tail_tokens(self.max_length)
            object.__setattr__(self, "head_tokens", head)  # frozen: the resolved defaults are set once, here
            object.__setattr__(self, "tail_tokens", tail)

    @property
    def content_tokens(self) -> int:
        """C = max_length - 2: content tokens per window ([CLS] and [SEP] take two positions).

        Raises:
            ConfigError: max_length is not resolved yet (None until the model is read).
        """
        if self.max_length is None:
            raise ConfigError("max_length is not resolved: build the stages with longbert.Pipeline.from_options("
                              "...) (it reads the model's positions), or give max_length")
        return self.max_length - 2

    def for_strategy(self, strategy: str) -> SegmentConfig:
        """These window options for ``strategy``'s windows: this record itself for its own strategy, else a
        copy with that strategy (checked again: ConfigError when the numbers do not suit it). The one place a
        feature's strategy is put into a SegmentConfig. Example: head_tail options .for_strategy("late")."""
        return self if strategy == self.strategy else dataclasses.replace(self, strategy=strategy)

    def check_window(self, max_length: int) -> None:
        """Check the options that depend on the window size C = max_length - 2.

        Raises:
            ConfigError: overlap >= C for sliding, or head + tail > C for head_tail.
        """
        c = max_length - 2
        if self.strategy == "sliding" and not self.overlap < c:
            raise ConfigError(f"--overlap={self.overlap} must be in [0, {c}) for windows of {c} content "
                              f"tokens (max_length {max_length} - [CLS] - [SEP]); lower --overlap")
        if is_late(self.strategy):
            check_late(self.chunk_tokens, self.late_overlap, max_length)
        if self.strategy == "head_tail":
            head, tail = self.head_tail_tokens(max_length)
            if head > c or head + tail > c:
                raise ConfigError(f"--head-tokens {head} + --tail-tokens {tail} = {head + tail} exceeds the {c} "
                                  f"content tokens of a window (max_length {max_length} - 2); lower one of them")

    def head_tail_tokens(self, max_length: int) -> tuple[int, int]:
        """(H, T) for windows of C = max_length - 2: the options, or the defaults 128 and C - H.

        For C = 510 the defaults are 128 + 382 (Sun et al. 2019); for other C the head keeps the same
        share, round(C * 128 / 510), e.g. C = 254 -> 64 + 190.
        """
        c = max_length - 2
        head = round(c * 128 / 510) if self.head_tokens is None else self.head_tokens
        tail = max(c - head, 0) if self.tail_tokens is None else self.tail_tokens
        return head, tail


CPU_TOKEN_BUDGET = 8192     # padded tokens per forward pass on a CPU when --max-batch-tokens is not given
GPU_TOKEN_BUDGET = 16384    # the same on a GPU


# Window tokens (specials included) of the documents whose vectors are held at once: a block of more
# is encoded, aggregated and written in pieces of whole documents (pipeline.pieces). 32,768 tokens are
# 64 full windows; at --level token with 384 dimensions their float32 token vectors are 50 MB.
BLOCK_TOKENS = 32768


@config_section
class EncodeConfig:
    """How Encode batches windows: <= batch_size windows, <= token_budget_on(device) padded positions a pass;
    ConfigError: < 1."""
    batch_size: int = 32                   # windows per forward pass, at most
    max_batch_tokens: int | None = None    # padded tokens per forward pass, at most; None: 8192 on a CPU, 16384 else
    block_tokens: int = BLOCK_TOKENS       # window tokens a block's model part holds at once (pipeline.pieces)

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"--batch-size={self.batch_size} must be >= 1")
        if self.max_batch_tokens is not None and self.max_batch_tokens < 1:
            raise ConfigError(f"--max-batch-tokens={self.max_batch_tokens} must be >= 1")
        if self.block_tokens < 512:
            raise ConfigError(f"--block-tokens={self.block_tokens} must be >= 512 (one window); the default "
                              f"is {BLOCK_TOKENS}")

    @property
    def token_budget(self) -> int:
        """Padded tokens per batch (windows x longest window) on a GPU: 16384 = 32 full 512-token windows,
        unless max_batch_tokens is given. A CPU's default is smaller: ``token_budget_on("cpu")``."""
        return self.token_budget_on("cuda")

    def token_budget_on(self, device_type: str) -> int:
        """Padded tokens per forward pass on ``device_type`` ("cpu", "cuda", "mps"): max_batch_tokens when
        given, else CPU_TOKEN_BUDGET (8192: 16 full 512-token windows) on a CPU and GPU_TOKEN_BUDGET (16384)
        elsewhere. On a 2-core Intel Xeon with AMX, ``extract --strategy head`` of 240 man pages took
        3-4% less time at 8192 than at 16384 in bfloat16 and 1% less in float32, in fewer CPU seconds
        (docs/performance.md, batch budget); a GPU gains from larger batches."""
        if self.max_batch_tokens is not None:
            return self.max_batch_tokens
        return CPU_TOKEN_BUDGET if device_type == "cpu" else GPU_TOKEN_BUDGET


@config_section
class PoolConfig:
    """How windows become vectors. ``features`` is the run's list of features (one or more, built where
    the options enter: pipeline.options.features_config.fold_features); pooling/layers/layer_agg are the one
    pooled window vector this config describes (pipeline.model.pool), for a one-feature run features[0]'s."""

    pooling: Pooling = "mean"
    layers: tuple[int, ...] = (-1,)        # hidden-state indices: 0 embeddings, 1..L layers, -1 last
    layer_agg: Literal["mean", "sum", "concat"] = "mean"
    aggregate: str = "mean"                # windows -> document: one of AGGREGATES or a comma list, concatenated
    level: Literal["document", "token", "window"] = "document"
    normalize: bool = False                # unit L2 norm: the (whole) document vector, or each window's vector
    features: tuple[Feature, ...] = (Feature(),)   # every feature of the run, one column each

    def __post_init__(self) -> None:
        fault = feature_fault("head_tail", self.pooling, self.layers, self.layer_agg, shorthand=True)
        if fault:
            raise ConfigError(fault)
        object.__setattr__(self, "aggregate", check_aggregate(self.aggregate))  # frozen: canonical form, once
        check_choice("--level", self.level, LEVELS)
        names = [f.name for f in self.features]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ConfigError(f"--feature asks twice for {', '.join(repeated)}; give each feature once")
        if len(self.features) > 1 and self.level == "token":
            raise ConfigError(f"--level token writes the token vectors of one feature, but {len(self.features)} "
                              "--feature options were given; give one feature with --level token")

    @property
    def per_window(self) -> bool:
        """--level window: one output row per window (the level's name is compared here and nowhere else
        in the stages: the builder picks the level's stage classes from these)."""
        return self.level == "window"

    @property
    def per_token(self) -> bool:
        """--level token: each document's per-token vectors are written beside its vector."""
        return self.level == "token"

    @property
    def aggregates(self) -> tuple[str, ...]:
        """The parts of --aggregate, in order: "first,last,mean,max" -> ("first", "last", "mean", "max")."""
        return tuple(self.aggregate.split(","))

    @property
    def parts(self) -> int:
        """Aggregates a written vector concatenates: len(aggregates); 1 at --level window (no aggregate)."""
        return 1 if self.per_window else len(self.aggregates)

    @property
    def pool_key(self) -> tuple[str, tuple[int, ...], str]:
        """(pooling, layers, layer_agg) of the window vector this config pools (as Feature.pool_key)."""
        return (self.pooling, self.layers, self.layer_agg)

    def dim(self, hidden: int) -> int:
        """D of the window vector this config pools (pipeline.options.features_config.window_dim)."""
        return window_dim(self.pooling, self.layers, self.layer_agg, hidden)

    def check_layers(self, num_hidden_layers: int) -> None:
        """Raises ConfigError when a layer index is outside [-(L+1), L] for a model of L layers."""
        for layer in sorted({x for f in self.features for x in f.layers}):
            if not -(num_hidden_layers + 1) <= layer <= num_hidden_layers:
                raise ConfigError(f"--layers contains {layer}, but the model has {num_hidden_layers} layers; "
                                  f"use indices in [-{num_hidden_layers + 1}, {num_hidden_layers}] "
                                  "(0 = embeddings, -1 = last layer)")


@config_section
class WriteConfig:
    output: str = "out/features.parquet"   # a .parquet file, or a directory (ends in /) of parts
    overwrite: bool = False
    resume: bool = False                   # directory output only: continue after the last part
    out_dtype: Literal["float32", "float16", "int8", "binary"] = "float32"  # int8: q + a float32 scale per vector;
                                           # binary: signs packed 8 to a byte (pipeline.output.schema)
    strict: bool = False                   # any row error makes the run exit 1
    progress: bool = True
    cache: str | None = None               # --cache DIR or s3://BUCKET/PREFIX: the window store
                                           # (pipeline.cache.stores.open_store); changes no value
    binary_center_file: str | None = None  # binary: an earlier binary output whose centre this run takes
    dims: int | None = None                # project each feature column to N dims before --out-dtype (pipeline.projection)
    dims_method: str = "auto"              # DIMS_METHODS
    projection_file: str | None = None     # an earlier --dims output whose projection this run takes

    def __post_init__(self) -> None:
        object.__setattr__(self, "output", check_output_uri(str(self.output)))  # frozen: set once, here
        if self.cache is not None:
            object.__setattr__(self, "cache", check_store_uri(str(self.cache), "--cache"))
        check_choice("--out-dtype", self.out_dtype, OUT_DTYPES)
        if self.binary_center_file is not None:
            object.__setattr__(self, "binary_center_file", expand_user(str(self.binary_center_file),
                                                                       "--binary-center"))
            if self.out_dtype != "binary":
                raise ConfigError(f"--binary-center {self.binary_center_file!r} gives the centre of binary vectors; "
                                  "add --out-dtype binary, or drop --binary-center")
        check_choice("--dims-method", self.dims_method, DIMS_METHODS)
        if self.dims is not None and (isinstance(self.dims, bool) or not isinstance(self.dims, int) or self.dims < 1):
            raise ConfigError(f"--dims {self.dims!r} must be a whole number >= 1 (the dimensions each vector keeps), "
                              "e.g. --dims 128")
        if self.projection_file is not None:
            object.__setattr__(self, "projection_file", expand_user(str(self.projection_file), "--projection"))
        if not self.is_directory and not self.output.lower().endswith(".parquet"):
            raise ConfigError(f"--output {self.output!r} is neither a .parquet file nor a directory (ending in /); "
                              f"longbert writes parquet: use e.g. -o {Path(self.output).with_suffix('.parquet')} "
                              "or -o DIR/")

    @property
    def is_directory(self) -> bool:
        """True when the output is a directory of numbered parts (path ends in / or is a directory)."""
        return self.output.endswith(("/", "\\")) or (store_scheme(self.output) == "" and Path(self.output).is_dir())
