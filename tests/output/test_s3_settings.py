"""One S3 connection (pipeline.storage) for the window store, the inputs and the outputs: the settings a
boto3 user has made (a profile in the AWS CLI's files) reach an s3:// input and an -o s3://BUCKET/PREFIX/
output as they reach the store, and an endpoint written without its scheme is the same exit 2 for each,
before anything is sent or the model loads. Against moto's server (tests/conftest.py's s3_bucket)."""
from __future__ import annotations

import os

import pytest
from conftest import invoke, write_csv
from test_s3_output import TEXTS, no_model_load, s3  # noqa: F401 - the fixtures

from pipeline import load_features


def _args(model, tmp_path, src, out):
    return ["extract", src, "-o", out, "--model", model, "--no-progress", "--max-length", 16, "--strategy", "chunk",
            "--block-rows", 3]


@pytest.mark.parametrize("where", ["input", "output"])
def test_an_endpoint_without_its_scheme_is_exit_2_naming_the_variable(runner, tiny_model_dir, tmp_path, s3,
                                                                      monkeypatch, no_model_load, where):
    bucket, client = s3
    client.put_object(Bucket=bucket, Key="in.csv", Body=b"id,text\nd0,a b c\n")
    local = write_csv(tmp_path / "in.csv", [{"id": "d0", "text": "a b c"}])
    host = os.environ["AWS_ENDPOINT_URL"].removeprefix("http://")
    monkeypatch.setenv("AWS_ENDPOINT_URL", host)
    src, out = (f"s3://{bucket}/in.csv", f"{tmp_path}/out/") if where == "input" else (local, f"s3://{bucket}/out/")
    result = invoke(runner, _args(tiny_model_dir, tmp_path, src, out))
    assert result.exit_code == 2, result.output
    uri = src if where == "input" else out
    label = "input" if where == "input" else "--output"
    assert result.output.startswith(f"Error: {label} {uri}: AWS_ENDPOINT_URL={host!r} has no scheme (http:// or "
                                    f"https://); write it in full, e.g. AWS_ENDPOINT_URL=http://{host}"), result.output
    assert "Traceback" not in result.output and os.listdir(".") == []


def test_an_input_and_an_output_take_their_credentials_from_a_profile(runner, tiny_model_dir, tmp_path, s3,
                                                                      monkeypatch):
    """No AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY, the keys in a profile of AWS_SHARED_CREDENTIALS_FILE
    named by AWS_PROFILE, the endpoint in that profile's config: the run reads the input from S3 and writes
    its output there, as a local run of the same file writes it locally."""
    bucket, client = s3
    local = write_csv(tmp_path / "in.csv", [{"id": f"d{i}", "text": t} for i, t in enumerate(TEXTS)])
    client.upload_file(str(local), bucket, "c/in.csv")
    creds, config = tmp_path / "credentials", tmp_path / "config"
    creds.write_text("[team]\naws_access_key_id = test\naws_secret_access_key = test\n")
    config.write_text(f"[profile team]\nregion = us-east-1\nendpoint_url = {os.environ['AWS_ENDPOINT_URL']}\n")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_PROFILE", "team")
    result = invoke(runner, _args(tiny_model_dir, tmp_path, f"s3://{bucket}/c/in.csv", f"s3://{bucket}/out/"))
    assert result.exit_code == 0, result.output
    expected = invoke(runner, _args(tiny_model_dir, tmp_path, local, f"{tmp_path}/local/"))
    assert expected.exit_code == 0, expected.output
    ids, X, _ = load_features(f"s3://{bucket}/out/")
    ids_local, X_local, _ = load_features(tmp_path / "local")
    assert list(ids) == list(ids_local) == [f"d{i}" for i in range(len(TEXTS))]
    assert abs(X - X_local).max() < 1e-5
