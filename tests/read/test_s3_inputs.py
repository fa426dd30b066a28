"""Inputs on S3 (``s3://BUCKET/KEY``, prefixes, quoted globs) against moto's server on 127.0.0.1 (the session's
``s3_server``, tests/cache/s3_server.py): every format gives what the same local file gives; a block fetches
only its own bytes; a changed object stops the run; each bad input is exit 2 before the model loads."""
from __future__ import annotations

import os
import socket
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import invoke
from test_formats import INPUTS, corpus, extract_format  # noqa: F401 - the corpus fixture, written in every format

import pipeline.model.encode_stage as encode_stage
from pipeline.errors import InputError, RunError
from pipeline.options.config import PipelineConfig
from pipeline.read import BlockSpec, read_block, scan, verify_inputs

SECRET = "s3in-secret-never-shown"   # moto takes any key; this one is looked for in outputs and messages
KEYS = {"AWS_ACCESS_KEY_ID": "AKIAS3INPUTS", "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "us-east-1"}


@pytest.fixture
def s3(s3_bucket, s3_server, monkeypatch, tmp_path):
    """A fresh bucket on the session's server with the AWS variables set for it (conftest's s3_bucket, with
    this module's keys), cwd tmp_path/cwd; returns (bucket, boto3 client, the server's request counter, reset)."""
    bucket, client = s3_bucket
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    return bucket, client, s3_server.counted


def upload(client, bucket: str, root, prefix: str) -> None:
    """Every file under ``root`` to s3://bucket/prefix/<its path under root>."""
    for path in sorted(root.rglob("*")):
        if path.is_file():
            client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(root).as_posix()}")


@pytest.fixture
def no_model_load(monkeypatch):
    """Fails the test if any weights load (Weights.encoder)."""
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")
    monkeypatch.setattr(encode_stage.Weights, "encoder", refuse)


def assert_same_frames(local: pd.DataFrame, remote: pd.DataFrame) -> None:
    """The same ids in the same order, the same counts and errors, vectors equal (within 1e-6)."""
    assert remote["id"].tolist() == local["id"].tolist()
    for col in ("n_tokens", "n_windows", "error"):
        assert remote[col].tolist() == local[col].tolist(), col
    for a, b in zip(local["features"], remote["features"]):
        assert (a is None) == (b is None)
        if a is not None:
            assert np.abs(np.asarray(a) - np.asarray(b)).max() < 1e-6


@pytest.mark.parametrize("fmt", list(INPUTS))
def test_every_format_on_s3_gives_the_local_files_output(runner, tiny_model_dir, corpus, tmp_path, s3, fmt):
    root, rows = corpus
    bucket, client, _ = s3
    upload(client, bucket, root / INPUTS[fmt].split("/")[0], f"corpus/{fmt}")
    local = extract_format(runner, tiny_model_dir, root, fmt, tmp_path / "local.parquet")
    uri = f"s3://{bucket}/corpus/{fmt}/{INPUTS[fmt].split('/', 1)[1]}" if fmt != "text" else f"s3://{bucket}/corpus/text/"
    remote = extract_format(runner, tiny_model_dir, _Root(uri), fmt, tmp_path / "s3.parquet")
    assert len(local) == len(rows)
    assert_same_frames(local, remote)
    if fmt != "text":
        assert remote["label"].tolist() == local["label"].tolist()
    meta = pq.read_schema(tmp_path / "s3.parquet").metadata[b"longbert"].decode()
    assert SECRET not in meta and "AKIAS3INPUTS" not in meta


class _Root:
    """Stands for test_formats' corpus folder: ``root / INPUTS[fmt]`` is the S3 URI itself."""

    def __init__(self, uri: str):
        self.uri = uri

    def __truediv__(self, _rel) -> str:
        return self.uri


