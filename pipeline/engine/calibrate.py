"""--out-dtype binary: the centre of the signs, found once before the first row is written.

The centre of a column is the per-dimension mean of the first ``CALIBRATION_DOCS`` documents'
vectors (pipeline.compact.binary_center): their document vectors, their windows' at --level window,
their tokens' for ``token_features``, computed by the run's own stages up to ``rows``. It goes into
the run's config (``WriteConfig.binary_center``), hence into the output's metadata, where the rows
stage reads it on every engine (a Ray worker gets it with the config). A resumed run takes it from
the manifest of the run it finishes, so every part keeps the bits of one centre; a run begun before
the centre existed (no centre in its metadata) goes on with the signs of x itself.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

import numpy as np

from ..batch import Batch
from ..compact import CALIBRATION_DOCS, binary_center
from ..options.config import PipelineConfig
from ..output.schema import TOKEN_FEATURES
from ..output.write import load_manifest
from ..read import Plan, read_block


def with_binary_center(cfg: PipelineConfig, pipeline: Callable[[], object], plan: Plan) -> PipelineConfig:
    """``cfg`` with ``write.binary_center`` filled for an --out-dtype binary run (any other run: as it is).

    Args:
        cfg: the run's config. pipeline: returns the Pipeline whose stages up to ``rows`` compute the
            vectors (called only when a centre must be computed; its model loads on first encode).
        plan: the run's plan of blocks (the first documents are read from its first blocks).

    Returns:
        The config, ``binary_center`` set to ((column, (D,) centre as floats, or None for the signs of x),
        ...): the resumed run's, or the first ``CALIBRATION_DOCS`` documents' means.

    Raises:
        whatever the stages raise on the first documents (RunError, ModelError...).
    """
    if cfg.write.out_dtype != "binary" or cfg.write.binary_center is not None:
        return cfg
    centers = resumed_centers(cfg)
    if centers is None:
        centers = tuple((name, tuple(map(float, c))) for name, c in first_documents_centers(pipeline(), plan).items())
    return dataclasses.replace(cfg, write=dataclasses.replace(cfg.write, binary_center=centers))


def resumed_centers(cfg: PipelineConfig) -> tuple | None:
    """The centres in the manifest of the DIR/ a --resume run finishes: ((column, centre or None), ...),
    None when the run starts afresh (no --resume, no manifest, or a manifest of another form)."""
    out = Path(cfg.write.output)
    if not (cfg.write.is_directory and cfg.write.resume and not cfg.write.overwrite and out.is_dir()):
        return None
    manifest = load_manifest(out)
    compact = ((manifest or {}).get("longbert") or {}).get("compact") or {}
    if compact.get("form") != "binary":
        return None
    return tuple((c["column"], tuple(c["center"]) if "center" in c else None) for c in compact["columns"])


def first_documents_centers(pipe, plan: Plan, n_docs: int = CALIBRATION_DOCS) -> dict[str, np.ndarray]:
    """{column: (D,) float32 centre} from the first ``n_docs`` rows of ``plan`` run through ``pipe``'s
    stages before ``rows``: the mean of their valid vectors per feature column (documents, or windows
    at --level window) and, when the stages give per-token vectors, of their tokens' (``token_features``).
    A column with no valid vector among them gets zeros."""
    stop = pipe.names.index("rows") if "rows" in pipe.names else len(pipe.names)
    vectors: dict[str, list[np.ndarray]] = {}
    tokens: list[np.ndarray] = []
    left = n_docs
    for spec in plan.blocks:
        if left <= 0:
            break
        rows = read_block(spec)
        rows = rows.slice(0, min(left, rows.num_rows))
        left -= rows.num_rows
        batch = pipe.process(Batch(rows=rows), 0, stop)
        for name, values in (batch.vectors or {}).items():
            valid = batch.valid if batch.valid is not None else np.ones(len(values), bool)
            vectors.setdefault(name, []).append(np.asarray(values, np.float32)[valid])
        tokens += [t[3] for t in batch.tokens or () if t is not None and t[3] is not None]
    centers = {name: binary_center(np.concatenate(parts)) for name, parts in vectors.items()}
    if tokens:
        centers[TOKEN_FEATURES] = binary_center(np.concatenate(tokens).astype(np.float32))
    return centers
