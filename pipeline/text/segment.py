"""Segment stage: cut a document's content tokens into windows of at most C = max_length - 2 tokens.

The ``Segment`` stage wraps each window that a strategy's rule (pipeline.text.rules) cuts in the
model's specials; ``window_spans`` is pure arithmetic on positions, so the window rules can be
tested (and property-tested) without a tokenizer.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..batch import Batch
from ..errors import ConfigError
from ..options.config import SegmentConfig
from ..stage import Stage
from ..types import TokenizedDoc, Window
from .rules import Spans, WindowRule, rule_of


def window_spans(n_tokens: int, cfg: SegmentConfig | WindowRule) -> list[Spans]:
    """Content-token ranges of each window of a document of ``n_tokens`` tokens, by the strategy's window
    rule (pipeline.text.rules: the README's "Window rules"; ``cfg`` an options record with max_length
    resolved, or a rule).

    Example: n=1000, C=510, head_tail 128+382 -> [((0, 128), (618, 1000))];
             n=1000, C=510, sliding overlap 128 -> [((0, 510),), ((382, 892),), ((764, 1000),)].

    Returns:
        One tuple of [start, end) spans per window, in document order.

    Raises:
        ConfigError: max_length not resolved.
    """
    return rule_of(cfg).spans(n_tokens)


def prompt_rules(cfg: SegmentConfig | WindowRule, n_prompt: int) -> WindowRule:
    """The window rule for windows that hold a prompt of ``n_prompt`` tokens after [CLS]
    (``WindowRule.with_prompt``: the same rule on C' = C - n_prompt content tokens).
    Example: C = 510, a 3-token prompt, head_tail 128 + 382 -> C' = 507, 128 + 379.

    Raises:
        ConfigError: the prompt leaves no content position, or an overlap or head that C' cannot hold.
    """
    return rule_of(cfg).with_prompt(n_prompt)


def segment(doc: TokenizedDoc, cfg: SegmentConfig | WindowRule, cls_id: int, sep_id: int,
            prompt_ids: Sequence[int] = ()) -> list[Window]:
    """Wrap each window of ``doc`` as [CLS] + prompt ids + content ids + [SEP] (the model's own special tokens).

    Args:
        doc: the tokenized document; its ``ids`` are the content tokens (already capped).
        cfg: the strategy's window rule (pipeline.text.rules), or options with max_length resolved.
        cls_id, sep_id: the tokenizer's cls_token_id and sep_token_id.
        prompt_ids: a sentence-transformers folder's prompt (pipeline.model.prompts), in every window;
            the spans are cut by ``prompt_rules`` (C - len(prompt_ids) content tokens). () : no prompt.

    Returns:
        The document's windows in order (empty for a document with no tokens). Each window's
        ``input_ids`` is int64 of length n_content + len(prompt_ids) + 2 <= cfg.max_length; its spans
        index the content tokens only.
    """
    rule = rule_of(cfg)
    spans_list = rule.with_prompt(len(prompt_ids)).spans(doc.n_kept)
    prefix = np.asarray([cls_id, *prompt_ids], dtype=np.int64)
    windows = []
    for idx, spans in enumerate(spans_list):
        content = np.concatenate([doc.ids[s:e] for s, e in spans]).astype(np.int64)
        input_ids = np.concatenate([prefix, content, [sep_id]]).astype(np.int64)
        assert input_ids.shape[0] <= rule.max_length
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
        strategies: each strategy's window rule (pipeline.text.rules: Head, Tail, HeadTail, Chunk,
            Sliding, Late), as a sequence of rules or a mapping strategy -> rule, in the order the
            features name them; an options ``SegmentConfig`` (max_length resolved) is taken as its
            rule (``rule_of``). Example: [longbert.HeadTail(512)] on 1,000 content ids -> one window
            [CLS] + ids[:128] + ids[-382:] + [SEP].
        cls_id, sep_id: the tokenizer's first and last id of every window ([CLS]/[SEP], <s>/</s>).
        prompt_ids: token ids put after [CLS] in every window (a sentence-transformers folder's prompt,
            pipeline.model.prompts.run_prompt); they take positions from the content
            (``WindowRule.with_prompt``).

    Raises:
        ConfigError: a mapping key that differs from its rule's strategy, two rules of one strategy, a
            value that is not a rule, or a prompt that a strategy's windows cannot hold.
    """

    name, requires, fills = "segment", ("docs",), ("windows",)

    def __init__(self, strategies: Mapping[str, WindowRule | SegmentConfig] | Sequence[WindowRule],
                 cls_id: int, sep_id: int, prompt_ids: Sequence[int] = ()):
        pairs = list(strategies.items()) if isinstance(strategies, Mapping) else [(None, r) for r in strategies]
        rules: dict[str, WindowRule] = {}
        for key, value in pairs:
            if not isinstance(value, (WindowRule, SegmentConfig)):
                raise ConfigError(f"strategies holds {value!r}; give window rules such as longbert.Chunk(max_length="
                                  "512) or longbert.HeadTail(512)")
            rule = rule_of(value)
            if key is not None and key != rule.strategy:
                raise ConfigError(f"strategies[{key!r}] is a window rule of strategy {rule.strategy!r}; "
                                  f"key it by its own strategy")
            if rule.strategy in rules:
                raise ConfigError(f"strategies holds two rules of strategy {rule.strategy!r}; give one")
            rule.with_prompt(len(prompt_ids))
            rules[rule.strategy] = rule
        self.strategies = rules
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
