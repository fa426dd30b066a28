"""The loop that streams a corpus through a Pipeline to the output, after the inputs are scanned and
the pipeline is built: the model loaded, the binary centre found, the sink opened, every block's
stages run in order and written, the inputs checked unchanged, the output committed. The local
engine (``pipeline.engine.local.run``, ``longbert extract``) and ``Pipeline.run`` both end here; this
module sits below the Pipeline class and imports it not.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..batch import Batch
from ..counts import BlockCounts
from ..errors import RunError
from ..model.facts import model_label
from ..options.config import DEFAULT_MODEL, PipelineConfig
from ..output.lock import holds_output
from ..output.write import check_resume
from ..read import Plan, read_block, verify_inputs
from .calibrate import binary_centre
from .centre_file import file_centers
from .columns import as_written
from .feed import feed_workers
from .run import BatchProgress, Summary, documents_of, peak_memory, fail_on_row_error, open_run, run_fingerprint, scan_inputs, writing


@holds_output
def run_corpus(cfg: PipelineConfig, echo: Callable[[str], None] | None = None, *,
               build: Callable[[PipelineConfig], Any]) -> Summary:
    """A whole local run: the output claimed (holds_output), the inputs scanned once, the Pipeline built
    for the scanned config by ``build`` (Pipeline.from_config, or a pipeline's own for_run), and its
    blocks streamed to the output (stream_corpus).

    Raises:
        ConfigError / InputError / ModelError (exit 2): before anything is written.
        RunError (exit 1): part-way; the output path then holds no file that looks complete.
    """
    started = time.perf_counter()
    cfg, plan = scan_inputs(cfg)
    return stream_corpus(plan, build(cfg), echo, started)


def stream_corpus(plan: Plan, pipe, echo: Callable[[str], None] | None = None,
                  started: float | None = None) -> Summary:
    """Run ``pipe`` (a Pipeline built for this run: Pipeline.from_config or for_run of the scanned
    config) over the blocks of ``plan`` into the output its config names.

    Args:
        plan: the scanned inputs (pipeline.engine.run.scan_inputs). pipe: the run's Pipeline; its
            ``cfg`` is the run's config. echo: where notes go (None: nowhere). started:
            time.perf_counter() when the run began (the summary's seconds; None: now).

    Returns:
        The Summary of the run.

    Raises:
        ConfigError / InputError / ModelError (exit 2): before anything is written.
        RunError (exit 1): part-way; the output path then holds no file that looks complete.
    """
    started = time.perf_counter() if started is None else started
    cfg = pipe.cfg
    schema = pipe.resolution().file_schema(plan.id_type)   # the rows stage's columns, then any a stage adds
    check_resume(cfg, run_fingerprint(cfg, plan, schema))
    if cfg.write.out_dtype == "binary" and cfg.write.binary_center_file is not None:
        file_centers(cfg.write.binary_center_file, pipe.resolution())   # a wrong file refused before the model loads
    if echo and cfg.write.progress:
        name = cfg.model.model
        echo(f"loading model {model_label(name) if name == DEFAULT_MODEL else name} ...")
    encode = pipe.encode_stage()
    try:
        if encode is not None:
            encode.load()
            if pipe.resolution().facts.sha256 is None and encode.facts.sha256 is not None:
                pipe = pipe.with_facts(encode.facts)   # a hub model hashed once its files came: the file's metadata
                encode.close()
                encode = pipe.encode_stage()
                encode.load()
        centre, binary_note = binary_centre(cfg, lambda: pipe, plan, pipe.resolution().binary_center)
        if centre is not None:   # --out-dtype binary: the rows stage's centre of the signs, found on the first documents
            pipe = pipe.with_binary_center(centre)
        schema = pipe.resolution().file_schema(plan.id_type)   # a hub model's sha256 may be known now
        sink, summary, todo, bar = open_run(cfg, schema, plan, echo)
        if binary_note:
            summary.notes.append(binary_note)
        summary.cache = summary.cache or (encode is not None and encode.store is not None)   # a store object too
        progress = BatchProgress(bar)

        def started_block(batch: Batch) -> None:
            progress.start_block(len(batch), sum(len(w.input_ids) for w in batch.unique))

        with writing(sink, cfg, bar), batch_hook(encode, progress.batch):
            outs = pipe.map_pieces(todo, read=lambda spec: Batch(rows=read_block(spec)), workers=feed_workers(),
                                   on_prepared=started_block, max_tokens=cfg.encode.block_tokens)
            first_doc = 0   # the piece's first document within its block
            for spec, out, last in outs:   # a block's pieces, each written as it comes (pipeline.pieces)
                if out.table is None:
                    raise RunError(f"no stage made the output table (stages: {', '.join(pipe.names)}); keep 'rows'")
                table = as_written(out.table, schema, pipe.names)   # a column no stage declared: refused by name
                summary.add(out.counts or BlockCounts())
                summary.add_dropped(len(out), out.dropped)
                del out   # the piece's vectors: not held while the next piece is encoded
                if cfg.write.strict:
                    fail_on_row_error(table, spec, first_doc)
                sink.write(spec, table, last)
                first_doc = 0 if last else first_doc + documents_of(table)
                del table
                if last:
                    progress.end_block()
            verify_inputs(plan.files)  # the inputs are still what the scan hashed (RunError, exit 1)
            summary.n_bytes = sink.commit()
    finally:
        if encode is not None:
            encode.close()   # the window store, closed through the stage that opened it
    summary.seconds = time.perf_counter() - started
    summary.peak_bytes = peak_memory()
    return summary




@contextlib.contextmanager
def batch_hook(encode, hook: Callable[[int, int], None]) -> Iterator[None]:
    """While inside, the encode stage's encoder calls ``hook(windows, tokens)`` after each forward pass
    (the run's progress bar); its own ``on_batch`` again after, so a pipeline kept across runs
    (Pipeline.for_run) holds no finished run's bar. ``encode`` None: nothing."""
    if encode is None:
        yield
        return
    encode.encoder.on_batch = hook
    try:
        yield
    finally:
        encode.encoder.on_batch = encode.on_batch
