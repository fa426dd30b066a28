"""The public stages: Batch, read, Pipeline (insert / replace / without / run), pool, aggregate and
save_features, each checked against an independent computation (tiny BERT, transformers called directly)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from conftest import invoke, words, write_csv

import longbert
from pipeline.errors import ConfigError, InputError

ML = 16     # max_length: windows of C = 14 content tokens


@pytest.fixture(scope="module")
def pipe(tiny_model_dir):
    return longbert.Pipeline.from_options(model=str(tiny_model_dir), strategy="chunk", max_length=ML)


def direct(model, ids: list[int]) -> torch.Tensor:
    """(seq, h) last hidden state of one unpadded window, straight from transformers."""
    with torch.no_grad():
        t = torch.tensor([ids])
        return model(input_ids=t, attention_mask=torch.ones_like(t), token_type_ids=torch.zeros_like(t)).last_hidden_state[0]


def test_batch_from_texts_takes_lists_series_and_arrays():
    texts = ["a b", "c"]
    for given in (texts, tuple(texts), pd.Series(texts), np.array(texts)):
        b = longbert.Batch.from_texts(given, ids=["x", "y"], lang=["en", None])
        assert b.texts == texts and b.ids == ["x", "y"] and b.rows.column("lang").to_pylist() == ["en", None]
    assert longbert.Batch.from_texts(texts).ids == [0, 1]
    cleaned = longbert.Batch.from_texts(texts, ids=["x", "y"]).with_texts(["A B", "C"])
    assert cleaned.texts == ["A B", "C"] and cleaned.ids == ["x", "y"]
    with pytest.raises(InputError, match="a list of texts was expected"):
        longbert.Batch.from_texts("one text")
    with pytest.raises(InputError, match=r"text at position 1 is NoneType, not str"):
        longbert.Batch.from_texts(["a", None])
    with pytest.raises(InputError, match="ids has 1 values for 2 texts"):
        longbert.Batch.from_texts(texts, ids=["x"])


def test_windows_without_the_model(pipe, tiny_bert):
    """(a) The stages before encode give each window's exact token positions and ids; no weight loads."""
    _, tok = tiny_bert
    texts = [words(30), words(3, 5)]
    batch = pipe.prepare(longbert.Batch.from_texts(texts))
    assert not pipe.context.loaded
    wins = batch.windows["chunk"]
    assert [(w.doc, w.spans) for w in wins] == [(0, ((0, 14),)), (0, ((14, 28),)), (0, ((28, 30),)), (1, ((0, 3),))]
    ids = tok(texts[0], add_special_tokens=False)["input_ids"]
    assert wins[1].input_ids.tolist() == [tok.cls_token_id, *ids[14:28], tok.sep_token_id]
    assert [d.n_tokens for d in batch.docs] == [30, 3]
    assert batch.unique == wins   # four distinct windows


def test_encode_stage_equals_a_direct_model_call(pipe, tiny_bert):
    """(b) Window vectors from pipe['encode'] equal transformers on the window's ids (mean pooling)."""
    model, _ = tiny_bert
    p = longbert.Pipeline.from_options(model=str(pipe.cfg.model.model), strategy="chunk", pooling="mean",
                                       max_length=ML)
    batch = p["encode"](p.prepare(longbert.Batch.from_texts([words(30), words(3, 5)])))
    expected = np.stack([direct(model, w.input_ids.tolist()).mean(0).numpy() for w in batch.unique])
    np.testing.assert_allclose(batch.encoded.vectors, expected, atol=1e-5)


