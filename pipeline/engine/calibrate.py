"""--out-dtype binary: the centre of the signs, found once before the first row is written.

The centre of a column is the per-dimension mean of the first ``CALIBRATION_DOCS`` documents'
vectors (pipeline.compact.binary_center): their document vectors, their windows' at --level window,
their tokens' for ``token_features``, computed by the run's own stages up to ``rows``. It is the rows
stage's fitted state (pipeline.output.rows.Rows ``binary_center``; Pipeline.with_binary_center), which
the writer records in the output's metadata (a Ray worker gets it with its stages). A resumed run takes
it from the manifest of the run it finishes, so every part keeps the bits of one centre; a run begun
before the centre existed (no centre in its metadata) goes on with the signs of x itself.

--dims' projection is found the same way, before the centre (whose vectors it projects): the resumed
run's, the one of the output named by --projection, a Matryoshka folder's own cut, or a PCA of the first
``PROJECTION_DOCS`` documents' vectors (``run_projection``).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Callable

import numpy as np

from ..batch import Batch
from ..compact import CALIBRATION_DOCS, binary_center
from ..errors import ConfigError
from ..options.config import PipelineConfig
from ..output.schema import TOKEN_FEATURES
from ..output.places import place_of
from ..output.write import load_manifest
from ..projection import PROJECTION_DOCS, Projection, fit_pca, truncation
from ..read import Plan, read_block
from .centre_file import file_centers, read_metadata


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
        ConfigError: a --binary-center file that is not a binary output, or of other features, or whose
            centre is not finite (pipeline.engine.centre_file.file_centers); a
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
        centers = file_centers(cfg.write.binary_center_file, pipeline().resolution())
    if centers is None:
        found, n_docs = first_documents_centers(pipeline(), plan, max_tokens=cfg.encode.block_tokens,
                                                projection=pipeline().resolution().projection)
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


def resumed_metadata(cfg: PipelineConfig, key: str) -> dict:
    """The ``key`` entry ("compact", "projection") of the run metadata in the manifest of the DIR/ (a folder
    or an s3:// prefix) a --resume run finishes; {} when the run starts afresh (no --resume, no manifest)."""
    if not (cfg.write.is_directory and cfg.write.resume and not cfg.write.overwrite):
        return {}
    place = place_of(cfg.write.output)
    if not place.exists():
        return {}
    return ((load_manifest(place) or {}).get("longbert") or {}).get(key) or {}


def resumed_centers(cfg: PipelineConfig) -> tuple | None:
    """The centres in the manifest of the DIR/ a --resume run finishes: ((column, centre or None), ...),
    None when the run starts afresh (no --resume, no manifest, or a manifest of another form)."""
    compact = resumed_metadata(cfg, "compact")
    if compact.get("form") != "binary":
        return None
    return tuple((c["column"], tuple(c["center"]) if "center" in c else None) for c in compact["columns"])


def documents_read(plan: Plan, n_docs: int) -> int:
    """How many of the first ``n_docs`` rows ``plan`` has: min(n_docs, its rows)."""
    return min(n_docs, sum(spec.n_rows for spec in plan.blocks))


def first_batches(pipe, plan: Plan, n_docs: int, max_tokens: int | None = None) -> Iterator[Batch]:
    """The first ``n_docs`` rows of ``plan`` run through ``pipe``'s stages before ``rows``, piece by piece:
    the one block loop (Pipeline.map_pieces), the model's part in pieces of at most ``max_tokens`` window
    tokens (as a run's blocks; None: one piece). Yields each piece's Batch (vectors, tokens, valid)."""
    stop = pipe.names.index("rows") if "rows" in pipe.names else len(pipe.names)
    firsts, left = [], n_docs   # (spec, rows of it to read): the first n_docs rows of the plan
    for spec in plan.blocks:
        if left <= 0:
            break
        firsts.append((spec, min(left, spec.n_rows)))
        left -= firsts[-1][1]
    read = lambda first: Batch(rows=read_block(first[0]).slice(0, first[1]))  # noqa: E731
    for _, batch, _ in pipe[:stop].map_pieces(firsts, read=read, max_tokens=max_tokens):
        yield batch


def first_documents_centers(pipe, plan: Plan, n_docs: int = CALIBRATION_DOCS, max_tokens: int | None = None,
                            projection: Mapping[str, Projection] | None = None) -> tuple[dict[str, np.ndarray], int]:
    """({column: (D,) float32 centre}, documents read) from the first ``n_docs`` rows of ``plan`` run
    through ``pipe``'s stages before ``rows``: the mean of their valid vectors per feature column
    (documents, or windows at --level window) and, when the stages give per-token vectors, of their
    tokens' (``token_features``). A column with no valid vector among them gets zeros.

    The stages run in the one block loop (Pipeline.map_pieces over the pipeline's stages before ``rows``),
    the model's part in pieces of at most ``max_tokens`` window tokens (as a run's blocks; None: one piece), and the tokens' mean is summed piece by piece in float64, so no more than
    one piece's token vectors are held (pipeline.compact.binary_center's mean up to the order of the sum).
    ``projection``: a --dims run's {column: Projection}: the centre is the mean of the projected vectors."""
    vectors: dict[str, list[np.ndarray]] = {}
    token_sum, token_rows = None, 0
    for batch in first_batches(pipe, plan, n_docs, max_tokens):
        for name, values in (batch.vectors or {}).items():
            valid = batch.valid if batch.valid is not None else np.ones(len(values), bool)
            kept = np.asarray(values, np.float32)[valid]                         # (m, D)
            if projection and name in projection:
                kept = projection[name].apply(kept)                               # (m, N)
            vectors.setdefault(name, []).append(kept)
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
    return centers, documents_read(plan, n_docs)


def run_projection(cfg: PipelineConfig, pipeline: Callable[[], object], plan: Plan,
                   given: Mapping[str, Projection] | None = None) -> tuple[dict[str, Projection] | None, str | None]:
    """The --dims projection of a run that must find it (none asked, or one ``given`` to the rows stage:
    None), and a note for the summary: which method ran, and when a PCA rests on fewer documents than
    ``PROJECTION_DOCS``.

    The projection is, in this order: the resumed run's (its manifest), the one of the output named by
    --projection (``file_projection``), a plain cut where the model folder declares --dims N as a
    Matryoshka dimension (--dims-method auto or truncate; pipeline.model.st_folder.matryoshka_dims), or a
    PCA (pipeline.projection.fit_pca) per feature column of the valid vectors of the first
    ``PROJECTION_DOCS`` documents (their windows at --level window).

    Raises:
        ConfigError: --dims at or above a column's dimensions (the hidden size for one plain feature);
            --dims-method truncate on a folder that does not declare N; more dims than the vectors the PCA
            is fitted on; a --projection file that is not a --dims output or whose model, columns or N
            differ; a ``given`` projection that is not the one of the run a --resume finishes.
    """
    write = cfg.write
    if write.dims is None and write.projection_file is None:
        return None, None
    resumed = resumed_projection(cfg)
    if given is not None:
        if resumed is not None and resumed != dict(given):
            raise ConfigError("projection is not the projection of the run being resumed (its parts keep another); "
                              "pass that run's projection, or start afresh with overwrite")
        return None, None
    if resumed is not None:
        return resumed, None
    resolved = pipeline().resolution()
    columns = dict(resolved.columns)
    if write.projection_file is not None:
        return file_projection(write.projection_file, columns, resolved.facts, write.dims), None
    n = write.dims
    small = min(columns.values())
    if n >= small:
        what = f"the model's hidden size {resolved.facts.hidden_size}" if small == resolved.facts.hidden_size else \
            f"the {small} dimensions of the feature vectors"
        raise ConfigError(f"--dims {n} is not below {what}; pass --dims below {small}, or drop --dims to keep them all")
    declared = _declared_dims(cfg)
    if write.dims_method == "truncate" and n not in declared:
        raise ConfigError(f"--dims-method truncate: the model folder declares no Matryoshka dimension {n} "
                          f"(declared: {list(declared) or 'none'}); a plain cut keeps little of a model not trained "
                          "for it: pass --dims-method pca, or one of the declared dimensions")
    if write.dims_method != "pca" and n in declared:
        return ({c: truncation(d, n) for c, d in columns.items()},
                f"dims: the first {n} dimensions (the model folder declares {n} as a Matryoshka dimension); "
                "pass --dims-method pca for a PCA instead")
    found, n_docs = first_documents_vectors(pipeline(), plan, PROJECTION_DOCS, cfg.encode.block_tokens)
    what = "windows" if cfg.pool.per_window else "documents"
    for name, x in found.items():
        if len(x) < n:
            raise ConfigError(f"--dims {n} is more than the {len(x)} {what} with vectors its projection is fitted on "
                              f"(the first {PROJECTION_DOCS} documents of the inputs); lower --dims to at most "
                              f"{len(x)}, or pass --projection with the output of a larger --dims run")
    projection = {name: fit_pca(x, n) for name, x in found.items()}
    fitted = min(len(x) for x in found.values())
    whose = "" if what == "documents" else "the windows of "
    note = f"dims: a PCA to {n} dimensions, fitted on {whose}the first {n_docs} documents ({fitted} vectors)"
    if n_docs < PROJECTION_DOCS:
        note += (f", fewer than {PROJECTION_DOCS}; pass --projection with a larger run's output to take its "
                 "projection")
    return projection, note


def _declared_dims(cfg: PipelineConfig) -> tuple[int, ...]:
    """The Matryoshka dimensions the run's model folder declares (pipeline.model.st_folder.matryoshka_dims)."""
    from ..model.facts import resolve_model_path
    from ..model.st_folder import matryoshka_dims

    name = cfg.model.model
    folders = [Path(name)] if Path(name).is_dir() else []
    try:
        folders.append(Path(resolve_model_path(name)))
    except Exception:   # an unreachable hub id: the model load says so; nothing is declared here
        pass
    return tuple(sorted({d for f in folders for d in matryoshka_dims(f)}))


def file_projection(path: str, columns: dict[str, int], facts, dims: int | None = None) -> dict[str, Projection]:
    """The projection of an earlier --dims output (``path``: a .parquet file or a DIR/ of parts), from its
    metadata's ``projection`` entry, for this run's ``columns`` ({column: D}) of the model ``facts``.

    Raises:
        ConfigError: the file cannot be read, holds no projection, is of another model (its sha256 or
            hidden size), lacks one of ``columns`` or takes another D, or keeps another N than ``dims``.
    """
    meta = read_metadata(path, "--projection")
    entry = meta.get("projection") or {}
    if not entry.get("columns"):
        raise ConfigError(f"--projection {path!r} holds no projection (it was written without --dims); pass an "
                          "output that `longbert extract --dims N` wrote")
    theirs_model = meta.get("model_sha256")
    if (theirs_model and facts.sha256 and theirs_model != facts.sha256) or meta.get("hidden_size") != facts.hidden_size:
        raise ConfigError(f"--projection {path!r} is the projection of another model ({meta.get('model')!r}, hidden "
                          f"size {meta.get('hidden_size')}); this run's model has hidden size {facts.hidden_size}: "
                          "pass an output of this model, or drop --projection to fit one")
    try:
        theirs = {c["column"]: Projection.from_metadata(c) for c in entry["columns"]}
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"--projection {path!r}: its projection cannot be read ({err}); pass an output that "
                          "`longbert extract --dims N` wrote") from None
    for name, dim in columns.items():
        if name not in theirs or theirs[name].input_dim != dim:
            have = {c: p.input_dim for c, p in theirs.items()}
            raise ConfigError(f"--projection {path!r} projects the columns {have}, this run writes {columns}; pass an "
                              "output of the same features and model")
        if dims is not None and theirs[name].dim != dims:
            raise ConfigError(f"--projection {path!r} keeps {theirs[name].dim} dimensions, but --dims is {dims}; "
                              f"pass --dims {theirs[name].dim}, or drop --dims to take the file's")
    return {name: theirs[name] for name in columns}


