"""The Ray engine: the driver's plan of blocks run on Ray actors, each of which writes its blocks' parts
itself and reports back only a small record (pipeline.engine.part_work.PartDone).

Only what is Ray's lives here: start or join Ray, check its resources, start the actors, hand them the
block specs, and give the driver their records in plan order. Everything else is the driver's
(pipeline.engine.driver): the inputs scanned into block specs (exit 2 before Ray starts), the binary
centre, the sink, the manifest, the summary. Each actor gets the run's Pipeline object itself (it pickles
without its weights; inserted Python stages travel with it), loads the model once, and for each spec runs
``write_block``: read the block, run the stages in pieces, write the part under a hidden name and rename
it into the sink's parts folder (a DIR/ output, or a .parquet output's staging folder) once complete:

    actors = [RayWorker(pipe, parts folder, schema) x --workers]   (max_restarts, max_task_retries)
    ActorPool(actors).map(write_block, specs)   -> PartDone records, in plan order
    -> the driver: sink.commit_part(record)      (the manifest, or the .parquet file's row groups)

So no vector passes through the driver; a worker killed mid-block is restarted by Ray and its block done
again (the part's name is the block's, so it lands once), and --resume redoes only blocks without a
committed part. On a cluster, every node must see the inputs and the output folder at the same paths.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import socket
from collections.abc import Callable, Iterator

import pyarrow as pa

from ..cache.stores import open_store, store_env
from ..errors import ConfigError, PipelineError, RunError
from ..model.host_memory import reuse_freed_memory
from ..options.config import PipelineConfig
from ..output.places import Place, output_env
from ..read import BlockSpec
from ..read.remote import worker_env
from .part_work import PartDone, write_block
from .run import Summary

MAX_RESTARTS = 3   # a worker process that dies (killed, out of memory) is started again this many times
MAX_TASK_RETRIES = 3   # and the block it was writing is given to it again


def import_ray():
    """``ray``, or ConfigError (exit 2) saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--engine ray needs Ray: pip install -e '.[ray]' in a clone of longbert (or pip install 'ray[data]'), "
                          "or use --engine local") from None
    return ray


class RayWorker:
    """One Ray actor (``ray.remote(RayWorker)``): the run's pipeline with its model loaded once, writing
    whole blocks into the sink's parts folder.

    Args:
        pipe: the run's Pipeline (pickled by Ray without its weights; its stages load them here).
        folder: the sink's parts_folder(): a Folder or path, the same on every node, or an S3 Prefix
            (pickled without its connection; the actor opens its own). schema: the output schema.
        threads: torch threads when the pipeline's config sets none (the actor's reserved CPUs).
    """

    def __init__(self, pipe, folder: Place | str, schema: pa.Schema, threads: int):
        reuse_freed_memory()   # this worker process runs forward passes (pipeline.model.host_memory)
        if not pipe.cfg.model.threads:
            import torch

            torch.set_num_threads(threads)
        self.pipe, self.folder, self.schema = pipe, folder, schema
        encode = pipe.encode_stage()
        if encode is not None:
            encode.load()   # once per actor, before the first block

    def write(self, spec_json: str) -> PartDone:
        """Write the block of ``spec_json`` (BlockSpec.to_json) to its part; returns its record.

        Raises:
            As pipeline.engine.part_work.write_block (Ray hands the error to the driver).
        """
        return write_block(self.pipe, BlockSpec.from_json(spec_json), self.folder, self.schema,
                           strict=self.pipe.cfg.write.strict)

    def pid(self) -> int:
        """This actor's process id (the tests kill it)."""
        return os.getpid()


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


