"""--engine ray with --cache s3://BUCKET/PREFIX: the actors and the driver share one store in S3 (moto's
server on 127.0.0.1, tests/cache/s3_server.py), the actors reach it with the driver's AWS_* variables."""
from __future__ import annotations

import pytest
from conftest import invoke, words, write_csv
from test_cache import assert_same, counts, extract, unique_windows
from test_object_store import objects, s3  # noqa: F401 - the fixture (s3_server: tests/conftest.py)
from test_ray import ray_address  # noqa: F401 - the module's local Ray

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
