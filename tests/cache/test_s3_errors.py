"""The S3 window store's failures named for what they are (a permission, bad credentials, an endpoint, a
certificate), never as damage or a dead server; the AWS settings boto3 and the AWS CLI read (AWS_PROFILE and
~/.aws, AWS_ENDPOINT_URL_S3, AWS_CA_BUNDLE...); refusals before "loading model"; `longbert cache` counting
only intact objects; no secret in any message. Against moto's S3 server on 127.0.0.1 (IAM users whose
policies allow some actions, the server checking credentials), with the tiny BERT.
"""
from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import threading
import uuid
import warnings

import boto3
import pytest
from conftest import iam_user, invoke, write_csv
from test_cache import TEXTS, assert_same, counts, extract, unique_windows
from test_object_store import CHUNK, KEYS, POOL, _free_port, _ids, no_model_load, objects, s3  # noqa: F401

import pipeline.model.encode_stage as encode_stage
from pipeline.aws_config import AwsSettings, check_endpoint, read_settings
from pipeline.cache.stores import open_store
from pipeline.errors import ConfigError, StoreWarning


@pytest.fixture
def auth(monkeypatch):
    """auth(True): the server checks credentials from now on (the IAM users' keys only); auth(False): any key."""
    import moto.settings

    def set_auth(on: bool) -> None:
        monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0 if on else float("inf"))
    yield set_auth
    set_auth(False)


def use_keys(monkeypatch, key: str, secret: str) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)


def refuse_model(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")
    monkeypatch.setattr(encode_stage.Weights, "encoder", refuse)


def run_cli(runner, tiny_model_dir, tmp_path, uri, *extra):
    """``longbert extract`` of TEXTS with the progress lines on (so "loading model" would show)."""
    src = write_csv(tmp_path / "e.csv", [{"text": t} for t in TEXTS])
    return invoke(runner, ["extract", src, "-o", tmp_path / "e.parquet", "--model", tiny_model_dir, "--overwrite",
                           "--cache", uri, *extra])


def windows_in(key: str) -> int:
    """N of an object key ending in SHA-N.lbw."""
    return int(key.rsplit("-", 1)[1].split(".")[0])


# ---------------------------------------------------------------- permissions


def test_credentials_that_may_list_and_write_but_not_read_are_exit_2_naming_s3_getobject(
        runner, tiny_model_dir, tmp_path, s3, s3_server, monkeypatch, auth):
    """Three runs, each refused before the model loads; no object is added, none is called damaged."""
    uri, client, _ = s3
    bucket = uri.split("/")[2]
    extract(runner, tiny_model_dir, tmp_path, TEXTS, "admin", *CHUNK, "--cache", uri)
    stored = objects(client, uri)
    key, secret = iam_user(s3_server, ("Allow", ["s3:List*", "s3:PutObject"], "*"))
    use_keys(monkeypatch, key, secret)
    refuse_model(monkeypatch)
    for _ in range(3):
        auth(True)
        result = run_cli(runner, tiny_model_dir, tmp_path, uri, *CHUNK)
        assert result.exit_code == 2
        assert result.output == (
            f"Error: --cache {uri}: the stored windows cannot be read: the credentials (AWS_ACCESS_KEY_ID={key}) "
            f"lack the permission s3:GetObject (AccessDenied on GET at {s3_server.url}); grant s3:GetObject on "
            f"arn:aws:s3:::{bucket}/runs/*, or use credentials that have it, or pass --cache another store\n")
        auth(False)
        assert objects(client, uri) == stored


def test_an_object_refused_during_a_run_is_named_encoded_again_and_never_copied(
        runner, tiny_model_dir, tmp_path, s3, s3_server, monkeypatch, auth):
    uri, client, _ = s3
    bucket = uri.split("/")[2]
    fresh, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "first", *CHUNK, "--block-rows", "4", "--cache", uri)
    n = len(unique_windows(tiny_model_dir, TEXTS))     # each stored once, in one of the objects
    stored = objects(client, uri)
    locked = sorted(stored)[-1]          # the open check reads the first object: this one is read later
    key, secret = iam_user(s3_server, ("Allow", ["s3:*"], "*"),
                           ("Deny", ["s3:GetObject"], f"arn:aws:s3:::{bucket}/{locked}"))
    use_keys(monkeypatch, key, secret)
    for _ in range(2):
        auth(True)
        with pytest.warns(StoreWarning) as caught:
            again, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "first", *CHUNK, "--cache", uri)   # one block
        said = [str(w.message) for w in caught]
        assert said == [f"window store {uri}: reading {locked.removeprefix('runs/')} was refused: the credentials "
                        f"(AWS_ACCESS_KEY_ID={key}) lack the permission s3:GetObject (AccessDenied on GET at "
                        f"{s3_server.url}); grant s3:GetObject on arn:aws:s3:::{bucket}/runs/*, or use credentials "
                        "that have it; the windows of the objects it cannot read are encoded again, and this run "
                        "stores nothing (the store may hold them already)"]
        assert counts(out) == (windows_in(locked), n - windows_in(locked))
        assert_same(again, fresh)
        auth(False)
        assert objects(client, uri) == stored           # no copy, however many runs


