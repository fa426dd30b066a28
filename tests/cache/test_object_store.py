"""The window store in S3-compatible storage (--cache s3://BUCKET/PREFIX), against moto's S3 server started
here on 127.0.0.1 (tests/cache/s3_server.py; no network, no Docker), with the tiny BERT.

Values are compared with a run without any store; requests are counted by the server itself.
"""
from __future__ import annotations

import os
from pathlib import Path
import pickle
import socket
import subprocess
import sys
import time
import warnings

import numpy as np
import pandas as pd
import pytest
from conftest import iam_user, invoke, words, write_csv
from test_cache import TEXTS, assert_same, counts, extract, unique_windows

import pipeline.model.encode_stage as encode_stage
from pipeline.cache.stores import open_store
from pipeline.errors import ConfigError, StoreWarning

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHUNK = ("--strategy", "chunk")
KEYS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}


@pytest.fixture
def s3(s3_bucket, s3_server, monkeypatch, tmp_path):
    """A fresh bucket on the local server, the AWS variables set for it (conftest's s3_bucket), the working
    folder tmp_path/cwd; yields (uri "s3://BUCKET/runs", boto3 client, the server's request counter)."""
    bucket, client = s3_bucket
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    return f"s3://{bucket}/runs", client, s3_server.counted


def objects(client, uri: str, prefix: str = "runs/") -> dict[str, bytes]:
    bucket = uri.split("/")[2]
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return {o["Key"]: client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


# ---------------------------------------------------------------- runs


def test_second_run_encodes_nothing_writes_nothing_and_equals_a_fresh_run(runner, tiny_model_dir, tmp_path, s3):
    uri, client, counted = s3
    extra = ("--overlap", 4, "--feature", "chunk:mean", "--feature", "late:mean")   # window and token vectors
    fresh, out0 = extract(runner, tiny_model_dir, tmp_path, TEXTS, "fresh", *extra)
    first, out1 = extract(runner, tiny_model_dir, tmp_path, TEXTS, "first", "--cache", uri, *extra)
    stored = objects(client, uri)
    n = int(out0.split(" windows encoded")[0].split()[-1])
    assert n > 0 and counts(out1) == (n, 0)
    assert stored and all(k.startswith("runs/windows-v1/") and k.endswith(".lbw") for k in stored)
    counted.reset()
    second, out2 = extract(runner, tiny_model_dir, tmp_path, TEXTS, "second", "--cache", uri, *extra)
    assert counts(out2) == (0, n)
    assert counted.count("PUT", ok_only=False) == counted.count("DELETE", ok_only=False) == 0
    assert counted.count("POST", ok_only=False) == 0        # no multi-object delete either
    assert objects(client, uri) == stored                    # a run that only reads writes nothing
    assert_same(first, fresh)
    assert_same(second, fresh)
    assert sorted(os.listdir(".")) == []                     # no folder named s3: in the working folder


def test_env_variable_and_cache_command(runner, tiny_model_dir, tmp_path, s3, monkeypatch):
    uri, client, _ = s3
    bucket = uri.split("/")[2]
    client.put_object(Bucket=bucket, Key="runs2/keep.txt", Body=b"x")      # beside the prefix: never touched
    client.put_object(Bucket=bucket, Key="runs/notes.txt", Body=b"y")      # in it, not the store's
    monkeypatch.setenv("LONGBERT_CACHE", uri)
    _, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "a", *CHUNK)
    n = len(unique_windows(tiny_model_dir, TEXTS))
    assert counts(out) == (n, 0)
    shown = invoke(runner, ["cache", uri])
    assert shown.exit_code == 0, shown.output
    stored = {k: v for k, v in objects(client, uri).items() if k.endswith(".lbw")}
    size = sum(len(v) for v in stored.values())
    assert shown.output.splitlines()[0].startswith(f"{uri} (objects): {size:,} bytes, {n:,} windows")
    assert shown.output.splitlines()[-1].split()[:2] == [str(n), "32"] and "float32 mean layers -1" in shown.output
    cleared = invoke(runner, ["cache", uri, "--clear"])
    assert cleared.exit_code == 0 and " 0 windows" in cleared.output.splitlines()[0]
    assert sorted(objects(client, uri, "")) == ["runs/notes.txt", "runs2/keep.txt"]
    _, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "b", *CHUNK)
    assert counts(out) == (n, 0)


