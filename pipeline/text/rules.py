"""Window rules: one small record per strategy, holding that strategy's values and nothing else.

A rule turns a document's content-token count into the [start, end) spans of its windows
(``spans``); the Segment stage wraps each window in the model's specials. C = max_length - 2
content tokens per window ([CLS] and [SEP] take two positions). The rules (README "Window rules"):

- ``Head(max_length)``: [0, C).  ``Tail(max_length)``: [n - C, n).
- ``HeadTail(max_length, head_tokens, tail_tokens)``: [0, H) and [n - T, n) in one window
  (Sun et al. 2019, "How to Fine-Tune BERT for Text Classification?": H = 128, T = 382 for C = 510).
- ``Chunk(max_length)``: [kC, min((k+1)C, n)); every token in exactly one window.
- ``Sliding(max_length, overlap)``: starts 0, S, 2S, ... with step S = C - overlap; the last window
  is the first that reaches token n - 1.
- ``Late(max_length, overlap)``: sliding's windows (overlap 256 by default) whose token vectors are
  cut into chunks afterwards (pipeline.model.late; the chunk size belongs to that step, not here).

Every rule gives one window [0, n) when n <= C, and none when n == 0. ``rule_of`` turns the
options' ``SegmentConfig`` into its rule; ``as_config`` turns a rule back into the options that
describe it (the file's metadata).
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from ..errors import ConfigError
from ..options.config import SegmentConfig
from ..options.features_config import is_late

Spans = tuple[tuple[int, int], ...]


@dataclasses.dataclass(frozen=True)
class WindowRule:
    """Windows of at most ``max_length`` positions, [CLS] and [SEP] included (C = max_length - 2
    content tokens). The base of the six strategies' rules; ``strategy`` names the one a class is.

    Raises:
        ConfigError: max_length < 3, naming ``max_length``.
    """

    max_length: int
    strategy: ClassVar[str] = ""

    def __post_init__(self) -> None:
        if not isinstance(self.max_length, int) or self.max_length < 3:
            raise ConfigError(f"{type(self).__name__}(max_length={self.max_length!r}): max_length must be an int "
                              ">= 3 ([CLS], one token, [SEP])")

    @property
    def content_tokens(self) -> int:
        """C = max_length - 2: content tokens per window."""
        return self.max_length - 2

    def spans(self, n_tokens: int) -> list[Spans]:
        """Content-token ranges of each window of a document of ``n_tokens`` (>= 0) tokens, in document
        order: [] for 0 tokens, [((0, n),)] when n <= C, else this strategy's rule (``cut``)."""
        if n_tokens == 0:
            return []
        if n_tokens <= self.content_tokens:
            return [((0, n_tokens),)]
        return self.cut(n_tokens)

    def cut(self, n: int) -> list[Spans]:
        """The windows of a document of n > C tokens (each subclass's rule)."""
        raise NotImplementedError

    def with_prompt(self, n_prompt: int) -> WindowRule:
        """The same rule for windows that hold a prompt of ``n_prompt`` tokens after [CLS]: C' = C - n_prompt
        content tokens (this rule itself when n_prompt is 0). Sliding and late keep their overlap (the step
        shrinks); head+tail keeps its head and gives the tail what is left, min(T, C' - H).
        Example: HeadTail(512) (128 + 382) with a 3-token prompt -> HeadTail(509, 128, 379).

        Raises:
            ConfigError: the prompt leaves no content position, or an overlap or head that C' cannot hold.
        """
        if n_prompt == 0:
            return self
        c = self.content_tokens - n_prompt
        if c < 1:
            raise ConfigError(f"the prompt's {n_prompt} tokens leave none of a window's {self.content_tokens} content "
                              f"positions (max_length {self.max_length}); raise --max-length, or pass --prompt-name "
                              "none or a shorter prompt")
        try:
            return self.shrunk(self.max_length - n_prompt)
        except ConfigError as err:
            raise ConfigError(f"with the prompt's {n_prompt} tokens in each window, {c} content positions remain: "
                              f"{err}") from None

    def shrunk(self, max_length: int) -> WindowRule:
        """This rule for windows of ``max_length`` positions (``with_prompt``)."""
        return dataclasses.replace(self, max_length=max_length)

    def options(self) -> dict[str, Any]:
        """The SegmentConfig fields this rule sets (``as_config``)."""
        return {"strategy": self.strategy, "max_length": self.max_length}


@dataclasses.dataclass(frozen=True)
class Head(WindowRule):
    """The first C content tokens: one window [0, C). Example: Head(512) on 1,000 tokens -> [((0, 510),)]."""

    strategy: ClassVar[str] = "head"

    def cut(self, n: int) -> list[Spans]:
        return [((0, self.content_tokens),)]


@dataclasses.dataclass(frozen=True)
class Tail(WindowRule):
    """The last C content tokens: one window [n - C, n). Example: Tail(512) on 1,000 -> [((490, 1000),)]."""

    strategy: ClassVar[str] = "tail"

    def cut(self, n: int) -> list[Spans]:
        return [((n - self.content_tokens, n),)]