def test_pool_on_my_own_model_output_equals_the_products_window_vector(tiny_model_dir, tiny_bert):
    """(d) longbert.pool on a user's own AutoModel output (numpy, padded batch) = the product's vectors."""
    model, tok = tiny_bert
    texts = [words(9), words(4, 3)]
    enc = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_hidden_states=True)
    mask = enc["attention_mask"].numpy()
    for pooling, layers, agg in (("mean", (-1,), "mean"), ("max", (-1,), "mean"), ("cls", (-2, -1), "concat")):
        states = tuple(h.numpy() for h in out.hidden_states)
        mine = longbert.pool(states if layers != (-1,) else out.last_hidden_state.numpy(), mask, pooling=pooling,
                             layers=layers, layer_agg=agg)
        p = longbert.Pipeline.from_options(model=str(tiny_model_dir), strategy="head", pooling=pooling,
                                           layers=layers, layer_agg=agg, max_length=ML)
        product = p["encode"](p.prepare(longbert.Batch.from_texts(texts))).encoded.vectors
        assert mine.dtype == np.float32
        np.testing.assert_allclose(mine, product, atol=1e-5)
    with pytest.raises(ConfigError, match="needs every layer"):
        longbert.pool(out.last_hidden_state.numpy(), mask, layers=(-2,))


def test_aggregate_on_numpy():
    """longbert.aggregate: per document, the windows' mean / max / weighted / lists, computed by hand."""
    v = np.array([[0, 2], [2, 4], [10, 10]], dtype=np.float32)
    doc = [0, 0, 1]
    np.testing.assert_allclose(longbert.aggregate(v, doc), [[1, 3], [10, 10]])
    np.testing.assert_allclose(longbert.aggregate(v, doc, weights=[1, 3, 5], how="weighted"), [[1.5, 3.5], [10, 10]])
    np.testing.assert_allclose(longbert.aggregate(torch.tensor(v), doc, how=["first", "max"]),
                               [[0, 2, 2, 4], [10, 10, 10, 10]])
    with pytest.raises(ConfigError, match="how='median'"):
        longbert.aggregate(v, doc, how="median")
    with pytest.raises(ConfigError, match="ascending"):
        longbert.aggregate(v, [1, 0, 0])


def test_inserted_cleaning_step_equals_extract_on_the_cleaned_corpus(pipe, tiny_model_dir, runner, tmp_path):
    """(c) A cleaning stage inserted before tokenize, run over a raw corpus with pipe.run, gives the same
    file as extract on the corpus cleaned beforehand."""
    raw = [f"<p>{words(20, i)}</p>" for i in range(5)] + ["<b></b>"]
    clean = [t.replace("<p>", "").replace("</p>", "").replace("<b>", "").replace("</b>", "") for t in raw]

    def strip_tags(batch):
        return batch.with_texts([t.replace("<p>", "").replace("</p>", "").replace("<b>", "").replace("</b>", "")
                                 for t in batch.texts])

    cleaning = pipe.insert(strip_tags, before="tokenize")
    assert cleaning.names == ("strip_tags", "tokenize", "segment", "dedup", "encode", "aggregate", "rows")
    assert pipe.names[0] == "tokenize"   # insert returns a new pipeline
    cleaning.run(str(write_csv(tmp_path / "raw.csv", [{"id": f"d{i}", "text": t} for i, t in enumerate(raw)])),
                 str(tmp_path / "mine.parquet"))
    src = write_csv(tmp_path / "clean.csv", [{"id": f"d{i}", "text": t} for i, t in enumerate(clean)])
    result = invoke(runner, ["extract", src, "-o", tmp_path / "cli.parquet", "--model", tiny_model_dir,
                             "--strategy", "chunk", "--max-length", ML, "--no-progress"])
    assert result.exit_code == 0, result.output
    mine, cli = pq.read_table(tmp_path / "mine.parquet"), pq.read_table(tmp_path / "cli.parquet")
    assert mine.schema.names == cli.schema.names
    assert mine.drop_columns(["features"]).equals(cli.drop_columns(["features"]))
    a = mine.column("features").to_pylist()
    b = cli.column("features").to_pylist()
    assert a[-1] is None and b[-1] is None
    np.testing.assert_allclose(np.array(a[:-1]), np.array(b[:-1]), atol=1e-6)


@pytest.mark.parametrize("extra", [["--level", "document", "--strategy", "sliding", "--overlap", "4"],
                                   ["--level", "token", "--strategy", "chunk"],
                                   ["--level", "window", "--strategy", "chunk"],
                                   ["--feature", "head:cls", "--feature", "chunk:mean:-2", "--aggregate", "mean,max"]])
