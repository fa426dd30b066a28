"""The stage contract: stages built alone from their own parameters, rebuilt from get_params, a pipeline
built from parts, requires/fills checked when a chain is made, filters with Batch.take, a replacement
aggregate that fills only ``vectors``, and no state shared between derived pipelines."""
from __future__ import annotations

import re
import threading

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import STAGE_ML as ML
from conftest import reference_vectors, words, write_csv
from transformers import BertTokenizerFast

import longbert
from pipeline.errors import ConfigError
from pipeline.options.config import SegmentConfig


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    t = BertTokenizerFast.from_pretrained(tiny_model_dir)
    assert len(t) == 53
    return t


def _features(table) -> list:
    return table.column("features").to_pylist()


def test_text_stages_built_alone_give_exact_windows(tok):
    """Tokenize, Segment and Dedup from plain values (a tokenizer, window sizes, special ids): no model
    weights, no config; the windows' positions and ids are the window rule's, computed here by hand."""
    text = words(30)
    batch = longbert.Tokenize(tok)(longbert.Batch.from_texts([text, words(5)]))
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert batch.docs[0].ids.tolist() == ids and batch.docs[1].n_tokens == 5
    seg = longbert.Segment({"chunk": SegmentConfig(strategy="chunk", max_length=ML)}, tok.cls_token_id, tok.sep_token_id)
    windows = seg(batch).windows["chunk"]
    c = ML - 2                                                                  # 14 content tokens per window
    assert [(w.doc, w.spans) for w in windows] == [(0, ((0, c),)), (0, ((c, 2 * c),)), (0, ((2 * c, 30),)),
                                                   (1, ((0, 5),))]
    assert windows[1].input_ids.tolist() == [tok.cls_token_id, *ids[c:2 * c], tok.sep_token_id]
    plan = longbert.Dedup()(seg(batch)).plan
    assert len(plan.unique) == 4 and plan.index[0].tolist() == [0, 1, 2, 3]


def test_every_stage_rebuilds_from_its_params_and_the_rebuilt_pipeline_gives_the_same_table(pipe):
    texts = [words(n, n) for n in (3, 14, 15, 40)] + [" "]
    for stage in pipe:
        again = type(stage)(**stage.get_params())
        assert again == stage and repr(again) == repr(stage)
        assert repr(stage).startswith(type(stage).__name__ + "(")
    rebuilt = longbert.Pipeline([type(s)(**s.get_params()) for s in pipe])
    assert rebuilt.names == pipe.names
    a, b = pipe(longbert.Batch.from_texts(texts)), rebuilt(longbert.Batch.from_texts(texts))
    assert a.equals(b)
    assert isinstance(pipe["segment"], longbert.Segment) and isinstance(pipe["rows"], longbert.Rows)


def test_segment_params_name_what_it_holds(pipe, tok):
    params = pipe["segment"].get_params()
    assert params["cls_id"] == tok.cls_token_id and params["sep_id"] == tok.sep_token_id
    assert list(params["strategies"]) == ["chunk"] and params["strategies"]["chunk"].max_length == ML
    assert params["strategies"]["chunk"] == longbert.Chunk(ML)   # the options' record is taken as its rule
    with pytest.raises(ConfigError, match="strategies\\['head'\\] is a window rule of strategy 'chunk'"):
        longbert.Segment({"head": SegmentConfig(strategy="chunk", max_length=ML)}, 2, 3)
    with pytest.raises(ConfigError, match="max_length is not resolved"):
        longbert.Segment({"chunk": SegmentConfig(strategy="chunk")}, 2, 3)


def test_a_stage_placed_before_what_it_reads_is_refused_when_the_chain_is_made(pipe):
    with pytest.raises(ConfigError, match="stage 'early' reads 'docs', which no stage before it fills; put it "
                                          "after 'tokenize'"):
        pipe.insert(pipe["segment"], before="tokenize", name="early")
    with pytest.raises(ConfigError, match=re.escape("stage 'encode' reads 'plan', which no stage before it fills; "
                                                    "stage 'dedup' fills it: add longbert.Dedup() before 'encode' "
                                                    "(the order is ['tokenize', 'segment', 'encode', 'aggregate', "
                                                    "'rows'])")):
        pipe.without("dedup")
    with pytest.raises(ConfigError, match="stage 'aggregate' reads 'encoded'"):
        longbert.Pipeline([pipe["tokenize"], pipe["segment"], pipe["dedup"], pipe["aggregate"]])

    def needs_windows(batch):
        return batch
    needs_windows.requires = ("windows",)
    with pytest.raises(ConfigError, match="stage 'needs_windows' reads 'windows'"):
        pipe.insert(needs_windows, after="tokenize")
    assert pipe.insert(needs_windows, after="segment").names[2] == "needs_windows"


@pytest.mark.parametrize("after", ["tokenize", "segment", "dedup", "encode"])
def test_a_filter_after_any_stage_gives_the_full_runs_rows_for_the_documents_kept(pipe, after):
    """Every other document kept by batch.take: the same rows (ids, counts) and vectors as the full run."""
    texts = [words(n, n) for n in (3, 30, 14, 40, 1, 15, 29)] + [" ", words(30)]   # the last repeats one: shared ids
    full = pipe(longbert.Batch.from_texts(texts))

    def every_other(batch):
        return batch.take(range(0, len(batch), 2))

    kept = pipe.insert(every_other, after=after)(longbert.Batch.from_texts(texts))
    expected = full.take(list(range(0, len(texts), 2)))
    assert kept.drop_columns(["features"]).equals(expected.drop_columns(["features"]))
    for got, want in zip(_features(kept), _features(expected)):
        assert (got is None) == (want is None)
        if got is not None:
            np.testing.assert_allclose(got, want, atol=1e-6)


