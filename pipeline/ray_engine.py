"""The Ray engine: the same block function (pipeline.block.Extractor) on Ray Data; called by cli.py.

The plan is the standard Ray Data batch-inference shape, with nothing scheduled by hand:

    ray.data.read_csv (every column a string)  [-> zip with ray.data.range: the row number]
    -> map_batches(RayBlock, compute=ActorPoolStrategy(size=--workers), batch_format="pyarrow")
    -> write_parquet into a work directory beside the output

then the driver puts the parts in input order into the output (a .parquet file or DIR/ of parts and
manifest.json, the same contract as the local engine), written under a temporary name and renamed.
With --resume, Ray Data's checkpointing (keyed by --id-col) skips the rows a killed run already wrote.

The inputs are checked by the local engine's scan first (pipeline.read, the standard library's csv
reader), so every option and input error exits 2 before Ray starts; pyarrow's parser (Ray's) must then
read the same rows, which the row-number zip and the final count check.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import shutil
import socket
import time
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .block import Extractor, feature_dim, resolve_config
from .config import PipelineConfig, ReadConfig
from .errors import ConfigError, InputError, PipelineError, RunError
from .read import CorpusScan, _records
from .run import Summary, _fail_on_row_error, check
from .write import (MANIFEST, FileSink, PartsSink, check_same_run, open_sink, output_schema,
                    remove_stale_partials)

ROW = "__longbert_row"          # input row number (0-based across all inputs), carried beside the output
TEXT_CRC = "__longbert_crc"     # crc32 of the row's text as Ray read it, checked against the input scan
WORK_STATE = "state.json"


def import_ray():
    """``ray`` with Ray Data, or ConfigError (exit 2) saying how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise ConfigError("--engine ray needs Ray Data: pip install 'longbert[ray]' (or pip install "
                          "'ray[data]'), or use --engine local") from None
    return ray


def check_ray(cfg: PipelineConfig, corpus: CorpusScan) -> None:
    """Options and inputs the Ray engine cannot take; raised before Ray starts.

    Raises:
        ConfigError (exit 2): --resume without --id-col or with duplicate ids (Ray Data's
            checkpointing is keyed by the id), or lines skipped by --on-bad-lines skip (pyarrow's CSV
            parser, which Ray reads with, cannot skip the same lines).
    """
    if cfg.write.resume and cfg.read.id_col is None:
        raise ConfigError("--resume with --engine ray uses Ray Data's checkpointing, keyed by the id column; "
                          "pass --id-col with a column of unique ids (or drop --resume)")
    if cfg.write.resume and corpus.duplicate_ids:
        raise ConfigError(f"--resume with --engine ray needs unique --id-col values, but {corpus.duplicate_ids} "
                          f"rows repeat an earlier {cfg.read.id_col!r}; de-duplicate the ids or drop --resume")
    if corpus.n_bad_lines:
        raise ConfigError(f"the inputs have {corpus.n_bad_lines} malformed CSV lines that --on-bad-lines skip "
                          "would drop; --engine ray reads with pyarrow's CSV parser, which cannot skip the "
                          "same lines. Fix those lines, or use --engine local")


def input_block(batch: pa.Table, read: ReadConfig) -> pa.Table:
    """A Ray batch (the CSV's own column names, plus ROW) -> the block function's input columns
    ``id`` (the row number, or the --id-col string), ``text`` and each --keep-col, as read.read_blocks."""
    columns = {"id": batch.column(ROW if read.id_col is None else read.id_col),
               "text": batch.column(read.text_col)}
    for col in read.keep_cols:
        columns[col] = batch.column(col)
    return pa.table(columns)


def text_crc(texts: list[str]) -> pa.Array:
    """crc32 (zlib) of each text's UTF-8 bytes, uint32: the check that output row i embeds input text i."""
    return pa.array([zlib.crc32(t.encode("utf-8", "surrogatepass")) for t in texts], type=pa.uint32())


class RayBlock:
    """The ``map_batches`` callable: loads the tokenizer and model once per actor (from the model
    path, on the actor's node), then runs the block function on each batch.

    Args:
        cfg: the run's config (max_length resolved by the driver).
        threads: torch threads for this actor when --threads is not given (its reserved CPUs).
    """

    def __init__(self, cfg: PipelineConfig, threads: int):
        if cfg.model.threads is None:
            cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, threads=threads))
        self.read = cfg.read
        self.extractor = Extractor(cfg)

    def __call__(self, batch: pa.Table) -> pa.Table:
        """pyarrow batch of input rows -> output rows (the project's schema), plus TEXT_CRC, the ROW
        column and the --id-col column under its own name (Ray's checkpoint writer keys on it)."""
        block = input_block(batch, self.read)
        out = self.extractor(block) if batch.num_rows else self.extractor.schema.empty_table()
        out = out.append_column(TEXT_CRC, text_crc(block.column("text").to_pylist()))
        for extra in (ROW, self.read.id_col):
            if extra is not None and extra in batch.column_names and extra not in out.column_names:
                out = out.append_column(extra, batch.column(extra))
        return out


