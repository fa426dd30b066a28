"""The Pipeline: insert / replace / without / run against extract, read, save_features, the hooks of encode and
the vectorizer, resolve-once counts, and the import paths. Each stage alone: tests/test_<stage name>.py."""
from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import STAGE_ML as ML
from conftest import invoke, words, write_csv

import longbert
from pipeline.errors import ConfigError, InputError


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
    hand-built block cannot happen)."""
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
    import pipeline.engine.resolved as block
    import pipeline.model.checkpoint as checkpoint
    import pipeline.model.facts as model

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
    code = ("import longbert, longbert.stages.text.segment as s; from longbert.stages.output.aggregate import token_features; "
            "print(hasattr(longbert, 'Pipeline'), s is longbert.stages.text.segment, callable(token_features))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True"]