def resumed_projection(cfg: PipelineConfig) -> dict[str, Projection] | None:
    """The projection in the manifest of the DIR/ (a folder or an s3:// prefix) a --resume run finishes
    ({column: Projection}); None when the run starts afresh or its manifest keeps none."""
    entry = resumed_metadata(cfg, "projection")
    if not entry.get("columns"):
        return None
    return {c["column"]: Projection.from_metadata(c) for c in entry["columns"]}


def first_documents_vectors(pipe, plan: Plan, n_docs: int, max_tokens: int | None = None
                            ) -> tuple[dict[str, np.ndarray], int]:
    """({column: (m, D) float32 valid vectors}, documents read) of the first ``n_docs`` rows of ``plan``
    run through ``pipe``'s stages before ``rows`` (documents' vectors, or windows' at --level window),
    the model's part in pieces of at most ``max_tokens`` window tokens, as first_documents_centers."""
    vectors: dict[str, list[np.ndarray]] = {}
    for batch in first_batches(pipe, plan, n_docs, max_tokens):
        for name, values in (batch.vectors or {}).items():
            valid = batch.valid if batch.valid is not None else np.ones(len(values), bool)
            x = np.asarray(values, np.float32)[valid]
            vectors.setdefault(name, []).append(x[np.isfinite(x).all(axis=1)])
    dims = dict(pipe.resolution().columns)
    return ({name: np.concatenate(vectors[name]) if name in vectors else np.zeros((0, d), np.float32)
             for name, d in dims.items()}, documents_read(plan, n_docs))
