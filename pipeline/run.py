"""The local engine: scan inputs, then read -> block function -> write, block by block; called by cli.py.

The next block is read, tokenized and segmented in a background thread while the model runs on the
current one (the fast tokenizer and pandas' parser release the GIL), so at most two blocks are in
memory at once.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
from tqdm import tqdm

from .block import Extractor, Prepared, resolve_config
from .config import PipelineConfig
from .errors import InputError, PipelineError, RunError
from .read import CorpusScan, read_blocks, scan
from .tokenize import UNKNOWN_WARN_SHARE, unknown_warning
from .write import open_sink


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

    def line(self) -> str:
        """documents, tokens, windows, rows with errors, seconds, output path (+ counts that are non-zero)."""
        text = (f"{self.documents} documents, {self.tokens} tokens, {self.windows} windows, "
                f"{self.errors} rows with errors, {self.seconds:.1f} s -> {self.output}")
        extra = []
        if self.resumed_from:
            extra.append(f"resumed after row {self.resumed_from}")
        if self.skipped_lines:
            extra.append(f"{self.skipped_lines} bad CSV lines skipped")
        if self.duplicate_ids:
            extra.append(f"warning: {self.duplicate_ids} duplicate ids (all rows kept)")
        if self.oom_splits:
            extra.append(f"{self.oom_splits} batches split after out-of-memory")
        if self.fp32_recomputed:
            extra.append(f"{self.fp32_recomputed} windows recomputed in float32")
        if self.tokens and self.unknown_tokens / self.tokens >= UNKNOWN_WARN_SHARE:
            extra.append(unknown_warning(self.unknown_tokens, self.tokens))
        return text + ("" if not extra else " (" + "; ".join(extra) + ")")


def _prefetch(blocks: Iterator[pa.Table], prepare: Callable[[pa.Table], Prepared]) -> Iterator[Prepared]:
    """Yield prepare(block) for each block, preparing the next one in a thread meanwhile."""
    def step():
        block = next(blocks, None)
        return None if block is None else prepare(block)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="longbert-read") as pool:
        future = pool.submit(step)
        while True:
            prepared = future.result()
            if prepared is None:
                return
            future = pool.submit(step)
            yield prepared


def check(cfg: PipelineConfig) -> tuple[PipelineConfig, object, CorpusScan]:
    """Everything that can fail before the run starts, in order: options that need the model's
    config, then the inputs. Loads no weights and writes nothing.

    Raises:
        ConfigError, ModelError, InputError (all exit 2).
    """
    cfg, tokenizer, _ = resolve_config(cfg)
    corpus = scan(cfg.read)
    if corpus.n_rows == 0:
        raise InputError(f"the inputs hold no rows ({', '.join(str(f.path) for f in corpus.files)}); "
                         "nothing to extract")
    return cfg, tokenizer, corpus


def run(cfg: PipelineConfig, echo: Callable[[str], None] | None = None) -> Summary:
    """Run the whole job on the local engine: CSV in, parquet out.

    Args:
        cfg: the validated config (cli.py builds it).
        echo: where to print notes (e.g. a resumed run); None prints nothing.

    Returns:
        The Summary of the run.

    Raises:
        ConfigError / InputError / ModelError (exit 2): before anything is written.
        RunError (exit 1): part-way; the output path then holds no file that looks complete.
    """
    started = time.perf_counter()
    cfg, tokenizer, corpus = check(cfg)
    extractor = Extractor(cfg, tokenizer)
    fingerprint = {"config": cfg.fingerprint(), "inputs": corpus.fingerprint(), "rows": corpus.n_rows}
    sink = open_sink(extractor.cfg, extractor.schema, fingerprint)
    summary = Summary(output=str(cfg.write.output), skipped_lines=corpus.n_bad_lines,
                      duplicate_ids=corpus.duplicate_ids)
    start_row = sink.open()
    summary.resumed_from = start_row
    if start_row and echo:
        echo(f"resuming {cfg.write.output} after row {start_row} of {corpus.n_rows}")
    bar = tqdm(total=corpus.n_rows, initial=start_row, unit="doc", disable=not cfg.write.progress,
               dynamic_ncols=True)
    t0 = time.perf_counter()
    try:
        blocks = read_blocks(cfg.read, corpus, start_row=start_row) if start_row < corpus.n_rows else iter(())
        for prepared in _prefetch(blocks, extractor.prepare):
            table = extractor.finish(prepared)
            if cfg.write.strict:
                _fail_on_row_error(table)
            sink.write(table)
            bar.update(table.num_rows)
            bar.set_postfix(tokens_s=f"{extractor.stats.tokens / max(time.perf_counter() - t0, 1e-9):.0f}")
        summary.n_bytes = sink.commit()
    except BaseException as err:
        sink.abort()
        if isinstance(err, PipelineError):
            raise
        if isinstance(err, OSError):
            raise RunError(f"writing {cfg.write.output} failed: {err.strerror or err}; free space or pick "
                           "another --output") from None
        raise
    finally:
        bar.close()
    stats = extractor.stats
    summary.documents, summary.tokens, summary.windows, summary.errors = (
        stats.documents, stats.tokens, stats.windows, stats.errors)
    summary.oom_splits = extractor.encoder.stats.oom_splits
    summary.fp32_recomputed = extractor.encoder.stats.fp32_recomputed
    summary.unknown_tokens = stats.unknown
    summary.seconds = time.perf_counter() - started
    return summary


def _fail_on_row_error(table: pa.Table) -> None:
    """--strict: raise RunError at the first row with an error (the run then leaves no output)."""
    errors = table.column("error").to_pylist()
    for i, error in enumerate(errors):
        if error is not None:
            row_id = table.column("id")[i].as_py()
            raise RunError(f"row with id {row_id!r}: {error}; --strict stops at the first row that cannot be "
                           "embedded (drop --strict to keep such rows with null features)")
