"""--dims: a PCA fitted on the first documents, applied before --out-dtype and kept in the metadata. The
projection is recomputed here with scikit-learn and numpy from the float32 vectors of the same texts;
--projection reuse, the Python form, Matryoshka truncation and the refusals with their messages."""
from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from sklearn.decomposition import PCA

from conftest import extract_cli, words
from pipeline.classify.features import load_features
from pipeline.projection import Projection, fit_pca

COMMON = ("--max-length", "16", "--strategy", "chunk")
TEXTS = [words(8 + (5 * i) % 23, 3 * i) for i in range(24)]


def _floats(tmp_path, model, texts, name="f.parquet", *args):
    _, out = extract_cli(tmp_path, texts, *COMMON, *args, model=model, name=name)
    return np.array(pq.read_table(out).column("features").to_pylist(), dtype=np.float32)   # (n, D)


def _meta(path) -> dict:
    return json.loads(pq.read_schema(path).metadata[b"longbert"])


def test_fit_pca_equals_scikit_learn():
    x = np.random.default_rng(0).normal(size=(50, 12)).astype(np.float32) * np.arange(1, 13, dtype=np.float32)
    p = fit_pca(x, 5)
    ref = PCA(5, svd_solver="full").fit(x.astype(np.float64))
    np.testing.assert_allclose(p.mean, ref.mean_, atol=1e-5)
    np.testing.assert_allclose(p.components, ref.components_, atol=1e-5)
    np.testing.assert_allclose(p.apply(x), ref.transform(x.astype(np.float64)), atol=1e-4)
    assert Projection.from_metadata(json.loads(json.dumps(p.to_metadata()))) == p


def test_dims_matches_a_pca_of_the_same_vectors(tmp_path, tiny_model_dir):
    x = _floats(tmp_path, tiny_model_dir, TEXTS)
    result, out = extract_cli(tmp_path, TEXTS, *COMMON, "--dims", "8", model=tiny_model_dir, name="d.parquet")
    ref = PCA(8, svd_solver="full").fit(x.astype(np.float64))
    meta = _meta(out)
    entry = meta["projection"]["columns"][0]
    stored = Projection.from_metadata(entry)
    assert (meta["projection"]["method"], entry["input_dim"], entry["dim"], entry["fitted_on"]) == ("pca", 32, 8, 24)
    assert meta["feature_dim"] == 8
    np.testing.assert_allclose(stored.mean, ref.mean_, atol=1e-5)
    np.testing.assert_allclose(stored.components, ref.components_, atol=1e-5)
    ids, X, _ = load_features(out)
    assert X.dtype == np.float32 and X.shape == (len(TEXTS), 8)
    np.testing.assert_allclose(X, ref.transform(x.astype(np.float64)), atol=1e-4)
    np.testing.assert_allclose(X, (x - stored.mean) @ stored.components.T, atol=1e-5)
    assert "dims: a PCA to 8 dimensions, fitted on the first 24 documents (24 vectors), " \
           "fewer than 1024" in result.output


@pytest.mark.parametrize("dtype", ["int8", "binary"])
def test_dims_before_out_dtype(tmp_path, tiny_model_dir, dtype):
    _, f = extract_cli(tmp_path, TEXTS, *COMMON, "--dims", "8", model=tiny_model_dir, name="f8.parquet")
    _, X, _ = load_features(f)
    _, out = extract_cli(tmp_path, TEXTS, *COMMON, "--dims", "8", "--out-dtype", dtype, model=tiny_model_dir,
                         name=f"{dtype}.parquet")
    _, raw, meta = load_features(out, raw=True)
    if dtype == "int8":
        assert raw.shape == (len(TEXTS), 8) and raw.dtype == np.int8
        np.testing.assert_allclose(raw * meta["scale"][:, None], X, atol=float(meta["scale"].max()) / 2 + 1e-6)
    else:
        center = np.array(meta["compact"]["columns"][0]["center"], np.float32)
        assert center.shape == (8,) and meta["compact"]["columns"][0]["dim"] == 8
        np.testing.assert_allclose(center, X.astype(np.float64).mean(0), atol=1e-5)
        np.testing.assert_array_equal(np.unpackbits(raw, axis=1, count=8).astype(bool), X > center)


