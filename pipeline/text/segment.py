"""Segment stage: cut a document's content tokens into windows of at most C = max_length - 2 tokens.

The ``Segment`` stage and its rules; ``window_spans`` is pure arithmetic on positions, so the
window rules can be tested (and property-tested) without a tokenizer.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from ..batch import Batch
from ..errors import ConfigError
from ..options.config import SegmentConfig
from ..stage import Stage
from ..types import TokenizedDoc, Window

Spans = tuple[tuple[int, int], ...]


def window_spans(n_tokens: int, cfg: SegmentConfig) -> list[Spans]:
    """Content-token ranges of each window of a document of ``n_tokens`` tokens.

    Rules (README "Window rules"), with C = cfg.max_length - 2:
      - n_tokens == 0: no window; n_tokens <= C: one window [0, n) for every strategy.
      - head: [0, C).  tail: [n - C, n).
      - head_tail: [0, H) and [n - T, n) in one window (Sun et al. 2019, "How to Fine-Tune BERT for
        Text Classification?", H=128, T=382).
      - chunk: [kC, min((k+1)C, n)) for k = 0.. ceil(n/C) - 1; every token in exactly one window.
      - sliding: starts 0, S, 2S, ... with step S = C - overlap; window [s, min(s + C, n)); the last
        window is the first that reaches token n - 1.
      - late: sliding's windows with cfg.late_overlap (256 unless --overlap is given); its chunks
        are cut from the token vectors afterwards (pipeline.model.late).

    Example: n=1000, C=510, head_tail 128+382 -> [((0, 128), (618, 1000))];
             n=1000, C=510, sliding overlap 128 -> [((0, 510),), ((382, 892),), ((764, 1000),)].

    Args:
        n_tokens: content tokens of the document (>= 0).
        cfg: segment options, with max_length resolved.

    Returns:
        One tuple of [start, end) spans per window, in document order.
    """
    c = cfg.content_tokens
    n = n_tokens
    if n == 0:
        return []
    if n <= c:
        return [((0, n),)]
    strategy = cfg.strategy
    if strategy == "head":
        return [((0, c),)]
    if strategy == "tail":
        return [((n - c, n),)]
    if strategy == "head_tail":
        h, t = cfg.head_tokens, cfg.tail_tokens
        spans = tuple(span for span in ((0, h), (n - t, n)) if span[1] > span[0])
        return [spans]
    step = c if strategy == "chunk" else c - (cfg.late_overlap if strategy == "late" else cfg.overlap)
    out: list[Spans] = []
    start = 0
    while True:
        end = min(start + c, n)
        out.append(((start, end),))
        if end == n:
            return out
        start += step


def prompt_rules(cfg: SegmentConfig, n_prompt: int) -> SegmentConfig:
    """The window rules for windows that hold a prompt of ``n_prompt`` tokens after [CLS]: the same rules
    on C' = C - n_prompt content tokens (``cfg`` itself when there is no prompt).

    head, tail, chunk, sliding and late cut C' tokens where they cut C; sliding and late keep their
    overlap (the step shrinks by n_prompt); head_tail keeps its head and gives the tail what is left,
    min(T, C' - H). Example: C = 510, a 3-token prompt, head_tail 128 + 382 -> C' = 507, 128 + 379.

    Raises:
        ConfigError: the prompt leaves no content position, or an overlap or head that C' cannot hold.
    """
    if n_prompt == 0:
        return cfg
    c = cfg.content_tokens - n_prompt
    if c < 1:
        raise ConfigError(f"the prompt's {n_prompt} tokens leave none of a window's {cfg.content_tokens} content "
                          f"positions (max_length {cfg.max_length}); raise --max-length, or pass --prompt-name "
                          "none or a shorter prompt")
    head = min(cfg.head_tokens, c)
    try:
        return dataclasses.replace(cfg, max_length=cfg.max_length - n_prompt, head_tokens=head,
                                   tail_tokens=min(cfg.tail_tokens, c - head))
    except ConfigError as err:
        raise ConfigError(f"with the prompt's {n_prompt} tokens in each window, {c} content positions remain: "
                          f"{err}") from None


def segment(doc: TokenizedDoc, cfg: SegmentConfig, cls_id: int, sep_id: int,
            prompt_ids: Sequence[int] = ()) -> list[Window]:
    """Wrap each window of ``doc`` as [CLS] + prompt ids + content ids + [SEP] (the model's own special tokens).

    Args:
        doc: the tokenized document; its ``ids`` are the content tokens (already capped).
        cfg: segment options with max_length resolved.
        cls_id, sep_id: the tokenizer's cls_token_id and sep_token_id.
        prompt_ids: a sentence-transformers folder's prompt (pipeline.model.prompts), in every window;
            the spans are cut by ``prompt_rules`` (C - len(prompt_ids) content tokens). () : no prompt.

    Returns:
        The document's windows in order (empty for a document with no tokens). Each window's
        ``input_ids`` is int64 of length n_content + len(prompt_ids) + 2 <= cfg.max_length; its spans
        index the content tokens only.
    """
    rules = prompt_rules(cfg, len(prompt_ids))
    spans_list = window_spans(doc.n_kept, rules)
    prefix = np.asarray([cls_id, *prompt_ids], dtype=np.int64)
    windows = []
    for idx, spans in enumerate(spans_list):
        content = np.concatenate([doc.ids[s:e] for s, e in spans]).astype(np.int64)
        input_ids = np.concatenate([prefix, content, [sep_id]]).astype(np.int64)
        assert input_ids.shape[0] <= cfg.content_tokens + 2
        windows.append(Window(doc=doc.row, window_idx=idx, n_windows=len(spans_list), spans=spans,
                              input_ids=input_ids, prompt_tokens=len(prompt_ids)))
    return windows


def covered_tokens(windows: list[Window]) -> int:
    """How many distinct content positions the windows cover (overlapping sliding windows count once).

    Example: spans [0, 510) and [382, 892) -> 892.
    """
    spans = sorted(span for w in windows for span in w.spans)
    total, reach = 0, 0
    for start, end in spans:
        start = max(start, reach)
        if end > start:
            total += end - start
            reach = end
    return total


class Segment(Stage):
    """``docs`` -> ``windows``: every strategy's windows of each document, at most ``max_length`` ids
    with the model's own specials (``segment``).

    Args:
        strategies: strategy name -> its SegmentConfig (max_length resolved), in the order the
            features name them. Example: {"head_tail": SegmentConfig(strategy="head_tail", max_length=512)}
            on 1,000 content ids -> one window [CLS] + ids[:128] + ids[-382:] + [SEP].
        cls_id, sep_id: the tokenizer's first and last id of every window ([CLS]/[SEP], <s>/</s>).
        prompt_ids: token ids put after [CLS] in every window (a sentence-transformers folder's prompt,
            pipeline.model.prompts.run_prompt); they take positions from the content (``prompt_rules``).

    Raises:
        ConfigError: a strategies key that differs from its config's strategy; a prompt that a
            strategy's windows cannot hold (``prompt_rules``).
    """

    name, requires, fills = "segment", ("docs",), ("windows",)

    def __init__(self, strategies: Mapping[str, SegmentConfig], cls_id: int, sep_id: int,
                 prompt_ids: Sequence[int] = ()):
        for key, seg in strategies.items():
            if key != seg.strategy:
                raise ConfigError(f"strategies[{key!r}] is a SegmentConfig of strategy {seg.strategy!r}; "
                                  f"key it by its own strategy")
            prompt_rules(seg, len(prompt_ids))
        self.strategies = dict(strategies)
        self.cls_id, self.sep_id = int(cls_id), int(sep_id)
        self.prompt_ids = tuple(int(i) for i in prompt_ids)

    def get_params(self, deep: bool = True) -> dict:
        return {"strategies": dict(self.strategies), "cls_id": self.cls_id, "sep_id": self.sep_id,
                "prompt_ids": self.prompt_ids}

    def __call__(self, batch: Batch) -> Batch:
        self.check(batch)
        windows = {strategy: [w for doc in batch.docs if doc.error is None
                              for w in segment(doc, seg, self.cls_id, self.sep_id, self.prompt_ids)]
                   for strategy, seg in self.strategies.items()}
        return batch.replace(windows=windows)
