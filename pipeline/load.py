"""Load stage: the device, the weights (transformers ``from_pretrained``), int8 (pipeline.int8), and the
early-stop view of a model that runs only the layers a run reads.

Called by pipeline.encode.Encoder.from_config; what is loaded was checked first by pipeline.model.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
from pathlib import Path

import torch

from .config import ModelConfig, PoolConfig
from .errors import ConfigError, ModelError
from .model import first_line, is_local, offline_if_local, quiet_transformers, resolve_model_path


def resolve_device(device: str) -> torch.device:
    """'auto' -> cuda if available, else cpu. Raises ConfigError for a device this machine lacks."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"--device {device}: no CUDA GPU is visible to torch; use --device cpu or auto")
    if device == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ConfigError("--device mps: MPS is not available here; use --device cpu or auto")
    return torch.device(device)


def load_model(cfg: ModelConfig, need_pooler: bool, device: torch.device):
    """Load the encoder with transformers ``AutoModel.from_pretrained`` (SDPA attention), in eval mode.

    safetensors are used where the checkpoint has them; a pickle-only checkpoint (pytorch_model.bin)
    loads only with ``cfg.allow_pickle`` (unpickling can run code). Never trust_remote_code.

    Raises:
        ModelError: missing/unfetchable model, pickle-only without --allow-pickle, no pooler weights
            when ``need_pooler``.
    """
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own bar counts documents
    path = resolve_model_path(cfg.model)
    use_safetensors: bool | None = True
    if is_local(path):
        files = {p.name for p in Path(path).iterdir()}
        has_st = any(f.endswith(".safetensors") or f.endswith(".safetensors.index.json") for f in files)
        if not has_st:
            if not cfg.allow_pickle:
                raise ModelError(f"--model {cfg.model!r} has only pickle weights (no .safetensors); loading a pickle "
                                 "can run arbitrary code. Convert it to safetensors, or pass --allow-pickle "
                                 "if you trust its source")
            use_safetensors = False
    elif cfg.allow_pickle:
        use_safetensors = None  # prefer safetensors, fall back to pickle
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[cfg.dtype]
    kwargs = dict(trust_remote_code=False, use_safetensors=use_safetensors, output_loading_info=True,
                  dtype=torch.float32)
    try:
        with offline_if_local(path), quiet_transformers():
            try:
                model, info = AutoModel.from_pretrained(path, attn_implementation="sdpa", **kwargs)
            except ValueError as err:  # a family without an SDPA path (transformers says so): its default
                if not any(s in str(err).lower() for s in ("sdpa", "scaled_dot_product_attention")):
                    raise
                model, info = AutoModel.from_pretrained(path, **kwargs)
    except (OSError, ValueError) as err:
        raise ModelError(f"cannot load --model {cfg.model!r} ({first_line(err)}); no model hub may be reachable: "
                         "pass a local path with --model DIR") from None
    if need_pooler:  # normally refused before loading (check_pooler); this catches pickle-only checkpoints
        missing = [k for k in info.get("missing_keys", []) if "pooler" in k]
        if missing or getattr(model, "pooler", None) is None:
            raise ModelError(f"--pooling pooler: --model {cfg.model!r} cannot serve it (its checkpoint has no "
                             f"pooler weights: {', '.join(missing) or 'no pooler layer'}); use --pooling cls or mean")
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

    Returns:
        (model or its truncated view, pools), the pools unchanged when the whole model runs.
    """
    n_layers = int(getattr(model.config, "num_hidden_layers", 0) or 0)
    deepest = 0
    for p in pools:
        for layer in (n_layers,) if p.pooling == "pooler" else p.layers:
            deepest = max(deepest, layer if layer >= 0 else n_layers + 1 + layer)
    path = _layer_list(model, n_layers)
    if path is None:
        return model, pools
    _share_output_hooks(model)
    # A model that changes the last layer's output after its layer list (ModernBERT's final norm) hands
    # that change to the view's last kept layer; one layer more keeps the wanted one intact.
    for depth in (max(deepest, 1), max(deepest, 1) + 1):
        if depth >= n_layers:
            return model, pools
        view = _truncated_view(model, path, depth)
        if _same_hidden_state(model, view, deepest):
            positive = tuple(dataclasses.replace(p, layers=tuple(x if x >= 0 else n_layers + 1 + x for x in p.layers))
                             for p in pools)
            return view, positive
    return model, pools


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
    clone._modules = dict(module._modules)
    return clone