def test_clear_with_credentials_that_may_not_delete_is_exit_2_naming_s3_deleteobject(
        runner, tiny_model_dir, tmp_path, s3, s3_server, monkeypatch, auth):
    uri, client, _ = s3
    bucket = uri.split("/")[2]
    extract(runner, tiny_model_dir, tmp_path, TEXTS, "a", *CHUNK, "--block-rows", "4", "--cache", uri)
    stored = objects(client, uri)
    key, secret = iam_user(s3_server, ("Allow", ["s3:Get*", "s3:List*"], "*"))
    use_keys(monkeypatch, key, secret)
    auth(True)
    result = invoke(runner, ["cache", uri, "--clear"])
    assert result.exit_code == 2
    assert result.output == (
        f"Error: longbert cache {uri} --clear: deleting the stored windows was refused: the credentials "
        f"(AWS_ACCESS_KEY_ID={key}) lack the permission s3:DeleteObject (AccessDenied on DELETE at {s3_server.url}); "
        f"grant s3:DeleteObject on arn:aws:s3:::{bucket}/runs/*, or use credentials that have it; 0 of {len(stored)} "
        "objects were deleted\n")
    shown = invoke(runner, ["cache", uri])           # the report still works for this reader
    assert shown.exit_code == 0 and f"{len(unique_windows(tiny_model_dir, TEXTS)):,} windows" in shown.output
    auth(False)
    assert objects(client, uri) == stored


def test_a_refused_write_names_s3_putobject(runner, tiny_model_dir, tmp_path, s3, s3_server, monkeypatch, auth):
    uri, client, _ = s3
    bucket = uri.split("/")[2]
    key, secret = iam_user(s3_server, ("Allow", ["s3:Get*", "s3:List*"], "*"))
    use_keys(monkeypatch, key, secret)
    auth(True)
    with pytest.warns(StoreWarning) as caught:
        extract(runner, tiny_model_dir, tmp_path, TEXTS[:3], "ro", *CHUNK, "--cache", uri)
    assert [str(w.message) for w in caught] == [
        f"window store {uri}: writing was refused: the credentials (AWS_ACCESS_KEY_ID={key}) lack the permission "
        f"s3:PutObject (AccessDenied on PUT at {s3_server.url}); grant s3:PutObject on arn:aws:s3:::{bucket}/runs/*, "
        "or use credentials that have it; this run reads the stored windows, and new windows were not stored"]


def test_credentials_that_may_not_list_are_exit_2_naming_s3_listbucket(runner, tiny_model_dir, tmp_path, s3, s3_server,
                                                                      monkeypatch, auth, no_model_load):
    uri, _, _ = s3
    bucket = uri.split("/")[2]
    key, secret = iam_user(s3_server, ("Allow", ["s3:GetObject", "s3:PutObject"], "*"))
    use_keys(monkeypatch, key, secret)
    auth(True)
    result = run_cli(runner, tiny_model_dir, tmp_path, uri)
    assert result.exit_code == 2
    assert result.output == (
        f"Error: --cache {uri}: the credentials (AWS_ACCESS_KEY_ID={key}) lack the permission s3:ListBucket "
        f"(AccessDenied on LIST at {s3_server.url}); grant s3:ListBucket on arn:aws:s3:::{bucket}, or use "
        "credentials that have it\n")


# ---------------------------------------------------------------- refusals before the model loads