def test_damaged_object_is_named_left_out_and_encoded_again(runner, tiny_model_dir, tmp_path, s3):
    uri, client, _ = s3
    bucket = uri.split("/")[2]
    fresh, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "first", *CHUNK, "--block-rows", "4", "--cache", uri)
    looked_up = sum(counts(out))          # a window shared by two blocks is looked up in each
    stored = objects(client, uri)
    assert len(stored) >= 2
    cut, flipped = sorted(stored)[:2]
    client.put_object(Bucket=bucket, Key=cut, Body=stored[cut][:-7])                          # truncated
    body = bytearray(stored[flipped])
    body[-3] ^= 0xFF                                                                           # one value changed
    client.put_object(Bucket=bucket, Key=flipped, Body=bytes(body))
    lost = sum(int(k.rsplit("-", 1)[1].split(".")[0]) for k in (cut, flipped))
    with pytest.warns(StoreWarning) as caught:
        again, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "again", *CHUNK, "--block-rows", "4",
                             "--cache", uri)
    named = " ".join(str(w.message) for w in caught)
    assert cut.removeprefix("runs/") in named and flipped.removeprefix("runs/") in named and "damaged" in named
    assert counts(out) == (lost, looked_up - lost)
    assert_same(again, fresh)
    n = len(unique_windows(tiny_model_dir, TEXTS))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StoreWarning)   # the damaged objects are still there, and named again
        third, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "third", *CHUNK, "--cache", uri)
    assert counts(out) == (0, n)                         # the windows were stored again, beside the damaged
    assert_same(third, fresh)


def test_two_writers_at_once_share_one_prefix(tiny_model_dir, tmp_path, s3, runner):
    uri, client, _ = s3
    texts = [words(20 + 3 * i, i) for i in range(40)]
    src = write_csv(tmp_path / "c.csv", [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)])
    env = {**os.environ, "PYTHONPATH": ROOT}
    procs = [subprocess.Popen([sys.executable, os.path.join(ROOT, "cli.py"), "extract", str(src), "-o",
                               str(tmp_path / f"run{i}.parquet"), "--model", str(tiny_model_dir), "--no-progress",
                               "--max-length", "16", *CHUNK, "--block-rows", "4", "--cache", uri], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    fresh, _ = extract(runner, tiny_model_dir, tmp_path, texts, "c", *CHUNK)
    for i in range(2):
        assert_same(pd.read_parquet(tmp_path / f"run{i}.parquet"), fresh)
    n = len(unique_windows(tiny_model_dir, texts))
    assert sum(counts(o)[0] for o, _ in outs) >= n
    again, out = extract(runner, tiny_model_dir, tmp_path, texts, "c", *CHUNK, "--cache", uri)
    assert counts(out) == (0, n)
    assert_same(again, fresh)


def test_read_only_credentials_read_and_say_once_that_nothing_was_stored(runner, tiny_model_dir, tmp_path, s3,
                                                                          s3_server, monkeypatch):
    import moto.settings

    uri, client, counted = s3
    extract(runner, tiny_model_dir, tmp_path, TEXTS[:5], "first", *CHUNK, "--cache", uri)
    stored = objects(client, uri)
    key_id, secret = iam_user(s3_server, ("Allow", ["s3:Get*", "s3:List*"], "*"))
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)   # the server checks credentials now
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    old = len(unique_windows(tiny_model_dir, TEXTS[:5]))
    n = len(unique_windows(tiny_model_dir, TEXTS))
    counted.reset()
    with pytest.warns(StoreWarning) as caught:
        read, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "read", *CHUNK, "--cache", uri)
    said = [str(w.message) for w in caught if "new windows were not stored" in str(w.message)]
    assert len(said) == 1 and uri in said[0]
    assert counts(out) == (n - old, old)
    assert counted.count("PUT") == 0                     # refused (403), and tried once only
    assert counted.count("PUT", ok_only=False) <= 1
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", float("inf"))
    assert objects(client, uri) == stored
    fresh, _ = extract(runner, tiny_model_dir, tmp_path, TEXTS, "fresh", *CHUNK)
    assert_same(read, fresh)


# ---------------------------------------------------------------- bad input: exit 2 before the model loads


@pytest.fixture
def no_model_load(monkeypatch):
    """Fails the test if any weights load (Weights.encoder)."""
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")
    monkeypatch.setattr(encode_stage.Weights, "encoder", refuse)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run(runner, tiny_model_dir, tmp_path, uri):
    src = write_csv(tmp_path / "e.csv", [{"text": t} for t in TEXTS])
    return invoke(runner, ["extract", src, "-o", tmp_path / "e.parquet", "--model", tiny_model_dir,
                           "--no-progress", "--cache", uri])