def test_projection_file_gives_the_same_vectors(tmp_path, tiny_model_dir):
    _, corpus = extract_cli(tmp_path, TEXTS, *COMMON, "--dims", "6", model=tiny_model_dir, name="corpus/")
    query = [TEXTS[3], words(13, 5)]
    result, q = extract_cli(tmp_path, query, *COMMON, "--projection", str(corpus), model=tiny_model_dir,
                            name="q.parquet")
    _, C, corpus_meta = load_features(corpus)
    _, Q, meta = load_features(q)
    assert Q.shape == (2, 6)
    np.testing.assert_array_equal(Q[0], C[3])   # the same text, the same vector in both files
    assert meta["projection"] == corpus_meta["projection"]
    assert "dims:" not in result.output
    x = _floats(tmp_path, tiny_model_dir, query, "fq.parquet")
    p = Projection.from_metadata(meta["projection"]["columns"][0])
    np.testing.assert_allclose(Q, (x - p.mean) @ p.components.T, atol=1e-5)


def test_python_projection_as_arrays(tmp_path, tiny_model_dir):
    from pipeline.engine.compose import Pipeline
    import pyarrow as pa

    x = _floats(tmp_path, tiny_model_dir, TEXTS)
    ref = PCA(4, svd_solver="full").fit(x.astype(np.float64))
    pipe = Pipeline.from_options(model=str(tiny_model_dir), max_length=16, strategy="chunk",
                                 projection=(ref.mean_, ref.components_))
    table = pipe(pa.table({"id": [f"r{i}" for i in range(3)], "text": TEXTS[:3]}))
    got = np.array(table.column("features").to_pylist(), np.float32)
    np.testing.assert_allclose(got, ref.transform(x[:3].astype(np.float64)), atol=1e-4)
    assert table.schema.field("features").type.list_size == 4


def test_matryoshka_folder_truncates(tmp_path, tiny_model_dir):
    import shutil

    folder = tmp_path / "mrl"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "README.md").write_text('MatryoshkaLoss with these parameters:\n```json\n{\n    "loss": '
                                      '"MultipleNegativesRankingLoss",\n    "matryoshka_dims": [\n        32,\n'
                                      '        16,\n        8\n    ]\n}\n```\n')
    x = _floats(tmp_path, folder, TEXTS)
    result, out = extract_cli(tmp_path, TEXTS, *COMMON, "--dims", "16", model=folder, name="t.parquet")
    _, X, meta = load_features(out)
    np.testing.assert_array_equal(X, x[:, :16])
    assert meta["projection"]["method"] == "truncate"
    assert "dims: the first 16 dimensions (the model folder declares 16 as a Matryoshka dimension)" in result.output
    _, out = extract_cli(tmp_path, TEXTS, *COMMON, "--dims", "16", "--dims-method", "pca", model=folder,
                         name="p.parquet")
    assert _meta(out)["projection"]["method"] == "pca"


def test_dims_refusals(tmp_path, tiny_model_dir):
    def refused(*args, texts=TEXTS, name="x.parquet"):
        result, _ = extract_cli(tmp_path, texts, *COMMON, *args, model=tiny_model_dir, name=name, ok=False)
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
        return " ".join(result.output.split())

    assert "--dims 32 is not below the model's hidden size 32; pass --dims below 32, or drop --dims to keep " \
           "them all" in refused("--dims", "32")
    assert "--dims 20 is more than the 5 documents with vectors its projection is fitted on (the first 1024 " \
           "documents of the inputs); lower --dims to at most 5, or pass --projection with the output of a " \
           "larger --dims run" in refused("--dims", "20", texts=TEXTS[:5])
    assert "--dims-method truncate: the model folder declares no Matryoshka dimension 8 (declared: none)" \
        in refused("--dims", "8", "--dims-method", "truncate")
    assert "--dims 0 must be a whole number >= 1" in refused("--dims", "0")
    assert "--dims projects document or window vectors, not --level token's per-token vectors" \
        in refused("--dims", "4", "--level", "token")
    _, plain = extract_cli(tmp_path, TEXTS[:3], *COMMON, model=tiny_model_dir, name="plain.parquet")
    assert f"--projection {str(plain)!r} holds no projection (it was written without --dims)" \
        in refused("--projection", str(plain))
    _, d6 = extract_cli(tmp_path, TEXTS, *COMMON, "--dims", "6", model=tiny_model_dir, name="d6.parquet")
    assert f"--projection {str(d6)!r} keeps 6 dimensions, but --dims is 4; pass --dims 6, or drop --dims to " \
           "take the file's" in refused("--dims", "4", "--projection", str(d6))
    assert f"--projection {str(d6)!r} projects the columns {{'features': 32}}, this run writes " \
           "{'features': 64}; pass an output of the same features and model" \
        in refused("--projection", str(d6), "--layers", "-1,-2", "--layer-agg", "concat")


