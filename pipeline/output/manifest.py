"""A DIR/ output's parts and manifest, in any place (pipeline.output.places: a local folder or an S3 prefix):
the part names, a finished local file put in place as a block's pending part (``finish_part``; parts are
written by pipeline.output.parts), the manifest saved while the run goes on and committed at its end (``save_manifest``, ``commit_parts``),
and the checks --resume makes (``read_manifest``, ``load_manifest``, ``part_ok``). The parts sink
(pipeline.output.write.PartsSink) calls these; so may any engine whose workers write their own parts.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import ConfigError
from .places import Place, place_of

MANIFEST = "_manifest.json"          # while the run goes on (pandas and pyarrow skip a leading _)
DONE_MANIFEST = "_manifest.parquet"  # once complete: 0 rows of the output schema, the manifest in its metadata
OLD_MANIFEST = "manifest.json"       # the name before 0.2; still read by --resume and load_features
MANIFEST_KEY = b"longbert_manifest"
MANIFEST_FORMAT = "longbert-parts/1"
LOCK = ".longbert-lock"              # an object-storage output's lock, inside its prefix (pipeline.output.lock)


def part_name(index: int, done: bool) -> str:
    """'_part-00003.parquet.pending' while the run goes on, 'part-00003.parquet' once it is complete.

    The pending name starts with _ (pandas and pyarrow skip it) and does not end in .parquet (a
    'DIR/*.parquet' glob in polars or duckdb does not match it), so no reader takes the parts of an
    unfinished run for the output.
    """
    return f"part-{index:05d}.parquet" if done else f"_part-{index:05d}.parquet.pending"


def read_manifest(path: str | Path | Place) -> dict | None:
    """The manifest of a DIR/ output (a folder or ``s3://BUCKET/PREFIX/``): ``_manifest.parquet``
    (complete), ``_manifest.json`` (running or killed) or an older run's ``manifest.json``; None when
    there is none.

    Raises:
        OSError, ValueError: a manifest that cannot be read. RunError: an S3 failure.
    """
    place = place_of(path)
    names = place.names()
    if DONE_MANIFEST in names:
        return json.loads(pq.read_schema(pa.BufferReader(place.get(DONE_MANIFEST))).metadata[MANIFEST_KEY])
    for name in (MANIFEST, OLD_MANIFEST):
        if name in names:
            return json.loads(place.get(name).decode("utf-8"))
    return None


def load_manifest(path: str | Path | Place) -> dict | None:
    """read_manifest for --resume: None when there is none.

    Raises:
        ConfigError (exit 2): a manifest that is empty or cannot be read, naming the file and the fix.
    """
    place = place_of(path)
    try:
        manifest = read_manifest(place)
        if manifest is not None and not isinstance(manifest.get("parts"), list):
            raise ValueError("it lists no parts")
        return manifest
    except (OSError, ValueError, KeyError, TypeError, AttributeError, pa.ArrowException) as err:
        names = place.names()
        files = [m for m in (DONE_MANIFEST, MANIFEST, OLD_MANIFEST) if m in names]
        file = place.where(files[0]) if files else place.location
        why = "is empty (0 bytes: the run that wrote it was cut off before it reached the disk)" \
            if files and names[files[0]] == 0 else f"cannot be read ({err})"
        raise ConfigError(f"--resume: {file} {why}, so the finished parts cannot be told from unfinished ones; "
                          "pass --overwrite instead of --resume to start the run again") from None


def part_ok(place: Place, part: dict, sizes: dict[str, int] | None = None) -> bool:
    """A part --resume may keep: it exists, has the size the manifest recorded (manifests since 0.3 record
    it), a footer pyarrow reads, and the recorded number of rows. ``sizes``: place.names(), if listed already."""
    sizes = place.names() if sizes is None else sizes
    if part["file"] not in sizes or ("bytes" in part and sizes[part["file"]] != part["bytes"]):
        return False
    try:
        return pq.read_metadata(place.reader(part["file"])).num_rows == part["rows"]
    except (OSError, pa.ArrowException):
        return False


def finish_part(place: Place, spooled: Path, spec, rows: int) -> dict:
    """Put a finished local parquet file (written at ``place.spool(...)``) in ``place`` as the pending part
    of the block of ``spec`` (a BlockSpec: index, first_row, n_rows); returns its manifest entry
    {file, block, first_row, rows, documents, bytes}. The part is whole or absent, never half there."""
    name = part_name(spec.index, done=False)
    size = place.upload(spooled, name)
    return {"file": name, "block": spec.index, "first_row": spec.first_row, "rows": rows,
            "documents": spec.n_rows, "bytes": size}   # rows > documents at --level window


def manifest_data(parts: dict[int, dict], n_blocks: int, fingerprint: dict, schema: pa.Schema,
                  complete: bool) -> dict:
    """The manifest: its format, whether complete, the run's fingerprint, rows, blocks, the parts in block
    order and the run's metadata (the schema's ``longbert``)."""
    ordered = [parts[i] for i in sorted(parts)]
    return {"format": MANIFEST_FORMAT, "complete": complete, "fingerprint": fingerprint,
            "rows": sum(p["rows"] for p in ordered), "blocks": n_blocks, "parts": ordered,
            "longbert": json.loads(schema.metadata[b"longbert"])}


def save_manifest(place: Place, data: dict, schema: pa.Schema, drop_done: bool = True) -> None:
    """Write the manifest ``data`` (manifest_data): complete, as ``_manifest.parquet`` (0 rows of
    ``schema``, the manifest in its metadata; ``_manifest.json`` removed), else as ``_manifest.json``
    (after removing any ``_manifest.parquet`` when ``drop_done``). Each write is atomic."""
    if data["complete"]:
        sink = pa.BufferOutputStream()
        meta = {**schema.metadata, MANIFEST_KEY: json.dumps(data).encode()}
        pq.write_table(schema.with_metadata(meta).empty_table(), sink)
        place.put(DONE_MANIFEST, sink.getvalue().to_pybytes())
        place.delete([MANIFEST])
        place.sync()
        return
    if drop_done:
        place.delete([DONE_MANIFEST])
    place.put(MANIFEST, json.dumps(data, indent=1).encode())


def commit_parts(place: Place, parts: dict[int, dict]) -> int:
    """Give every part its final name (``part-NNNNN.parquet``; the entries in ``parts`` are updated);
    returns the parts' size in bytes. The manifest is the caller's to save, complete, next."""
    for index, part in sorted(parts.items()):
        final = part_name(index, done=True)
        if part["file"] != final:
            place.rename(part["file"], final)
            part["file"] = final
    place.sync()
    sizes = place.names()
    return sum(sizes[p["file"]] for p in parts.values())


# What a DIR/ output holds: its parts (finished, pending, half-written), its manifest (and their temporary
# names) and, on object storage, its lock. Anything else in the folder is the user's.
RUN_FILE = re.compile(r"(_?part-\d+\.parquet(\.pending)?|\.part-\d+(\.\d+)?\.partial|_manifest\.(json|parquet)"
                      r"|manifest\.json|\._manifest\.(json|parquet)\.partial|\.longbert-lock)")


def foreign_files(folder: str | Path | Place) -> list[str]:
    """The names in ``folder`` (a folder or an S3 prefix) that no longbert run writes there (sorted;
    sub-folders end in /).

    Example: a run's folder with a README.txt added -> ["README.txt"]; a run's own folder -> [].
    """
    return sorted(name for name in place_of(folder).names() if not RUN_FILE.fullmatch(name))


def run_files(names: dict[str, int] | list[str]) -> list[str]:
    """The names among ``names`` that a longbert run wrote (RUN_FILE), the lock aside."""
    return sorted(n for n in names if RUN_FILE.fullmatch(n) and n != LOCK)
