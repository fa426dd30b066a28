"""--out-dtype int8 and binary: the stored columns equal numpy's quantization / packbits of the float32
run's vectors, at document, window and token level; the metadata says how to decode; load_features
decodes (and raw=True returns the stored arrays); --resume on a DIR/ gives the same bytes."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import disk_full_at_part, extract_cli, invoke, words, write_csv

from pipeline.classify.features import load_features
from pipeline.errors import ConfigError
from pipeline.output.write import PartsSink, read_manifest

ML = 16
LENGTHS = [29, 3, 0, 14, 40, 7]   # several windows, one, an empty document (a null row), long


def run(runner, model_dir, tmp_path, *extra, out="out.parquet", lengths=LENGTHS):
    """conftest.extract_cli on texts of ``lengths`` with ids in in.csv, chunk unless ``extra`` has --feature
    (exit 0): the output path."""
    _, path = extract_cli(tmp_path, [words(n, i) for i, n in enumerate(lengths)], "--max-length", ML,
                          *(() if "--feature" in extra else ("--strategy", "chunk")), *extra, model=model_dir, name=out,
                          ids=True, src=tmp_path / "in.csv", runner=runner)
    return path


def int8_reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """numpy's symmetric absmax quantization, written out here: scale = max|x| / 127, q = rint(x / scale)."""
    scale = np.abs(x).max(axis=1) / 127.0
    q = np.clip(np.rint(x / np.where(scale > 0, scale, 1)[:, None]), -127, 127).astype(np.int8)
    return q, scale.astype(np.float32)


def fixed(column) -> np.ndarray:
    """A fixed_size_list column of non-null rows -> (n, k) numpy in its stored dtype."""
    arr = column.combine_chunks()
    return arr.flatten().to_numpy(zero_copy_only=False).reshape(len(arr), arr.type.list_size)


@pytest.mark.parametrize("level", ["document", "window"])
def test_int8_equals_the_quantized_float32_run(runner, tiny_model_dir, tmp_path, level):
    ref = pq.read_table(run(runner, tiny_model_dir, tmp_path, "--level", level, out="f32.parquet"))
    out = run(runner, tiny_model_dir, tmp_path, "--level", level, "--out-dtype", "int8", out="i8.parquet")
    table = pq.read_table(out)
    assert table.schema.field("features").type == pa.list_(pa.int8(), 32)
    assert table.schema.field("features_scale").type == pa.float32()
    names = table.column_names
    assert names.index("features_scale") == names.index("features") + 1
    assert [n for n in names if n != "features_scale"] == ref.column_names   # only a column added
    valid = ref.column("features").is_valid().to_numpy(zero_copy_only=False)
    assert not valid.all() and valid.any()                                   # the empty document's null row
    assert table.column("features").is_valid().to_numpy(zero_copy_only=False).tolist() == valid.tolist()
    assert table.column("features_scale").is_valid().to_numpy(zero_copy_only=False).tolist() == valid.tolist()
    x = fixed(ref.column("features").filter(valid))                          # (n, 32) float32
    q, scale = int8_reference(x)
    np.testing.assert_array_equal(fixed(table.column("features").filter(valid)), q)
    np.testing.assert_allclose(table.column("features_scale").filter(valid).to_numpy(), scale, rtol=1e-6)
    assert np.abs(q).max(axis=1).tolist() == [127] * len(q)

    meta = json.loads(table.schema.metadata[b"longbert"])
    assert meta["out_dtype"] == "int8"
    assert meta["compact"]["form"] == "int8" and meta["compact"]["scale_column"] == "features_scale"
    assert meta["compact"]["dequantize"] == "x = q * scale"
    assert "compact" not in json.loads(ref.schema.metadata[b"longbert"])     # float32 files stay as they were

    ids, X, lmeta = load_features(out)
    ref_ids, ref_X, _ = load_features(tmp_path / "f32.parquet")
    assert ids.tolist() == ref_ids.tolist() and X.dtype == np.float32 and X.shape == ref_X.shape
    assert (np.abs(X - ref_X) <= scale[:, None] / 2 + 1e-7).all()
    assert not np.array_equal(X, ref_X)
    _, raw, rmeta = load_features(out, raw=True)
    assert raw.dtype == np.int8
    np.testing.assert_array_equal(raw, q)
    np.testing.assert_allclose(rmeta["scale"], scale, rtol=1e-6)