def _work_dir(output: Path) -> Path:
    """Ray's parts and checkpoint live beside the output: ``.NAME.ray/`` (kept for --resume)."""
    return output.parent / f".{output.name}.ray"


def _prepare_work(work: Path, fingerprint: dict, resume: bool) -> int:
    """Create (or, with --resume, keep) the work directory; returns rows already written to it.

    Raises:
        ConfigError: --resume over a work directory of other options or inputs.
    """
    state = work / WORK_STATE
    old = json.loads(state.read_text()) if resume and state.exists() else {}
    if old.get("resume"):  # only a --resume run has Ray checkpoints to continue from
        check_same_run(old.get("fingerprint", {}), fingerprint, work)
        parts = sorted((work / "parts").glob("*.parquet"))
        return sum(pq.ParquetFile(p).metadata.num_rows for p in parts)
    shutil.rmtree(work, ignore_errors=True)
    (work / "parts").mkdir(parents=True)
    state.write_text(json.dumps({"fingerprint": fingerprint, "resume": resume}))
    return 0


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
            ray.init(address=cfg.ray.ray_address, **kwargs)
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


def _dataset(ray, cfg: PipelineConfig, corpus: CorpusScan, cpus: float):
    """The lazy Ray Data plan from CSV to output rows (see the module docstring)."""
    from pyarrow import csv as pacsv

    read = cfg.read
    columns = list(dict.fromkeys(c for c in (read.id_col, read.text_col, *read.keep_cols) if c is not None))
    ds = ray.data.read_csv(
        [str(f.path.resolve()) for f in corpus.files],
        read_options=pacsv.ReadOptions(encoding=read.encoding, use_threads=False),
        parse_options=pacsv.ParseOptions(newlines_in_values=True),
        # every column a string, empty fields "" (not null): ids keep leading zeros, texts stay texts
        convert_options=pacsv.ConvertOptions(column_types={c: pa.string() for c in columns},
                                             include_columns=columns, strings_can_be_null=False,
                                             quoted_strings_can_be_null=False),
    )
    if not cfg.write.resume:  # checkpointing filters the read, so a resumed run orders parts by id instead
        with warnings.catch_warnings():  # zip is deprecated from Ray 2.64 (the ray extra pins below it)
            warnings.simplefilter("ignore")
            ds = ds.zip(ray.data.range(corpus.n_rows).rename_columns({"id": ROW}))
    return ds.map_batches(
        RayBlock, fn_constructor_kwargs={"cfg": cfg, "threads": max(1, round(cpus))},
        batch_size=read.block_rows, batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=cfg.ray.workers),
        num_cpus=cpus, num_gpus=cfg.ray.gpus_per_worker or None)


def _row_keys(parts: list[Path], crc: np.ndarray, id_rows: dict[str, int] | None) -> list[np.ndarray]:
    """Per part, the input row number of each of its rows (ROW column, or --id-col mapped by the scan).

    Args:
        crc: (n_rows,) uint32, text_crc of every input row as the standard library's csv reader read it.

    Raises:
        RunError: the parts do not hold every input row exactly once, or a row's text is not the
            input's text at that row (the two CSV parsers disagree).
    """
    keys, crcs = [], []
    for part in parts:
        names = pq.ParquetFile(part).schema_arrow.names
        table = pq.read_table(part, columns=[ROW if ROW in names else "id", TEXT_CRC])
        if ROW in names:
            keys.append(table.column(0).to_numpy().astype(np.int64))
        else:
            keys.append(np.array([id_rows.get(i, -1) for i in table.column(0).to_pylist()], dtype=np.int64))
        crcs.append(table.column(1).to_numpy())
    n_rows = crc.shape[0]
    allkeys = np.concatenate(keys) if keys else np.zeros(0, np.int64)
    if allkeys.shape[0] != n_rows or not np.array_equal(np.sort(allkeys), np.arange(n_rows)):
        raise RunError(f"the Ray run wrote {allkeys.shape[0]} rows for {n_rows} input rows (pyarrow's CSV "
                       "parser and the input check disagree, or the work directory was changed); nothing "
                       "was written to the output; re-run with --engine local, or without --resume")
    wrong = np.flatnonzero(crc[allkeys] != np.concatenate(crcs))
    if wrong.size:
        raise RunError(f"{wrong.size} rows read by Ray differ from the input check's reading of the same rows "
                       f"(first: input row {int(allkeys[wrong[0]])}); pyarrow's CSV parser reads this file "
                       "differently; nothing was written to the output; use --engine local")
    return keys


