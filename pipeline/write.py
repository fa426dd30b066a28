"""Write stage: the output schema, and sinks that stream row groups to parquet without ever leaving
a file (or directory) at the output path that looks complete before the run is.

Called by pipeline.run (local engine); ``output_schema`` also by pipeline.block and pipeline.ray_engine.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .config import PipelineConfig
from .errors import ConfigError
from .types import ModelFacts

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "longbert-parts/1"


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def run_metadata(cfg: PipelineConfig, model: ModelFacts, dim: int, token_dim: int) -> dict:
    """The JSON stored under the parquet schema metadata key ``longbert``.

    ``model`` is what the user named (pipeline.encode.model_label: never an absolute path of this
    machine), ``model_sha256`` the hash of its config and weight files (pipeline.encode.model_sha256),
    so two outputs can be compared across machines.
    """
    seg = cfg.segment
    strategy = {"name": seg.strategy, "max_length": seg.max_length, "content_tokens": seg.max_length - 2,
                "max_tokens_per_doc": seg.max_tokens_per_doc}
    if seg.strategy == "head_tail":
        strategy.update(head_tokens=seg.head_tokens, tail_tokens=seg.tail_tokens)
    if seg.strategy == "sliding":
        strategy.update(overlap=seg.overlap, step=seg.max_length - 2 - seg.overlap)
    return {
        "model": model.name,
        "model_sha256": model.sha256,
        "model_family": model.family,
        "hidden_size": model.hidden_size,
        "feature_dim": dim,
        "token_feature_dim": token_dim if cfg.pool.level == "token" else None,
        "max_length": seg.max_length,
        "strategy": strategy,
        "pooling": cfg.pool.pooling,
        "layers": list(cfg.pool.layers),
        "layer_agg": cfg.pool.layer_agg,
        "aggregate": cfg.pool.aggregate,
        "level": cfg.pool.level,
        "normalize": cfg.pool.normalize,
        "dtype": cfg.model.dtype,
        "quantize": cfg.model.quantize,
        "out_dtype": cfg.write.out_dtype,
        "text_col": cfg.read.text_col,
        "id_col": cfg.read.id_col,
        "keep_cols": list(cfg.read.keep_cols),
        "version": _version("longbert"),
        "libraries": {name: _version(name) for name in ("torch", "transformers", "tokenizers", "pyarrow", "pandas")},
    }


def output_schema(cfg: PipelineConfig, id_type: pa.DataType, model: ModelFacts, dim: int,
                  token_dim: int) -> pa.Schema:
    """The fixed output schema, declared from the config and the model's facts before the first row.

    Columns: id, each --keep-col (string), n_tokens int32, n_unknown int32, n_windows int32, truncated bool,
    features fixed_size_list<float32|float16>[dim], error string; with --level token also token_ids
    list<int32>, positions list<int32>, offsets list<fixed_size_list<int32>[2]>, token_features
    list<fixed_size_list<float>[token_dim]>. Metadata key ``longbert``: run_metadata as JSON.
    """
    value = pa.float16() if cfg.write.out_dtype == "float16" else pa.float32()
    fields = [pa.field("id", id_type)]
    fields += [pa.field(c, pa.string()) for c in cfg.read.keep_cols]
    fields += [pa.field("n_tokens", pa.int32()), pa.field("n_unknown", pa.int32()), pa.field("n_windows", pa.int32()),
               pa.field("truncated", pa.bool_()), pa.field("features", pa.list_(value, dim)),
               pa.field("error", pa.string())]
    if cfg.pool.level == "token":
        fields += [pa.field("token_ids", pa.list_(pa.int32())), pa.field("positions", pa.list_(pa.int32())),
                   pa.field("offsets", pa.list_(pa.list_(pa.int32(), 2))),
                   pa.field("token_features", pa.list_(pa.list_(value, token_dim)))]
    meta = {"longbert": json.dumps(run_metadata(cfg, model, dim, token_dim))}
    return pa.schema(fields, metadata=meta)


def check_same_run(old: dict, new: dict, path: Path | str) -> None:
    """--resume may only continue a run of the same options and input bytes (fingerprints as
    ``{"config": ..., "inputs": ...}``).

    Raises:
        ConfigError: naming what differs from the run that wrote ``path``.
    """
    changed = [k for k in ("config", "inputs") if old.get(k) != new[k]]
    if changed:
        what = " and ".join({"config": "the options", "inputs": "the input files"}[k] for k in changed)
        raise ConfigError(f"--resume: {what} differ from the run that wrote {path}; run with the same options "
                          "and inputs, or pass --overwrite to start again")


def remove_stale_partials(path: Path) -> None:
    """Remove ``.NAME.PID.partial`` files or folders beside ``path`` left by a killed run (its PID is
    gone); those of a run still alive are kept."""
    prefix = f".{path.name}."
    for stale in path.parent.glob(f"{prefix}*.partial"):
        pid = stale.name[len(prefix):-len(".partial")]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class FileSink:
    """One parquet file, written row group by row group to a hidden temporary sibling
    (``.NAME.PID.partial``) and renamed onto ``path`` by ``commit``; removed on any failure.

    A kill at any point leaves the previous complete file (or none) at ``path``.
    """

    path: Path
    schema: pa.Schema
    _tmp: Path | None = None
    _writer: pq.ParquetWriter | None = None
    rows: int = 0

    def open(self) -> int:
        """Create the temporary file; returns the row to start from (always 0 for a file)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_partials(self.path)
        self._tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.partial")
        self._writer = pq.ParquetWriter(self._tmp, self.schema)
        return 0

    def write(self, table: pa.Table) -> None:
        """Append one row group."""
        assert self._writer is not None
        self._writer.write_table(table)
        self.rows += table.num_rows

    def commit(self) -> int:
        """Close and rename into place; returns the file's size in bytes."""
        assert self._writer is not None and self._tmp is not None
        self._writer.close()
        self._writer = None
        os.replace(self._tmp, self.path)
        self._tmp = None
        return self.path.stat().st_size

    def abort(self) -> None:
        """Remove the temporary file (on error or interrupt)."""
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception:  # noqa: BLE001 - the run already failed; the file is removed anyway
                pass
            self._writer = None
        if self._tmp is not None and self._tmp.exists():
            self._tmp.unlink()
        self._tmp = None


