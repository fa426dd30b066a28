"""int8 on the CPU: every nn.Linear of a loaded model becomes an Int8Linear (oneDNN's int8 matrix product).
Weights are int8 per output channel; activations are
quantized per forward batch at run time to the full unsigned 8-bit range (dynamic quantization).
The kernel is ``torch.ops.onednn.qlinear_pointwise`` on plain uint8/int8 tensors: the op torch.compile's
x86 int8 path lowers to. It replaces ``torch.ao.quantization.quantize_dynamic`` (and fbgemm's
quantized tensors), which PyTorch marks as deprecated. Measured on an AVX2 CPU (docs/hardware.md):
fbgemm's ``quantized.linear_dynamic`` op, called directly, is 0-10% faster on one thread but its weights
must be a quantized tensor, whose creation warns that it is deprecated; torchao 0.18's
Int8DynamicActivationInt8WeightConfig ran 25x slower than float32 without torch.compile.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..errors import ConfigError


class QuantizedInput:
    """The last input quantized, kept for the next Linear that reads the very same tensor: an attention
    layer's query, key and value projections read one hidden state, so it is quantized once, not three
    times (the quantization passes cost about as much as the int8 products on an AVX2 CPU).

    The passes write into two scratch buffers kept between calls (float32 and uint8, grown to the
    largest input seen: 5 bytes per input value, 63 MB for 8,192 positions x 1,536). A fresh buffer of
    that size costs the kernel's page faults on every call: 46 ms against 17 ms for one 8,192 x 1,536
    input on one AVX2 core, about a tenth of an int8 forward pass (torch.profiler, bundled model)."""

    def __init__(self):
        self.source: Tensor | None = None
        self.result: tuple[Tensor, float, int] | None = None
        self.floats = torch.empty(0)                        # (capacity,) float32 scratch
        self.codes = torch.empty(0, dtype=torch.uint8)      # (capacity,) uint8: the result's storage

    def quantize(self, x: Tensor) -> tuple[Tensor, float, int] | None:
        """(..., k) float -> ((m, k) uint8, scale, zero point), m = x.numel() / k: x ~ scale * (q - zero),
        q in [0, 255], one scale for the whole tensor covering [min(x, 0), max(x, 0)]. The same tensor
        object again (held here, so its id cannot be reused) returns the kept result. None when x holds
        a non-finite value (no scale exists; the caller computes in float32). The uint8 result is a view
        of the scratch buffer: valid until the next call with another tensor."""
        if self.source is x and self.result is not None:
            return self.result
        flat = x.reshape(-1, x.shape[-1])                                        # (m, k)
        lo, hi = torch.aminmax(flat)
        lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)                     # 0 exactly representable
        if not math.isfinite(hi - lo):
            return None
        scale = max((hi - lo) / 255.0, 1e-12)
        zero = round(-lo / scale)
        if self.codes.numel() < flat.numel():
            self.source = self.result = None  # the old result's storage goes with the old buffer
            self.floats = torch.empty(flat.numel())
            self.codes = torch.empty(flat.numel(), dtype=torch.uint8)
        buf = self.floats[:flat.numel()].view(flat.shape)
        q = self.codes[:flat.numel()].view(flat.shape)
        # + 0.5, then the cast truncates: round half up, in 4 passes over the tensor, none allocating
        torch.mul(flat, 1.0 / scale, out=buf).add_(zero + 0.5).clamp_(0.0, 255.0)
        q.copy_(buf)
        self.source, self.result = x, (q, scale, zero)
        return self.result


class Int8Linear(nn.Module):
    """y = x W^T + b with W in int8 (one scale per output channel) and x quantized per call.

    Weights: symmetric, in [-levels, levels]: 127, or 63 on a CPU without int8 dot-product
    instructions (VNNI), where the kernel adds pairs of uint8 x int8 products in 16 bits, which
    saturate with 8-bit weights (default model, 5 repeated-word documents: mean cosine 0.979 with
    127, 0.985 with 63, 0.987 computed exactly).
    Activations: one asymmetric uint8 scale and zero point per call, over the whole input (all the
    windows of a forward batch), covering [min(x, 0), max(x, 0)] with 256 levels (the "full range":
    no 7-bit reduce_range). So a vector depends slightly on its batch neighbours (``--batch-size 1``
    removes that). Source: PyTorch's dynamic quantization recipe (Linear, per-channel qint8 weights).
    """

    def __init__(self, linear: nn.Linear, shared: QuantizedInput | None = None, post_op: str = "none",
                 levels: int = 127):
        super().__init__()
        self.shared = shared or QuantizedInput()
        self.post_op = post_op   # "none", or "gelu": erf GELU applied by the kernel to its float32 output
        w = linear.weight.detach().float()                                        # (out, in)
        scale = (w.abs().amax(dim=1) / levels).clamp(min=1e-12)                   # (out,)
        q = torch.round(w / scale[:, None]).clamp(-levels, levels).to(torch.int8)  # (out, in)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("w_scale", scale, persistent=False)
        self.register_buffer("w_zero", torch.zeros(self.out_features, dtype=torch.int32), persistent=False)
        self.register_buffer("packed", torch.ops.onednn.qlinear_prepack(q, None), persistent=False)
        self.register_buffer("packed_weight", q, persistent=False)  # (out, in) int8, for non-finite inputs
        bias = linear.bias.detach().float() if linear.bias is not None else None
        self.register_buffer("bias", bias, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        """x (..., in_features) float -> (..., out_features) float32."""
        quantized = self.shared.quantize(x)
        if quantized is None:  # a non-finite input: float32 with the int8 weights, so the window stays non-finite
            weight = self.packed_weight.float() * self.w_scale[:, None]               # (out, in)
            y = nn.functional.linear(x.float(), weight, self.bias)
            return nn.functional.gelu(y) if self.post_op == "gelu" else y
        qx, scale, zero = quantized                                                   # (m, in) uint8
        y = torch.ops.onednn.qlinear_pointwise(qx, scale, zero, self.packed, self.w_scale, self.w_zero,
                                               self.bias, 1.0, 0, torch.float32, self.post_op, [],
                                               "none" if self.post_op == "gelu" else "")
        return y.reshape(*x.shape[:-1], self.out_features)                        # (..., out)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 (oneDNN)"


def weight_levels() -> int:
    """The int8 weights' levels on this CPU: 127, or 63 without int8 dot-product instructions (VNNI:
    amx_int8, avx512_vnni, avx_vnni), where the kernel's 16-bit pair sums would saturate (Int8Linear)."""
    from ..chip import VNNI_FLAGS, detect

    return 127 if any(f in detect("cpu").flags for f in VNNI_FLAGS) else 63