def test_prefix_glob_and_mixed_inputs_read_as_the_local_ones(corpus, s3):
    """A prefix is a folder (its .txt/.md objects, others counted), a quoted glob matches keys segment by
    segment, an object reached twice is read once, and ``source`` is relative as for local inputs."""
    root, rows = corpus
    bucket, client, _ = s3
    upload(client, bucket, root, "corpus")
    client.put_object(Bucket=bucket, Key="corpus/text/skip.pdf", Body=b"%PDF-1.4")
    client.put_object(Bucket=bucket, Key="corpus/text/.hidden.txt", Body=b"hidden")
    (root / "extra").mkdir(exist_ok=True)

    def table(*inputs, **options):
        plan = scan(PipelineConfig.from_options(inputs=inputs, block_rows=4, **options).read)
        return plan, pa.concat_tables([read_block(BlockSpec.from_json(s.to_json())) for s in plan.blocks])

    plan, remote = table(f"s3://{bucket}/corpus/text", with_source=True)
    _, local = table(str(root / "text"), with_source=True)
    assert remote.to_pylist() == local.to_pylist() and remote.num_rows == len(rows)
    assert plan.skipped_files == 1 and plan.skipped_names == [f"s3://{bucket}/corpus/text/skip.pdf"]
    assert plan.fingerprint() == scan(PipelineConfig.from_options(inputs=(str(root / "text"),)).read).fingerprint()

    glob = f"s3://{bucket}/corpus/*/c.*l*"        # jsonl/c.jsonl and gz/c.jsonl.gz, not csv/ or parquet/
    plan, remote = table(glob, f"s3://{bucket}/corpus/jsonl/c.jsonl", with_source=True)
    _, local = table(str(root / "*" / "c.*l*"), with_source=True)
    assert [str(f.path) for f in plan.files] == [f"s3://{bucket}/corpus/gz/c.jsonl.gz",
                                                 f"s3://{bucket}/corpus/jsonl/c.jsonl"]
    assert remote.to_pylist() == local.to_pylist()
    assert set(remote.column("source").to_pylist()) == {"gz/c.jsonl.gz", "jsonl/c.jsonl"}
    plan, remote = table(f"s3://{bucket}/corpus/jsonl/*.jsonl")   # one folder deep: listed with a delimiter
    assert [str(f.path) for f in plan.files] == [f"s3://{bucket}/corpus/jsonl/c.jsonl"]
    assert remote.to_pylist() == table(str(root / "jsonl" / "*.jsonl"))[1].to_pylist()


def test_the_scan_fetches_each_object_once_and_a_block_only_its_bytes(corpus, s3, tmp_path):
    """Scan: one whole GET per object. A line-format block: one ranged GET of [offset, end) (a CSV block
    also its header's first bytes). A parquet block: the file's tail (footer) and its row group's chunks."""
    root, rows = corpus
    bucket, client, counted = s3
    upload(client, bucket, root, "corpus")
    for rel in ("jsonl/c.jsonl", "csv/c.csv"):
        counted.reset()
        plan = scan(PipelineConfig.from_options(inputs=(f"s3://{bucket}/corpus/{rel}",), block_rows=2).read)
        assert [path for path, rng in counted.gets if not rng] == [f"/{bucket}/corpus/{rel}"]   # once, whole
        data = (root / rel).read_bytes()
        spec = BlockSpec.from_json(plan.blocks[2].to_json())
        counted.reset()
        assert read_block(spec).column("id").to_pylist() == [r["id"] for r in rows[4:6]]
        ranges = _ranges(counted)
        assert spec.end == plan.blocks[3].offset and data[spec.offset:spec.end].count(b"\n") >= 2
        assert (spec.offset, spec.end - 1) in ranges and counted.count("HEAD") == 0   # HTTP ranges are inclusive
        header = [r for r in ranges if r != (spec.offset, spec.end - 1)]
        assert header == ([(0, len(data) - 1)] if rel == "csv/c.csv" else [])   # a CSV's header (file < 64 KiB)

    texts = [f"document {i} " + "w" * 2000 for i in range(400)]
    pq.write_table(pa.table({"id": [str(i) for i in range(400)], "text": texts}), tmp_path / "big.parquet",
                   row_group_size=50, compression="none")
    data = (tmp_path / "big.parquet").read_bytes()
    client.put_object(Bucket=bucket, Key="big.parquet", Body=data)
    plan = scan(PipelineConfig.from_options(inputs=(f"s3://{bucket}/big.parquet",), block_rows=50).read)
    counted.reset()
    assert read_block(BlockSpec.from_json(plan.blocks[1].to_json())).column("text").to_pylist() == texts[50:100]
    group = pq.ParquetFile(tmp_path / "big.parquet").metadata.row_group(1)
    chunks = [group.column(i) for i in range(group.num_columns)]
    first = min(c.dictionary_page_offset or c.data_page_offset for c in chunks)
    last = max((c.dictionary_page_offset or c.data_page_offset) + c.total_compressed_size for c in chunks)
    tail = [(a, b) for a, b in _ranges(counted) if b == len(data) - 1]
    assert len(tail) == 1 and len(data) - tail[0][0] <= 64 << 10                      # the footer's read
    assert all(first <= a and b < last for a, b in _ranges(counted) if (a, b) not in tail)
    assert counted.bytes_out <= (last - first) + (64 << 10) < len(data) / 5