def test_refusals_come_before_the_loading_model_line(runner, tiny_model_dir, tmp_path, s3, monkeypatch):
    uri, _, _ = s3
    ok = run_cli(runner, tiny_model_dir, tmp_path, uri)
    assert ok.exit_code == 0 and "loading model" in ok.output          # the line a refusal must not print first
    refuse_model(monkeypatch)
    bad = run_cli(runner, tiny_model_dir, tmp_path, "s3://no-such-bucket-here/x")
    assert bad.exit_code == 2 and "loading model" not in bad.output
    assert bad.output.startswith("Error: --cache s3://no-such-bucket-here/x: the bucket 'no-such-bucket-here' does not")
    src = write_csv(tmp_path / "l.csv", [{"text": t, "label": "ab"[i % 2]} for i, t in enumerate(TEXTS)])
    probed = invoke(runner, ["probe", src, "--label-col", "label", "--folds", "2", "--model", tiny_model_dir,
                             "--cache", "s3://no-such-bucket-here/x"])
    assert probed.exit_code == 2 and "loading model" not in probed.output
    assert "the bucket 'no-such-bucket-here' does not exist" in probed.output


# ---------------------------------------------------------------- longbert cache


def test_cache_report_counts_only_intact_objects_and_says_where_hit_counts_are(runner, tiny_model_dir, tmp_path, s3):
    uri, client, _ = s3
    bucket = uri.split("/")[2]
    extract(runner, tiny_model_dir, tmp_path, TEXTS, "a", *CHUNK, "--block-rows", "4", "--cache", uri)
    _, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "a", *CHUNK, "--block-rows", "4", "--cache", uri)
    assert counts(out)[0] == 0                                    # a run that took every window from the store
    shown = invoke(runner, ["cache", uri]).output.splitlines()
    assert shown[1] == ("hit rate: not kept in the store (its reads write nothing); each run's summary line says how "
                        "many windows came from it (\"N windows encoded, M from the cache\")")
    assert shown[-1].split()[2:5] == ["-", "-", "-"]              # lookups, hits, rate: not 0
    stored = objects(client, uri)
    cut, flipped = sorted(stored)[:2]
    client.put_object(Bucket=bucket, Key=cut, Body=stored[cut][:-7])
    body = bytearray(stored[flipped])
    body[-3] ^= 0xFF
    client.put_object(Bucket=bucket, Key=flipped, Body=bytes(body))
    intact = {k: v for k, v in stored.items() if k not in (cut, flipped)}
    result = invoke(runner, ["cache", uri])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    n, size = sum(windows_in(k) for k in intact), sum(len(v) for v in intact.values())
    assert lines[0].startswith(f"{uri} (objects): {size:,} bytes, {n:,} windows")
    assert lines[1] == (f"not counted: {windows_in(cut) + windows_in(flipped):,} windows in 2 damaged objects "
                        f"({len(stored[cut]) - 7 + len(stored[flipped]):,} bytes): its sha256 is not its name's")
    assert lines[-1].split()[0] == f"{n:,}"


def test_a_large_store_report_checks_each_objects_size_against_its_index(s3, monkeypatch):
    import numpy as np

    import pipeline.cache.object_store as object_store

    uri, client, _ = s3
    monkeypatch.setattr(object_store, "WHOLE_BELOW", 0)     # as a store too large to read whole for a report
    store = open_store(uri)
    store.register(POOL, 8, "t")
    ids = _ids(20, seed=7)
    for start in range(0, 20, 5):
        store.put_many(POOL, ids[start:start + 5], np.ones((5, 8), dtype=np.float32))
    stored = objects(client, uri)
    cut = sorted(stored)[1]
    client.put_object(Bucket=uri.split("/")[2], Key=cut, Body=stored[cut][:-4])
    stats = open_store(uri).stats()
    assert (stats["entries"], stats["objects"]) == (15, 3)
    assert stats["left_out"] == {"damaged": [1, 5, len(stored[cut]) - 4,
                                             f"it holds {len(stored[cut]) - 4:,} bytes, its index says {len(stored[cut]):,}"]}


# ---------------------------------------------------------------- the endpoint


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_an_endpoint_without_scheme_is_exit_2_naming_the_variable(runner, tiny_model_dir, tmp_path, s3, s3_server,
                                                                 monkeypatch, no_model_load, host):
    uri, _, counted = s3
    value = f"{host}:{s3_server.url.rsplit(':', 1)[1]}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", value)
    result = run_cli(runner, tiny_model_dir, tmp_path, uri)
    assert result.exit_code == 2
    assert result.output == (f"Error: --cache {uri}: AWS_ENDPOINT_URL={value!r} has no scheme (http:// or https://); "
                             f"write it in full, e.g. AWS_ENDPOINT_URL=http://{value} for a server without TLS, or "
                             f"AWS_ENDPOINT_URL=https://{value}\n")
    assert sum(counted.requests.values()) == 0


