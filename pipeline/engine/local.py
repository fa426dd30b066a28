"""The local engine: every block's stages in this process, the next blocks read and prepared in a feeder
thread ahead of the model (pipeline.engine.feed); it hands the driver (pipeline.engine.driver) each finished
piece, which the driver writes. ``run(cfg)`` is ``longbert extract`` without ``--engine ray``.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from ..batch import Batch
from ..model.facts import model_label
from ..options.config import DEFAULT_MODEL, PipelineConfig
from ..read import read_block
from .compose import Pipeline
from .driver import drive
from .feed import feed_workers
from .part_work import Piece
from .run import Summary


def run(cfg: PipelineConfig, echo: Callable[[str], None] | None = None, pipe=None) -> Summary:
    """Run the whole job on the engine ``cfg.ray.engine`` names (local by default): inputs in, parquet out.

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
    return drive(cfg, echo, build=Pipeline.from_config if pipe is None else pipe.for_run)


class LocalEngine:
    """The engine of this process (pipeline.engine.engines.Engine): loads the model once, then streams
    finished pieces to the driver, the progress bar moved after every forward batch."""

    def __init__(self, cfg: PipelineConfig):
        self.cfg = cfg

    def prepare(self, pipe, echo: Callable[[str], None] | None):
        """Load the model (a hub model's sha256, known once its files came, goes in the file's metadata)."""
        encode = pipe.encode_stage()
        if encode is not None:
            encode.open_store()   # a store that cannot be opened is refused before "loading model"
        if echo and pipe.cfg.write.progress:
            name = pipe.cfg.model.model
            echo(f"loading model {model_label(name) if name == DEFAULT_MODEL else name} ...")
        if encode is None:
            return pipe
        encode.load()
        if pipe.resolution().facts.sha256 is None and encode.facts.sha256 is not None:
            pipe = pipe.with_facts(encode.facts)   # a hub model hashed once its files came: the file's metadata
            encode.close()
            pipe.encode_stage().load()
        return pipe

    def calibration_pipe(self, pipe):
        """The run's own pipeline."""
        return pipe

    def stream(self, pipe, todo: list, sink, schema, progress) -> Iterator[Piece]:
        """Each piece of each block of ``todo``, finished, in order (Pipeline.map_pieces)."""
        encode = pipe.encode_stage()

        def started_block(batch: Batch) -> None:
            progress.start_block(len(batch), sum(len(w.input_ids) for w in batch.unique))

        with batch_hook(encode, progress.batch):
            outs = pipe.map_pieces(todo, read=lambda spec: Batch(rows=read_block(spec)), workers=feed_workers(),
                                   on_prepared=started_block, max_tokens=pipe.cfg.encode.block_tokens)
            for spec, out, last in outs:
                yield Piece(spec, out, last)
                del out

    def close(self, pipe) -> None:
        """Close the window store, through the stage that opened it."""
        if pipe.encode_stage() is not None:
            pipe.encode_stage().close()


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
