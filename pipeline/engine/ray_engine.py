"""The Ray engine: the local engine's plan of blocks, mapped over a Ray actor pool.

Only what is Ray's lives here: start or join Ray, check its resources, run the actor pool, hand the
results to the sink. Everything else is the local engine's: ``pipeline.engine.run.check`` scans the inputs
into block specs on the driver (exit 2 before Ray starts), each actor runs ``read_block(spec)`` and
the pipeline's stages (``Pipeline.map``) on its specs, and the driver writes each result
through the same sink, by block index:

    ray.data.from_items(specs, one block each)
    -> map_batches(RayBlock, compute=ActorPoolStrategy(size=--workers), batch_size=1)
    -> iter_batches on the driver -> sink.write(spec, table) in block order

So --on-bad-lines skip, --strict and --resume behave exactly as on the local engine: --resume skips the
blocks whose parts are complete. On a cluster, every node must see the inputs at the same paths.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import socket
import time
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ..cache.stores import open_store, store_env
from ..counts import BlockCounts
from .resolved import output_for
from .calibrate import binary_centre
from .compose import Pipeline
from ..options.config import PipelineConfig
from ..errors import ConfigError, PipelineError, RunError
from ..model.host_memory import reuse_freed_memory
from ..read import BlockSpec, read_block, verify_inputs
from ..read.remote import worker_env
from ..output.lock import holds_output
from .run import Summary, check, documents_of, fail_on_row_error, open_run, peak_memory, run_fingerprint, writing
from ..output.write import check_resume

SPEC = "spec"                   # the input column: one BlockSpec as JSON
BLOCK = "__longbert_block"      # added to each output row: its block's index (dropped by the driver)
COUNTS = "__longbert_counts"    # the block's BlockCounts as JSON on its first row, null on the others (dropped)


def import_ray():
    """``ray`` with Ray Data, or ConfigError (exit 2) saying how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise ConfigError("--engine ray needs Ray Data: pip install 'longbert[ray]' (or pip install "
                          "'ray[data]'), or use --engine local") from None
    return ray


class RayBlock:
    """The ``map_batches`` callable: loads the tokenizer and model once per actor, then for each block
    spec in a batch runs ``read_block`` and the block function.

    Args:
        cfg: the run's config (max_length and the id column resolved by the driver).
        threads: torch threads for this actor when --threads is not given (its reserved CPUs).
        id_type: the plan's id type (pa.int64() row numbers, or pa.string()).
        centre: --out-dtype binary's centre the driver found ({column: values or None}), or None.
    """

    def __init__(self, cfg: PipelineConfig, threads: int, id_type: pa.DataType, centre: dict | None = None):
        if cfg.model.threads is None:
            cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, threads=threads))
        reuse_freed_memory()   # this worker process runs forward passes (pipeline.model.host_memory)
        self.pipe = Pipeline.from_config(cfg)
        if centre is not None:
            self.pipe = self.pipe.with_binary_center(centre)
        self.pipe.encode_stage().load()   # once per actor, before the first batch

    def __call__(self, batch: pa.Table) -> Iterator[pa.Table]:
        """A batch of specs (column SPEC) -> their output rows (the project's schema) plus BLOCK and COUNTS,
        one table per piece of a block (--block-tokens, Pipeline.map_pieces), each handed to Ray as it
        is made: the actor holds one piece's vectors, never a whole block's."""
        specs = [BlockSpec.from_json(text) for text in batch.column(SPEC).to_pylist()]
        max_tokens = self.pipe.cfg.encode.block_tokens
        for spec, done, _ in self.pipe.map_pieces(specs, read=read_block, max_tokens=max_tokens):
            out, counts = done.table, done.counts
            del done
            out = out.append_column(BLOCK, pa.array([spec.index] * out.num_rows, pa.int64()))
            yield out.append_column(COUNTS, pa.array([counts.to_json()] + [None] * (out.num_rows - 1), pa.string()))


