"""The window rules as records of their own: each strategy's spans against a direct definition of its
rule, the Segment stage built from rules alone (no model, no options record), the values each rule
refuses (messages name the Python arguments), and the options round trip the metadata relies on."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import longbert
from pipeline.errors import ConfigError
from pipeline.options.config import SegmentConfig
from pipeline.text.rules import RULES, as_config, rule_of
from pipeline.types import TokenizedDoc


def direct_starts(n: int, c: int, step: int) -> list[int]:
    """Window starts of a stepped rule, written out: every multiple of step until a window reaches n."""
    starts = [0]
    while starts[-1] + c < n:
        starts.append(starts[-1] + step)
    return starts


@settings(max_examples=150, deadline=None)
@given(n=st.integers(0, 3000), max_length=st.integers(3, 600), data=st.data())
def test_every_rule_cuts_the_windows_its_definition_names(n, max_length, data):
    c = max_length - 2
    overlap = data.draw(st.integers(0, c - 1))
    head = data.draw(st.integers(0, c))
    tail = data.draw(st.integers(0 if head else 1, c - head))
    short = [] if n == 0 else [((0, n),)]
    want = {
        longbert.Head(max_length): [((0, c),)],
        longbert.Tail(max_length): [((n - c, n),)],
        longbert.HeadTail(max_length, head, tail): [tuple(s for s in ((0, head), (n - tail, n)) if s[1] > s[0])],
        longbert.Chunk(max_length): [((s, min(s + c, n)),) for s in range(0, n, c)],
        longbert.Sliding(max_length, overlap): [((s, min(s + c, n)),) for s in direct_starts(n, c, c - overlap)],
        longbert.Late(max_length, overlap): [((s, min(s + c, n)),) for s in direct_starts(n, c, c - overlap)],
    }
    for rule, spans in want.items():
        assert rule.spans(n) == (spans if n > c else short), rule


def test_the_defaults_are_the_readme_rules():
    assert longbert.HeadTail(512).spans(1000) == [((0, 128), (618, 1000))]        # 128 + 382
    assert (longbert.HeadTail(256).head_tokens, longbert.HeadTail(256).tail_tokens) == (64, 190)
    assert longbert.Sliding(512).spans(1000) == [((0, 510),), ((382, 892),), ((764, 1000),)]  # overlap 128
    assert longbert.Late(512).spans(1000) == [((0, 510),), ((254, 764),), ((508, 1000),)]     # overlap 256
    assert [r.strategy for r in RULES.values()] == list(RULES) == ["head", "tail", "head_tail", "chunk", "sliding",
                                                                   "late"]


def test_a_segment_from_rules_alone_wraps_each_window_in_the_model_specials():
    ids = np.arange(1000, 1030, dtype=np.int64)   # 30 content ids
    doc = TokenizedDoc(row=0, ids=ids, offsets=np.zeros((30, 2), np.int32), n_tokens=30)
    seg = longbert.Segment([longbert.Chunk(12), longbert.HeadTail(12, 4, 6)], cls_id=7, sep_id=9)
    windows = seg(dataclasses.replace(longbert.Batch.from_texts(["x"]), docs=[doc])).windows
    assert list(windows) == ["chunk", "head_tail"]
    assert [w.input_ids.tolist() for w in windows["chunk"]] == [[7, *range(1000 + k, min(1010 + k, 1030)), 9]
                                                                for k in (0, 10, 20)]
    (ht,) = windows["head_tail"]
    assert ht.input_ids.tolist() == [7, 1000, 1001, 1002, 1003, *range(1024, 1030), 9]
    assert ht.spans == ((0, 4), (24, 30))
    assert longbert.Segment(**seg.get_params()) == seg


def test_a_prompt_takes_positions_from_every_rule():
    assert longbert.HeadTail(512).with_prompt(3) == longbert.HeadTail(509, 128, 379)
    assert longbert.Sliding(512, 100).with_prompt(10) == longbert.Sliding(502, 100)   # the step shrinks
    with pytest.raises(ConfigError, match="leave none of a window's 3 content positions"):
        longbert.Chunk(5).with_prompt(3)


@pytest.mark.parametrize("build, names", [
    (lambda: longbert.Chunk(2), r"Chunk\(max_length=2\): max_length must be an int >= 3"),
    (lambda: longbert.Sliding(12, overlap=10), r"Sliding\(max_length=12, overlap=10\): overlap must be in \[0, 10\)"),
    (lambda: longbert.Late(12, overlap=-1), r"Late\(max_length=12, overlap=-1\)"),
    (lambda: longbert.HeadTail(12, 6, 6), r"HeadTail\(max_length=12, head_tokens=6, tail_tokens=6\).*sum <= 10"),
    (lambda: longbert.HeadTail(12, 0, 0), r"not both 0"),
    (lambda: longbert.Segment([longbert.Chunk(12), longbert.Chunk(20)], 2, 3), "two rules of strategy 'chunk'"),
    (lambda: longbert.Segment(["chunk"], 2, 3), r"strategies holds 'chunk'; give window rules"),
])
def test_values_a_rule_refuses_are_named_by_their_python_arguments(build, names):
    with pytest.raises(ConfigError, match=names):
        build()


@pytest.mark.parametrize("strategy", list(RULES))
def test_the_options_record_and_its_rule_describe_each_other(strategy):
    options = SegmentConfig(strategy=strategy, max_length=40, head_tokens=5, tail_tokens=20, overlap=7,
                            late_overlap=9, max_tokens_per_doc=300)
    rule = rule_of(options)
    assert type(rule) is RULES[strategy] and rule.max_length == 40
    assert rule.spans(100) == rule_of(as_config(rule, SegmentConfig())).spans(100)
    back = as_config(rule, dataclasses.replace(options, max_length=512))
    assert back.max_length == 40 and back.max_tokens_per_doc == 300 and rule_of(back) == rule
    assert {"head_tail": (rule.head_tokens, rule.tail_tokens) if strategy == "head_tail" else None,
            "sliding": getattr(rule, "overlap", None), "late": getattr(rule, "overlap", None)}.get(strategy) == \
        {"head_tail": (5, 20), "sliding": 7, "late": 9}.get(strategy)