def test_nothing_listening_is_exit_2_naming_cache_and_the_endpoint(runner, tiny_model_dir, tmp_path, s3,
                                                                   monkeypatch, no_model_load):
    uri, _, _ = s3
    endpoint = f"http://127.0.0.1:{_free_port()}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    started = time.monotonic()
    result = _run(runner, tiny_model_dir, tmp_path, uri)
    assert time.monotonic() - started < 60
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"Error: --cache {uri}: nothing answers at {endpoint} (")
    assert "Traceback" not in result.output and not (tmp_path / "e.parquet").exists()


def test_missing_bucket_is_exit_2_naming_it(runner, tiny_model_dir, tmp_path, s3, no_model_load):
    result = _run(runner, tiny_model_dir, tmp_path, "s3://no-such-bucket-here/x")
    assert result.exit_code == 2
    assert "the bucket 'no-such-bucket-here' does not exist at http://127.0.0.1:" in result.output


@pytest.mark.parametrize("unset", [("AWS_ACCESS_KEY_ID",), ("AWS_SECRET_ACCESS_KEY",),
                                   ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")])
def test_missing_credentials_are_exit_2_naming_them(runner, tiny_model_dir, tmp_path, s3, monkeypatch, unset,
                                                     no_model_load):
    uri, _, counted = s3
    for name in unset:
        monkeypatch.delenv(name)
    result = _run(runner, tiny_model_dir, tmp_path, uri)
    assert result.exit_code == 2
    assert "no credentials for http://127.0.0.1:" in result.output and " and ".join(unset) in result.output
    assert sum(counted.requests.values()) == 0                # nothing sent


def test_refused_credentials_are_exit_2(runner, tiny_model_dir, tmp_path, s3, monkeypatch, no_model_load):
    import moto.settings

    uri, _, _ = s3
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAUNKNOWN0000000")
    result = _run(runner, tiny_model_dir, tmp_path, uri)
    assert result.exit_code == 2
    assert "refused the credentials (AWS_ACCESS_KEY_ID=AKIAUNKNOWN0000000): InvalidAccessKeyId" in result.output


def test_unknown_scheme_and_no_bucket_are_exit_2(runner, tiny_model_dir, tmp_path, s3):
    result = _run(runner, tiny_model_dir, tmp_path, "gs://b/x")
    assert result.exit_code == 2 and "no window store opens gs:// URIs; pass a folder or s3://BUCKET/PREFIX" in result.output
    result = _run(runner, tiny_model_dir, tmp_path, "s3:///x")
    assert result.exit_code == 2 and "names no bucket" in result.output
    assert os.listdir(".") == []


def test_missing_library_names_the_extra(s3, monkeypatch):
    uri, _, _ = s3
    monkeypatch.setitem(sys.modules, "obstore", None)          # import obstore now raises ImportError
    with pytest.raises(ConfigError) as err:
        open_store(uri)
    assert str(err.value) == (f"--cache {uri}: this store needs the obstore library, which is not installed; "
                              "pip install -e '.[s3]' in a clone of longbert (or pip install 'obstore>=0.12')")
    import tomllib   # the pin the message names is pyproject.toml's

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["optional-dependencies"]["s3"] == ["obstore>=0.12"]


# ---------------------------------------------------------------- the Python API and pickles


def test_vectorizer_travels_as_its_uri_and_shares_the_store(tiny_model_dir, s3, monkeypatch):
    import longbert
    import pipeline.classify.loaded as loaded_mod

    uri, client, counted = s3
    vec = longbert.LongBertVectorizer(model=str(tiny_model_dir), strategy="chunk", max_length=16, cache=uri)
    first = vec.fit_transform(TEXTS)
    copy = pickle.loads(pickle.dumps(vec))
    assert copy.cache == uri and uri.encode() in pickle.dumps(vec)
    monkeypatch.setattr(loaded_mod, "_LOADED", {})             # as a fresh process: the model loads again
    counted.reset()
    again = copy.fit_transform(TEXTS)
    np.testing.assert_allclose(again, first, atol=1e-6, rtol=0)
    assert counted.count("PUT", ok_only=False) == 0 and counted.count("GET") >= 1
    plain = longbert.LongBertVectorizer(model=str(tiny_model_dir), strategy="chunk", max_length=16, cache=None)
    np.testing.assert_allclose(plain.fit_transform(TEXTS), first, atol=1e-6, rtol=0)


def test_store_object_pickles_as_its_uri_and_the_stage_keeps_the_uri(s3, tiny_model_dir):
    from pipeline.model.encode_stage import Encode
    from pipeline.options.config import Feature, ModelConfig

    uri, _, _ = s3
    store = open_store(uri)
    copy = pickle.loads(pickle.dumps(store))
    assert copy.uri == uri and type(copy) is type(store)
    stage = Encode(ModelConfig(model=str(tiny_model_dir)), [Feature("chunk", "mean")], store=uri)
    assert pickle.loads(pickle.dumps(stage)).store == uri


# ---------------------------------------------------------------- the store and its objects, without a model


POOL = "ab" * 32


def _ids(n: int, seed: int = 0) -> list[np.ndarray]:
    """n distinct windows: [CLS]=2, the window's number, 0 to 29 random ids, [SEP]=3."""
    rng = np.random.default_rng(seed)
    return [np.concatenate([[2, 1000 + i], rng.integers(5, 50, int(rng.integers(0, 30))), [3]]) for i in range(n)]


def test_blocks_round_trip_and_refuse_damage():
    from pipeline.cache.object_blocks import BlockDamaged, index_length, pack_block, parse_index, parse_name, verify

    keys, values = [bytes([i]) * 32 for i in range(3)], [b"\x00" * 16, b"\x01" * 8, b""]
    name, data = pack_block(POOL, 4, "label", "vectors", keys, values)
    sha, n = parse_name(f"windows-v1/{POOL}/{name}")
    assert n == 3 and verify(sha, data) and len(data) == index_length(3) + 24
    header, entries = parse_index(data[:index_length(3)], 3)
    assert header == {"pool": POOL, "dim": 4, "label": "label", "kind": "vectors"}
    assert [(k, data[o:o + 4 * v]) for k, o, v in entries] == list(zip(keys, values))
    assert not verify(sha, data[:-1]) and not verify(sha, data[:-1] + b"\x02")
    with pytest.raises(BlockDamaged):
        parse_index(data[:index_length(3) - 1], 3)
    with pytest.raises(BlockDamaged):
        parse_index(data, 2)
    assert parse_name("x/notes.txt") is None and parse_name(f"{sha}-3-0a1b.lbw") == (sha, 3)


def test_requests_per_1000_windows_and_values(s3):
    """1,000 windows put in 4 blocks: 4 PUTs of one object each; another process's store object reads
    them back with 1 LIST and 4 GETs (the open check adds one LIST), bit for bit."""
    uri, client, counted = s3
    ids = _ids(1000)
    vectors = np.random.default_rng(1).standard_normal((1000, 384)).astype(np.float32)
    writer = open_store(uri)
    writer.register(POOL, 384, "test")
    for start in range(0, 1000, 250):
        assert writer.put_many(POOL, ids[start:start + 250], vectors[start:start + 250]) == 250
    assert counted.count("PUT") == 4 and len(objects(client, uri)) == 4
    counted.reset()
    reader = pickle.loads(pickle.dumps(writer))                # as another process: nothing in memory
    reader.register(POOL, 384, "test")
    got = np.concatenate([reader.lookup(POOL, ids[s:s + 250])[0] for s in range(0, 1000, 250)])
    assert got.tobytes() == vectors.tobytes()
    assert (counted.count("LIST"), counted.count("GET"), counted.count("PUT", ok_only=False)) == (1, 4, 0)
    stats = reader.stats()
    assert (stats["entries"], stats["objects"], stats["hits"], stats["lookups"]) == (1000, 4, 1000, 1000)
    assert stats["size_bytes"] == sum(len(v) for v in objects(client, uri).values())


def test_token_vectors_and_a_racing_duplicate(s3):
    uri, client, counted = s3
    ids = _ids(6, seed=3)
    tokens = [np.full((len(i) - 2, 8), k, dtype=np.float32) for k, i in enumerate(ids)]
    a, b = open_store(uri), open_store(uri)
    for store in (a, b):
        store.register(POOL, 8, "tokens")
        assert store.get_tokens(POOL, ids) == [None] * 6      # both list an empty pool first: a race
    a.put_tokens(POOL, ids, tokens)
    b.put_tokens(POOL, ids, tokens)                            # the same object: create-if-absent says it is there
    assert len(objects(client, uri)) == 1 and counted.count("PUT") == 1 and counted.count("PUT", ok_only=False) == 2
    c = open_store(uri)
    c.register(POOL, 8, "tokens")
    for got, want in zip(c.get_tokens(POOL, ids), tokens):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="token vectors must be"):
        c.put_tokens(POOL, ids[:1], [tokens[1]])
    with pytest.raises(ValueError, match="is not registered"):
        c.get_many("cd" * 32, ids)


def test_a_damaged_object_falls_back_to_another_copy(s3):
    uri, client, _ = s3
    bucket = uri.split("/")[2]
    ids = _ids(5, seed=4)
    vectors = np.arange(5 * 4, dtype=np.float32).reshape(5, 4)
    for part in (slice(0, 5), slice(0, 3)):                    # two racing writers' blocks overlap in 3 windows
        store = open_store(uri)
        store.register(POOL, 4, "t")
        if part == slice(0, 3):
            store._index[POOL] = {}                            # as a writer that listed before the first put
        store.put_many(POOL, ids[part], vectors[part])
    stored = objects(client, uri)
    big = next(k for k in stored if k.endswith("-5.lbw"))
    client.put_object(Bucket=bucket, Key=big, Body=stored[big][:-4])
    reader = open_store(uri)
    reader.register(POOL, 4, "t")
    with pytest.warns(StoreWarning, match="is damaged"):
        found = reader.get_many(POOL, ids)
    assert [f is not None for f in found] == [True] * 3 + [False] * 2   # the 3 from the other object
    np.testing.assert_array_equal(np.stack(found[:3]), vectors[:3])


def test_the_cli_prints_a_store_warning_as_one_line(monkeypatch):
    import cli

    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)   # restored after the test
    cli._plain_store_warnings()
    once = warnings.formatwarning
    cli._plain_store_warnings()
    assert warnings.formatwarning is once                  # not wrapped again by a second call
    assert warnings.formatwarning("the object x is damaged", StoreWarning, "/a/b.py", 7) == \
        "Warning: the object x is damaged\n"
    assert "/a/b.py:7" in warnings.formatwarning("other", UserWarning, "/a/b.py", 7)