@dataclasses.dataclass(frozen=True)
class HeadTail(WindowRule):
    """The first H and the last T content tokens in one window, H + T <= C. None: H = 128 for C = 510,
    else round(C * 128 / 510); T = C - H. Example: HeadTail(512) on 1,000 -> [((0, 128), (618, 1000))].

    Raises:
        ConfigError: a negative H or T, both 0, or H + T > C, naming head_tokens and tail_tokens.
    """

    head_tokens: int | None = None
    tail_tokens: int | None = None
    strategy: ClassVar[str] = "head_tail"

    def __post_init__(self) -> None:
        super().__post_init__()
        c = self.content_tokens
        head = round(c * 128 / 510) if self.head_tokens is None else self.head_tokens
        tail = max(c - head, 0) if self.tail_tokens is None else self.tail_tokens
        if head < 0 or tail < 0 or head + tail == 0 or head + tail > c:
            raise ConfigError(f"HeadTail(max_length={self.max_length}, head_tokens={head}, tail_tokens={tail}): "
                              f"head_tokens and tail_tokens must be >= 0, not both 0, with a sum <= {c} (the "
                              "window's content tokens); change one of them")
        object.__setattr__(self, "head_tokens", head)   # frozen: the resolved defaults are set once, here
        object.__setattr__(self, "tail_tokens", tail)

    def cut(self, n: int) -> list[Spans]:
        spans = ((0, self.head_tokens), (n - self.tail_tokens, n))
        return [tuple(span for span in spans if span[1] > span[0])]

    def shrunk(self, max_length: int) -> WindowRule:
        c = max_length - 2
        head = min(self.head_tokens, c)
        return HeadTail(max_length, head, min(self.tail_tokens, c - head))

    def options(self) -> dict[str, Any]:
        return {**super().options(), "head_tokens": self.head_tokens, "tail_tokens": self.tail_tokens}


@dataclasses.dataclass(frozen=True)
class Chunk(WindowRule):
    """Consecutive windows of C tokens; every token in exactly one.
    Example: Chunk(512) on 1,000 tokens -> [((0, 510),), ((510, 1000),)]."""

    strategy: ClassVar[str] = "chunk"

    def cut(self, n: int) -> list[Spans]:
        return _stepped(n, self.content_tokens, self.content_tokens)


@dataclasses.dataclass(frozen=True)
class Sliding(WindowRule):
    """Windows of C tokens, neighbours sharing ``overlap`` tokens (step C - overlap).
    Example: Sliding(512, overlap=128) on 1,000 -> [((0, 510),), ((382, 892),), ((764, 1000),)].

    Raises:
        ConfigError: overlap outside [0, C), naming overlap.
    """

    overlap: int = 128
    strategy: ClassVar[str] = "sliding"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.overlap < self.content_tokens:
            raise ConfigError(f"{type(self).__name__}(max_length={self.max_length}, overlap={self.overlap}): overlap "
                              f"must be in [0, {self.content_tokens}) for windows of {self.content_tokens} content "
                              "tokens; lower overlap")

    def cut(self, n: int) -> list[Spans]:
        return _stepped(n, self.content_tokens, self.content_tokens - self.overlap)

    def options(self) -> dict[str, Any]:
        return {**super().options(), "overlap": self.overlap}


@dataclasses.dataclass(frozen=True)
class Late(Sliding):
    """Late chunking's windows: sliding windows with overlap 256 by default, each encoded whole and its
    token vectors cut into chunks afterwards (pipeline.model.late). Example: Late(512) on 1,000 tokens
    -> [((0, 510),), ((254, 764),), ((508, 1000),)]."""

    overlap: int = 256
    strategy: ClassVar[str] = "late"

    def options(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "max_length": self.max_length, "late_overlap": self.overlap}


RULES: dict[str, type[WindowRule]] = {r.strategy: r for r in (Head, Tail, HeadTail, Chunk, Sliding, Late)}


def _stepped(n: int, c: int, step: int) -> list[Spans]:
    """Windows [s, min(s + c, n)) at s = 0, step, 2 step, ... up to the first that reaches n."""
    out: list[Spans] = []
    start = 0
    while True:
        end = min(start + c, n)
        out.append(((start, end),))
        if end == n:
            return out
        start += step


def rule_of(cfg: SegmentConfig | WindowRule) -> WindowRule:
    """The window rule of the options' ``SegmentConfig`` (a rule as it is): its strategy's class with
    the values that strategy reads (head_tail: head_tokens, tail_tokens; sliding: overlap; late:
    late_overlap). Example: SegmentConfig(strategy="chunk", max_length=64) -> Chunk(64).

    Raises:
        ConfigError: max_length not resolved yet, or a value the rule refuses.
    """
    if isinstance(cfg, WindowRule):
        return cfg
    c = cfg.content_tokens   # ConfigError when max_length is None
    if cfg.strategy == "head_tail":
        return HeadTail(c + 2, cfg.head_tokens, cfg.tail_tokens)
    if cfg.strategy == "sliding":
        return Sliding(c + 2, cfg.overlap)
    if is_late(cfg.strategy):
        return Late(c + 2, cfg.late_overlap)
    return RULES[cfg.strategy](c + 2)


def as_config(rule: WindowRule, base: SegmentConfig) -> SegmentConfig:
    """``base`` with the fields ``rule`` sets (its strategy, max_length and its own values): the options
    that describe a Segment's windows in the file's metadata. The fields no rule reads (the tokens kept
    per document, late's chunk size) stay ``base``'s."""
    return dataclasses.replace(base, **rule.options())