def _in_input_order(parts: list[Path], keys: list[np.ndarray], block_rows: int, columns: list[str]):
    """Yield tables of ``block_rows`` rows in input-row order, reading each part once while it is
    needed (parts hold increasing rows; a resumed run's parts may interleave with earlier ones)."""
    counts = np.array([k.shape[0] for k in keys])
    allkeys = np.concatenate(keys)
    order = np.argsort(allkeys, kind="stable")                         # output position -> flat index
    part_of = np.repeat(np.arange(len(parts)), counts)[order]          # (n,)
    offset = (np.arange(allkeys.shape[0]) - np.repeat(np.cumsum(counts) - counts, counts))[order]
    last_use = np.zeros(len(parts), dtype=np.int64)
    np.maximum.at(last_use, part_of, np.arange(part_of.shape[0]))      # last output position per part
    cache: dict[int, pa.Table] = {}
    for start in range(0, part_of.shape[0], block_rows):
        stop = min(start + block_rows, part_of.shape[0])
        pieces = []
        run_start = start
        for i in range(start + 1, stop + 1):                           # runs of rows from one part
            if i == stop or part_of[i] != part_of[run_start]:
                p = int(part_of[run_start])
                if p not in cache:
                    cache[p] = pq.read_table(parts[p], columns=columns)
                pieces.append(cache[p].take(pa.array(offset[run_start:i])))
                run_start = i
        for p in [p for p in cache if last_use[p] < stop]:
            del cache[p]
        yield pa.concat_tables(pieces)


def _output_done(cfg: PipelineConfig, fingerprint: dict) -> int | None:
    """Rows of a complete DIR/ output of the same run, when --resume finds one (then nothing is redone).

    Raises:
        ConfigError: --resume (without --overwrite) over a DIR/ run of other options or inputs, as the
            local engine does; it is never replaced without --overwrite.
    """
    manifest = Path(cfg.write.output) / MANIFEST
    if not (cfg.write.resume and not cfg.write.overwrite and cfg.write.is_directory and manifest.exists()):
        return None
    old = json.loads(manifest.read_text())
    check_same_run(old.get("fingerprint", {}), fingerprint, cfg.write.output)
    return old["rows"] if old.get("complete") else None


def run(cfg: PipelineConfig, echo: Callable[[str], None] | None = None) -> Summary:
    """Run the whole job on Ray Data: CSV in, parquet out (a file, or DIR/ of parts + manifest.json).

    Args:
        cfg: the validated config (cli.py builds it), ``cfg.ray.engine == "ray"``.
        echo: where to print notes; None prints nothing.

    Returns:
        The Summary of the run (batches split after out-of-memory are not counted on Ray).

    Raises:
        ConfigError / InputError / ModelError (exit 2): before Ray starts and before anything is written.
        RunError (exit 1): the Ray run failed part-way; the output path holds nothing new (with
            --resume the work directory ``.NAME.ray/`` keeps the finished rows).
    """
    started = time.perf_counter()
    try:
        cfg, tokenizer, corpus = check(cfg)
    except InputError as err:  # the scan's hint to skip bad lines does not hold for Ray (check_ray)
        raise InputError(str(err).replace("or pass --on-bad-lines skip to drop such lines",
                                          "or skip such lines with --engine local --on-bad-lines skip")) from None
    check_ray(cfg, corpus)
    cfg, _, facts = resolve_config(cfg, tokenizer)
    dim, token_dim = feature_dim(cfg, facts.hidden_size)
    id_type = pa.int64() if cfg.read.id_col is None else pa.string()
    schema = output_schema(cfg, id_type, facts, dim, token_dim)
    fingerprint = {"config": cfg.fingerprint(), "inputs": corpus.fingerprint(), "rows": corpus.n_rows}
    open_sink(cfg, schema, fingerprint)  # the output checks (exists, --overwrite, --resume) only
    output = Path(cfg.write.output)
    summary = Summary(output=str(output), duplicate_ids=corpus.duplicate_ids)
    done = _output_done(cfg, fingerprint)
    if done is not None:
        summary.resumed_from = done
        summary.seconds = time.perf_counter() - started
        if echo:
            echo(f"{output} is already complete ({done} rows); nothing to do")
        return summary

    ray = import_ray()
    work = _work_dir(output)
    summary.resumed_from = _prepare_work(work, fingerprint, cfg.write.resume and not cfg.write.overwrite)
    if summary.resumed_from and echo:
        echo(f"resuming: {summary.resumed_from} of {corpus.n_rows} rows are already in {work}")
    logging.getLogger("ray.data").setLevel(logging.WARNING if cfg.write.progress else logging.ERROR)
    try:
        _run_ray(ray, cfg, corpus, work)
        _finish(cfg, schema, fingerprint, corpus, work, summary)
    except BaseException:
        if not cfg.write.resume:  # a killed run (SIGKILL) leaves it; the next run without --resume wipes it
            shutil.rmtree(work, ignore_errors=True)
        raise
    shutil.rmtree(work, ignore_errors=True)
    summary.seconds = time.perf_counter() - started
    return summary


