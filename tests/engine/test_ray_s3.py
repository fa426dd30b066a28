"""--engine ray with object storage (moto's server on 127.0.0.1, tests/cache/s3_server.py): --cache
s3://BUCKET/PREFIX shared by the actors and the driver, S3 inputs the actors read, and -o s3://BUCKET/PREFIX/
whose parts the actors upload themselves; the actors reach it all with the driver's AWS_* variables."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import invoke, words, write_csv
from test_cache import assert_same, counts, extract, unique_windows
from test_object_store import objects, s3  # noqa: F401 - the fixtures (s3_server: conftest)
from test_formats import corpus  # noqa: F401 - the corpus fixture, written in every format

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]


def test_ray_workers_fill_the_store_a_local_run_reads(ray_address, tiny_model_dir, tmp_path, runner, s3):
    uri, client, counted = s3
    texts = [words(10 + 5 * i, i) for i in range(16)]
    src = write_csv(tmp_path / "r.csv", [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)])
    result = invoke(runner, ["extract", src, "-o", f"{tmp_path}/ray/", "--model", tiny_model_dir, "--no-progress",
                             "--max-length", 16, "--strategy", "chunk", "--block-rows", 4, "--engine", "ray",
                             "--workers", 2, "--cache", uri])
    assert result.exit_code == 0, result.output
    n = len(unique_windows(tiny_model_dir, texts))
    assert objects(client, uri) and counts(result.output)[0] >= n
    fresh, _ = extract(runner, tiny_model_dir, tmp_path, texts, "r", "--strategy", "chunk")
    again, out = extract(runner, tiny_model_dir, tmp_path, texts, "r", "--strategy", "chunk", "--cache", uri)
    assert counts(out) == (0, n)
    assert_same(again, fresh)


def test_ray_reads_s3_inputs_of_every_format_like_local_files(ray_address, tiny_model_dir, corpus, tmp_path, runner,
                                                               s3):
    """The corpus in every format on S3 (objects and a text prefix), read by the actors themselves (ranged
    GETs with the driver's AWS_* variables): the same rows, sources and vectors as the local files."""
    from test_formats import INPUTS
    from test_ray import read_output
    from test_s3_inputs import upload

    root, rows = corpus
    uri, client, counted = s3
    bucket = uri.split("/")[2]
    upload(client, bucket, root, "in")
    names = [f for f in INPUTS if f != "semicolon"]
    local_inputs = [root / INPUTS[f] for f in names]
    s3_inputs = [f"s3://{bucket}/in/{INPUTS[f]}" + ("/" if f == "text" else "") for f in names]
    common = ["--model", tiny_model_dir, "--no-progress", "--strategy", "chunk", "--block-rows", "4", "--with-source"]
    local = invoke(runner, ["extract", *local_inputs, *common, "-o", tmp_path / "local.parquet"])
    counted.reset()
    ray_run = invoke(runner, ["extract", *s3_inputs, *common, "--engine", "ray", "--workers", 2, "-o", f"{tmp_path}/ray/"])
    assert local.exit_code == 0 and ray_run.exit_code == 0, (local.output, ray_run.output)
    ours, theirs = read_output(tmp_path / "local.parquet"), read_output(tmp_path / "ray")
    assert theirs.num_rows == ours.num_rows == len(rows) * len(names)
    for name in ours.column_names:
        a, b = ours.column(name).to_pylist(), theirs.column(name).to_pylist()
        if name == "features":
            assert all((x is None) == (y is None) for x, y in zip(a, b))
            assert max(float(np.abs(np.subtract(x, y)).max()) for x, y in zip(a, b) if x is not None) < 1e-5
        else:
            assert a == b, name
    whole = [path for path, rng in counted.gets if not rng]
    assert sorted(whole) == sorted(set(whole))        # the driver's scan fetched each object whole once


def test_ray_writes_an_s3_output_equal_to_the_local_engines(ray_address, tiny_model_dir, tmp_path, runner, s3):
    """-o s3://BUCKET/PREFIX/ with --engine ray: the same parts, ids in order and vectors within 1e-5 as
    the local engine's DIR/ output."""
    import numpy as np

    from pipeline import load_features

    uri, client, _ = s3
    texts = [words(10 + 5 * i, i) for i in range(16)]
    src = write_csv(tmp_path / "r.csv", [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)])
    common = ["--model", tiny_model_dir, "--no-progress", "--max-length", 16, "--strategy", "chunk", "--block-rows", 4]
    result = invoke(runner, ["extract", src, "-o", f"{uri}/out/", *common, "--engine", "ray", "--workers", 2])
    assert result.exit_code == 0, result.output
    local = invoke(runner, ["extract", src, "-o", f"{tmp_path}/local/", *common])
    assert local.exit_code == 0, local.output
    ids, X, _ = load_features(f"{uri}/out/")
    ids_local, X_local, _ = load_features(tmp_path / "local")
    assert list(ids) == list(ids_local) == [f"d{i}" for i in range(16)]
    np.testing.assert_allclose(X, X_local, atol=1e-5, rtol=0)
    assert sorted(k.rsplit("/", 1)[1] for k in objects(client, uri, "runs/out/")) == [
        "_manifest.parquet", *(f"part-0000{i}.parquet" for i in range(4))]