def center_reference(x: np.ndarray) -> np.ndarray:
    """The binary centre written out with numpy: the per-dimension mean of the given float32 vectors."""
    return np.mean(np.asarray(x, np.float64), axis=0).astype(np.float32)


def centered_signs(x: np.ndarray, center: np.ndarray, bits: np.ndarray) -> None:
    """bits == packbits(x > center), checked where no rounding of the two runs' vectors (batched apart,
    within 1e-6) can flip a sign; those are nearly all."""
    sure = np.abs(x - center) > 1e-5                                        # (n, D)
    np.testing.assert_array_equal(np.unpackbits(bits, axis=1, count=x.shape[1])[sure], (x > center)[sure])
    assert sure.mean() > 0.99


@pytest.mark.parametrize("level", ["document", "window"])
def test_binary_equals_packbits_of_the_centred_float32_run(runner, tiny_model_dir, tmp_path, level):
    ref = pq.read_table(run(runner, tiny_model_dir, tmp_path, "--level", level, out="f32.parquet"))
    out = run(runner, tiny_model_dir, tmp_path, "--level", level, "--out-dtype", "binary", out="bin.parquet")
    table = pq.read_table(out)
    assert table.schema.field("features").type == pa.list_(pa.uint8(), 4)
    assert table.column_names == ref.column_names
    valid = ref.column("features").is_valid().to_numpy(zero_copy_only=False)
    x = fixed(ref.column("features").filter(valid))
    bits = fixed(table.column("features").filter(valid))
    meta = json.loads(table.schema.metadata[b"longbert"])
    center = np.asarray(meta["compact"]["columns"][0]["center"], np.float32)
    np.testing.assert_allclose(center, center_reference(x), atol=1e-6)   # fewer than 64 documents: all of them
    assert np.abs(center).max() > 0.01                                   # a centre, not the signs of x
    centered_signs(x, center, bits)
    assert meta["out_dtype"] == "binary"
    assert {k: meta["compact"][k] for k in ("form", "dim", "bitorder", "decode", "bit")} == \
        {"form": "binary", "dim": 32, "bitorder": "big", "decode": "x = 2*bit - 1", "bit": "1 where x > center"}
    _, X, _ = load_features(out)
    np.testing.assert_array_equal(X, np.unpackbits(bits, axis=1, count=32).astype(np.float32) * 2 - 1)
    _, raw, _ = load_features(out, raw=True)
    assert raw.dtype == np.uint8
    np.testing.assert_array_equal(raw, bits)


def test_binary_centre_is_the_mean_of_the_first_64_documents(runner, tiny_model_dir, tmp_path):
    lengths = [5 + (7 * i) % 30 for i in range(64)] + [60] * 16   # 80 documents; the last 16 long ones
    ref = pq.read_table(run(runner, tiny_model_dir, tmp_path, "--block-rows", 10, out="f32.parquet", lengths=lengths))
    out = run(runner, tiny_model_dir, tmp_path, "--block-rows", 10, "--out-dtype", "binary", out="bin.parquet",
              lengths=lengths)
    x = fixed(ref.column("features"))
    meta = json.loads(pq.read_schema(out).metadata[b"longbert"])
    center = np.asarray(meta["compact"]["columns"][0]["center"], np.float32)
    np.testing.assert_allclose(center, center_reference(x[:64]), atol=1e-6)
    assert np.abs(center_reference(x) - center_reference(x[:64])).max() > 1e-3   # the rule is seen
    centered_signs(x, center, fixed(pq.read_table(out).column("features")))


def token_lists(table: pa.Table, column: str) -> list[np.ndarray | None]:
    """token_features-like list<fixed_size_list<x>[k]> -> per row an (m, k) array (None: null row)."""
    out = []
    for row in table.column(column).to_pylist():
        out.append(None if row is None else np.array(row))
    return out