def test_an_upper_case_scheme_and_endpoint_url_s3_are_taken(runner, tiny_model_dir, tmp_path, s3, s3_server,
                                                            monkeypatch):
    uri, client, _ = s3
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.url.replace("http://", "HTTP://"))
    fresh, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "a", *CHUNK, "--cache", uri)
    n = len(unique_windows(tiny_model_dir, TEXTS))
    assert counts(out) == (n, 0) and objects(client, uri)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_free_port()}")    # nothing there: _S3 wins
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server.url)
    again, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "a", *CHUNK, "--cache", uri)
    assert counts(out) == (0, n)
    assert_same(again, fresh)


@pytest.mark.parametrize("value, message", [
    ("localhost:9000", "AWS_ENDPOINT_URL='localhost:9000' has no scheme (http:// or https://); write it in full, e.g. "
                       "AWS_ENDPOINT_URL=http://localhost:9000 for a server without TLS, or "
                       "AWS_ENDPOINT_URL=https://localhost:9000"),
    ("ftp://h:21", "AWS_ENDPOINT_URL='ftp://h:21': the scheme 'ftp://' is not http:// or https://; e.g. "
                   "AWS_ENDPOINT_URL=http://h:21"),
    ("http://", "AWS_ENDPOINT_URL='http://' names no valid host[:port] after 'http://'; e.g. "
                "AWS_ENDPOINT_URL=http://localhost:9000"),
    ("http://h:99999", "AWS_ENDPOINT_URL='http://h:99999' names no valid host[:port] after 'http://'; e.g. "
                       "AWS_ENDPOINT_URL=http://localhost:9000"),
    ("https://my host:9000", "AWS_ENDPOINT_URL='https://my host:9000' names no valid host[:port] after 'https://'; "
                             "e.g. AWS_ENDPOINT_URL=https://localhost:9000"),
])
def test_check_endpoint_refuses(value, message):
    with pytest.raises(ConfigError) as err:
        check_endpoint(value, "AWS_ENDPOINT_URL")
    assert str(err.value) == message


@pytest.mark.parametrize("value, taken", [("HTTP://h:9000/", "http://h:9000"), ("https://s3.example.com", "https://s3.example.com"),
                                          ("http://[::1]:9000", "http://[::1]:9000"), (" http://10.0.0.2 ", "http://10.0.0.2")])
def test_check_endpoint_takes(value, taken):
    assert check_endpoint(value, "AWS_ENDPOINT_URL") == taken


def test_a_host_that_does_not_resolve_is_named(runner, tiny_model_dir, tmp_path, s3, monkeypatch, no_model_load):
    uri, _, _ = s3
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://no-such-host.invalid:9000")
    result = run_cli(runner, tiny_model_dir, tmp_path, uri)
    assert result.exit_code == 2
    assert result.output == (f"Error: --cache {uri}: the host of http://no-such-host.invalid:9000 cannot be found "
                             "(DNS); check AWS_ENDPOINT_URL, or unset it for AWS S3\n")


# ---------------------------------------------------------------- AWS_PROFILE and ~/.aws


def aws_files(tmp_path, monkeypatch, credentials: str = "", config: str = "") -> None:
    for name, text in (("AWS_SHARED_CREDENTIALS_FILE", credentials), ("AWS_CONFIG_FILE", config)):
        path = tmp_path / name.lower()
        path.write_text(text)
        monkeypatch.setenv(name, str(path))


