"""The segment stage: exact token positions of every window, for every strategy, at the boundaries;
the windows of a text from the stages before encode, without the model."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from conftest import words
from hypothesis import strategies as st

import longbert

from pipeline.options.config import SegmentConfig
from pipeline.options.features_config import STRATEGIES
from pipeline.errors import ConfigError
from pipeline.text.segment import covered_tokens, segment, window_spans
from pipeline.types import TokenizedDoc

C = 510


def cfg(strategy: str, **kw) -> SegmentConfig:
    return SegmentConfig(strategy=strategy, max_length=512, **kw)


def positions(spans) -> list[int]:
    return [p for s, e in spans for p in range(s, e)]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("n", [1, C - 1, C])
def test_short_documents_are_one_whole_window_for_every_strategy(strategy, n):
    assert window_spans(n, cfg(strategy)) == [((0, n),)]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_empty_document_has_no_window(strategy):
    assert window_spans(0, cfg(strategy)) == []


@pytest.mark.parametrize("n", [C + 1, 2 * C, 5000])
def test_head_and_tail(n):
    assert window_spans(n, cfg("head")) == [((0, C),)]
    assert window_spans(n, cfg("tail")) == [((n - C, n),)]


@pytest.mark.parametrize("n", [C + 1, 2 * C, 5000])
def test_head_tail_keeps_first_128_and_last_382(n):
    (spans,) = window_spans(n, cfg("head_tail"))
    assert positions(spans) == list(range(128)) + list(range(n - 382, n))


def test_head_tail_at_511_tokens_drops_exactly_one_middle_token():
    (spans,) = window_spans(511, cfg("head_tail"))
    assert spans == ((0, 128), (129, 511))  # token 128 is the one left out


def test_head_tail_with_zero_head_is_tail_only():
    (spans,) = window_spans(600, cfg("head_tail", head_tokens=0, tail_tokens=510))
    assert spans == ((90, 600),)


@pytest.mark.parametrize("n,expected", [
    (C + 1, [(0, C), (C, C + 1)]),
    (2 * C, [(0, C), (C, 2 * C)]),
    (2 * C + 5, [(0, C), (C, 2 * C), (2 * C, 2 * C + 5)]),   # shared case B22: a 5-token last chunk
    (5000, [(k * C, min((k + 1) * C, 5000)) for k in range(10)]),
])
def test_chunk_windows_are_consecutive(n, expected):
    assert window_spans(n, cfg("chunk")) == [(s,) for s in expected]


@pytest.mark.parametrize("n,overlap,expected", [
    (C + 1, 0, [(0, C), (C, C + 1)]),
    (C + 1, 128, [(0, C), (382, C + 1)]),
    (2 * C, 128, [(0, 510), (382, 892), (764, 1020)]),
    (1000, 128, [(0, 510), (382, 892), (764, 1000)]),
    (892, 128, [(0, 510), (382, 892)]),          # second window ends exactly at n: no third one
    (893, 128, [(0, 510), (382, 892), (764, 893)]),
    (1020, 509, [(k, min(k + 510, 1020)) for k in range(0, 511)]),  # step 1
])
def test_sliding_windows_step_is_window_minus_overlap(n, overlap, expected):
    assert window_spans(n, cfg("sliding", overlap=overlap)) == [(s,) for s in expected]


def test_overlap_as_large_as_window_is_refused():
    # shared case B03: sliding, max_length 512, overlap 510
    with pytest.raises(ConfigError, match=r"--overlap=510 must be in \[0, 510\)"):
        SegmentConfig(strategy="sliding", max_length=512, overlap=510)


def test_head_plus_tail_over_window_is_refused():
    with pytest.raises(ConfigError, match="--head-tokens 200 \\+ --tail-tokens 382 = 582 exceeds the 510"):
        SegmentConfig(strategy="head_tail", max_length=512, head_tokens=200, tail_tokens=382)


def test_tail_tokens_default_fills_the_window():
    assert SegmentConfig(max_length=512).tail_tokens == 382
    assert SegmentConfig(max_length=512).head_tokens == 128
    assert SegmentConfig(max_length=256, head_tokens=60).tail_tokens == 194
    assert (SegmentConfig(max_length=256).head_tokens, SegmentConfig(max_length=256).tail_tokens) == (64, 190)


def test_segment_wraps_windows_in_cls_and_sep():
    ids = np.arange(100, 100 + 1000, dtype=np.int32)
    doc = TokenizedDoc(row=3, ids=ids, offsets=np.zeros((1000, 2), np.int32), n_tokens=1000)
    windows = segment(doc, cfg("sliding"), cls_id=101, sep_id=102)
    assert [w.window_idx for w in windows] == [0, 1, 2] and all(w.n_windows == 3 and w.doc == 3 for w in windows)
    assert windows[1].input_ids.tolist() == [101] + list(range(100 + 382, 100 + 892)) + [102]
    assert windows[2].input_ids.shape[0] == 1000 - 764 + 2
    assert covered_tokens(windows) == 1000


# --- properties (hypothesis): for random N, strategy and options ---

@st.composite
def segment_cases(draw):
    max_length = draw(st.integers(3, 64))
    c = max_length - 2
    strategy = draw(st.sampled_from(STRATEGIES))
    head = draw(st.integers(0, c))
    tail = draw(st.integers(0, c - head))
    if strategy == "head_tail" and head + tail == 0:
        tail = 1
    overlap = draw(st.integers(0, c - 1))
    n = draw(st.integers(0, 6 * c + 3))
    return n, SegmentConfig(strategy=strategy, max_length=max_length, head_tokens=head, tail_tokens=tail,
                            overlap=overlap, late_overlap=overlap)   # late: sliding's windows


@settings(max_examples=400, deadline=None)
@given(segment_cases())
def test_windows_cover_exactly_the_promised_positions(case):
    n, c_fg = case
    c = c_fg.content_tokens
    windows = window_spans(n, c_fg)
    flat = [positions(w) for w in windows]
    # no window exceeds the limit, every position is a real token, ascending inside each window
    assert all(len(p) <= c for p in flat)
    assert all(p == sorted(set(p)) and all(0 <= x < n for x in p) for p in flat)
    # windows are in document order
    assert [p[0] for p in flat] == sorted(p[0] for p in flat)
    if n == 0:
        assert windows == []
        return
    if n <= c:
        assert flat == [list(range(n))]
        return
    s = c_fg.strategy
    if s == "head":
        assert flat == [list(range(c))]
    elif s == "tail":
        assert flat == [list(range(n - c, n))]
    elif s == "head_tail":
        assert flat == [list(range(c_fg.head_tokens)) + list(range(n - c_fg.tail_tokens, n))]
    elif s == "chunk":
        assert [x for p in flat for x in p] == list(range(n))          # every token exactly once
        assert all(len(p) == c for p in flat[:-1])
    else:
        step = c - c_fg.overlap
        assert [p[0] for p in flat] == [k * step for k in range(len(flat))]
        assert sorted(set(x for p in flat for x in p)) == list(range(n))   # no gap
        assert flat[-1][-1] == n - 1 and (len(flat) == 1 or flat[-2][-1] < n - 1)  # first to reach n-1
        assert all(len(a) == c and a[-c_fg.overlap:] == b[:c_fg.overlap] if c_fg.overlap else True
                   for a, b in zip(flat[:-1], flat[1:]) if len(b) >= c_fg.overlap)


def test_windows_without_the_model(pipe, tiny_bert):
    """(a) The stages before encode give each window's exact token positions and ids; no weight loads."""
    _, tok = tiny_bert
    texts = [words(30), words(3, 5)]
    batch = pipe.prepare(longbert.Batch.from_texts(texts))
    assert not pipe["encode"].loaded
    wins = batch.windows["chunk"]
    assert [(w.doc, w.spans) for w in wins] == [(0, ((0, 14),)), (0, ((14, 28),)), (0, ((28, 30),)), (1, ((0, 3),))]
    ids = tok(texts[0], add_special_tokens=False)["input_ids"]
    assert wins[1].input_ids.tolist() == [tok.cls_token_id, *ids[14:28], tok.sep_token_id]
    assert [d.n_tokens for d in batch.docs] == [30, 3]
    assert batch.unique == wins   # four distinct windows
