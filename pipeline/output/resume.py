"""--resume's rule: a run may continue only a run of the same options, input bytes, plan of blocks,
model weights and stages; the message names what differs."""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import ConfigError


def check_same_run(old: dict, new: dict, path: Path | str) -> None:
    """--resume may only continue a run of the same options, input bytes, plan of blocks, model weights,
    stages and prompt (fingerprints as ``{"config", "inputs", "plan", "model", "stages", "prompt"}``; a run written before
    plans or model hashes were kept is compared without them; no "stages": the built-in ones).

    Raises:
        ConfigError: naming what differs from the run that wrote ``path``.
    """
    changed = [k for k in ("config", "inputs") if old.get(k) != new[k]]
    for key in ("plan", "model", "quantize"):   # runs written before a key existed are compared without it
        if not changed and key in old and old[key] != new.get(key):
            changed = [key]
    if not changed and old.get("stages") != new.get("stages"):   # absent: the built-in stages
        changed = ["stages"]
    if not changed and old.get("prompt") != new.get("prompt"):   # absent: no prompt
        changed = ["prompt"]
    if changed:
        names = {"config": "the options", "inputs": "the input files", "plan": "the blocks the inputs are cut into",
                 "model": "the model's weights", "stages": "the pipeline's stages",
                 "quantize": "the int8 weight levels (this CPU's int8 kernel)",
                 "prompt": "the model folder's prompt settings"}
        what = " and ".join(names[k] for k in changed)
        which = option_changes(old.get("options"), new.get("options")) if "config" in changed else ""
        if changed in (["model"], ["stages"], ["quantize"]):   # sha256 of the weights, or the stage labels, then and now
            was, now = (old.get(changed[0]) or "the built-in stages", new.get(changed[0]) or "the built-in stages")
            which = f" ({was} then, {now} now)"
        if changed == ["prompt"]:
            was, now = (repr(d["prompt"]["text"]) if d.get("prompt") else "no prompt" for d in (old, new))
            which = f" ({was} then, {now} now)"
        raise ConfigError(f"--resume: {what} differ from the run that wrote {path}{which}; run with the same "
                          "options and inputs, or pass --overwrite to start again")


def option_changes(old: dict | None, new: dict | None) -> str:
    """' (--strategy: 'head' then, 'chunk' now; ...)' for the options two runs set differently, from the
    option dicts their manifests keep (PipelineConfig.fingerprint_options); '' when the old run kept none."""
    if not old or not new:
        return ""

    def flat(d: dict, prefix: str = "") -> dict:
        out = {}
        for key, value in d.items():
            if isinstance(value, dict):
                out.update(flat(value, f"{prefix}{key}."))
            else:
                out[f"{prefix}{key}"] = value
        return out

    a, b = flat(json.loads(json.dumps(old))), flat(json.loads(json.dumps(new)))  # tuples as lists
    diffs = [f"--{key.rsplit('.', 1)[-1].replace('_', '-')}: {a.get(key)!r} then, {b.get(key)!r} now"
             for key in sorted(set(a) | set(b)) if a.get(key) != b.get(key)]
    return f" ({'; '.join(diffs)})" if diffs else ""