def test_pipe_run_gives_extracts_file(tiny_model_dir, runner, tmp_path, extra):
    """pipe.run and `longbert extract` write the same rows, vectors within 1e-6, at every level."""
    src = write_csv(tmp_path / "in.csv", [{"text": words(n, n)} for n in (1, 14, 15, 40, 3)] + [{"text": " "}])
    result = invoke(runner, ["extract", src, "-o", tmp_path / "cli.parquet", "--model", tiny_model_dir,
                             "--max-length", ML, "--no-progress", *extra])
    assert result.exit_code == 0, result.output
    options: dict = {"model": str(tiny_model_dir), "max_length": ML}
    it = iter(extra)
    for flag in it:
        key, value = flag[2:].replace("-", "_"), next(it)
        if key == "feature":
            options.setdefault("feature", []).append(value)
        else:
            options[key] = int(value) if value.isdigit() else value
    longbert.Pipeline.from_options(**options).run(str(src), str(tmp_path / "mine.parquet"))
    mine, cli = pq.read_table(tmp_path / "mine.parquet"), pq.read_table(tmp_path / "cli.parquet")
    assert mine.schema.equals(cli.schema, check_metadata=False)
    for name in mine.column_names:
        x, y = mine.column(name).to_pylist(), cli.column(name).to_pylist()
        if name in ("features", "token_features") or name.startswith("f_"):
            for p, q in zip(x, y):
                assert (p is None) == (q is None)
                if p is not None:
                    np.testing.assert_allclose(np.array(p, dtype=np.float32), np.array(q, dtype=np.float32), atol=1e-6)
        else:
            assert x == y, name


def test_replace_and_without(pipe):
    seen = []

    def spy(batch):
        seen.append(len(batch.unique))
        return batch

    p = pipe.insert(spy, after="dedup", name="spy").without("rows")
    out = p.process(longbert.Batch.from_texts([words(30)]))
    assert seen == [3] and out.table is None and out.vectors["features"].shape == (1, 32)
    with pytest.raises(ConfigError, match="keep the 'rows' stage"):
        p(longbert.Batch.from_texts([words(3)]))
    same = pipe.replace("segment", pipe["segment"])
    assert same.names == pipe.names
    with pytest.raises(ConfigError, match="no stage 'nope'"):
        pipe.insert(spy, before="nope")
    with pytest.raises(ConfigError, match="has not filled"):
        pipe["encode"](longbert.Batch.from_texts(["w1"]))


def test_read_yields_batches_with_one_id_type(tmp_path, pipe):
    """read() settles the id column once; its batches go through the pipeline (the id mismatch of a
    hand-built Extractor cannot happen)."""
    src = write_csv(tmp_path / "c.csv", [{"id": i, "text": words(5 + i), "lab": "x"} for i in range(7)])
    batches = list(longbert.read(str(src), block_rows=3, keep_cols=["lab"]))   # a list, as a user writes it
    assert [len(b) for b in batches] == [3, 3, 1]
    assert batches[0].ids == ["0", "1", "2"] and batches[0].rows.column("lab").to_pylist() == ["x"] * 3
    table = pipe(batches[1])
    assert table.column("id").to_pylist() == ["3", "4", "5"]
    with pytest.raises(ConfigError, match="'strategy' is not a reading option"):
        list(longbert.read(str(src), strategy="head"))
    with pytest.raises(InputError):
        list(longbert.read(str(tmp_path / "missing.csv")))