def _run_ray(ray, cfg: PipelineConfig, corpus: CorpusScan, work: Path) -> None:
    """Execute the plan, writing parts into ``work/parts`` (Ray errors -> RunError, exit 1)."""
    started_ray, cpus = _start_ray(ray, cfg)
    try:
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True
        ctx.enable_progress_bars = cfg.write.progress
        ctx.checkpoint_config = None
        if cfg.write.resume:
            from ray.data.checkpoint import CheckpointConfig
            ctx.checkpoint_config = CheckpointConfig(id_column=cfg.read.id_col,
                                                     checkpoint_path=str((work / "checkpoint").resolve()),
                                                     delete_checkpoint_on_success=False)
        try:
            _dataset(ray, cfg, corpus, cpus).write_parquet(str((work / "parts").resolve()))
        except PipelineError:
            raise
        except Exception as err:  # noqa: BLE001 - Ray wraps actor errors; report the cause, not a traceback
            cause = getattr(err, "cause", None) or err
            if isinstance(cause, PipelineError):
                raise type(cause)(str(cause)) from None
            first = str(cause).strip().splitlines()[-1] if str(cause).strip() else type(cause).__name__
            raise RunError(f"the Ray run failed: {first}"
                           + ("; re-run with --resume to continue" if cfg.write.resume else "")) from None
        finally:
            ctx.checkpoint_config = None
    finally:
        if started_ray:
            ray.shutdown()


def _finish(cfg: PipelineConfig, schema: pa.Schema, fingerprint: dict, corpus: CorpusScan, work: Path,
            summary: Summary) -> None:
    """Write the work directory's parts into the output in input order, through the local engine's
    sinks (a file renamed into place; a DIR/ built under a temporary name and renamed)."""
    parts = sorted((work / "parts").glob("*.parquet"))
    id_rows: dict[str, int] | None = {} if cfg.write.resume else None
    crc = np.zeros(corpus.n_rows, dtype=np.uint32)
    row = 0
    for fs in corpus.files:  # the inputs once more, as the local engine reads them
        for line, record in _records(fs.path, cfg.read):
            if line >= 0:
                crc[row] = zlib.crc32(record[cfg.read.text_col].encode("utf-8", "surrogatepass"))
                if id_rows is not None:
                    id_rows[record[cfg.read.id_col]] = row
                row += 1
    keys = _row_keys(parts, crc, id_rows)
    output = Path(cfg.write.output)
    remove_stale_partials(output)
    staging = output.parent / f".{output.name}.{os.getpid()}.partial"
    sink = PartsSink(staging, schema, fingerprint) if cfg.write.is_directory else FileSink(output, schema)
    try:
        sink.open()
        for table in _in_input_order(parts, keys, cfg.read.block_rows, schema.names):
            table = table.cast(schema)
            if cfg.write.strict:
                _fail_on_row_error(table)
            sink.write(table)
            summary.documents += table.num_rows
            summary.tokens += int(pc.sum(table.column("n_tokens")).as_py() or 0)
            summary.unknown_tokens += int(pc.sum(table.column("n_unknown")).as_py() or 0)
            summary.windows += int(pc.sum(table.column("n_windows")).as_py() or 0)
            summary.errors += table.num_rows - table.column("error").null_count
        summary.n_bytes = sink.commit()
    except BaseException:
        sink.abort()
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if cfg.write.is_directory:
        old = output.parent / f".{output.name}.{os.getpid()}.old"
        if output.exists():
            os.replace(output, old)
        os.replace(staging, output)
        shutil.rmtree(old, ignore_errors=True)
