"""What an interrupted run (Ctrl-C, SIGTERM) leaves at its output, in the CLI's last line."""
from __future__ import annotations

from pathlib import Path

from ..errors import PipelineError
from ..options.config import PipelineConfig
from .places import place_of
from .write import read_manifest


def interrupted_message(cfg: PipelineConfig | None) -> str:
    """The line an interrupted ``extract`` prints: what its output holds now, and how to go on.

    Args:
        cfg: the run's config; None when the interrupt came before the options were read.

    Returns:
        e.g. "Interrupted: 8 of 10 parts of out/parts/ were kept; run the same command with --resume to
        do the other 2." for a DIR/ output (parts counted from its manifest, those still on disk), or
        "Interrupted: no output was written (out/f.parquet is moved into place only when the run
        completes; a file already there is left as it was); run the command again." for a file.
    """
    if cfg is None:
        return "Interrupted before the run started: nothing was written."
    if not cfg.write.is_directory:
        out = Path(cfg.write.output)
        return (f"Interrupted: no output was written ({out} is moved into place only when the run completes; "
                "a file already there is left as it was); run the command again.")
    place = place_of(cfg.write.output)
    out = place.location
    try:
        names = place.names()
        manifest = (read_manifest(place) if names else None) or {}
        parts = [p for p in manifest.get("parts", []) if p["file"] in names]
    except (OSError, ValueError, KeyError, TypeError, PipelineError):  # a manifest being replaced, or damaged; S3 failing
        manifest, parts = {}, []
    total = manifest.get("blocks")
    if manifest.get("complete"):
        return f"Interrupted after the run completed: {out}/ holds all {len(parts)} parts."
    if not parts:
        return f"Interrupted: no part of {out}/ was finished; run the command again."
    if not isinstance(total, int) or total < len(parts):   # a manifest written before it counted the blocks
        return f"Interrupted: {len(parts)} parts of {out}/ were kept; run the same command with --resume to do the rest."
    return (f"Interrupted: {len(parts)} of {total} parts of {out}/ were kept; run the same command with --resume "
            f"to do the other {total - len(parts)}.")