@dataclass
class PartsSink:
    """A directory of numbered parts (part-00000.parquet, one per block) and a manifest.json.

    Each part is written to a temporary name and renamed; the manifest (rewritten atomically after
    each part) lists the finished parts and says ``"complete": true`` only at the end, so --resume
    continues after the last finished part.
    """

    path: Path
    schema: pa.Schema
    fingerprint: dict
    resume: bool = False
    parts: list[dict] = field(default_factory=list)
    rows: int = 0

    def open(self) -> int:
        """Create the directory or pick up a previous run; returns the first row still to do.

        Raises:
            ConfigError: --resume over a run with other options or inputs (names what changed).
        """
        self.path.mkdir(parents=True, exist_ok=True)
        manifest = self.path / MANIFEST
        if self.resume and manifest.exists():
            old = json.loads(manifest.read_text())
            check_same_run(old.get("fingerprint", {}), self.fingerprint, self.path)
            self.parts = [p for p in old["parts"] if (self.path / p["file"]).exists()]
            self.rows = sum(p["rows"] for p in self.parts)
            if old.get("complete") and len(self.parts) == len(old["parts"]):
                return self.rows  # already complete: nothing to redo, the manifest stays complete
        else:
            for old_part in self.path.glob("part-*.parquet"):
                old_part.unlink()
        for stale in self.path.glob(".part-*.partial"):
            stale.unlink()
        self._save(complete=False)
        return self.rows

    def write(self, table: pa.Table) -> None:
        """Write one block as the next part, then record it in the manifest."""
        name = f"part-{len(self.parts):05d}.parquet"
        tmp = self.path / f".{name}.partial"
        pq.write_table(table, tmp)
        os.replace(tmp, self.path / name)
        self.parts.append({"file": name, "first_row": self.rows, "rows": table.num_rows})
        self.rows += table.num_rows
        self._save(complete=False)

    def commit(self) -> int:
        """Mark the manifest complete; returns the parts' total size in bytes."""
        self._save(complete=True)
        return sum((self.path / p["file"]).stat().st_size for p in self.parts)

    def abort(self) -> None:
        """Keep finished parts for --resume; drop a half-written one."""
        for stale in self.path.glob(".part-*.partial"):
            stale.unlink()

    def _save(self, complete: bool) -> None:
        data = {"format": MANIFEST_FORMAT, "complete": complete, "fingerprint": self.fingerprint,
                "rows": self.rows, "parts": self.parts,
                "longbert": json.loads(self.schema.metadata[b"longbert"])}
        tmp = self.path / f".{MANIFEST}.partial"
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, self.path / MANIFEST)


def open_sink(cfg: PipelineConfig, schema: pa.Schema, fingerprint: dict) -> FileSink | PartsSink:
    """The sink for ``cfg.write.output``, after the overwrite/resume checks.

    Raises:
        ConfigError: the output exists without --overwrite/--resume, or --resume with a file output.
    """
    out = Path(cfg.write.output)
    if cfg.write.is_directory:
        has_run = (out / MANIFEST).exists() or any(out.glob("part-*.parquet")) if out.exists() else False
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--output {str(out)!r} exists and is not a directory; pick another path")
        if has_run and not (cfg.write.overwrite or cfg.write.resume):
            raise ConfigError(f"--output {str(out)!r} already holds a run; pass --resume to continue it or "
                              "--overwrite to replace it")
        if out.exists() and not has_run and any(out.iterdir()) and not cfg.write.overwrite:
            raise ConfigError(f"--output {str(out)!r} is a non-empty directory that holds no longbert run; "
                              "pick an empty or new directory")
        return PartsSink(out, schema, fingerprint, resume=cfg.write.resume and not cfg.write.overwrite)
    if cfg.write.resume:
        raise ConfigError("--resume needs a directory output of numbered parts: pass -o DIR/ (ending in /)")
    if out.exists() and not cfg.write.overwrite:
        raise ConfigError(f"--output {str(out)!r} exists; pass --overwrite to replace it or choose another path")
    if out.is_dir():
        raise ConfigError(f"--output {str(out)!r} is a directory; end it with / for numbered parts")
    return FileSink(out, schema)