def test_token_level_int8_and_binary(runner, tiny_model_dir, tmp_path):
    ref = pq.read_table(run(runner, tiny_model_dir, tmp_path, "--level", "token", out="f32.parquet"))
    i8 = pq.read_table(run(runner, tiny_model_dir, tmp_path, "--level", "token", "--out-dtype", "int8",
                           out="i8.parquet"))
    bn = pq.read_table(run(runner, tiny_model_dir, tmp_path, "--level", "token", "--out-dtype", "binary",
                           out="bin.parquet"))
    assert i8.schema.field("token_features").type == pa.list_(pa.list_(pa.int8(), 32))
    assert i8.schema.field("token_features_scale").type == pa.list_(pa.float32())
    assert bn.schema.field("token_features").type == pa.list_(pa.list_(pa.uint8(), 4))
    assert [n for n in i8.column_names if not n.endswith("_scale")] == ref.column_names
    meta = json.loads(i8.schema.metadata[b"longbert"])
    assert {"column": "token_features", "scale_column": "token_features_scale", "dim": 32} in meta["compact"]["columns"]
    scales = i8.column("token_features_scale").to_pylist()
    seen, binary = 0, []
    for x, q, s, b in zip(token_lists(ref, "token_features"), token_lists(i8, "token_features"), scales,
                          token_lists(bn, "token_features")):
        if x is None:
            assert q is None and s is None and b is None
            continue
        seen += 1
        rq, rs = int8_reference(x.astype(np.float32))
        np.testing.assert_array_equal(q, rq)
        np.testing.assert_allclose(s, rs, rtol=1e-6)
        assert len(s) == len(x)
        assert (np.abs(q * np.array(s, np.float32)[:, None] - x) <= rs[:, None] / 2 + 1e-7).all()
        binary.append((x.astype(np.float32), b))
    assert seen == 5
    # binary: each token's signs around the mean token vector of the (fewer than 64) documents
    center = np.asarray(next(c["center"] for c in json.loads(bn.schema.metadata[b"longbert"])["compact"]["columns"]
                             if c["column"] == "token_features"), np.float32)
    tokens = np.concatenate([x for x, _ in binary])
    np.testing.assert_allclose(center, center_reference(tokens), atol=1e-6)
    centered_signs(tokens, center, np.concatenate([b for _, b in binary]).astype(np.uint8))
    # the document vectors of a token run are compact too, and load_features skips the token columns
    _, X, _ = load_features(tmp_path / "i8.parquet")
    _, ref_X, _ = load_features(tmp_path / "f32.parquet")
    assert X.shape == ref_X.shape and np.abs(X - ref_X).max() < np.abs(ref_X).max() / 127


