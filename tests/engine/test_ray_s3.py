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
