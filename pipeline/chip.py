"""Chip detection: what the device of a run can do fast, found once per run without loading weights.
On a CPU it reads the instruction-set flags the
kernel lists in /proc/cpuinfo (Linux); elsewhere, or when that file cannot be read, it falls back to
``torch.backends.cpu.get_cpu_capability()`` (which names AVX2 / AVX512 but not the bfloat16 units).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

# CPU flags (as /proc/cpuinfo spells them) that name a fast path, in the order they are reported.
# amx_bf16 / avx512_bf16: bfloat16 matrix products (oneDNN); amx_int8 / avx512_vnni: int8 dot products.
CPU_FLAGS = ("amx_bf16", "avx512_bf16", "amx_int8", "avx512_vnni", "avx_vnni", "avx512f", "avx2")
BF16_FLAGS = ("amx_bf16", "avx512_bf16")
VNNI_FLAGS = ("amx_int8", "avx512_vnni", "avx_vnni")  # int8 dot products summed in 32 bits (pipeline.model.int8)

# Measured on a CPU with amx_bf16 avx512_bf16 amx_int8 avx512_vnni (the bundled model, `extract
# --strategy head --threads 1` on 150 labelled documents, CPU seconds of the model part; docs/hardware.md).
BF16_SPEEDUP = 2.5
BF16_COSINE = 0.9999


@dataclass(frozen=True)
class Chip:
    """What one device offers. Example: an AVX2-only CPU ->
    Chip(device="cpu", name="AMD EPYC 7B13", flags=("avx2",), bf16_fast=False, capability=None)."""

    device: str                 # "cpu" | "cuda" | "mps" (the type only, no index)
    name: str                   # CPU model name or GPU name; "" when unknown
    flags: tuple[str, ...]      # the CPU_FLAGS found, in CPU_FLAGS order; () on GPUs
    bf16_fast: bool             # a bfloat16 path faster than float32 (CUDA with bf16, AMX-BF16, AVX-512 BF16)
    capability: str | None = None  # torch's CPU capability when the flags came from torch, else None

    @property
    def recommended_dtype(self) -> str:
        """The dtype ``--dtype auto`` picks: "bfloat16" with a fast bfloat16 path, else "float32"."""
        return "bfloat16" if self.bf16_fast else "float32"

    def describe(self) -> str:
        """One line, e.g. "cpu (AMD EPYC 7B13; avx2; no fast bfloat16 path)"."""
        what = [self.name] if self.name else []
        if self.device == "cpu":
            what.append(" ".join(self.flags) if self.flags else f"torch capability {self.capability or 'unknown'}")
        what.append("fast bfloat16" if self.bf16_fast else "no fast bfloat16 path")
        return f"{self.device} ({'; '.join(what)})"


def parse_cpuinfo(text: str) -> tuple[str, tuple[str, ...]]:
    """(model name, the CPU_FLAGS present) from the text of /proc/cpuinfo (its first processor).

    Example: "model name : Xeon\\nflags : fpu avx2 amx_bf16\\n" -> ("Xeon", ("amx_bf16", "avx2")).
    """
    name, flags = "", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not name:
            name = value.strip()
        elif key == "flags" and not flags:
            flags = set(value.split())
    return name, tuple(f for f in CPU_FLAGS if f in flags)


def cpu_chip(cpuinfo: str | None = None) -> Chip:
    """The CPU's Chip, from ``cpuinfo`` (the text of /proc/cpuinfo; read here when None).

    Without /proc/cpuinfo (macOS, Windows) the flags are unknown and torch's capability is reported;
    bfloat16 is then not called fast (float32 is the safe choice).
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
    name, flags = parse_cpuinfo(cpuinfo)
    capability = None
    if not flags:
        import torch

        capability = torch.backends.cpu.get_cpu_capability()
    return Chip(device="cpu", name=name, flags=flags, bf16_fast=any(f in flags for f in BF16_FLAGS),
                capability=capability)


def device_type(device: str) -> str:
    """The device type a run's ``--device`` means here: "auto" -> "cuda" when torch sees a GPU, else
    "cpu"; "cuda:1" -> "cuda". Imports torch only for "auto"."""
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return device.split(":")[0]


@functools.lru_cache(maxsize=None)
def detect(device: str = "auto") -> Chip:
    """The Chip of ``device`` (auto | cpu | cuda | cuda:N | mps), found once per process (cached).

    CUDA: the GPU's name and ``torch.cuda.is_bf16_supported()``; MPS: bfloat16 not called fast.
    No weights are loaded; only torch is imported (for auto, cuda and mps).
    """
    kind = device_type(device)
    if kind == "cuda":
        import torch

        if not torch.cuda.is_available():
            return Chip(device="cuda", name="", flags=(), bf16_fast=False)
        index = int(device.split(":")[1]) if ":" in device else torch.cuda.current_device()
        return Chip(device="cuda", name=torch.cuda.get_device_name(index), flags=(),
                    bf16_fast=bool(torch.cuda.is_bf16_supported()))
    if kind == "mps":
        return Chip(device="mps", name="Apple GPU", flags=(), bf16_fast=False)
    return cpu_chip()


def auto_dtype(device: str, quantize: str = "none") -> str:
    """What ``--dtype auto`` means for this run: "bfloat16" on a device with a fast bfloat16 path,
    "float32" elsewhere and always with ``--quantize int8`` (int8 runs on a float32 model)."""
    if quantize != "none":
        return "float32"
    return detect(device).recommended_dtype


def bf16_note(device: str, dtype: str, quantize: str) -> str | None:
    """The summary's note for a float32 run on a CPU with a fast bfloat16 path, else None.

    Example: -> "this CPU has a fast bfloat16 path (amx_bf16): --dtype auto ran the model part about
    2.5x faster at a cosine >= 0.9999 to float32 on such a CPU".
    """
    if dtype != "float32" or quantize != "none" or device_type(device) != "cpu":
        return None
    chip = detect(device)
    if not chip.bf16_fast:
        return None
    units = " ".join(f for f in chip.flags if f in BF16_FLAGS)
    return (f"this CPU has a fast bfloat16 path ({units}): --dtype auto ran the model part about "
            f"{BF16_SPEEDUP}x faster at a cosine >= {BF16_COSINE} to float32 on such a CPU")
