"""--engine ray with object storage (moto's server on 127.0.0.1, tests/cache/s3_server.py): --cache
s3://BUCKET/PREFIX shared by the actors and the driver, S3 inputs the actors read, and -o s3://BUCKET/PREFIX/
whose parts the actors upload themselves; the actors reach it all with the driver's AWS_* variables."""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import STAGE_ML, invoke, words, write_csv
from test_cache import assert_same, counts, extract, unique_windows
from test_object_store import objects, s3  # noqa: F401 - the fixtures (s3_server: conftest)
from test_formats import corpus  # noqa: F401 - the corpus fixture, written in every format
from test_ray_parts import N_DOCS, docs_csv, driver_items, read_dir  # noqa: F401 - the fixtures
from test_ray_parts import assert_same as same_output

from pipeline.output.write import read_manifest

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


def read_prefix(uri: str) -> tuple[pa.Table, list[dict]]:
    """A finished output under an S3 prefix: its rows in manifest order and the manifest's parts; only the
    listed parts (and the manifest) are under the prefix, no pending or half-written one."""
    from pipeline.output.manifest import read_manifest
    from pipeline.output.places import place_of

    place = place_of(uri)
    manifest = read_manifest(place)
    assert manifest["complete"] is True
    listed = [p["file"] for p in manifest["parts"]]
    assert sorted(place.names()) == sorted([*listed, "_manifest.parquet"])
    return pa.concat_tables([pq.read_table(pa.BufferReader(place.get(f))) for f in listed]), manifest["parts"]


@pytest.mark.parametrize("level, source", [("document", "s3"), ("window", "s3"), ("token", "s3"), ("document", "file")])
def test_ray_reads_s3_and_writes_s3_equal_to_local_and_the_driver_gets_records_only(
        ray_address, tiny_model_dir, docs_csv, tmp_path, runner, s3, driver_items, level, source):
    """S3 input and -o s3://BUCKET/PREFIX/ on Ray: each actor reads its blocks and uploads its own parts straight
    to the prefix (with the driver's AWS_* variables: for the output alone too, ``source`` "file"); the driver
    commits their records. The output equals the local engine's from the local file (ids in order, every row
    once, vectors within 1e-5, the same manifest), and the driver is handed one small PartDone per block,
    never a vector."""
    uri, client, _ = s3
    bucket = uri.split("/")[2]
    client.upload_file(str(docs_csv), bucket, "in/docs.csv")
    common = ["--model", tiny_model_dir, "--no-progress", "--strategy", "chunk", "--max-length", STAGE_ML,
              "--level", level, "--block-rows", 3]
    local = invoke(runner, ["extract", docs_csv, *common, "-o", f"{tmp_path}/local/"])
    assert local.exit_code == 0, local.output
    driver_items.clear()
    out = f"{uri}/out-{level}-{source}/"
    src = f"s3://{bucket}/in/docs.csv" if source == "s3" else docs_csv
    ray_run = invoke(runner, ["extract", src, *common, "--engine", "ray", "--workers", 2,
                              "-o", out])
    assert ray_run.exit_code == 0, ray_run.output
    ours, (theirs, parts) = read_dir(tmp_path / "local"), read_prefix(out)
    same_output(ours, theirs)
    ids = theirs.column("id").to_pylist()
    if level == "document":
        assert ids == [f"d{i}" for i in range(N_DOCS)]
    else:   # a row per window or per document: each document's rows together, documents in order
        assert list(dict.fromkeys(ids)) == [f"d{i}" for i in range(N_DOCS)]
    keys = ("file", "block", "first_row", "rows", "documents", "bytes")
    local_parts = read_manifest(tmp_path / "local")["parts"]
    assert [{k: p[k] for k in keys} for p in parts] == [{k: p[k] for k in keys} for p in local_parts]
    assert [name for name, _ in driver_items] == ["PartDone"] * 4
    assert max(size for _, size in driver_items) < 2048
    if level == "token":   # a part holds more bytes than any record the driver got
        assert min(p["bytes"] for p in parts) > max(size for _, size in driver_items)
    assert os.listdir(".") == []   # no local folder in the URI's name (the s3 fixture's working folder)
