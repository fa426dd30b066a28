"""What the driver (pipeline.engine.driver) does around the stages on every engine: scan the inputs into a
plan of blocks, open the sink, count, report.

The next blocks are read, tokenized and segmented in worker threads (pipeline.engine.feed, one per torch CPU
thread) while the model runs on the current one (the fast tokenizer and pandas' parser release the
GIL), so at most workers + 1 blocks are in memory at once.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import sys
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from tqdm import tqdm

from ..counts import BlockCounts
from .resolved import resolve_config
from ..options.config import PipelineConfig
from ..chip import bf16_note
from ..model.st_folder import settings_note
from ..errors import InputError, RunError
from ..read import BlockSpec, Plan, row_location, scan
from ..columns import ERROR, ID, WINDOW
from ..text.tokenize import UNKNOWN_WARN_SHARE, unknown_warning
from ..output.durable import write_failure
from .progress import progress_bar
from ..output.sink_api import Sink
from ..output.write import open_sink


@dataclass
class Summary:
    """What a run did; ``line()`` is the one summary line the CLI prints."""

    output: str
    documents: int = 0
    tokens: int = 0
    windows: int = 0
    errors: int = 0
    seconds: float = 0.0
    n_bytes: int = 0
    skipped_lines: int = 0
    duplicate_ids: int = 0
    resumed_from: int = 0
    oom_splits: int = 0
    fp32_recomputed: int = 0
    unknown_tokens: int = 0       # tokens the tokenizer mapped to its unknown token (column n_unknown)
    id_note: str | None = None
    windows_saved: int = 0       # windows not encoded: shared between strategies or identical token ids
    skipped_files: int = 0       # files in input folders left out for their extension
    skipped_names: list[str] = field(default_factory=list)  # the first of them, named in the line
    windows_cached: int = 0      # unique windows taken from the window store, not encoded
    cache: bool = False          # a window store was used (--cache, or a store object given to the pipeline):
    #                              the line says how many windows came from it
    notes: list[str] = field(default_factory=list)   # e.g. parts redone, a lock taken over
    rows_read: int = 0           # input rows this run gave the stages (Pipeline.run: what a filter saw)
    dropped: dict[str, int] = field(default_factory=dict)   # stage name -> rows it dropped (a filter's take)
    peak_bytes: int = 0          # the process's peak resident memory when the run ended (peak_memory); 0: not measured

    def add(self, counts: BlockCounts) -> None:
        """Add one block's counts (the rows stage's BlockCounts), on any engine."""
        for mine, theirs in _ADDED.items():
            setattr(self, mine, getattr(self, mine) + getattr(counts, theirs))

    def add_dropped(self, kept: int, dropped: dict[str, int] | None) -> None:
        """Count one block's rows: ``kept`` rows left after the stages, ``dropped`` by each stage (its name ->
        rows; None: none), so rows read = kept + every drop."""
        self.rows_read += kept + sum((dropped or {}).values())
        for name, n in (dropped or {}).items():
            self.dropped[name] = self.dropped.get(name, 0) + n

    def line(self) -> str:
        """documents, tokens, windows (with a window store, or any window served from one: "N windows
        encoded, M from the cache"), rows with errors, seconds, the peak memory (when measured), output path
        (+ counts that are non-zero, in the order of _NOTED). When a stage
        dropped rows it begins with the rows read and each such stage's count: "10 rows read; 'my_filter'
        dropped 1; 9 documents written, ..."."""
        cached = f", {self.windows_cached} from the cache" if self.cache or self.windows_cached else ""
        docs = f"{self.documents} documents"
        if self.dropped:   # the README's one row per input row does not hold: say where the rows went
            drops = "; ".join(f"{name!r} dropped {n}" for name, n in self.dropped.items())
            docs = f"{self.rows_read} rows read; {drops}; {self.documents} documents written"
        peak = f", peak memory {self.peak_bytes / 1e9:.2f} GB" if self.peak_bytes else ""
        text = (f"{docs}, {self.tokens} tokens, {self.windows} windows encoded{cached}, "
                f"{self.errors} rows with errors, {self.seconds:.1f} s{peak} -> {self.output}")
        extra = [self.id_note] if self.id_note else []
        extra += [self._noted(name, template) for name, template in _NOTED if getattr(self, name)]
        if self.tokens and self.unknown_tokens / self.tokens >= UNKNOWN_WARN_SHARE:
            extra.append(unknown_warning(self.unknown_tokens, self.tokens))
        extra += self.notes
        return text + ("" if not extra else " (" + "; ".join(extra) + ")")


    def _noted(self, name: str, template: str) -> str:
        """One bracketed count; the skipped files are named (the first few, then how many more)."""
        text = template.format(getattr(self, name))
        if name == "skipped_files" and self.skipped_names:
            more = self.skipped_files - len(self.skipped_names)
            text = f"{text[:-1]}: {', '.join(self.skipped_names)}{f' and {more} more' if more > 0 else ''})"
        return text


def peak_memory() -> int:
    """Bytes: the most resident memory this process has held since it started: on Linux the kernel's
    high-water mark of this program's memory (VmHWM in /proc/self/status), elsewhere ``getrusage``'s
    ru_maxrss (KiB on Linux, bytes on macOS); 0 where the system says neither (Windows).

    Why not ru_maxrss on Linux: it is kept across execve, so a run started by a large process (a notebook,
    a benchmark holding a local S3 server, a Ray raylet) would report its parent's size at the fork as its own
    peak; VmHWM belongs to the program the exec started.

    The model's weights and the torch runtime are part of it: it is what a job on this machine needs.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024   # "VmHWM:   123456 kB"
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
    except ImportError:   # Windows
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


# Summary field <- BlockCounts field, for Summary.add
_ADDED = {"documents": "documents", "tokens": "tokens", "windows": "windows", "errors": "errors",
          "windows_saved": "windows_saved", "oom_splits": "oom_splits", "fp32_recomputed": "fp32_recomputed",
          "unknown_tokens": "unknown", "windows_cached": "windows_cached"}
# The summary line's bracketed counts, shown when non-zero, in this order
_NOTED = (("windows_saved", "{} windows saved by de-duplication"), ("resumed_from", "resumed: {} rows were done"),
          ("skipped_lines", "{} bad lines skipped"), ("skipped_files", "{} files skipped (not .txt/.md)"),
          ("duplicate_ids", "warning: {} duplicate ids (all rows kept)"),
          ("oom_splits", "{} batches split after out-of-memory"),
          ("fp32_recomputed", "{} windows recomputed in float32"))


class BatchProgress:
    """Moves a document bar after every forward batch, not once per block: a block of D documents whose
    windows hold T tokens stands at floor(D x tokens done / T) whole documents, so the rate and the ETA
    follow the tokens done. The count never runs ahead of the work: it moves by whole documents, and
    a block's last document counts only once the block is written (end_block), so the bar reaches its
    total when the output is. The postfix shows windows/s and tokens/s since the first batch."""

    def __init__(self, bar: tqdm):
        self.bar = bar
        self.docs = self.tokens = self.block_tokens_done = 0
        self.moved = 0                                     # whole documents of this block on the bar
        self.windows_done = self.tokens_done = 0
        self.t0: float | None = None

    def start_block(self, docs: int, tokens: int) -> None:
        """A block of ``docs`` documents whose windows hold ``tokens`` tokens (padding not counted) begins."""
        self.docs, self.tokens, self.moved, self.block_tokens_done = docs, tokens, 0, 0
        if self.t0 is None:
            self.t0 = time.perf_counter()

    def batch(self, windows: int, tokens: int) -> None:
        """One forward batch of ``windows`` windows and ``tokens`` tokens is done."""
        self.block_tokens_done += tokens
        share = self.block_tokens_done / self.tokens if self.tokens else 0.0
        target = min(math.floor(self.docs * share), self.docs - 1)    # the last one waits for the write
        if target > self.moved:
            self.bar.update(target - self.moved)
            self.moved = target
        self.windows_done += windows
        self.tokens_done += tokens
        seconds = max(time.perf_counter() - (self.t0 or 0.0), 1e-9)
        self.bar.set_postfix(windows_s=f"{self.windows_done / seconds:.1f}", tokens_s=f"{self.tokens_done / seconds:.0f}")

    def end_block(self) -> None:
        """The block is written: the bar stands at its last document (documents without windows included)."""
        self.bar.update(self.docs - self.moved)
        self.moved = self.docs


def scan_inputs(cfg: PipelineConfig) -> tuple[PipelineConfig, Plan]:
    """The inputs scanned and checked once (no model file is read): (config with --id-col set to the
    id column found, the plan of blocks).

    Raises:
        InputError (exit 2): as pipeline.read.scan, or inputs that hold no rows.
    """
    plan = scan(cfg.read)
    if plan.n_rows == 0:
        raise InputError(f"the inputs hold no rows ({', '.join(str(f.path) for f in plan.files)}); "
                         "nothing to extract")
    if plan.columns.id_col != cfg.read.id_col:
        cfg = dataclasses.replace(cfg, read=dataclasses.replace(cfg.read, id_col=plan.columns.id_col))
    return cfg, plan


def check(cfg: PipelineConfig) -> tuple[PipelineConfig, object, Plan]:
    """Everything that can fail before the run starts, in order: the inputs (scan_inputs), then the
    options that need the model's config and tokenizer. Loads no weights, writes nothing.

    Returns:
        (config with max_length resolved and --id-col set to the id column found, tokenizer, plan).

    Raises:
        ConfigError, ModelError, InputError (all exit 2).
    """
    cfg, plan = scan_inputs(cfg)
    cfg, tokenizer, _ = resolve_config(cfg)
    return cfg, tokenizer, plan


def run_fingerprint(cfg: PipelineConfig, plan: Plan, schema: pa.Schema | None = None) -> dict:
    """What --resume compares: the options, the inputs' bytes, the rows and the plan of blocks and,
    for --quantize int8 the weight levels (``quantize``: "int8-w127" or "int8-w63"), and,
    from the output schema's metadata, the model's weights (``model``: their sha256), for a
    pipeline with stages of its own, every stage (``stages``, pipeline.stage.stage_label), and a
    sentence-transformers folder's prompt applied (``prompt``: name, text, include_prompt)."""
    fingerprint = {"config": cfg.fingerprint(), "inputs": plan.fingerprint(), "rows": plan.n_rows,
                   "plan": plan.plan_fingerprint(), "options": cfg.fingerprint_options()}
    if cfg.model.quantize != "none":   # the CPU's int8 kernel decides the weight levels, which change the vectors
        from ..model.int8 import quantize_label

        fingerprint["quantize"] = quantize_label(cfg.model.quantize)
    if schema is not None and schema.metadata and b"longbert" in schema.metadata:
        meta = json.loads(schema.metadata[b"longbert"])
        if meta.get("model_sha256"):
            fingerprint["model"] = meta["model_sha256"]
        if meta.get("stages"):
            fingerprint["stages"] = meta["stages"]
        if (meta.get("folder_settings") or {}).get("prompt"):   # the folder's prompt, whether named or its default
            fingerprint["prompt"] = meta["folder_settings"]["prompt"]
    return fingerprint


@contextlib.contextmanager
def writing(sink: Sink, cfg: PipelineConfig, bar) -> Iterator[None]:
    """The sink's life on both engines: on any failure inside, abort the sink (no file that looks
    complete is left) and turn an OSError into write_failure's RunError naming its cause; always
    close the progress bar.

    Raises:
        RunError: an OSError while writing (no space, folder removed, permissions, read-only).
    """
    try:
        yield
    except BaseException as err:
        sink.abort()
        if isinstance(err, OSError):
            raise write_failure(err, cfg.write.output, cfg.write.is_directory) from None
        raise
    finally:
        bar.close()


def open_run(cfg: PipelineConfig, schema: pa.Schema, plan: Plan, echo: Callable[[str], None] | None
             ) -> tuple[Sink, Summary, list[BlockSpec], tqdm]:
    """What both engines do before the first block: open the sink (which finds the blocks a resumed run
    already has), start the summary and the document bar, and say what is resumed.

    Returns:
        (sink, summary, the specs still to run in plan order, the progress bar).

    Raises:
        ConfigError: as open_sink and PartsSink.open (existing output, --resume over another run).
    """
    sink = open_sink(cfg, schema, run_fingerprint(cfg, plan, schema))
    summary = Summary(output=str(cfg.write.output), skipped_lines=plan.n_bad_lines,
                      duplicate_ids=plan.duplicate_ids, id_note=plan.id_note, skipped_files=plan.skipped_files,
                      skipped_names=plan.skipped_names,
                      cache=cfg.write.cache is not None)
    done = sink.open(plan.blocks)
    todo = [spec for spec in plan.blocks if spec.index not in done]
    summary.resumed_from = sum(spec.n_rows for spec in plan.blocks if spec.index in done)
    note = bf16_note(cfg.model.device, cfg.model.dtype, cfg.model.quantize)
    if note:  # once per run: a float32 run on a CPU with a fast bfloat16 path
        summary.notes.append(note)
    note = settings_note(json.loads(schema.metadata[b"longbert"]).get("folder_settings"))
    if note:  # once per run: options that differ from what the model folder declares
        summary.notes.append(note)
    if sink.redone:
        summary.notes.append(f"{sink.redone} parts redone (a kept part failed the check of size, footer or rows)")
    if done and echo:
        echo(resume_note(cfg, plan, done))
    bar = progress_bar(plan.n_rows, summary.resumed_from, cfg.write.progress)
    return sink, summary, todo, bar


def resume_note(cfg: PipelineConfig, plan: Plan, done: set[int]) -> str:
    """The note a --resume run prints: how many blocks were done, or that nothing is left."""
    if len(done) == len(plan.blocks):
        return f"{cfg.write.output} is already complete ({plan.n_rows} rows); nothing to do"
    rows = sum(spec.n_rows for spec in plan.blocks if spec.index in done)
    return (f"resuming {cfg.write.output}: {len(done)} of {len(plan.blocks)} blocks ({rows} of {plan.n_rows} "
            "rows) are done")


def _starts_document(table: pa.Table) -> list[int]:
    """Per output row, 1 where it is a document's first row, else 0: rows are documents, or at --level
    window a document's windows, whose first row has window 0 (or null: no window)."""
    if WINDOW not in table.column_names:
        return [1] * table.num_rows
    return [int(w is None or w == 0) for w in table.column(WINDOW).to_pylist()]


def documents_of(table: pa.Table) -> int:
    """The documents whose output rows ``table`` holds (rows, or at --level window the documents begun)."""
    return sum(_starts_document(table))


def fail_on_row_error(table: pa.Table, spec: BlockSpec, first_doc: int = 0) -> None:
    """--strict: raise RunError at the first row with an error, naming its id and its file and line
    (the run then leaves no output). ``table``: the output rows of the block's documents from its
    ``first_doc``-th on (a piece of the block, pipeline.pieces)."""
    errors = table.column(ERROR).to_pylist()
    docs = list(itertools.accumulate(_starts_document(table)))
    for i, error in enumerate(errors):
        if error is not None:
            row_id = table.column(0)[i].as_py()
            what = f"row with id {row_id!r}" if table.column_names[0] == ID else f"row {row_id}"
            raise RunError(f"{what} ({row_location(spec, first_doc + docs[i] - 1)}): {error}; --strict stops at the first row that "
                           "cannot be embedded (drop --strict to keep such rows with null features)")
