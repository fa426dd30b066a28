"""The one driver of every engine: a run's output claimed (the lock), the inputs scanned into a plan, the
pipeline built, the engine opened by name (pipeline.engine.engines), the binary centre found, the sink
opened, the engine's stream of finished pieces written or of workers' parts committed, in plan order, the
inputs checked unchanged, the output committed, the summary made. ``longbert extract`` (either engine)
and ``Pipeline.run`` both end here. The driver never holds more than one piece's rows; on an engine whose
workers write their own parts (Ray) it holds no row at all, only block specs, counts and the centre.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..counts import BlockCounts
from ..output.lock import holds_output
from ..output.write import check_resume
from ..options.config import PipelineConfig
from ..read import Plan, verify_inputs
from .calibrate import binary_centre, run_projection
from .centre_file import file_centers
from .engines import open_engine
from .part_work import PartDone, Piece, written_table
from .run import (BatchProgress, Summary, documents_of, fail_on_row_error, open_run, peak_memory, run_fingerprint,
                  scan_inputs, writing)


@holds_output
def drive(cfg: PipelineConfig, echo: Callable[[str], None] | None = None, *,
          build: Callable[[PipelineConfig], Any]) -> Summary:
    """A whole run on the engine ``cfg.ray.engine`` names: the output claimed (holds_output), the inputs
    scanned once, the Pipeline built for the scanned config by ``build`` (Pipeline.from_config, or a
    pipeline's own for_run), and its blocks run into the output (drive_plan).

    Raises:
        ConfigError / InputError / ModelError (exit 2): before anything is written.
        RunError (exit 1): part-way; the output path then holds no file that looks complete.
    """
    started = time.perf_counter()
    cfg, plan = scan_inputs(cfg)
    return drive_plan(plan, build(cfg), echo, started)


def drive_plan(plan: Plan, pipe, echo: Callable[[str], None] | None = None, started: float | None = None) -> Summary:
    """Run ``pipe`` (a Pipeline built for this run; its ``cfg`` is the run's config and names the engine)
    over the blocks of ``plan`` into the output its config names.

    Args:
        plan: the scanned inputs (pipeline.engine.run.scan_inputs). pipe: the run's Pipeline. echo: where
            notes go (None: nowhere). started: time.perf_counter() when the run began (None: now).

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
    engine = open_engine(cfg)
    ready = pipe
    try:
        ready = pipe = engine.prepare(pipe, echo)
        projection, dims_note = run_projection(cfg, lambda: engine.calibration_pipe(pipe), plan,
                                               pipe.resolution().projection)
        if projection is not None:   # --dims: the rows stage's projection, found before the centre (of its vectors)
            pipe = pipe.with_projection(projection)
        centre, binary_note = binary_centre(cfg, lambda: engine.calibration_pipe(pipe), plan,
                                            pipe.resolution().binary_center)
        if centre is not None:   # --out-dtype binary: the rows stage's centre of the signs, found on the first documents
            pipe = pipe.with_binary_center(centre)
        schema = pipe.resolution().file_schema(plan.id_type)   # a hub model's sha256 may be known now
        sink, summary, todo, bar = open_run(cfg, schema, plan, echo)
        summary.notes += [n for n in (dims_note, binary_note) if n]
        encode = pipe.encode_stage()
        summary.cache = summary.cache or (encode is not None and encode.store is not None)   # a store object too
        with writing(sink, cfg, bar):
            progress = BatchProgress(bar)
            _write_all(engine.stream(pipe, todo, sink, schema, progress), pipe, schema, sink, summary, progress)
            verify_inputs(plan.files)  # the inputs are still what the scan hashed (RunError, exit 1)
            summary.n_bytes = sink.commit()
    finally:
        engine.close(ready)
    summary.seconds = time.perf_counter() - started
    summary.peak_bytes = peak_memory()   # the driver's: on Ray each worker holds its own model and one piece
    return summary


def _write_all(stream, pipe, schema, sink, summary: Summary, progress: BatchProgress) -> None:
    """Hand each item of an engine's stream to the sink, in plan order: a Piece is checked (its columns,
    --strict) and written; a PartDone, whose worker did both, is committed. Counts go to the summary."""
    strict = pipe.cfg.write.strict
    first_doc = 0   # a piece's first document within its block
    for item in stream:
        if isinstance(item, PartDone):
            sink.commit_part(item.part)
            summary.add(item.counts)
            summary.add_dropped(item.kept, item.dropped)
            progress.bar.update(item.spec.n_rows)
            continue
        assert isinstance(item, Piece), type(item)
        spec, last = item.spec, item.last
        table = written_table(pipe, schema, item.out)   # a column no stage declared: refused by name
        summary.add(item.out.counts or BlockCounts())
        summary.add_dropped(len(item.out), item.out.dropped)
        del item   # the piece's vectors: not held while the next piece is encoded
        if strict:
            fail_on_row_error(table, spec, first_doc)
        sink.write(spec, table, last)
        first_doc = 0 if last else first_doc + documents_of(table)
        del table
        if last:
            progress.end_block()