def test_a_profile_of_the_aws_files_gives_keys_region_and_endpoint(runner, tiny_model_dir, tmp_path, s3, s3_server,
                                                                   monkeypatch, auth):
    uri, client, _ = s3
    key, secret = iam_user(s3_server, ("Allow", ["s3:*"], "*"))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name)
    aws_files(tmp_path, monkeypatch, f"[team]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n",
              f"[profile team]\nregion = us-east-1\nservices = local\n\n[services local]\ns3 =\n"
              f"  endpoint_url = {s3_server.url}\n")
    monkeypatch.setenv("AWS_PROFILE", "team")
    auth(True)                                    # only the profile's keys are accepted now
    fresh, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "p", *CHUNK, "--cache", uri)
    again, out = extract(runner, tiny_model_dir, tmp_path, TEXTS, "p", *CHUNK, "--cache", uri)
    assert counts(out) == (0, len(unique_windows(tiny_model_dir, TEXTS)))
    assert_same(again, fresh)
    aws_files(tmp_path, monkeypatch, f"[team]\naws_access_key_id = {key}\naws_secret_access_key = wrong\n",
              f"[profile team]\nendpoint_url = {s3_server.url}\n")
    result = run_cli(runner, tiny_model_dir, tmp_path, uri)
    assert result.exit_code == 2
    assert result.output == (f"Error: --cache {uri}: {s3_server.url} refused the credentials (AWS_ACCESS_KEY_ID={key}): "
                             "SignatureDoesNotMatch; check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN\n")


def test_an_unknown_profile_and_a_role_profile_are_exit_2(runner, tiny_model_dir, tmp_path, s3, monkeypatch,
                                                          no_model_load):
    uri, _, _ = s3
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    aws_files(tmp_path, monkeypatch, "[default]\naws_access_key_id = A\naws_secret_access_key = B\n",
              "[profile dev]\nrole_arn = arn:aws:iam::123456789012:role/r\nsource_profile = default\n")
    creds, config = tmp_path / "aws_shared_credentials_file", tmp_path / "aws_config_file"
    monkeypatch.setenv("AWS_PROFILE", "nope")
    result = run_cli(runner, tiny_model_dir, tmp_path, uri)
    assert result.exit_code == 2
    assert result.output == (f"Error: --cache {uri}: AWS_PROFILE='nope': no profile [nope] in {creds} and no "
                             f"[profile nope] in {config}; profiles there: default, dev; set AWS_PROFILE to one of "
                             "them, or unset it\n")
    monkeypatch.setenv("AWS_PROFILE", "dev")
    result = run_cli(runner, tiny_model_dir, tmp_path, uri)
    assert result.exit_code == 2
    assert result.output == (f"Error: --cache {uri}: profile 'dev' in {config} gets its credentials by assuming a role "
                             "(role_arn), which longbert does not do itself; export them first: eval \"$(aws configure "
                             "export-credentials --profile dev --format env)\", or set AWS_ACCESS_KEY_ID and "
                             "AWS_SECRET_ACCESS_KEY\n")


def test_read_settings_follows_botocores_order(tmp_path):
    creds, config = tmp_path / "credentials", tmp_path / "config"
    creds.write_text("[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = FILESECRET\n"
                     "aws_session_token = FILETOKEN\n")
    config.write_text("[default]\nregion = eu-west-3\nendpoint_url = http://profile:1\nca_bundle = "
                      f"{creds}\n\n[profile other]\nregion = ap-south-1\naws_access_key_id = CFGKEY\n"
                      "aws_secret_access_key = CFGSECRET\n")
    files = {"AWS_SHARED_CREDENTIALS_FILE": str(creds), "AWS_CONFIG_FILE": str(config)}
    got = read_settings(files)
    assert (got.key_id, got.secret, got.token, got.region, got.endpoint, got.ca_bundle, got.profile) == \
        ("FILEKEY", "FILESECRET", "FILETOKEN", "eu-west-3", "http://profile:1", str(creds), "default")
    assert got.credentials_from == f"profile 'default' in {creds}" and "FILESECRET" not in repr(got)
    env = {**files, "AWS_ACCESS_KEY_ID": "ENVKEY", "AWS_SECRET_ACCESS_KEY": "ENVSECRET", "AWS_DEFAULT_REGION": "us-west-2",
           "AWS_ENDPOINT_URL": "http://env:2", "AWS_CA_BUNDLE": str(config)}
    got = read_settings(env)
    assert (got.key_id, got.secret, got.token, got.region, got.endpoint, got.ca_bundle) == \
        ("ENVKEY", "ENVSECRET", None, "us-west-2", "http://env:2", str(config))
    got = read_settings({**env, "AWS_REGION": "sa-east-1", "AWS_ENDPOINT_URL_S3": "https://s3only:3"})
    assert (got.region, got.endpoint, got.endpoint_from) == ("sa-east-1", "https://s3only:3", "AWS_ENDPOINT_URL_S3")
    got = read_settings({**files, "AWS_PROFILE": "other"})
    assert (got.key_id, got.region, got.endpoint) == ("CFGKEY", "ap-south-1", None)
    got = read_settings({**env, "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"})
    assert got.endpoint is None and got.obstore_config()["endpoint"] == "https://s3.us-west-2.amazonaws.com"
    with pytest.raises(ConfigError, match="AWS_CA_BUNDLE='/no/such.pem': no such file"):
        read_settings({**files, "AWS_CA_BUNDLE": "/no/such.pem"})