def quantize_label(quantize: str) -> str:
    """--quantize as the window store key and --resume record it: "none", or "int8-w127" / "int8-w63" (the
    weight levels this CPU's int8 kernel takes, which change the vectors). Example: "int8" on an AVX2-only
    CPU -> "int8-w63"."""
    return quantize if quantize == "none" else f"{quantize}-w{weight_levels()}"


def quantize_int8(model: nn.Module) -> nn.Module:
    """Replace every nn.Linear of ``model`` (in place) by an Int8Linear; embeddings and LayerNorms
    stay float32. Returns the model.

    Raises:
        ConfigError: this torch build has no oneDNN (mkldnn) CPU backend to run int8 on.
    """
    if not torch.backends.mkldnn.is_available() or not hasattr(torch.ops.onednn, "qlinear_pointwise"):
        raise ConfigError("--quantize int8 needs PyTorch's oneDNN CPU backend, which this torch build lacks; "
                          "drop --quantize (or use --dtype auto)")
    levels = weight_levels()
    shared = QuantizedInput()  # one per model: forward passes run one after another
    for parent in list(model.modules()):
        fuse = _fusable_gelu(parent)
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, Int8Linear(child, shared, "gelu" if fuse and name == "dense" else "none", levels))
        if fuse:
            parent.intermediate_act_fn = nn.Identity()  # applied inside the dense layer's kernel now
    return model


def _fusable_gelu(module: nn.Module) -> bool:
    """True for a BERT-style intermediate block, ``act(dense(x))`` with act the exact (erf) GELU:
    transformers' GELUActivation on torch's gelu. Its GELU then runs in the int8 kernel (one pass
    over the (windows x positions, intermediate size) output fewer)."""
    act = getattr(module, "intermediate_act_fn", None)
    dense = getattr(module, "dense", None)
    if not isinstance(dense, nn.Linear) or type(act).__name__ != "GELUActivation":
        return False
    forward = type(module).forward
    return getattr(act, "act", None) is nn.functional.gelu and "intermediate_act_fn" in forward.__code__.co_names