def test_take_reorders_and_checks_positions(pipe):
    batch = pipe.prepare(longbert.Batch.from_texts([words(20), words(3), words(16, 2)]))
    cut = batch.take([2, 0])
    assert cut.ids == [2, 0] and [d.row for d in cut.docs] == [0, 1]
    assert [(w.doc, w.spans) for w in cut.windows["chunk"]] == [(0, ((0, 14),)), (0, ((14, 16),)),
                                                                (1, ((0, 14),)), (1, ((14, 20),))]
    with pytest.raises(ConfigError, match=r"positions must be in \[0, 3\), got \[5\]"):
        batch.take([0, 5])
    with pytest.raises(ConfigError, match="a position is repeated"):
        batch.take([1, 1])


def test_a_replacement_aggregate_fills_only_vectors(pipe, tiny_bert):
    """A median over windows, written with the documented field alone: the rows stage derives errors,
    valid, n_windows and truncated; the vectors equal the median of direct model calls per window."""
    model, tok = tiny_bert
    texts = [words(40), words(5), " "]

    def median(batch):
        index = batch.into_unique("chunk")
        out = np.zeros((len(batch), 32), np.float32)
        for d in range(len(batch)):
            rows = [index[j] for j, w in enumerate(batch.windows["chunk"]) if w.doc == d]
            if rows:
                out[d] = np.median(batch.encoded.vectors[rows], axis=0)
        return batch.replace(vectors={"features": out})

    table = pipe.replace("aggregate", median)(longbert.Batch.from_texts(texts))
    assert table.column("n_windows").to_pylist() == [3, 1, 0]
    assert table.column("truncated").to_pylist() == [False, False, False]
    assert table.column("error").to_pylist()[:2] == [None, None] and table.column("error")[2].as_py()
    ids = tok(texts[0], add_special_tokens=False)["input_ids"]
    windows = [[tok.cls_token_id, *ids[a:a + 14], tok.sep_token_id] for a in (0, 14, 28)]
    want = np.median(reference_vectors(model, tok, windows, pooling="mean"), axis=0)
    np.testing.assert_allclose(_features(table)[0], want, atol=1e-5)
    assert _features(table)[2] is None


def test_a_derived_pipelines_run_leaves_its_parent_unchanged(pipe, tmp_path):
    src = write_csv(tmp_path / "in.csv", [{"id": f"d{i}", "text": words(5 + i), "lab": f"x{i}"} for i in range(4)])
    child = pipe.insert(lambda b: b, before="tokenize", name="same")
    child.run(str(src), str(tmp_path / "child.parquet"), keep_cols=["lab"])
    pipe.run(str(src), str(tmp_path / "parent.parquet"))
    assert "lab" in pq.read_table(tmp_path / "child.parquet").column_names
    assert "lab" not in pq.read_table(tmp_path / "parent.parquet").column_names
    assert pipe.cfg.read.keep_cols == () and pipe.cfg.write.output != str(tmp_path / "child.parquet")


def test_two_derived_pipelines_in_two_threads_give_their_single_thread_results(pipe):
    lower = pipe.insert(lambda b: b.with_texts([t.replace("w1", "w2") for t in b.texts]), before="tokenize",
                        name="swap")
    texts = [words(n, n) for n in (5, 20, 33, 14)] * 3
    alone = {"pipe": pipe(longbert.Batch.from_texts(texts)), "swap": lower(longbert.Batch.from_texts(texts))}
    got: dict = {}

    def work(name, p):
        got[name] = [p(longbert.Batch.from_texts(texts)) for _ in range(3)]

    threads = [threading.Thread(target=work, args=a) for a in (("pipe", pipe), ("swap", lower))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, tables in got.items():
        assert all(t.equals(alone[name]) for t in tables), name
    assert not alone["pipe"].equals(alone["swap"])


def test_dir_of_longbert_is_its_all():
    assert dir(longbert) == sorted(longbert.__all__)
    for name in ("Stage", "Tokenize", "Segment", "Dedup", "Encode", "Aggregate", "Rows"):
        assert name in longbert.__all__ and isinstance(getattr(longbert, name), type)


def test_resume_with_other_stages_is_refused_naming_them_and_the_file_names_its_stages(pipe, tmp_path):
    import json

    src = write_csv(tmp_path / "in.csv", [{"id": f"d{i}", "text": words(5 + i)} for i in range(6)])

    def lower(batch):
        return batch.with_texts([t.lower() for t in batch.texts])

    cleaning = pipe.insert(lower, before="tokenize")
    out = tmp_path / "parts"
    cleaning.run(str(src), f"{out}/", block_rows=2)
    manifest_stages = json.loads(pq.read_schema(next(out.glob("*.parquet"))).metadata[b"longbert"])["stages"]
    assert manifest_stages[0].startswith("lower=test_stage_contract.") and manifest_stages[1:] == [
        "tokenize", "segment", "dedup", "encode", "aggregate", "rows"]
    with pytest.raises(ConfigError, match=r"resume=True: the pipeline's stages differ from the run that wrote .*"
                                          r"the built-in stages now"):
        pipe.run(str(src), f"{out}/", block_rows=2, resume=True)
    cleaning.run(str(src), f"{out}/", block_rows=2, resume=True)      # the same stages: resumed
    plain = tmp_path / "plain.parquet"
    pipe.run(str(src), str(plain))
    assert "stages" not in json.loads(pq.read_schema(plain).metadata[b"longbert"])