# ---------------------------------------------------------------- TLS


def _tls_files(tmp_path):
    """A CA and a server certificate for 127.0.0.1 it signed: (ca.pem, server cert path, server key path)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def cert(subject, issuer, key, signer, ca):
        builder = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                   .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=2))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]), critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = cert("test ca", "test ca", ca_key, ca_key, True)
    leaf = cert("127.0.0.1", "test ca", key, ca_key, False)
    pem = serialization.Encoding.PEM
    (tmp_path / "ca.pem").write_bytes(ca.public_bytes(pem))
    (tmp_path / "server.pem").write_bytes(leaf.public_bytes(pem))
    (tmp_path / "server.key").write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                            serialization.NoEncryption()))
    return tmp_path / "ca.pem", tmp_path / "server.pem", tmp_path / "server.key"


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    """moto's S3 over HTTPS on 127.0.0.1 with a certificate of a private CA: (url, ca.pem)."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    ca, cert, key = _tls_files(tmp_path_factory.mktemp("tls"))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = make_server("127.0.0.1", 0, DomainDispatcherApplication(create_backend_app), threaded=True,
                         request_handler=MotoRequestHandler, ssl_context=context)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"https://127.0.0.1:{server.server_port}"
    boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test",
                 verify=str(ca)).create_bucket(Bucket="tls-bucket")
    yield url, ca
    server.shutdown()


def test_a_certificate_of_an_unknown_ca_is_named_and_aws_ca_bundle_trusts_it(s3, tls_server, monkeypatch):
    import numpy as np

    url, ca = tls_server
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    with pytest.raises(ConfigError) as err:
        open_store("s3://tls-bucket/p")
    assert str(err.value) == (f"--cache s3://tls-bucket/p: the TLS connection to {url} failed: its certificate is "
                              "signed by a CA this machine does not trust (UnknownIssuer); set AWS_CA_BUNDLE to the "
                              "PEM file of that CA")
    monkeypatch.setenv("AWS_CA_BUNDLE", str(ca))
    store = open_store("s3://tls-bucket/p")
    store.register(POOL, 4, "t")
    ids = _ids(3)
    store.put_many(POOL, ids, np.eye(3, 4, dtype=np.float32))
    reader = open_store("s3://tls-bucket/p")
    reader.register(POOL, 4, "t")
    np.testing.assert_array_equal(reader.lookup(POOL, ids)[0], np.eye(3, 4, dtype=np.float32))
    assert "SSL_CERT_FILE" not in os.environ                 # set only while the client is built


def test_https_to_a_plain_http_server_is_named(s3, s3_server, monkeypatch):
    uri, _, _ = s3
    url = s3_server.url.replace("http://", "https://")
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    with pytest.raises(ConfigError) as err:
        open_store(uri)
    assert str(err.value) == (f"--cache {uri}: the TLS connection to {url} failed: the server did not answer in TLS "
                              "(an http:// server?) (InvalidContentType); write AWS_ENDPOINT_URL with http:// for a "
                              "server without TLS")


# ---------------------------------------------------------------- secrets


