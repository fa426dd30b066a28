"""A DIR/ output on object storage (-o s3://BUCKET/PREFIX/) against moto's S3 server on 127.0.0.1 (the
session's ``s3_server``, tests/conftest.py), with the tiny BERT: it equals the local DIR/ output, resumes,
overwrites only under its prefix, is locked by a conditional put, and every bad endpoint, bucket or
credential is exit 2 before the model loads, with no local folder made in the URI's name."""
from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import iam_user, invoke, words, write_csv

import pipeline.model.encode_stage as encode_stage
import pipeline.output.parts as parts_module
from pipeline import load_features
from pipeline.errors import RunError
from pipeline.output.lock import acquire_object
from pipeline.output.places import Prefix

TEXTS = [words(3 + 5 * i, offset=i) for i in range(10)]   # 3..48 tokens: one to four windows of 16
SECRET = "s3cr3t-Value-never-shown"


@pytest.fixture
def s3(s3_bucket, monkeypatch, tmp_path):
    """The session's server with a fresh bucket, a secret key to look for, the working folder tmp_path/cwd
    (where a folder "s3:" would appear); returns (bucket, boto3 client)."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)   # moto accepts any key until it checks them
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    return s3_bucket


@pytest.fixture
def no_model_load(monkeypatch):
    """Fails the test if any weights load (Weights.encoder)."""
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")
    monkeypatch.setattr(encode_stage.Weights, "encoder", refuse)


def objects(client, bucket: str, prefix: str = "") -> dict[str, bytes]:
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return {o["Key"]: client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


def extract(runner, model, tmp_path, out, *args, texts=TEXTS):
    src = write_csv(tmp_path / "in.csv", [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)])
    return invoke(runner, ["extract", src, "-o", out, "--model", model, "--no-progress", "--max-length", 16,
                           "--strategy", "chunk", "--block-rows", 3, *args])


def assert_same_output(uri: str, folder, ids_expected=None):
    """load_features of both equal (ids in order, vectors within 1e-5, metadata), and their parts have the
    same columns and rows."""
    ids_s3, X_s3, meta_s3 = load_features(uri)
    ids, X, meta = load_features(folder)
    assert list(ids_s3) == list(ids) == (ids_expected or [f"d{i}" for i in range(len(TEXTS))])
    np.testing.assert_allclose(X_s3, X, atol=1e-5, rtol=0)
    assert np.isfinite(X_s3).all()
    for key in ("kept", "rows", "window"):
        a, b = meta_s3.pop(key, {}), meta.pop(key, {})
        assert list(a) == list(b) if key != "window" else np.array_equal(a, b)
    assert meta_s3 == meta


def assert_same_table(ours: pa.Table, theirs: pa.Table):
    """Same columns and rows; float vectors within 1e-5, everything else equal."""
    assert ours.column_names == theirs.column_names and ours.num_rows == theirs.num_rows
    for name in ours.column_names:
        x, y = ours.column(name).to_pylist(), theirs.column(name).to_pylist()
        if pa.types.is_list(ours.schema.field(name).type) or pa.types.is_fixed_size_list(ours.schema.field(name).type):
            for p, q in zip(x, y):
                assert (p is None) == (q is None), name
                if p is not None:
                    np.testing.assert_allclose(np.array(p, dtype=np.float64), np.array(q, dtype=np.float64), atol=1e-5)
        else:
            assert x == y, name


@pytest.mark.parametrize("level", ["document", "window", "token"])
def test_an_s3_output_equals_the_local_folder_output_and_load_features_reads_it(runner, tiny_model_dir, tmp_path, s3,
                                                                                level):
    bucket, client = s3
    local = extract(runner, tiny_model_dir, tmp_path, f"{tmp_path}/local/", "--level", level)
    assert local.exit_code == 0, local.output
    result = extract(runner, tiny_model_dir, tmp_path, f"s3://{bucket}/runs/out/", "--level", level)
    assert result.exit_code == 0, result.output
    assert f"-> s3://{bucket}/runs/out/" in result.output
    stored = objects(client, bucket)
    local_names = sorted(p.name for p in (tmp_path / "local").iterdir())
    assert local_names == ["_manifest.parquet", "part-00000.parquet", "part-00001.parquet", "part-00002.parquet",
                           "part-00003.parquet"]   # 10 rows, 3 a block
    assert sorted(stored) == [f"runs/out/{n}" for n in local_names]   # no lock, no pending part left
    for name in local_names[1:]:
        ours, theirs = pq.read_table(pa.BufferReader(stored[f"runs/out/{name}"])), pq.read_table(tmp_path / "local" / name)
        assert_same_table(ours, theirs)
        assert ours.schema.metadata == theirs.schema.metadata   # the run's metadata and provenance
    manifest = json.loads(pq.read_schema(pa.BufferReader(stored[f"runs/out/_manifest.parquet"])).metadata[b"longbert_manifest"])
    assert manifest["complete"] and [p["file"] for p in manifest["parts"]] == local_names[1:]
    assert [p["bytes"] for p in manifest["parts"]] == [len(stored[f"runs/out/{n}"]) for n in local_names[1:]]
    if level != "window":
        assert_same_output(f"s3://{bucket}/runs/out/", tmp_path / "local")
    else:   # a row per window: 14 content tokens a chunk window of 16
        windows = [f"d{i}" for i in range(len(TEXTS)) for _ in range(math.ceil((3 + 5 * i) / 14))]
        assert_same_output(f"s3://{bucket}/runs/out/", tmp_path / "local", windows)
    assert os.listdir(".") == []   # no folder "s3:" (nor anything else) made where the run ran
    assert SECRET not in result.output and all(SECRET.encode() not in data for data in stored.values())


def test_resume_after_a_failed_run_redoes_only_the_missing_blocks(runner, tiny_model_dir, tmp_path, s3, monkeypatch):
    bucket, client = s3
    uri = f"s3://{bucket}/out/"
    real, calls = parts_module.finish_part, []

    def fail_third(place, spooled, spec, rows):
        calls.append(spec.index)
        if len(calls) == 3:
            raise RunError("the network went away")
        return real(place, spooled, spec, rows)

    monkeypatch.setattr(parts_module, "finish_part", fail_third)
    failed = extract(runner, tiny_model_dir, tmp_path, uri)
    assert failed.exit_code == 1 and "the network went away" in failed.output
    stored = objects(client, bucket)
    assert sorted(stored) == ["out/_manifest.json", "out/_part-00000.parquet.pending", "out/_part-00001.parquet.pending"]
    manifest = json.loads(stored["out/_manifest.json"])
    assert not manifest["complete"] and [p["block"] for p in manifest["parts"]] == [0, 1]
    with pytest.raises(Exception, match="the run is incomplete"):
        load_features(uri)
    again = extract(runner, tiny_model_dir, tmp_path, uri)
    assert again.exit_code == 2 and "already holds a run; pass --resume" in again.output
    monkeypatch.setattr(parts_module, "finish_part", real)
    client.delete_object(Bucket=bucket, Key="out/_part-00001.parquet.pending")   # a listed part lost: redone
    calls.clear()
    monkeypatch.setattr(parts_module, "finish_part", lambda *a: calls.append(a[2].index) or real(*a))
    resumed = extract(runner, tiny_model_dir, tmp_path, uri, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert f"resuming {uri}: 1 of 4 blocks (3 of 10 rows) are done" in resumed.output
    assert calls == [1, 2, 3]
    monkeypatch.setattr(parts_module, "finish_part", real)
    assert extract(runner, tiny_model_dir, tmp_path, f"{tmp_path}/local/").exit_code == 0
    assert_same_output(uri, tmp_path / "local")
    assert sorted(objects(client, bucket)) == ["out/_manifest.parquet", *(f"out/part-0000{i}.parquet" for i in range(4))]


def test_overwrite_deletes_only_under_the_prefix(runner, tiny_model_dir, tmp_path, s3):
    bucket, client = s3
    uri = f"s3://{bucket}/out/"
    beside = {"out2/part-00003.parquet": b"a neighbour whose name starts alike", "keep.txt": b"mine",
              "deep/out/part-00000.parquet": b"another run"}
    for key, body in beside.items():
        client.put_object(Bucket=bucket, Key=key, Body=body)
    assert extract(runner, tiny_model_dir, tmp_path, uri).exit_code == 0                 # 4 parts
    result = extract(runner, tiny_model_dir, tmp_path, uri, "--overwrite", texts=TEXTS[:5])   # 2 parts
    assert result.exit_code == 0, result.output
    stored = objects(client, bucket)
    assert {k: stored[k] for k in beside} == beside
    assert sorted(k for k in stored if k.startswith("out/")) == ["out/_manifest.parquet", "out/part-00000.parquet",
                                                                "out/part-00001.parquet"]
    ids, _, _ = load_features(uri)
    assert list(ids) == [f"d{i}" for i in range(5)]


def test_a_foreign_object_under_the_prefix_is_never_overwritten(runner, tiny_model_dir, tmp_path, s3, no_model_load):
    bucket, client = s3
    client.put_object(Bucket=bucket, Key="out/notes.txt", Body=b"mine")
    result = extract(runner, tiny_model_dir, tmp_path, f"s3://{bucket}/out/", "--overwrite")
    assert result.exit_code == 2
    assert "is a non-empty directory that holds no longbert run (notes.txt)" in result.output
    assert sorted(objects(client, bucket)) == ["out/notes.txt"]


def test_the_lock_refuses_a_second_writer_and_takes_over_a_dead_ones(runner, tiny_model_dir, tmp_path, s3,
                                                                      monkeypatch):
    bucket, client = s3
    uri = f"s3://{bucket}/out/"
    held = acquire_object(Prefix(uri))   # this process: alive, on this host
    try:
        refused = extract(runner, tiny_model_dir, tmp_path, uri)
        assert refused.exit_code == 2
        assert f"--output {uri} is being written by another run (process {os.getpid()} on host " in refused.output
        assert Prefix(uri).put_new(".longbert-lock", b"{}") is False   # the conditional put itself
    finally:
        held.release()
    assert objects(client, bucket) == {}
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    holder = {"pid": int(dead.stdout), "host": socket.gethostname(), "started": time.time() - 5,
              "renewed": time.time() - 5, "token": "x"}
    client.put_object(Bucket=bucket, Key="out/.longbert-lock", Body=json.dumps(holder).encode())
    taken = extract(runner, tiny_model_dir, tmp_path, uri)
    assert taken.exit_code == 0, taken.output
    assert f"took over the lock of a run that ended without releasing it (process {holder['pid']}" in taken.output
    assert "out/.longbert-lock" not in objects(client, bucket)


@pytest.mark.parametrize("out, folder", [("s3://{b}/f.parquet", "s3://{b}/f/"), ("s3://{b}/x/f.PARQUET", "s3://{b}/x/f/"),
                                         ("s3://{b}/feats", "s3://{b}/feats/")])
def test_a_single_object_is_refused_naming_the_folder_form(runner, tiny_model_dir, tmp_path, s3, out, folder,
                                                           no_model_load):
    bucket, client = s3
    result = extract(runner, tiny_model_dir, tmp_path, out.format(b=bucket))
    assert result.exit_code == 2
    assert result.output.strip().endswith(f"object storage takes a folder of parts, not a single file; write -o "
                                          f"{folder.format(b=bucket)} (ending in /)")
    assert os.listdir(".") == [] and objects(client, bucket) == {}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _refused_key(monkeypatch):
    import moto.settings

    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)   # the server checks credentials now
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIANOSUCHKEY0000000")


@pytest.mark.parametrize("case", ["no bucket", "refused key", "no key", "dead endpoint"])
def test_a_bad_bucket_credential_or_endpoint_is_exit_2_before_the_model_loads(runner, tiny_model_dir, tmp_path, s3,
                                                                              monkeypatch, no_model_load, case):
    bucket, client = s3
    uri = f"s3://{bucket}/out/"
    if case == "no bucket":
        uri = "s3://no-such-bucket-here/out/"
        want = f"Error: --output {uri}: the bucket 'no-such-bucket-here' does not exist at http://127.0.0.1:"
    elif case == "refused key":
        _refused_key(monkeypatch)
        want = f"Error: --output {uri}: http://127.0.0.1:"
    elif case == "no key":
        monkeypatch.delenv("AWS_ACCESS_KEY_ID")
        want = f"Error: --output {uri}: no credentials for http://127.0.0.1:"
    else:
        endpoint = f"http://127.0.0.1:{_free_port()}"
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        want = f"Error: --output {uri}: nothing answers at {endpoint} ("
    started = time.monotonic()
    result = extract(runner, tiny_model_dir, tmp_path, uri)
    assert time.monotonic() - started < 60
    assert result.exit_code == 2, result.output
    assert result.output.startswith(want), result.output
    if case == "refused key":
        assert "refused the credentials (AWS_ACCESS_KEY_ID=AKIANOSUCHKEY0000000)" in result.output
    assert "Traceback" not in result.output and SECRET not in result.output
    assert os.listdir(".") == []   # no folder "s3:"


def test_load_features_of_a_missing_bucket_names_it(s3):
    with pytest.raises(Exception, match="path s3://no-such-bucket-here/out/: the bucket 'no-such-bucket-here' does "
                                        "not exist"):
        load_features("s3://no-such-bucket-here/out/")


def test_pipeline_run_writes_the_same_s3_output_and_names_its_arguments(runner, tiny_model_dir, tmp_path, s3):
    import longbert
    from pipeline.errors import ConfigError

    bucket, _ = s3
    assert extract(runner, tiny_model_dir, tmp_path, f"{tmp_path}/local/").exit_code == 0
    pipe = longbert.Pipeline.from_options(model=str(tiny_model_dir), max_length=16, strategy="chunk", block_rows=3)
    uri = f"s3://{bucket}/py/"
    pipe.run(str(tmp_path / "in.csv"), uri, id_col="id")
    assert_same_output(uri, tmp_path / "local")
    with pytest.raises(ConfigError, match=r"already holds a run; pass resume=True to continue it or overwrite=True"):
        pipe.run(str(tmp_path / "in.csv"), uri, id_col="id")
    with pytest.raises(ConfigError, match=r"object storage takes a folder of parts, not a single file; write "
                                          rf"output='s3://{bucket}/py/'|-o s3://{bucket}/py/"):
        pipe.run(str(tmp_path / "in.csv"), f"s3://{bucket}/py.parquet", id_col="id")


def test_an_interrupted_s3_run_says_how_many_parts_were_kept(s3, tiny_model_dir, tmp_path, runner, monkeypatch):
    bucket, client = s3
    real = parts_module.finish_part

    def interrupt_third(*args):
        if args[2].index == 2:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(parts_module, "finish_part", interrupt_third)
    result = extract(runner, tiny_model_dir, tmp_path, f"s3://{bucket}/out/")
    assert result.exit_code != 0
    assert (f"Interrupted: 2 of 4 parts of s3://{bucket}/out/ were kept; run the same command with --resume to do "
            "the other 2.") in result.output
    assert ".longbert-lock" not in " ".join(objects(client, bucket))   # released however the run ends


@pytest.mark.parametrize("kind", ["folder", "prefix"])
def test_a_folder_and_a_prefix_answer_the_same_few_operations(kind, s3, tmp_path):
    """The storage seam (pipeline.output.places): put-if-absent, put, get, names, rename, delete, and an
    upload above the multipart threshold (5 MiB) that arrives whole."""
    from pipeline.output.places import place_of

    bucket, client = s3
    place = place_of(f"s3://{bucket}/seam/" if kind == "prefix" else tmp_path / "seam")
    place.make()
    assert place.names() == {} and not place.exists()
    assert place.put_new("a", b"one") is True and place.put_new("a", b"two") is False
    assert place.get("a") == b"one"
    place.put("a", b"three")
    assert place.get("a") == b"three" and place.exists("a") and not place.exists("b")
    big = np.random.default_rng(0).bytes(6 * 1024 * 1024 + 3)
    spooled = place.spool("_part-00007.parquet.pending")
    spooled.write_bytes(big)
    assert place.upload(spooled, "big") == len(big) and not spooled.exists()
    place.rename("big", "moved")
    assert place.names() == {"a": 5, "moved": len(big)} and place.get("moved") == big
    with pytest.raises(FileNotFoundError):
        place.get("big")
    place.delete(["a", "moved", "never-there"])
    assert place.names() == {}
    if kind == "prefix":
        assert objects(client, bucket) == {}


def test_the_lock_is_renewed_and_never_written_over_once_taken_over(s3, monkeypatch):
    import pipeline.output.lock as lock_module

    bucket, client = s3
    monkeypatch.setattr(lock_module, "LOCK_RENEW", 0.01)
    place = Prefix(f"s3://{bucket}/out/")
    held = acquire_object(place)
    read = lambda: json.loads(client.get_object(Bucket=bucket, Key="out/.longbert-lock")["Body"].read())  # noqa: E731
    for _ in range(1000):   # renewals come every 10 ms: wait for one, however slow the machine
        if read()["renewed"] > held.holder["started"]:
            break
        time.sleep(0.01)
    assert read()["renewed"] > held.holder["started"] and read()["token"] == held.holder["token"]
    other = {"pid": 1, "host": "elsewhere", "started": 0, "renewed": time.time(), "token": "theirs"}
    client.put_object(Bucket=bucket, Key="out/.longbert-lock", Body=json.dumps(other).encode())   # a takeover
    held._thread.join(timeout=30)
    assert not held._thread.is_alive() and read() == other
    held.release()
    assert read() == other   # not ours any more: left to its holder


def test_credentials_that_may_read_but_not_write_are_exit_2_before_the_model_loads(runner, tiny_model_dir, tmp_path,
                                                                                   s3, s3_server, monkeypatch,
                                                                                   no_model_load):
    import moto.settings

    bucket, client = s3
    key_id, secret = iam_user(s3_server, ("Allow", ["s3:Get*", "s3:List*"], "*"))
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)   # the server checks credentials now
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    result = extract(runner, tiny_model_dir, tmp_path, f"s3://{bucket}/out/")
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"Error: --output s3://{bucket}/out/: the credentials (AWS_ACCESS_KEY_ID="
                                    f"{key_id}) lack the permission s3:PutObject (AccessDenied on PUT at "
                                    f"{s3_server.url}); grant s3:PutObject on arn:aws:s3:::{bucket}/out/*")
    assert secret not in result.output and os.listdir(".") == []
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", float("inf"))
    assert objects(client, bucket) == {}


def test_parts_written_by_workers_are_committed_by_the_sink(runner, tiny_model_dir, tmp_path, s3):
    """The split an engine with writing workers uses: each worker gets the place pickled and writes its
    block's part (write_part); the driver's sink records the entries and commits the manifest. The
    result reads back as the output of one local run."""
    import pickle
    from types import SimpleNamespace

    from pipeline.output.parts import write_part
    from pipeline.output.places import place_of
    from pipeline.output.write import PartsSink

    bucket, _ = s3
    assert extract(runner, tiny_model_dir, tmp_path, f"{tmp_path}/local/").exit_code == 0
    folder = tmp_path / "local"
    schema = pq.read_schema(folder / "_manifest.parquet")
    schema = schema.with_metadata({k: v for k, v in schema.metadata.items() if k != b"longbert_manifest"})
    tables = [pq.read_table(folder / f"part-0000{i}.parquet") for i in range(4)]
    specs = [SimpleNamespace(index=i, first_row=3 * i, n_rows=t.num_rows) for i, t in enumerate(tables)]
    uri = f"s3://{bucket}/workers/"
    sink = PartsSink(uri, schema, {"config": "c", "inputs": "i"})
    assert sink.open(specs) == set()
    for spec, table in reversed(list(zip(specs, tables))):   # workers finish in any order
        worker_place = pickle.loads(pickle.dumps(place_of(uri)))
        sink.record(write_part(worker_place, spec, table, schema))
    sink.commit()
    assert_same_output(uri, folder)


def test_binary_center_takes_the_centre_of_an_s3_output(runner, tiny_model_dir, tmp_path, s3):
    bucket, _ = s3
    uri = f"s3://{bucket}/bin/"
    assert extract(runner, tiny_model_dir, tmp_path, uri, "--out-dtype", "binary").exit_code == 0
    texts = [words(20, offset=7)] * 3   # other documents: their own mean would be another centre
    result = extract(runner, tiny_model_dir, tmp_path, f"{tmp_path}/again/", "--out-dtype", "binary",
                     "--binary-center", uri, texts=texts)
    assert result.exit_code == 0, result.output
    _, _, theirs = load_features(uri, raw=True)
    _, _, ours = load_features(tmp_path / "again", raw=True)
    assert ours["compact"]["columns"][0]["center"] == theirs["compact"]["columns"][0]["center"]
    assert ours["compact"]["columns"][0]["center"] != [0.0] * len(ours["compact"]["columns"][0]["center"])
    missing = extract(runner, tiny_model_dir, tmp_path, f"{tmp_path}/third/", "--out-dtype", "binary",
                      "--binary-center", "s3://no-such-bucket-here/bin/", texts=texts)
    assert missing.exit_code == 2
    assert "--binary-center s3://no-such-bucket-here/bin/: the bucket 'no-such-bucket-here' does not exist" in \
        missing.output


def test_a_run_killed_at_its_third_part_resumes_and_encodes_only_what_was_lost(runner, tiny_model_dir, tmp_path, s3):
    """SIGKILL (no cleanup: the lock object and a spooled part stay) as the third part is put; --resume takes
    the dead run's lock over, keeps the two listed parts and writes the other two."""
    bucket, client = s3
    uri = f"s3://{bucket}/out/"
    src = write_csv(tmp_path / "in.csv", [{"id": f"d{i}", "text": t} for i, t in enumerate(TEXTS)])
    args = [src, "-o", uri, "--model", tiny_model_dir, "--no-progress", "--max-length", 16, "--strategy", "chunk",
            "--block-rows", 3]
    code = ("import os, sys; import pipeline.output.parts as w; real = w.finish_part\n"
            "def die(place, spooled, spec, rows):\n"
            "    if spec.index == 2: os.kill(os.getpid(), 9)\n"
            "    return real(place, spooled, spec, rows)\n"
            "w.finish_part = die\n"
            "from cli import main; main(['extract', *sys.argv[1:]])")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": root})
    assert done.returncode == -9, done.stderr
    stored = objects(client, bucket)
    assert sorted(stored) == ["out/.longbert-lock", "out/_manifest.json", "out/_part-00000.parquet.pending",
                              "out/_part-00001.parquet.pending"]
    resumed = invoke(runner, ["extract", *args[:2], uri, *args[3:], "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert "took over the lock of a run that ended without releasing it (process" in resumed.output
    assert f"resuming {uri}: 2 of 4 blocks (6 of 10 rows) are done" in resumed.output
    assert "4 documents," in resumed.output   # blocks 2 and 3 only
    assert extract(runner, tiny_model_dir, tmp_path, f"{tmp_path}/local/").exit_code == 0
    assert_same_output(uri, tmp_path / "local")


def test_probe_reads_an_s3_output(runner, tiny_model_dir, tmp_path, s3):
    from pipeline.classify.probe_files import probe_files

    bucket, _ = s3
    texts = [words(5 + i % 7, offset=3 * (i % 2)) for i in range(20)]
    rows = [{"id": f"d{i}", "text": t, "label": f"c{i % 2}"} for i, t in enumerate(texts)]
    src = write_csv(tmp_path / "in.csv", rows)
    common = ["--model", tiny_model_dir, "--no-progress", "--max-length", 16, "--keep-col", "label"]
    assert invoke(runner, ["extract", src, "-o", f"s3://{bucket}/p/", *common]).exit_code == 0
    assert invoke(runner, ["extract", src, "-o", f"{tmp_path}/p/", *common]).exit_code == 0
    result = invoke(runner, ["probe", f"s3://{bucket}/p/", "--label-col", "label", "--folds", 2])
    assert result.exit_code == 0, result.output
    ours, local = (probe_files([p], label_col="label", folds=2) for p in (f"s3://{bucket}/p/", f"{tmp_path}/p/"))
    for r in (*ours, *local):
        r.pop("file"), r.pop("seconds", None)
    assert ours == local and local[0]["rows"] == 20


def test_save_features_refuses_a_uri_and_makes_no_local_folder(tmp_path, monkeypatch):
    import longbert
    from pipeline.errors import ConfigError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"path 's3://bkt1/f.parquet' is a URI; save_features writes one local "
                                          r"\.parquet file"):
        longbert.save_features("s3://bkt1/f.parquet", ["a"], np.ones((1, 3), dtype=np.float32))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("args", [["stats", "{src}", "--plot", "s3://bkt1/x.png"],
                                  ["probe", "{src}", "--label-col", "label", "--out", "s3://bkt1/r.csv"]])
def test_a_chart_or_csv_path_that_is_a_uri_is_refused(runner, tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    src = write_csv(tmp_path / "in.csv", [{"text": "a b", "label": "x"}])
    result = invoke(runner, [a.format(src=src) for a in args])
    assert result.exit_code == 2
    assert "takes a local file path, not a URI; write it locally" in result.output
    assert sorted(os.listdir(tmp_path)) == ["in.csv"]