def _ranges(counted) -> list[tuple[int, int]]:
    """The (first, last) byte of each GET's Range header (every GET must have one)."""
    assert all(rng.startswith("bytes=") for _, rng in counted.gets), counted.gets
    return [tuple(int(x) for x in rng.removeprefix("bytes=").split("-")) for _, rng in counted.gets]


def test_a_changed_object_stops_the_block_and_the_end_check(corpus, s3):
    root, _ = corpus
    bucket, client, _ = s3
    upload(client, bucket, root / "jsonl", "c")
    uri = f"s3://{bucket}/c/c.jsonl"
    plan = scan(PipelineConfig.from_options(inputs=(uri,), block_rows=4).read)
    assert plan.blocks[0].etags == (client.head_object(Bucket=bucket, Key="c/c.jsonl")["ETag"],)
    verify_inputs(plan.files)
    client.put_object(Bucket=bucket, Key="c/c.jsonl", Body=(root / "jsonl" / "c.jsonl").read_bytes() + b"\n")
    with pytest.raises(RunError, match=f"^input {uri}: the object changed or was removed while the run read it"):
        read_block(plan.blocks[1])
    with pytest.raises(RunError, match=f"^{uri}: the input changed while the run read it \\(its ETag or size"):
        verify_inputs(plan.files)


def test_input_checks_name_the_uri(s3, tmp_path):
    """Bad bytes, a bad line and --on-bad-lines skip work as on a local file, naming the object's URI."""
    bucket, client, _ = s3
    body = b'{"id": "a", "text": "fine"}\n{"id": "b", "text": "caf\xe9"}\nnot json\n{"id": "c", "text": "ok"}\n'
    client.put_object(Bucket=bucket, Key="x/bad.jsonl", Body=body)
    uri = f"s3://{bucket}/x/bad.jsonl"
    (tmp_path / "bad.jsonl").write_bytes(body)
    for options in ({}, {"encoding": "cp1252"}):
        with pytest.raises(InputError) as remote:
            scan(PipelineConfig.from_options(inputs=(uri,), **options).read)
        with pytest.raises(InputError) as local:
            scan(PipelineConfig.from_options(inputs=(str(tmp_path / "bad.jsonl"),), **options).read)
        assert str(remote.value).startswith(f"{uri}: ")
        assert str(remote.value).replace(uri, "F") == str(local.value).replace(str(tmp_path / "bad.jsonl"), "F")
    plan = scan(PipelineConfig.from_options(inputs=(uri,), encoding="cp1252", on_bad_lines="skip").read)
    assert plan.n_bad_lines == 1 and [t for s in plan.blocks for t in read_block(s).column("text").to_pylist()] == \
        ["fine", "café", "ok"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _bad(runner, tiny_model_dir, tmp_path, uri):
    started = time.monotonic()
    result = invoke(runner, ["extract", uri, "-o", tmp_path / "o.parquet", "--model", tiny_model_dir, "--no-progress"])
    assert time.monotonic() - started < 60
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and not (tmp_path / "o.parquet").exists() and os.listdir(".") == []
    assert SECRET not in result.output and "AKIAS3INPUTS" not in result.output
    return result.output


def test_bad_s3_inputs_are_exit_2_before_the_model_loads(runner, tiny_model_dir, tmp_path, s3, monkeypatch,
                                                         no_model_load):
    bucket, client, counted = s3
    client.put_object(Bucket=bucket, Key="c/a.jsonl", Body=b'{"text": "x"}\n')
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    out = _bad(runner, tiny_model_dir, tmp_path, "s3://no-such-bucket-here/c/*.jsonl")
    assert out.startswith(f"Error: input s3://no-such-bucket-here/c: the bucket 'no-such-bucket-here' does not exist "
                          f"at {endpoint}; check the name")
    out = _bad(runner, tiny_model_dir, tmp_path, f"s3://{bucket}/c/*.csv")
    assert out.startswith(f"Error: input glob 's3://{bucket}/c/*.csv' matches no object (1 under s3://{bucket}/c/); "
                          "check the pattern and quote it")
    out = _bad(runner, tiny_model_dir, tmp_path, f"s3://{bucket}/c/b.jsonl")
    assert out.startswith(f"Error: input 's3://{bucket}/c/b.jsonl' does not exist: no object has that key or starts "
                          f"with s3://{bucket}/c/b.jsonl/; check the path")
    out = _bad(runner, tiny_model_dir, tmp_path, "gs://bucket/a.jsonl")
    assert out.startswith("Error: input 'gs://bucket/a.jsonl': only s3:// URIs are read from object storage")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    counted.reset()
    out = _bad(runner, tiny_model_dir, tmp_path, f"s3://{bucket}/c/a.jsonl")
    assert out.startswith(f"Error: input s3://{bucket}/c/a.jsonl: no credentials for {endpoint}: AWS_SECRET_ACCESS_KEY "
                          "is not set") and sum(counted.requests.values()) == 0


def test_refused_credentials_and_no_server_are_exit_2(runner, tiny_model_dir, tmp_path, s3, monkeypatch,
                                                      no_model_load):
    import moto.settings

    bucket, client, _ = s3
    client.put_object(Bucket=bucket, Key="c/a.jsonl", Body=b'{"text": "x"}\n')
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAUNKNOWN0000000")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value-never-shown")
    out = _bad(runner, tiny_model_dir, tmp_path, f"s3://{bucket}/c/*.jsonl")
    assert out.startswith(f"Error: input s3://{bucket}/c: {os.environ['AWS_ENDPOINT_URL']} refused the request "
                          "(InvalidAccessKeyId); check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN")
    assert "AKIAUNKNOWN" not in out and "s3cr3t" not in out
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", float("inf"))
    endpoint = f"http://127.0.0.1:{_free_port()}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    out = _bad(runner, tiny_model_dir, tmp_path, f"s3://{bucket}/c/a.jsonl")
    assert out.startswith(f"Error: input s3://{bucket}/c/a.jsonl: nothing answers at {endpoint} (")
    assert "set AWS_ENDPOINT_URL to its address" in out