def test_save_features_is_read_by_load_features_and_probe(tmp_path, runner):
    """(e) Vectors made elsewhere, written with save_features, load back exactly and feed probe."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 6)).astype(np.float32)
    y = ["a" if v > 0 else "b" for v in X[:, 0]]
    X[3] = np.nan
    path = longbert.save_features(tmp_path / "mine.parquet", [f"d{i}" for i in range(40)], X, label=y)
    ids, X2, meta = longbert.load_features(path)
    assert meta["source"] == "external" and meta["model"] is None
    assert list(ids) == [f"d{i}" for i in range(40) if i != 3] and meta["left_out"][0]["id"] == "d3"
    np.testing.assert_array_equal(X2, np.delete(X, 3, axis=0))
    assert list(meta["kept"]["label"]) == [v for i, v in enumerate(y) if i != 3]
    result = invoke(runner, ["probe", path, "--label-col", "label", "--folds", "3", "--no-progress"])
    assert result.exit_code == 0, result.output


def test_encode_and_vectorizer_take_preprocess_feature_and_level(tiny_model_dir):
    texts = ["<p>" + words(20) + "</p>", words(30, 3)]
    strip = lambda t: t.replace("<p>", "").replace("</p>", "")  # noqa: E731
    common = dict(model=str(tiny_model_dir), max_length=ML)
    X = longbert.encode(texts, preprocess=strip, feature="chunk:mean", **common)
    Y = longbert.encode([strip(t) for t in texts], strategy="chunk", pooling="mean", **common)
    np.testing.assert_array_equal(X, Y)
    W, doc = longbert.encode(texts, preprocess=strip, feature="chunk:mean", level="window", **common)
    assert doc.tolist() == [0, 0, 1, 1, 1] and W.shape == (5, 32)
    np.testing.assert_allclose(W[:2].mean(0), X[0], atol=1e-6)    # chunk and average of its windows
    T = longbert.encode(texts, preprocess=strip, strategy="chunk", level="token", **common)
    assert [t.shape for t in T] == [(20, 32), (30, 32)]
    V = longbert.LongBertVectorizer(preprocess=strip, feature=["chunk:mean", "head:cls"], **common).transform(texts)
    head = longbert.encode([strip(t) for t in texts], strategy="head", pooling="cls", **common)
    np.testing.assert_allclose(V, np.hstack([Y, head]), atol=1e-6)
    with pytest.raises(ConfigError, match="level='document'"):
        longbert.LongBertVectorizer(level="window", **common).fit(texts)


def test_one_extract_resolves_the_model_once(tiny_model_dir, runner, tmp_path, monkeypatch):
    """The model's config, its safetensors header and its facts are read once per run (they were read
    twice, the path resolved six times); a hub id is probed once per process."""
    import pipeline.block as block
    import pipeline.checkpoint as checkpoint
    import pipeline.model as model

    calls: dict[str, int] = {}

    def counting(owner, name):
        real = getattr(owner, name)

        def wrapper(*a, **k):
            calls[name] = calls.get(name, 0) + 1
            return real(*a, **k)
        monkeypatch.setattr(owner, name, wrapper)

    counting(block, "model_facts")
    counting(model, "load_model_config")
    counting(checkpoint, "read_header")   # the safetensors header of each weight file
    monkeypatch.setattr(checkpoint, "_STORED", {})
    counting(model, "_hub_or_cache")
    src = write_csv(tmp_path / "in.csv", [{"text": words(20)}, {"text": words(3)}])
    result = invoke(runner, ["extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model_dir, "--no-progress"])
    assert result.exit_code == 0, result.output
    assert calls == {"model_facts": 1, "load_model_config": 1, "read_header": 1}
    monkeypatch.setattr(model, "_HUB_RESOLVED", {})
    monkeypatch.setattr(model, "_unreachable", lambda endpoint: None)   # a hub that answers
    assert [model.resolve_model_path("org/some-model") for _ in range(3)] == ["org/some-model"] * 3
    assert calls["_hub_or_cache"] == 1


def test_import_longbert_beside_a_clone_named_longbert(tmp_path):
    """From the folder that holds a clone named ``longbert``, ``import longbert`` is still the API (not an
    empty namespace package), and ``longbert.stages.<module>`` imports give the stage modules themselves."""
    import subprocess
    import sys

    (tmp_path / "longbert").mkdir()
    (tmp_path / "longbert" / "README.md").write_text("a clone\n")
    code = ("import longbert, longbert.stages.segment as s; from longbert.stages.aggregate import token_features; "
            "print(hasattr(longbert, 'Pipeline'), s is longbert.stages.segment, callable(token_features))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True"]