@pytest.mark.parametrize("level", ["document", "window", "token"])
@pytest.mark.parametrize("form", ["int8", "binary"])
def test_resume_on_a_dir_gives_the_same_bytes(runner, tiny_model_dir, tmp_path, monkeypatch, form, level):
    lengths = [29, 0, 40, 3, 15, 50, 1, 33, 0, 20]
    extra = ("--level", level, "--out-dtype", form, "--block-rows", 3)
    single = pq.read_table(run(runner, tiny_model_dir, tmp_path, *extra, lengths=lengths))
    write = disk_full_at_part(monkeypatch, 3)
    src = tmp_path / "in.csv"
    args = ["extract", src, "-o", f"{tmp_path}/parts/", "--model", tiny_model_dir, "--no-progress",
            "--max-length", ML, "--strategy", "chunk", *extra]
    result = invoke(runner, args)
    assert result.exit_code == 1 and "kept for --resume" in result.output
    assert [p["block"] for p in read_manifest(tmp_path / "parts")["parts"]] == [0, 1]
    monkeypatch.setattr(PartsSink, "write", write)
    if form == "binary":   # the resumed run takes the centre from the manifest; it computes none
        monkeypatch.setattr("pipeline.engine.calibrate.first_documents_centers", lambda *a, **k: pytest.fail("recomputed"))
    result = invoke(runner, [*args, "--resume"])
    assert result.exit_code == 0 and "resuming" in result.output, result.output
    parts = pq.read_table(sorted((tmp_path / "parts").glob("part-*.parquet")))
    for name in single.column_names:
        assert parts.column(name).to_pylist() == single.column(name).to_pylist(), name
    _, X, _ = load_features(tmp_path / "parts")
    _, raw, _ = load_features(tmp_path / "parts", raw=True)
    np.testing.assert_array_equal(X, load_features(tmp_path / "out.parquet")[1])
    np.testing.assert_array_equal(raw, load_features(tmp_path / "out.parquet", raw=True)[1])
    windows = sum(-(-n // (ML - 2)) for n in lengths)       # chunk: ceil(n / 14) windows of each document
    assert raw.dtype == (np.int8 if form == "int8" else np.uint8) and X.shape == (windows if level == "window" else 8, 32)
    # another --out-dtype is another run: --resume refuses to mix the forms
    other = "binary" if form == "int8" else "int8"
    result = invoke(runner, [*args[:-2], "--out-dtype", other, "--block-rows", 3, "--resume"])
    assert result.exit_code == 2 and f"--out-dtype: {form!r} then, {other!r} now" in result.output


def test_several_features_get_a_scale_column_each(runner, tiny_model_dir, tmp_path):
    out = run(runner, tiny_model_dir, tmp_path, "--feature", "chunk:mean", "--feature", "chunk:cls",
              "--out-dtype", "int8")
    table = pq.read_table(out)
    meta = json.loads(table.schema.metadata[b"longbert"])
    columns = [c["column"] for c in meta["features"]]
    assert len(columns) == 2
    for c in columns:
        assert table.schema.field(c).type == pa.list_(pa.int8(), 32)
        assert table.schema.field(c + "_scale").type == pa.float32()
    assert [e["scale_column"] for e in meta["compact"]["columns"]] == [c + "_scale" for c in columns]
    _, X, m = load_features(out, feature=columns[1], raw=True)
    assert X.dtype == np.int8 and m["scale"].shape == (len(X),)


def test_encode_refuses_compact_out_dtype():
    import longbert

    with pytest.raises(ConfigError, match="out_dtype='int8'"):
        longbert.encode(["a text"], out_dtype="int8")


def test_help_names_the_choices(runner):
    result = invoke(runner, ["extract", "--help"])
    assert "int8" in result.output and "binary" in result.output and "_scale" in result.output


def test_keep_col_named_like_the_scale_column_is_refused(runner, tiny_model_dir, tmp_path):
    src = write_csv(tmp_path / "in.csv", [{"text": words(5), "features_scale": "x"}])
    args = ["extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model_dir, "--no-progress",
            "--keep-col", "features_scale"]
    result = invoke(runner, [*args, "--out-dtype", "int8"])
    assert result.exit_code == 2 and "--keep-col 'features_scale' clashes" in result.output
    assert invoke(runner, [*args, "--out-dtype", "binary"]).exit_code == 0   # no scale column there


def test_token_int8_quantizes_the_pieces_array_once_and_gives_views_of_it():
    """The int8 token vectors of documents whose float32 vectors tile one array are views of one int8 array
    (no per-document copy; the Arrow column takes it whole), equal to each document quantized alone."""
    from pipeline.compact import quantize_int8
    from pipeline.output.arrow_arrays import tiled_buffer
    from pipeline.output.vector_columns import token_int8

    rng = np.random.default_rng(3)
    base = (rng.standard_normal((50, 8)) * rng.uniform(0.1, 5, size=(50, 1))).astype(np.float32)
    items = [base[0:20], base[20:21], base[21:50]]
    qs, scales = token_int8(items)
    for x, q, s in zip(items, qs, scales):
        rq, rs = quantize_int8(x)
        np.testing.assert_array_equal(q, rq)
        np.testing.assert_array_equal(s, rs)
    assert tiled_buffer(qs, np.dtype(np.int8)) is not None and tiled_buffer(scales, np.dtype(np.float32)) is not None
    assert all(q.base is qs[0].base is not None for q in qs)   # views of one array
    # a document left out (a row error) in the middle: each document alone, the same values
    gaps = [base[0:20], None, base[21:50]]
    qs, scales = token_int8(gaps)
    assert qs[1] is None and scales[1] is None
    np.testing.assert_array_equal(qs[2], quantize_int8(base[21:50])[0])


@pytest.mark.parametrize("form", ["int8", "binary"])
def test_compact_vector_columns_are_written_without_a_dictionary(runner, tiny_model_dir, tmp_path, form):
    """A dictionary would hold a 4-byte index per int8 value of the row group in the writer (as much as the
    float32 vectors); the ids and token ids keep theirs."""
    path = run(runner, tiny_model_dir, tmp_path, "--level", "token", "--out-dtype", form, out=f"{form}.parquet")
    meta = pq.ParquetFile(path).metadata
    encodings = {meta.schema.column(i).path: meta.row_group(0).column(i).encodings for i in range(meta.num_columns)}
    dictionary = {p for p, e in encodings.items() if any("DICTIONARY" in x for x in e)}
    vectors = {p for p in encodings if p.startswith(("features", "token_features"))}
    assert vectors and not vectors & dictionary, encodings
    assert {"id", "token_ids.list.element"} <= dictionary