def test_projection_of_another_model_is_refused(tmp_path, tiny_model_dir):
    import shutil

    import torch
    from transformers import BertModel

    other = tmp_path / "other"
    shutil.copytree(tiny_model_dir, other)
    torch.manual_seed(1)
    model = BertModel.from_pretrained(other)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    model.save_pretrained(other)
    _, d6 = extract_cli(tmp_path, TEXTS, *COMMON, "--dims", "6", model=tiny_model_dir, name="d6.parquet")
    result, _ = extract_cli(tmp_path, TEXTS[:2], *COMMON, "--projection", str(d6), model=other, name="o.parquet",
                            ok=False)
    assert result.exit_code == 2
    assert f"--projection {str(d6)!r} is the projection of another model" in result.output


def test_resume_keeps_its_projection(tmp_path, tiny_model_dir, monkeypatch):
    from conftest import disk_full_at_part

    args = (*COMMON, "--dims", "5", "--block-rows", "8")
    _, whole = extract_cli(tmp_path, TEXTS, *args, model=tiny_model_dir, name="whole/")
    src = tmp_path / "in.csv"
    disk_full_at_part(monkeypatch, 2)
    result, out = extract_cli(tmp_path, TEXTS, *args, model=tiny_model_dir, name="cut/", src=src, ok=False)
    assert result.exit_code == 1
    monkeypatch.undo()
    result, _ = extract_cli(tmp_path, None, *args, "--resume", model=tiny_model_dir, name="cut/", src=src,
                            overwrite=False)
    assert "dims:" not in result.output   # taken from the parts it finishes, not fitted again
    _, A, meta_a = load_features(whole)
    _, B, meta_b = load_features(out)
    np.testing.assert_array_equal(A, B)
    assert meta_a["projection"] == meta_b["projection"]


def test_python_dims_without_a_projection_is_refused_on_a_batch(tiny_model_dir):
    import pyarrow as pa

    from pipeline.engine.compose import Pipeline
    from pipeline.errors import ConfigError

    pipe = Pipeline.from_options(model=str(tiny_model_dir), max_length=16, dims=4)
    with pytest.raises(ConfigError, match=r"dims=4 needs a fitted projection, which a run finds on its first "
                                          r"documents \(pipe.run, longbert extract --dims\)"):
        pipe(pa.table({"id": ["a"], "text": [TEXTS[0]]}))


def test_each_feature_column_gets_its_own_pca(tmp_path, tiny_model_dir):
    feats = ("--max-length", "16", "--feature", "head:cls", "--feature", "chunk:mean")
    _, f = extract_cli(tmp_path, TEXTS, *feats, model=tiny_model_dir, name="f.parquet")
    _, d = extract_cli(tmp_path, TEXTS, *feats, "--dims", "5", model=tiny_model_dir, name="d.parquet")
    meta = _meta(d)
    assert [c["column"] for c in meta["projection"]["columns"]] == ["f_head_cls", "f_chunk_mean"]
    assert [e["feature_dim"] for e in meta["features"]] == [5, 5]
    for column in ("f_head_cls", "f_chunk_mean"):
        x = np.array(pq.read_table(f).column(column).to_pylist(), np.float32)
        ref = PCA(5, svd_solver="full").fit(x.astype(np.float64))
        _, X, _ = load_features(d, feature=column)
        np.testing.assert_allclose(X, ref.transform(x.astype(np.float64)), atol=1e-4)