def test_a_run_closes_the_store_it_was_given_but_not_the_vectorizers(tiny_model_dir, tmp_path, s3):
    """Pipeline.run closes, through the encode stage, a store passed open (here the S3 store) and the one
    it opened from its URI; the closed store opens again on the next run, which encodes nothing."""
    import longbert
    from pipeline.classify.loaded import memory_store
    from pipeline.options.config import PipelineConfig

    uri, _, _ = s3
    src = write_csv(tmp_path / "in.csv", [{"id": f"d{i}", "text": t} for i, t in enumerate(TEXTS)])
    given = open_store(uri)
    closed = []
    real = given.close
    given.close = lambda: (closed.append(1), real())[1]
    cfg = PipelineConfig.from_options(model=str(tiny_model_dir), max_length=16, strategy="chunk", progress=False)
    pipe = longbert.Pipeline.from_config(cfg, store=given)
    first = pipe.run(str(src), str(tmp_path / "a.parquet"))
    assert closed == [1] and first.windows_cached == 0
    second = pipe.run(str(src), str(tmp_path / "b.parquet"))
    assert closed == [1, 1] and (second.windows, second.windows_cached) == (0, first.windows)
    memory = memory_store()
    pipe = longbert.Pipeline.from_config(cfg, store=memory)
    pipe.run(str(src), str(tmp_path / "c.parquet"))
    assert memory.stats()["entries"] > 0                     # not closed: its windows are still there