def split_counts(table: pa.Table) -> tuple[pa.Table, BlockCounts]:
    """Rows of a block from Ray -> (those output rows without COUNTS, the BlockCounts they carry)."""
    counts = BlockCounts()
    for text in table.column(COUNTS).drop_null().to_pylist():
        counts.add(BlockCounts.from_json(text))
    return table.drop_columns([COUNTS]), counts


def check_address(address: str | None, timeout_s: float = 5.0) -> None:
    """A HOST:PORT --ray-address must accept a TCP connection within ``timeout_s`` seconds (ray.init
    retries an unreachable address for minutes); None, "auto" and ray:// addresses are left to Ray.

    Raises:
        ConfigError: the address is malformed or nothing listens there.
    """
    if address is None or address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--ray-address={address!r} is not HOST:PORT or 'auto'; pass the address that "
                          "`ray start --head` printed (e.g. 10.0.0.5:6379) or 'auto' on a cluster node")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise ConfigError(f"--ray-address={address!r}: nothing answers there ({err.strerror or err}); start a "
                          "cluster with `ray start --head`, pass the address it printed, or leave "
                          "--ray-address out to start a local Ray") from None


def init_keeping_sigterm(ray, **kwargs) -> None:
    """``ray.init(**kwargs)``, with the SIGTERM handler it found put back: ray.init installs its own, which
    calls sys.exit, so a SIGTERM would end ``longbert extract --engine ray`` without the interrupted
    message and with exit 15 instead of the command's 130 (its handler, cli._interrupt, raises
    KeyboardInterrupt as Ctrl-C does). Raises what ray.init raises."""
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()   # only the main thread has handlers
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        ray.init(**kwargs)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _start_ray(ray, cfg: PipelineConfig) -> tuple[bool, float]:
    """Connect to (or start) Ray; returns (whether we started it, CPUs per worker).

    A local Ray gets max(cores, workers x CPUs + 2) logical CPUs: the read and write tasks need CPUs of
    their own beside the actors, or the read waits forever for a CPU the actor pool holds.

    Raises:
        ConfigError: --ray-address cannot be joined (unreachable, or its token authentication refuses
            us), or no node has the CPUs and GPUs one worker asks for (Ray would wait forever).
    """
    workers = cfg.ray.workers
    cores = os.cpu_count() or 1
    local = cfg.ray.ray_address is None
    if cfg.ray.cpus_per_worker is not None:
        cpus = cfg.ray.cpus_per_worker
    else:
        cpus = float(max(1, cores // workers)) if local else 1.0
    if local and not ray.is_initialized() and (cfg.ray.cpus_per_worker or 0) > cores:
        raise ConfigError(f"--cpus-per-worker={cfg.ray.cpus_per_worker:g}, but this machine has {cores} cores for "
                          f"the local Ray; use --cpus-per-worker {cores} or less, or join a cluster with --ray-address")
    if ray.is_initialized():
        started = False
    else:
        check_address(cfg.ray.ray_address)
        kwargs = dict(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
        if local:
            kwargs["num_cpus"] = max(cores, math.ceil(workers * cpus) + 2)
        try:
            init_keeping_sigterm(ray, address=cfg.ray.ray_address, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as err:
            hint = ("if a cluster runs there, it may use Ray's token authentication (the default since Ray "
                    "2.5x): run from one of its nodes with --ray-address auto, or give this process the "
                    "cluster's token (RAY_AUTH_TOKEN, see docs.ray.io ray-security/token-auth); otherwise "
                    "start a cluster with `ray start --head`, or leave --ray-address out to start a local Ray")
            raise ConfigError(f"--ray-address={cfg.ray.ray_address!r}: cannot join Ray ({_first_line(err)}); "
                              f"{hint}") from None
        started = True
    try:
        _check_resources(ray, cpus, cfg.ray.gpus_per_worker)
    except ConfigError:
        if started:
            ray.shutdown()
        raise
    return started, cpus


def _check_resources(ray, cpus: float, gpus: float) -> None:
    """Some alive node must hold one worker's CPUs and GPUs, else ConfigError (Ray would wait forever).
    Workers beyond what the cluster holds at once simply wait for a free slot."""
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    if any(n.get("CPU", 0) >= cpus and n.get("GPU", 0) >= gpus for n in nodes):
        return
    have = ", ".join(f"{n.get('CPU', 0):g} CPU / {n.get('GPU', 0):g} GPU" for n in nodes) or "no alive node"
    raise ConfigError(f"no Ray node has the {cpus:g} CPUs and {gpus:g} GPUs one worker asks for (nodes: {have}); "
                      "lower --cpus-per-worker / --gpus-per-worker, or add such a node to the cluster")


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def in_block_order(batches: Iterator[pa.Table], specs: list[BlockSpec]) -> Iterator[tuple[BlockSpec, pa.Table, bool]]:
    """Regroup Ray's output batches by block and yield (spec, rows, complete) in the order of ``specs``:
    the rows of the block whose turn it is as they come (an actor hands over each piece of a block as it
    makes it), ``complete`` True with the rows that finish the block.

    Ray may split or merge the tables it returns; rows are grouped by their BLOCK column, a block is
    complete when it has its spec's n_rows rows, and blocks that come early wait for their turn.

    Raises:
        RunError: a block came back with more rows than its spec, or blocks are missing at the end.
    """
    by_index = {s.index: s for s in specs}
    pending: dict[int, list[pa.Table]] = {}
    counts: dict[int, int] = {}
    order = iter(specs)
    want = next(order, None)
    for batch in batches:
        if batch.num_rows == 0:
            continue
        blocks = batch.column(BLOCK).to_numpy()
        for index in dict.fromkeys(blocks.tolist()):
            part = batch.filter(pc.equal(batch.column(BLOCK), index)).drop_columns([BLOCK])
            pending.setdefault(index, []).append(part)
            counts[index] = counts.get(index, 0) + part.num_rows
            if counts[index] > by_index[index].n_rows:
                raise RunError(f"block {index} came back from Ray with {counts[index]} rows for "
                               f"{by_index[index].n_rows}; nothing more was written; run again")
        # the block being written: its pieces go out as they come; a later block's wait for its turn
        while want is not None and pending.get(want.index):
            done = counts.get(want.index) == want.n_rows
            parts = pending.pop(want.index)
            for k, part in enumerate(parts):
                yield want, part, done and k == len(parts) - 1
            if not done:
                break
            want = next(order, None)
    if want is not None:
        raise RunError(f"Ray returned no rows for block {want.index} (rows {want.first_row}.."
                       f"{want.first_row + want.n_rows - 1}); run again with --resume to do the rest")


@holds_output
def run(cfg: PipelineConfig, echo: Callable[[str], None] | None = None) -> Summary:
    """Run the whole job on Ray: the local engine's plan, read and block function on Ray actors,
    the local engine's sink on the driver.

    Args:
        cfg: the validated config (cli.py builds it), ``cfg.ray.engine == "ray"``.
        echo: where to print notes; None prints nothing.

    Returns:
        The Summary of the run: the actors' block counts, added up as on the local engine.

    Raises:
        ConfigError / InputError / ModelError (exit 2): before Ray starts and before anything is written.
        RunError (exit 1): the Ray run failed part-way; a DIR/ output keeps its finished parts for --resume.
    """
    started = time.perf_counter()
    cfg, tokenizer, plan = check(cfg)
    if cfg.write.cache:   # a store that cannot be opened (no endpoint, no bucket, no credentials): exit 2 here
        open_store(cfg.write.cache).close()
    cfg, schema = output_for(cfg, tokenizer, plan.id_type)
    check_resume(cfg, run_fingerprint(cfg, plan, schema))
    centre, binary_note = binary_centre(cfg, lambda: Pipeline.from_config(driver_config(cfg), tokenizer), plan)
    if centre is not None:   # --out-dtype binary: the centre, found here once, reaches the actors' rows stage
        cfg, schema = output_for(cfg, tokenizer, plan.id_type, centre)
    ray = import_ray()
    sink, summary, todo, bar = open_run(cfg, schema, plan, echo)
    if binary_note:
        summary.notes.append(binary_note)
    logging.getLogger("ray.data").setLevel(logging.WARNING if cfg.write.progress else logging.ERROR)
    with writing(sink, cfg, bar):
        if todo:
            first_doc = 0   # the piece's first document within its block
            for spec, piece, last in _run_ray(ray, cfg, plan.id_type, todo, centre):
                table, counts = split_counts(piece)
                if cfg.write.strict:
                    fail_on_row_error(table, spec, first_doc)
                sink.write(spec, table, last)
                first_doc = 0 if last else first_doc + documents_of(table)
                bar.update(table.num_rows)
                summary.add(counts)
        verify_inputs(plan.files)  # the inputs are still what the scan hashed (RunError, exit 1)
        summary.n_bytes = sink.commit()
    summary.seconds = time.perf_counter() - started
    summary.peak_bytes = peak_memory()   # the driver's: each actor holds its own model and one piece
    return summary


def driver_config(cfg: PipelineConfig) -> PipelineConfig:
    """``cfg`` for the model the driver runs itself (the binary centre's first documents): as the
    actors run it, but on the CPU in float32 where they use an accelerator the driver may lack."""
    if cfg.model.device in ("auto", "cpu"):
        return cfg
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, device="cpu", dtype="float32"))


def _run_ray(ray, cfg: PipelineConfig, id_type: pa.DataType, specs: list[BlockSpec], centre: dict | None = None
             ) -> Iterator[tuple[BlockSpec, pa.Table, bool]]:
    """Map read_block + the block function over ``specs`` on an actor pool; yield (spec, output rows of
    a piece, whether the block is complete with it) in plan order (in_block_order). Ray's errors become RunError (exit 1) with the cause's last line; a PipelineError
    raised in an actor (e.g. a file changed during the run) keeps its class."""
    started_ray, cpus = _start_ray(ray, cfg)
    try:
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True
        ctx.enable_progress_bars = False  # the driver's bar counts documents as they are written
        ds = ray.data.from_items([{SPEC: s.to_json()} for s in specs], override_num_blocks=len(specs))
        env = {**store_env(cfg.write.cache),   # s3://: the driver's AWS_* variables, so the actors reach its store
               **worker_env([s.path for s in specs])}   # and the S3 inputs their blocks read
        ds = ds.map_batches(
            RayBlock, fn_constructor_kwargs={"cfg": cfg, "threads": max(1, round(cpus)), "id_type": id_type,
                                             "centre": centre},
            batch_size=1, batch_format="pyarrow", compute=ray.data.ActorPoolStrategy(size=cfg.ray.workers),
            num_cpus=cpus, num_gpus=cfg.ray.gpus_per_worker or None,
            **({"runtime_env": {"env_vars": env}} if env else {}))
        try:
            yield from in_block_order(ds.iter_batches(batch_size=None, batch_format="pyarrow"), specs)
        except PipelineError:
            raise
        except Exception as err:  # noqa: BLE001 - Ray wraps actor errors; report the cause, not a traceback
            cause = getattr(err, "cause", None) or err
            if isinstance(cause, PipelineError):
                raise type(cause)(str(cause)) from None
            first = str(cause).strip().splitlines()[-1] if str(cause).strip() else type(cause).__name__
            raise RunError(f"the Ray run failed: {first}"
                           + ("; re-run with --resume to continue" if cfg.write.is_directory else "")) from None
    finally:
        if started_ray:
            ray.shutdown()