def test_a_spec_names_its_object_by_uri_and_survives_json(corpus, s3):
    """What the Ray engine ships: path 's3://BUCKET/KEY', the ETags, the stamps and the range end."""
    root, _ = corpus
    bucket, client, _ = s3
    upload(client, bucket, root / "text", "t")
    plan = scan(PipelineConfig.from_options(inputs=(f"s3://{bucket}/t/",), block_rows=4).read)
    spec = plan.blocks[0]
    assert spec.path == f"s3://{bucket}/t" and spec.files == tuple(sorted(p.name for p in (root / "text").iterdir()))[:4]
    assert len(spec.etags) == 4 and all(e.startswith('"') for e in spec.etags) and len(spec.stamp) == 8
    assert BlockSpec.from_json(spec.to_json()) == spec
    assert read_block(BlockSpec.from_json(spec.to_json())).column("id").to_pylist() == list(spec.files)


def test_resume_over_s3_inputs_redoes_nothing_and_refuses_a_changed_object(runner, tiny_model_dir, corpus, tmp_path,
                                                                           s3):
    """The resume fingerprint of an S3 input is its name, bytes and sha256, as for the same file on disk:
    the same object resumes (every part kept), new content under the same key is refused (exit 2)."""
    root, rows = corpus
    bucket, client, _ = s3
    upload(client, bucket, root / "jsonl", "r")
    args = ["extract", f"s3://{bucket}/r/c.jsonl", "--model", tiny_model_dir, "--no-progress", "--strategy", "chunk",
            "--block-rows", 4, "-o", f"{tmp_path}/out/"]
    first = invoke(runner, args)
    assert first.exit_code == 0, first.output
    parts = sorted(p.name for p in (tmp_path / "out").glob("part-*.parquet"))
    stamps = {p: (tmp_path / "out" / p).stat().st_mtime_ns for p in parts}
    again = invoke(runner, [*args, "--resume"])
    assert again.exit_code == 0, again.output
    assert {p: (tmp_path / "out" / p).stat().st_mtime_ns for p in parts} == stamps   # no part written again
    lines = (root / "jsonl" / "c.jsonl").read_bytes().splitlines(keepends=True)
    client.put_object(Bucket=bucket, Key="r/c.jsonl", Body=b"".join(lines[1:] + lines[:1]))   # same bytes, reordered
    changed = invoke(runner, [*args, "--resume"])
    assert changed.exit_code == 2
    assert changed.output.startswith("Error: --resume: the input files differ from the run that wrote")