def test_a_large_store_reads_indexes_first_then_only_the_objects_asked_for(s3, monkeypatch):
    """Above WHOLE_BELOW bytes a pool's objects are indexed by a ranged GET of their first 512 + 36 N bytes,
    and an object's vectors are read only when one of its windows is asked for (then checked whole)."""
    import pipeline.cache.object_store as object_store

    uri, client, counted = s3
    bucket = uri.split("/")[2]
    monkeypatch.setattr(object_store, "WHOLE_BELOW", 0)
    ids, vectors = _ids(40, seed=5), np.random.default_rng(6).standard_normal((40, 16)).astype(np.float32)
    writer = open_store(uri)
    writer.register(POOL, 16, "t")
    for start in range(0, 40, 10):
        writer.put_many(POOL, ids[start:start + 10], vectors[start:start + 10])
    stored = objects(client, uri)
    last = sorted(stored)[-1]
    client.put_object(Bucket=bucket, Key=last, Body=stored[last][:-1])          # cut by one byte
    reader = open_store(uri)          # its open check: a LIST, then a LIST and a 1-byte GET (may it read?)
    counted.reset()
    reader.register(POOL, 16, "t")
    first = reader.lookup(POOL, ids[:10])
    assert counted.count("GET") == 4 + 1                        # 4 indexes, then the one object asked for
    np.testing.assert_array_equal(first[0], vectors[:10])
    with pytest.warns(StoreWarning, match="is damaged"):
        found = reader.get_many(POOL, ids)
    missing = [i for i, f in enumerate(found) if f is None]
    assert len(missing) == 10 and all(np.array_equal(found[i], vectors[i]) for i in range(40) if i not in missing)