class RayEngine:
    """The Ray engine (pipeline.engine.engines.Engine): the driver loads no model but for --out-dtype
    binary's centre; its stream is the workers' PartDone records, in plan order."""

    def __init__(self, cfg: PipelineConfig):
        self.cfg = cfg
        self.driver_pipe = None   # the pipeline the driver ran for the binary centre (closed by close)

    def prepare(self, pipe, echo: Callable[[str], None] | None):
        """Check, before Ray starts and the output opens: the window store (an s3:// one that cannot be
        reached), Ray itself, and that the pipeline pickles (each worker gets it).

        Raises:
            ConfigError (exit 2): as open_store and import_ray; a stage that does not pickle, naming why.
        """
        if self.cfg.write.cache:
            open_store(self.cfg.write.cache).close()
        ray = import_ray()
        try:
            ray.cloudpickle.dumps(pipe)
        except Exception as err:  # noqa: BLE001 - any pickling failure: a lock, a file handle, a generator...
            raise ConfigError(f"the Ray workers each get the pipeline, but it does not pickle ({_first_line(err)}); "
                              "keep a stage's state picklable (no open file, lock or connection: open it on "
                              "first call), or run on the local engine") from None
        return pipe

    def calibration_pipe(self, pipe):
        """The run's pipeline, or where the workers use an accelerator, the built-in stages on the CPU
        (driver_config). TODO(engine): a pipeline with stages of its own is then calibrated without them."""
        if self.driver_pipe is None:
            if self.cfg.model.device in ("auto", "cpu"):
                self.driver_pipe = pipe
            else:
                from .compose import Pipeline

                self.driver_pipe = Pipeline.from_config(driver_config(pipe.cfg))
        return self.driver_pipe

    def stream(self, pipe, todo: list, sink, schema: pa.Schema, progress) -> Iterator[PartDone]:
        """The blocks ``todo`` written by the actors into ``sink.parts_folder()``; their records in plan order
        (``progress`` moves as the driver commits them)."""
        if todo:
            yield from ray_parts(import_ray(), pipe, todo, sink.parts_folder(), schema)

    def close(self, pipe) -> None:
        """Close the driver's own model and store, if the centre made it open them."""
        for p in {id(x): x for x in (pipe, self.driver_pipe) if x is not None}.values():
            if p.encode_stage() is not None:
                p.encode_stage().close()


def run(cfg: PipelineConfig, echo: Callable[[str], None] | None = None) -> Summary:
    """Run the whole job on Ray (``cfg.ray.engine == "ray"``): pipeline.engine.driver.drive with the
    built-in stages; the actors write the parts, the driver commits them.

    Returns:
        The Summary of the run: the actors' block counts, added up as on the local engine.

    Raises:
        ConfigError / InputError / ModelError (exit 2): before Ray starts and before anything is written.
        RunError (exit 1): the Ray run failed part-way; a DIR/ output keeps its committed parts for --resume.
    """
    from .compose import Pipeline
    from .driver import drive

    return drive(cfg, echo, build=Pipeline.from_config)


def driver_config(cfg: PipelineConfig) -> PipelineConfig:
    """``cfg`` for the model the driver runs itself (the binary centre's first documents): as the
    actors run it, but on the CPU in float32 where they use an accelerator the driver may lack."""
    if cfg.model.device in ("auto", "cpu"):
        return cfg
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, device="cpu", dtype="float32"))


def ray_parts(ray, pipe, specs: list[BlockSpec], folder: Place | str, schema: pa.Schema) -> Iterator[PartDone]:
    """Start Ray (or join it), start ``--workers`` RayWorker actors and map their ``write`` over ``specs``
    (ray.util.ActorPool: each actor one block at a time); yield each PartDone in plan order. Ray's errors
    become RunError (exit 1) with the cause's last line; a PipelineError raised in an actor keeps its class.
    """
    from ray.util.actor_pool import ActorPool

    cfg = pipe.cfg
    started_ray, cpus = _start_ray(ray, cfg)
    try:
        env = {**store_env(cfg.write.cache),   # s3://: the driver's AWS_* variables, so the actors reach its store,
               **worker_env([s.path for s in specs]),   # the S3 inputs their blocks read
               **output_env(cfg.write.output)}          # and the S3 output they write their parts to
        worker = ray.remote(RayWorker).options(
            num_cpus=cpus, num_gpus=cfg.ray.gpus_per_worker or None, max_restarts=MAX_RESTARTS,
            max_task_retries=MAX_TASK_RETRIES, **({"runtime_env": {"env_vars": env}} if env else {}))
        shared = ray.put(pipe)   # held until the end: a restarted actor is built from it again
        actors = [worker.remote(shared, folder, schema, max(1, round(cpus)))
                  for _ in range(min(cfg.ray.workers, len(specs)))]
        try:
            yield from ActorPool(actors).map(lambda actor, spec: actor.write.remote(spec.to_json()), specs)
        except PipelineError:
            raise
        except Exception as err:  # noqa: BLE001 - Ray wraps actor errors; report the cause, not a traceback
            raise _ray_failure(err, cfg) from None
        finally:
            for actor in actors:
                ray.kill(actor)
    finally:
        if started_ray:
            ray.shutdown()


def _ray_failure(err: Exception, cfg: PipelineConfig) -> PipelineError:
    """The error of a failed Ray run: the actor's PipelineError as it was, else RunError with the cause's
    last line (and, for a DIR/ output, the hint to resume)."""
    cause = getattr(err, "cause", None) or err
    if isinstance(cause, PipelineError):
        return type(cause)(str(cause))
    first = str(cause).strip().splitlines()[-1] if str(cause).strip() else type(cause).__name__
    return RunError(f"the Ray run failed: {first}" + ("; re-run with --resume to continue" if cfg.write.is_directory
                                                       else ""))
