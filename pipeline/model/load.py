"""Load stage: the device, the weights (transformers ``from_pretrained``), int8 (pipeline.model.int8), and the
early-stop view of a model that runs only the layers a run reads.

What is loaded was checked first by pipeline.model.facts.
"""
from __future__ import annotations

import copy
import dataclasses
import pickle
import functools
from pathlib import Path

import torch
from safetensors import SafetensorError

from .checkpoint import Expected, check_keys, stored_tensors, weight_files
from ..options.config import ModelConfig, PoolConfig
from ..errors import ConfigError, ModelError
from .gc_pause import paused_gc
from .facts import (FAMILIES, HUB_FIX, checkpoint_folder, first_line, is_local, offline_if_local, quiet_transformers,
                    resolve_model_path)

# what loading a damaged checkpoint raises in transformers, safetensors and torch (a cut pickle, a tensor
# of the wrong size); turned into ModelError at the call
LOAD_ERRORS = (OSError, ValueError, RuntimeError, KeyError, EOFError, pickle.UnpicklingError, SafetensorError,
               TypeError, AttributeError, IndexError, ZeroDivisionError)


def resolve_device(device: str) -> torch.device:
    """'auto' -> cuda if available, else cpu. Raises ConfigError for a device this machine lacks."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"--device {device}: no CUDA GPU is visible to torch; use --device cpu or auto")
    if device == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ConfigError("--device mps: MPS is not available here; use --device cpu or auto")
    return torch.device(device)


@paused_gc()
def load_model(cfg: ModelConfig, need_pooler: bool, device: torch.device):
    """Load the encoder with transformers ``AutoModel.from_pretrained`` (SDPA attention), in eval mode.

    safetensors are used where the checkpoint has them; a pickle-only checkpoint (pytorch_model.bin)
    loads only with ``cfg.allow_pickle`` (unpickling can run code). Never trust_remote_code.

    Every parameter must come from the checkpoint (pipeline.model.checkpoint.check_keys on the safetensors
    headers, or on transformers' loading report for pickle and hub checkpoints): a model with a random
    weight is never returned. A pooler that is absent and not needed, task heads and buffers are benign.

    Raises:
        ModelError: missing/unfetchable model, no weights, pickle-only without --allow-pickle, a damaged
            checkpoint (the file named, never hub advice for a local folder), weights missing, foreign or
            of another shape than config.json gives, no pooler weights when ``need_pooler``.
    """
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own bar counts documents
    path = resolve_model_path(cfg.model)
    use_safetensors = _weights_format(path, cfg)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[cfg.dtype]
    kwargs = dict(trust_remote_code=False, use_safetensors=use_safetensors, output_loading_info=True,
                  dtype=torch.float32)
    folder = checkpoint_folder(path)
    where = ", ".join(p.name for p in weight_files(folder)) if folder is not None else "the checkpoint"
    # names and shapes are checked against the model built from config.json, after transformers read the
    # weights (mismatched ones are set aside, not raised) and before any row is read
    kwargs["ignore_mismatched_sizes"] = True
    try:
        with offline_if_local(path), quiet_transformers():
            stored = stored_tensors(folder, cfg.model) if folder is not None else None
            try:
                model, info = AutoModel.from_pretrained(path, attn_implementation="sdpa", **kwargs)
            except ValueError as err:  # a family without an SDPA path (transformers says so): its default
                if not any(s in str(err).lower() for s in ("sdpa", "scaled_dot_product_attention")):
                    raise
                model, info = AutoModel.from_pretrained(path, **kwargs)
    except LOAD_ERRORS as err:
        fix = f"{path} holds a damaged checkpoint or a config.json that does not fit it; download or copy the " \
              "model folder again" if is_local(path) else HUB_FIX
        raise ModelError(f"cannot load --model {cfg.model!r} ({first_line(err)}); {fix}") from None
    expected = expected_tensors(model)
    check_keys(stored if stored is not None else reported_tensors(info, expected), expected, need_pooler, where,
               cfg.model)
    if need_pooler and getattr(model, "pooler", None) is None:  # normally refused before loading (check_pooler)
        raise ModelError(f"--pooling pooler: --model {cfg.model!r} cannot serve it (no pooler layer); use "
                         "--pooling cls or mean")
    model.eval()
    if cfg.quantize == "int8":
        if device.type != "cpu":
            raise ConfigError(f"--quantize int8 runs on the CPU only; drop it or use --device cpu (got {device})")
        from .int8 import quantize_int8

        model = quantize_int8(model)
    model = model.to(device=device, dtype=dtype)
    if dtype != torch.float32:  # the float32 recompute of a non-finite window needs the weights unrounded
        model.load_float32 = functools.partial(load_model, dataclasses.replace(cfg, dtype="float32"), need_pooler, device)
    return model


def _weights_format(path: str, cfg: ModelConfig) -> bool | None:
    """use_safetensors for from_pretrained: True, False (a local pickle-only folder with --allow-pickle),
    None (a hub id with --allow-pickle: safetensors first).

    Raises:
        ModelError: a local folder without weight files, or with pickle weights only and no --allow-pickle.
    """
    if not is_local(path):
        return None if cfg.allow_pickle else True
    files = weight_files(Path(path))
    if not files:
        raise ModelError(f"--model {cfg.model!r}: {path} holds no weights (model.safetensors, or its shards and "
                         "model.safetensors.index.json); download or copy the model folder again")
    if not any(".safetensors" in p.name for p in files):
        if not cfg.allow_pickle:
            raise ModelError(f"--model {cfg.model!r} has only pickle weights (no .safetensors); loading a pickle "
                             "can run arbitrary code. Convert it to safetensors, or pass --allow-pickle "
                             "if you trust its source")
        return False
    return True


def expected_tensors(model) -> Expected:
    """What a model built from its config.json holds: its parameters' names and shapes (as built, before
    any weight was copied in), its top-level modules and buffers, its base-model prefix and pooler."""
    family = FAMILIES.get(getattr(model.config, "model_type", ""))
    return Expected(shapes={k: tuple(p.shape) for k, p in model.named_parameters()},
                    modules=frozenset(n for n, _ in model.named_children()),
                    buffers=frozenset(n for n, _ in model.named_buffers()),
                    prefix=str(getattr(model, "base_model_prefix", "") or ""),
                    pooler=family.pooler_weights if family else ())


def reported_tensors(info: dict, expected: Expected) -> dict:
    """The stored tensors as transformers' loading report tells them, for a checkpoint whose headers were
    not read (pickle, a hub download): {name: (None, shape)}; a mismatched one with its stored shape."""
    missing = set(info.get("missing_keys", ()))
    stored = {k: (None, shape) for k, shape in expected.shapes.items() if k not in missing}
    stored.update({k: (None, ()) for k in info.get("unexpected_keys", ())})
    for key, shape, *_ in info.get("mismatched_keys", ()):
        stored[key] = (None, tuple(shape))
    return stored


# A batch that already holds this many padded tokens is closed early rather than take a window more
# than EARLY_CLOSE_SHORTER shorter than its longest (whose padding would be wasted work).
_LAYER_LISTS = ("encoder.layer", "transformer.layer", "encoder.layers", "layers")


def stop_early(model, pools: tuple[PoolConfig, ...]):
    """A view of ``model`` that runs only the layers the pools read, and the pools re-indexed for it.

    When no pool reads the last layer (e.g. only -2, or 0..3 of 6), the forward pass stops after the
    deepest layer needed: a shallow copy of the model whose layer list is the model's own first k
    layers (the same modules and weights, no copy of a tensor, no attention code of ours). Its
    pooler is dropped (the pooler reads the last layer, so no such pool is asked for). Layer
    indices become positive (hidden_states[i] of the view equals the full model's for i <= k).
    The view is checked once against the full model on a short probe input; a model that alters
    its last layer's output (ModernBERT's final norm) keeps one layer more, and models without a
    recognised layer list (_LAYER_LISTS, e.g. ALBERT's one shared layer) run whole.

    Args:
        model: a loaded encoder whose config has num_hidden_layers = L.
        pools: the run's pools; pooling "pooler" counts as reading layer L.

    When no pool asks for the pooler, the pooler is dropped from the view too, even when every layer runs.

    Returns:
        (model or its truncated view, pools), the pools unchanged when the whole model runs.
    """
    n_layers = int(getattr(model.config, "num_hidden_layers", 0) or 0)
    deepest = 0
    for p in pools:
        for layer in (n_layers,) if p.pooling == "pooler" else p.layers:
            deepest = max(deepest, layer if layer >= 0 else n_layers + 1 + layer)
    _share_output_hooks(model)   # before any view is made, so that every view shares them
    whole = model if any(p.pooling == "pooler" for p in pools) else _without_pooler(model)
    path = _layer_list(model, n_layers)
    if path is None:
        return whole, pools
    # A model that changes the last layer's output after its layer list (ModernBERT's final norm) hands
    # that change to the view's last kept layer; one layer more keeps the wanted one intact.
    for depth in (max(deepest, 1), max(deepest, 1) + 1):
        if depth >= n_layers:
            return whole, pools
        view = _truncated_view(model, path, depth)
        if _same_hidden_state(model, view, deepest):
            positive = tuple(dataclasses.replace(p, layers=tuple(x if x >= 0 else n_layers + 1 + x for x in p.layers))
                             for p in pools)
            return view, positive
    return whole, pools


def _without_pooler(model):
    """The model itself, or, when it has a pooler (BERT's dense + tanh on [CLS]), a shallow view without
    it: no pool asks for the pooler's output, so its matrix product per batch is wasted. The full model
    keeps its pooler for another run that asks for it."""
    if getattr(model, "pooler", None) is None:
        return model
    view = _shallow(model)
    view.pooler = None
    return view


def _share_output_hooks(model) -> None:
    """Install transformers' output-capturing hooks (transformers >= 5 records hidden_states with
    forward hooks on the layer modules) on the model before it is copied, so the view shares them and
    its flag instead of adding a second set to the same layers. A no-op on versions without them."""
    try:
        from transformers.utils.output_capturing import maybe_install_capturing_hooks
    except ImportError:
        return
    try:
        maybe_install_capturing_hooks(model)
    except Exception:  # noqa: BLE001 - a model without recordable outputs: hidden_states come from its forward
        pass


def _same_hidden_state(model, view, index: int) -> bool:
    """True when the view's hidden_states[index] equals the full model's on a short probe input (8 ids)."""
    param = next(model.parameters())
    vocab = int(getattr(model.config, "vocab_size", 100) or 100)
    ids = (torch.arange(8, device=param.device) % max(vocab - 1, 1) + 1).unsqueeze(0)   # (1, 8)
    mask = torch.ones_like(ids)
    with torch.inference_mode():
        full = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[index]
        short = view(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[index]
    return full.shape == short.shape and bool(torch.allclose(full.float(), short.float(), atol=1e-3, rtol=1e-3))


def _layer_list(model, n_layers: int) -> str | None:
    """The dotted attribute path of the model's nn.ModuleList of its n_layers layers, or None."""
    for path in _LAYER_LISTS:
        obj = model
        for part in path.split("."):
            obj = getattr(obj, part, None)
        if isinstance(obj, torch.nn.ModuleList) and len(obj) == n_layers:
            return path
    return None


def _truncated_view(model, path: str, depth: int):
    """Shallow copies along ``path`` (the model and each parent module), the last holding a ModuleList
    of the first ``depth`` layers; the original model is left untouched."""
    parts = path.split(".")
    view = _shallow(model)
    view.config = copy.copy(model.config)
    view.config.num_hidden_layers = depth
    parent = view
    for part in parts[:-1]:
        child = _shallow(getattr(parent, part))
        setattr(parent, part, child)
        parent = child
    layers = getattr(parent, parts[-1])
    setattr(parent, parts[-1], torch.nn.ModuleList(list(layers)[:depth]))
    if getattr(view, "pooler", None) is not None:
        view.pooler = None
    return view


def _shallow(module: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``module`` that shares parameters and child modules but has its own child table."""
    clone = copy.copy(module)
    clone._modules = dict(module._modules)   # torch's child table: no public way to copy it (tests/test_layering.py)
    return clone
