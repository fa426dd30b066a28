"""--out-dtype binary: the centre of the signs, found once before the first row is written.

The centre of a column is the per-dimension mean of the first ``CALIBRATION_DOCS`` documents'
vectors (pipeline.compact.binary_center): their document vectors, their windows' at --level window,
their tokens' for ``token_features``, computed by the run's own stages up to ``rows``. It is the rows
stage's fitted state (pipeline.output.rows.Rows ``binary_center``; Pipeline.with_binary_center), which
the writer records in the output's metadata (a Ray worker gets it with its stages). A resumed run takes
it from the manifest of the run it finishes, so every part keeps the bits of one centre; a run begun
before the centre existed (no centre in its metadata) goes on with the signs of x itself.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Callable

import numpy as np

from ..batch import Batch
from ..compact import CALIBRATION_DOCS, binary_center
from ..errors import ConfigError
from ..options.config import PipelineConfig
from ..output.schema import TOKEN_FEATURES
from ..output.places import is_uri, place_of
from ..output.write import load_manifest
from ..read import Plan, read_block


def binary_centre(cfg: PipelineConfig, pipeline: Callable[[], object], plan: Plan,
                  given: Mapping[str, object] | None = None) -> tuple[dict | None, str | None]:
    """The centre of an --out-dtype binary run's bits when the run must find it (any other run, or a
    centre ``given`` to the rows stage: None), and a note for the summary when it rests on few documents.

    The centre is, in this order: the resumed run's (its manifest), the one of the output named by
    --binary-center (``file_centers``), or the mean of the first ``CALIBRATION_DOCS`` documents. Of one
    document its own mean is the vector itself, whose bits would all be 0: such a run keeps the signs
    of x itself and says so; of 2 to 63 documents the note says how many it rests on.

    Args:
        cfg: the run's config. pipeline: returns the Pipeline whose stages up to ``rows`` compute the
            vectors (called only when a centre must be computed; its model loads on first encode).
        plan: the run's plan of blocks (the first documents are read from its first blocks).
        given: the rows stage's own centre ({column: values or None}), or None.

    Returns:
        ({column: (D,) centre as floats, or None for the signs of x}, or None; the summary's note or None).

    Raises:
        ConfigError: a --binary-center file that is not a binary output, or whose columns differ; a
            ``given`` centre that is not the centre of the run a --resume finishes.
        Whatever the stages raise on the first documents (RunError, ModelError...).
    """
    if cfg.write.out_dtype != "binary":
        return None, None
    resumed = resumed_centers(cfg)
    if given is not None:
        if resumed is not None and dict(resumed) != {k: None if v is None else tuple(v) for k, v in given.items()}:
            raise ConfigError("binary_center is not the centre of the run being resumed (its parts' bits keep "
                              "another); pass that run's centre, or start afresh with overwrite")
        return None, None
    note = None
    centers = resumed
    if centers is None and cfg.write.binary_center_file is not None:
        centers = file_centers(cfg.write.binary_center_file, pipeline().resolution().binary_columns())
    if centers is None:
        found, n_docs = first_documents_centers(pipeline(), plan, max_tokens=cfg.encode.block_tokens)
        if n_docs == 1:
            centers = tuple((name, None) for name in found)
            note = ("binary: one document has no centre of its own (its mean is itself, every bit 0): its bits are "
                    "the signs of x; pass --binary-center with a larger run's output to compare bits across files")
        else:
            centers = tuple((name, tuple(map(float, c))) for name, c in found.items())
            if 1 < n_docs < CALIBRATION_DOCS:
                note = (f"binary: the centre is the mean of {n_docs} documents (fewer than {CALIBRATION_DOCS}); pass "
                        "--binary-center with a larger run's output to take its centre")
    # a column none of the first documents gave a vector (per-token: all refused) keeps the signs of x
    return {**{c: None for c in pipeline().resolution().binary_columns()}, **dict(centers)}, note


def file_centers(path: str, columns: dict[str, int]) -> tuple:
    """The centres of an earlier --out-dtype binary output (``path``: a .parquet file or a DIR/ of parts,
    local or ``s3://BUCKET/PREFIX/``),
    from its metadata's ``compact`` entry, for this run's ``columns`` ({column: D}).

    Returns:
        ((column, (D,) centre as floats, or None: that file kept the signs of x), ...) in ``columns``' order.

    Raises:
        ConfigError: the file cannot be read, holds no binary output, or lacks one of ``columns`` or
            gives it another dimension (naming both).
    """
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..output.write import DONE_MANIFEST

    where = Path(path)
    try:
        if is_uri(path):   # a finished s3://BUCKET/PREFIX/ output: its endpoint, bucket and credentials first
            place = place_of(path, "--binary-center")
            place.check()
            target = pa.BufferReader(place.get(DONE_MANIFEST))
        else:
            target = where / DONE_MANIFEST if where.is_dir() else where
        raw = (pq.read_schema(target).metadata or {}).get(b"longbert")
        compact = (json.loads(raw) if raw else {}).get("compact") or {}
    except (OSError, ValueError, pa.ArrowException) as err:
        raise ConfigError(f"--binary-center {path!r} cannot be read as a longbert output ({err}); pass a .parquet "
                          "file or a finished DIR/ that `longbert extract --out-dtype binary` wrote") from None
    if compact.get("form") != "binary":
        raise ConfigError(f"--binary-center {path!r} holds no --out-dtype binary output (no centre in its metadata); "
                          "pass a file that `longbert extract --out-dtype binary` wrote")
    theirs = {c["column"]: c for c in compact.get("columns", [])}
    for name, dim in columns.items():
        if name not in theirs or theirs[name].get("dim") != dim:
            have = {c: e.get("dim") for c, e in theirs.items()}
            raise ConfigError(f"--binary-center {path!r} has the columns {have}, this run writes {columns}; pass an "
                              "output of the same features and model")
    return tuple((name, tuple(map(float, theirs[name]["center"])) if "center" in theirs[name] else None)
                 for name in columns)


def resumed_centers(cfg: PipelineConfig) -> tuple | None:
    """The centres in the manifest of the DIR/ a --resume run finishes: ((column, centre or None), ...),
    None when the run starts afresh (no --resume, no manifest, or a manifest of another form)."""
    if not (cfg.write.is_directory and cfg.write.resume and not cfg.write.overwrite):
        return None
    place = place_of(cfg.write.output)   # a folder or an s3:// prefix
    if not place.exists():
        return None
    manifest = load_manifest(place)
    compact = ((manifest or {}).get("longbert") or {}).get("compact") or {}
    if compact.get("form") != "binary":
        return None
    return tuple((c["column"], tuple(c["center"]) if "center" in c else None) for c in compact["columns"])


def first_documents_centers(pipe, plan: Plan, n_docs: int = CALIBRATION_DOCS,
                            max_tokens: int | None = None) -> tuple[dict[str, np.ndarray], int]:
    """({column: (D,) float32 centre}, documents read) from the first ``n_docs`` rows of ``plan`` run
    through ``pipe``'s stages before ``rows``: the mean of their valid vectors per feature column
    (documents, or windows at --level window) and, when the stages give per-token vectors, of their
    tokens' (``token_features``). A column with no valid vector among them gets zeros.

    The stages run in the one block loop (Pipeline.map_pieces over the pipeline's stages before ``rows``),
    the model's part in pieces of at most ``max_tokens`` window tokens (as a run's blocks; None: one piece), and the tokens' mean is summed piece by piece in float64, so no more than
    one piece's token vectors are held (pipeline.compact.binary_center's mean up to the order of the sum)."""
    stop = pipe.names.index("rows") if "rows" in pipe.names else len(pipe.names)
    firsts, left = [], n_docs   # (spec, rows of it to read): the first n_docs rows of the plan
    for spec in plan.blocks:
        if left <= 0:
            break
        firsts.append((spec, min(left, spec.n_rows)))
        left -= firsts[-1][1]
    vectors: dict[str, list[np.ndarray]] = {}
    token_sum, token_rows = None, 0
    read = lambda first: Batch(rows=read_block(first[0]).slice(0, first[1]))  # noqa: E731
    for _, batch, _ in pipe[:stop].map_pieces(firsts, read=read, max_tokens=max_tokens):   # the one block loop
        for name, values in (batch.vectors or {}).items():
            valid = batch.valid if batch.valid is not None else np.ones(len(values), bool)
            vectors.setdefault(name, []).append(np.asarray(values, np.float32)[valid])
        for t in batch.tokens or ():
            if t is not None and t[3] is not None:
                x = np.asarray(t[3], dtype=np.float32)
                finite = x[np.isfinite(x).all(axis=1)]                       # (m', D)
                part = finite.sum(axis=0, dtype=np.float64)                  # (D,)
                token_sum = part if token_sum is None else token_sum + part
                token_rows += len(finite)
    centers = {name: binary_center(np.concatenate(parts)) for name, parts in vectors.items()}
    if token_sum is not None:
        centers[TOKEN_FEATURES] = (token_sum / token_rows).astype(np.float32) if token_rows else \
            np.zeros(len(token_sum), np.float32)
    return centers, n_docs - left