def test_no_secret_key_or_session_token_appears_anywhere(runner, tiny_model_dir, tmp_path, s3, s3_server, monkeypatch,
                                                         auth):
    """Every message of the failures above, the warnings, the output file and the store's objects: the
    secret key and the session token never appear (the key id may)."""
    uri, client, _ = s3
    token = "SESSIONTOKEN-" + uuid.uuid4().hex
    seen: list[str] = []
    extract(runner, tiny_model_dir, tmp_path, TEXTS, "a", *CHUNK, "--block-rows", "4", "--cache", uri)
    stored = objects(client, uri)
    locked = sorted(stored)[-1]
    users = {"noget": iam_user(s3_server, ("Allow", ["s3:List*", "s3:PutObject"], "*")),
             "reader": iam_user(s3_server, ("Allow", ["s3:Get*", "s3:List*"], "*")),
             "partial": iam_user(s3_server, ("Allow", ["s3:*"], "*"),
                                 ("Deny", ["s3:GetObject"], f"arn:aws:s3:::{uri.split('/')[2]}/{locked}"))}
    secrets = [secret for _, secret in users.values()] + [token]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name, args in (("noget", ["extract"]), ("reader", ["clear"]), ("reader", ["extract"]),
                           ("partial", ["extract"]), ("bad", ["extract"]), ("token", ["extract"])):
            key, secret = users.get(name, (users["reader"][0], "wrong-" + users["reader"][1]))
            if name == "token":                               # the right keys with a token the server refuses
                key, secret = users["reader"]
                monkeypatch.setenv("AWS_SESSION_TOKEN", token)
            use_keys(monkeypatch, key, secret)
            auth(True)
            if args == ["clear"]:
                seen.append(invoke(runner, ["cache", uri, "--clear"]).output)
            else:
                result = run_cli(runner, tiny_model_dir, tmp_path, uri, *CHUNK, "--block-rows", "4")
                seen.append(result.output)
            auth(False)
        monkeypatch.setenv("AWS_SESSION_TOKEN", token)       # ignored by the server without auth; must not leak
        use_keys(monkeypatch, *users["reader"])
        seen.append(run_cli(runner, tiny_model_dir, tmp_path, uri, *CHUNK).output)
        seen.append(invoke(runner, ["cache", uri]).output)
    seen += [str(w.message) for w in caught]
    text = "\n".join(seen)
    assert "AccessDenied" in text and "SignatureDoesNotMatch" in text and users["reader"][0] in text   # they were said
    assert "refused the credentials" in seen[5]                                                     # the token's run
    blobs = [text.encode(), (tmp_path / "e.parquet").read_bytes(), *objects(client, uri).values()]
    for secret in secrets:
        assert not any(secret.encode() in blob for blob in blobs), secret[:4]
    settings = AwsSettings(secret="abc-SECRET", token="tok-TOKEN")
    assert settings.redact("x abc-SECRET y tok-TOKEN") == "x *** y ***" and "SECRET" not in repr(settings)


def test_an_object_that_fails_to_read_is_named_for_that_never_damaged_and_not_copied(s3, monkeypatch):
    """A read that fails for another reason than damage or a permission (here a 503 after the retries)."""
    import numpy as np
    from obstore.exceptions import GenericError

    import pipeline.cache.object_client as object_client

    uri, client, _ = s3
    ids, vectors = _ids(6, seed=8), np.arange(6 * 4, dtype=np.float32).reshape(6, 4)
    writer = open_store(uri)
    writer.register(POOL, 4, "t")
    writer.put_many(POOL, ids[:3], vectors[:3])
    writer.put_many(POOL, ids[3:], vectors[3:])
    stored = objects(client, uri)
    failing = sorted(stored)[-1].removeprefix("runs/")
    real = object_client.Client.get

    def get(self, path, end=None):
        if path == failing:
            raise GenericError("Generic S3 error: Error performing GET http://x/y in 30s - Server returned non-2xx "
                               "status code: 503 Service Unavailable: <Error><Code>SlowDown</Code></Error>")
        return real(self, path, end)

    monkeypatch.setattr(object_client.Client, "get", get)
    reader = open_store(uri)
    reader.register(POOL, 4, "t")
    with pytest.warns(StoreWarning) as caught:
        found = reader.get_many(POOL, ids)
    said = [str(w.message) for w in caught]
    assert said == [f"window store {uri}: the object {failing} could not be read at {os.environ['AWS_ENDPOINT_URL']} "
                    "(Generic S3 error: Error performing GET http://x/y in 30s - Server returned non-2xx status code: "
                    "503 Service Unavailable: <Error><Code>SlowDown</Code></Error>); its windows are encoded again, "
                    "and the next run reads it again"]
    lost = [i for i, f in enumerate(found) if f is None]
    assert len(lost) == 3 and all(np.array_equal(found[i], vectors[i]) for i in range(6) if i not in lost)
    reader.put_many(POOL, [ids[i] for i in lost], vectors[lost])     # the same block: already there, no copy
    assert objects(client, uri) == stored
    stats = reader.stats()
    assert stats["entries"] == 3 and list(stats["left_out"]) == ["failed"] and stats["left_out"]["failed"][:2] == [1, 3]
