"""What ``longbert stats`` measures on the model before it tokenizes the corpus: the forward speed of full
windows and the peak memory of the model part (the runtime, the weights, one forward batch), and the window
content it times. Called by pipeline.engine.stats.corpus_stats.
"""
from __future__ import annotations

import time

import numpy as np

from ..errors import ConfigError
from ..options.config import PipelineConfig
from ..read import read_blocks
from ..text.tokenize import tokenize_block

_SPEED_WINDOWS = 4   # full-size windows per timed forward pass when measuring the speed


def measure_speed(cfg: PipelineConfig, tokenizer, sample_ids: np.ndarray) -> tuple[float, str, tuple[int, int, int]]:
    """Full-size windows per second of the configured model and device (about 2-6 s on a CPU), and the
    peak memory of a forward batch of one window and of one as large as extract's.

    Loads the model (pipeline.model.encode.Encoder), runs an untimed pass of one window of max_length
    positions, then one of as many as the run's batch budget holds (16 on a CPU by default; the peak
    memory is read after each), then times forward passes of 4 such windows (content: ``sample_ids``
    repeated) until 1 s has passed or 5 passes ran. A shared or busy machine reads slower than it runs alone.

    Returns:
        (windows per second, the device it ran on, e.g. "cpu", (this process's peak resident bytes after
        the one-window pass: runtime and weights, after the full batch, the full batch's windows);
        pipeline.engine.run.peak_memory; pipeline.engine.memory_estimate.model_part scales between them).
    """
    from ..model.encode import Encoder, EncodeSpec
    from ..model.facts import special_ids
    from ..types import Window
    from .run import peak_memory

    seg = cfg.segment
    c = seg.content_tokens
    if sample_ids.size == 0:
        sample_ids = np.array([tokenizer.unk_token_id or 0], dtype=np.int64)
    content = np.resize(sample_ids.astype(np.int64), c)                            # (C,)
    cls_id, sep_id = special_ids(tokenizer, cfg.model.model)
    ids = np.concatenate([[cls_id], content, [sep_id]]).astype(np.int64)
    spec = EncodeSpec.from_config(cfg)
    encoder = Encoder.from_config(spec, tokenizer)
    per_batch = max(_SPEED_WINDOWS, min(spec.encode.batch_size,
                                        spec.encode.token_budget_on(encoder.device.type) // seg.max_length))
    full = [Window(doc=0, window_idx=i, n_windows=per_batch, spans=((0, c),), input_ids=ids) for i in range(per_batch)]
    encoder.encode(full[:1])   # the runtime and the weights, with the smallest batch
    base = peak_memory()
    encoder.encode(full)       # warm-up, one batch as extract makes them: its peak memory is the model part's
    peak = peak_memory()
    windows = full[:_SPEED_WINDOWS]
    encoder.encode(windows)  # at the timed shape: first-call allocations are not the steady speed
    passes, t0 = 0, time.perf_counter()
    while passes == 0 or (time.perf_counter() - t0 < 1.0 and passes < 5):
        encoder.encode(windows)
        passes += 1
    return passes * _SPEED_WINDOWS / (time.perf_counter() - t0), str(encoder.device), (base, peak, per_batch)


def speed_of(cfg: PipelineConfig, tokenizer, sample_ids: np.ndarray, windows_per_second: float | None
           ) -> tuple[float, str, tuple[int, int, int] | None]:
    """(windows per second, where the speed comes from, measure_speed's peak memory or None): measured on the
    model (``measure_speed``), or the speed given and nothing measured. Raises ConfigError: a given speed <= 0."""
    if windows_per_second is not None:
        if windows_per_second <= 0:
            raise ConfigError(f"--windows-per-second={windows_per_second} must be > 0")
        return float(windows_per_second), "given with --windows-per-second", None
    speed, device, model_bytes = measure_speed(cfg, tokenizer, sample_ids)
    return speed, f"measured on {device}, {_SPEED_WINDOWS} windows of {cfg.segment.max_length}", model_bytes


def sample_ids(corpus, tokenizer, content_tokens: int, lowercase: bool) -> np.ndarray:
    """Up to ``content_tokens`` ids of the corpus's first document that has that many (else its longest
    first document's): the content of the windows measure_speed times. Each text is cut to that many
    tokens before tokenizing (pipeline.text.cut), so a huge document costs the measure nothing."""
    sample = np.zeros(0, dtype=np.int64)
    for block in read_blocks(corpus):
        for doc in tokenize_block(block.column("text").to_pylist(), tokenizer, content_tokens, with_offsets=False,
                                  lowercase=lowercase):
            if doc.n_kept > sample.size:
                sample = doc.ids[:content_tokens]
            if sample.size >= content_tokens:
                return sample
    return sample
