"""The connection to S3-compatible object storage, one for the window store (pipeline.cache.object_client),
the outputs (pipeline.output.places) and the inputs (pipeline.read.s3_connect): an obstore S3Store configured
as boto3 and the AWS CLI are (the AWS variables, then the profile in ~/.aws: pipeline.aws_config), the check
made before a run, and S3's failures as the run's errors named for what they are (a missing permission, bad
credentials, a TLS, DNS or connection failure), each message naming the option (--cache, --output, ...)
whose URI failed. No message holds the secret key or the session token. obstore is imported only when a
URI is opened.

Why obstore: its ``put(mode="create")`` sends ``If-None-Match: *``, a conditional put that AWS S3, MinIO,
SeaweedFS and R2 honour, so an object is written once and two writers that race never overwrite one
another; it reads the AWS variables itself, talks to any S3-compatible endpoint, and ships as a wheel.
"""
from __future__ import annotations

import contextlib
import os
import re
from datetime import timedelta

from .aws_config import KEYS, ROLE_VARIABLES, AwsSettings, missing_credentials, read_settings
from .errors import ConfigError, RunError

CONNECT_TIMEOUT = "5s"          # a TCP connection: an endpoint where nothing listens fails in seconds
REQUEST_TIMEOUT = "120s"        # one request, body included (a 64 MiB object on a slow link)
RETRIES = {"max_retries": 3, "retry_timeout": timedelta(seconds=30)}   # then the open check fails (< 60 s)
OTHER_CREDENTIALS = ROLE_VARIABLES   # role credentials obstore also reads from the environment


def split_uri(uri: str) -> tuple[str, str]:
    """(bucket, prefix) of "s3://BUCKET/PREFIX" (prefix "" for a whole bucket). Example: "s3://b/x/y" -> ("b", "x/y")."""
    bucket, _, prefix = uri.split("://", 1)[1].partition("/")
    return bucket, prefix.strip("/")


def endpoint() -> str:
    """Where requests go, for messages: the endpoint (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's
    endpoint_url), else AWS S3 in the region (AWS_REGION, AWS_DEFAULT_REGION, the profile's; us-east-1).
    Falls back to the raw variable when the settings cannot be read (read_settings names that problem)."""
    try:
        return read_settings().where()
    except ConfigError:
        return os.environ.get("AWS_ENDPOINT_URL") or f"AWS S3 ({os.environ.get('AWS_REGION') or 'us-east-1'})"


def endpoint_variable() -> str:
    """The variable (or profile entry) that set the endpoint, for fixes; "AWS_ENDPOINT_URL" when none did."""
    return settings().endpoint_from or "AWS_ENDPOINT_URL"


def aws_env() -> dict[str, str]:
    """This process's AWS_* variables, for another process that must reach the same storage with the same
    settings (a Ray actor's runtime_env); never logged. Example: {"AWS_ENDPOINT_URL": "http://...", ...}."""
    return {k: v for k, v in os.environ.items() if k.startswith("AWS_")}


def settings() -> AwsSettings:
    """The AWS settings (pipeline.aws_config.read_settings), or empty ones when they cannot be read (for
    messages only: the check before the run names that problem)."""
    try:
        return read_settings()
    except ConfigError:
        return AwsSettings()


@contextlib.contextmanager
def _trusting(ca_bundle: str | None):
    """While the client is built: SSL_CERT_FILE=``ca_bundle`` (obstore's TLS reads the certificates to trust
    from it when it builds its HTTP client); the variable is restored after. Nothing without a bundle."""
    if not ca_bundle:
        yield
        return
    before = os.environ.get("SSL_CERT_FILE")
    os.environ["SSL_CERT_FILE"] = ca_bundle
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SSL_CERT_FILE", None)
        else:
            os.environ["SSL_CERT_FILE"] = before


def s3_store(uri: str):
    """An obstore S3Store whose paths are relative to the URI's prefix ("s3://b/x" -> keys "x/NAME"), from
    the AWS settings (pipeline.aws_config: the variables, then the profile; any S3-compatible endpoint, plain
    http only for an http:// one; AWS_CA_BUNDLE trusted), with short connect timeouts and few retries so
    that a bad endpoint fails within a minute. Sends nothing.

    Raises:
        ConfigError: the settings cannot be read (an endpoint without a scheme, an unknown AWS_PROFILE...).
        ModuleNotFoundError: obstore is not installed (callers name the extra to install).
    """
    from obstore.store import S3Store

    bucket, prefix = split_uri(uri)
    found = read_settings()
    config = found.obstore_config()
    with _trusting(found.ca_bundle):
        return S3Store(bucket, prefix=prefix or None, config=config,
                       client_options={"allow_http": config.get("endpoint", "").startswith("http://"),
                                       "connect_timeout": CONNECT_TIMEOUT, "timeout": REQUEST_TIMEOUT},
                       retry_config=RETRIES)


def open_bucket(uri: str) -> tuple[object, str]:
    """(S3Store of the URI's bucket, its prefix): keys are then ``prefix + "/" + name``. Sends nothing.

    Example: open_bucket("s3://b/corpus/x.jsonl") -> (S3Store of b, "corpus/x.jsonl").
    """
    bucket, prefix = split_uri(uri)
    return s3_store(f"s3://{bucket}"), prefix


def check_credentials(uri: str, option: str = "--cache", instead: str = "") -> None:
    """Credentials are set: both of AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile's keys
    (AWS_PROFILE or "default", pipeline.aws_config), or a role's variables; the endpoint is well formed.
    ``instead``: the other way out the message offers (default "pass OPTION a folder").

    Raises:
        ConfigError: naming the variables missing, or as pipeline.aws_config.read_settings (an endpoint
            without a scheme, an unknown AWS_PROFILE...); nothing is sent.
    """
    try:
        missing = missing_credentials()
        where = read_settings().where()
    except ConfigError as err:
        raise ConfigError(f"{option} {uri}: {err}") from None
    if missing:
        raise ConfigError(f"{option} {uri}: no credentials for {where}: {' and '.join(missing)} "
                          f"{'is' if len(missing) == 1 else 'are'} not set; set {' and '.join(KEYS)} "
                          "(and AWS_SESSION_TOKEN for temporary ones), or AWS_PROFILE to a profile of "
                          f"~/.aws/credentials, or {instead or f'pass {option} a folder'}")


def check_bucket(store, uri: str, option: str = "--cache") -> None:
    """One LIST of at most one key through ``store``: the endpoint answers, the bucket exists, the
    credentials are accepted (check_credentials first: nothing is sent without them).

    Raises:
        ConfigError: as ``check_credentials`` and ``open_error``.
    """
    import obstore

    check_credentials(uri, option)
    try:
        next(iter(obstore.list(store, chunk_size=1)), None)
    except Exception as err:  # noqa: BLE001 - obstore's errors, named by the message below
        raise open_error(uri, err, option) from None
    except BaseException as err:   # a panic in the Rust client (pyo3's PanicException): a message, not a trace
        if type(err).__name__ != "PanicException":
            raise
        raise open_error(uri, err, option) from None


# S3's permission for each request (IAM action names), for the messages of a refused request
PERMISSIONS = {"GET": "s3:GetObject", "HEAD": "s3:GetObject", "PUT": "s3:PutObject", "LIST": "s3:ListBucket",
               "DELETE": "s3:DeleteObject"}
BAD_CREDENTIALS = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
                   "TokenRefreshRequired", "InvalidClientTokenId", "UnrecognizedClientException")
# TLS failures in the client's error text -> what is wrong and the fix ({var}: the endpoint's variable)
TLS = (("UnknownIssuer", "its certificate is signed by a CA this machine does not trust",
        "set AWS_CA_BUNDLE to the PEM file of that CA"),
       ("CaUsedAsEndEntity", "its certificate is a CA certificate used as a server's (self-signed)",
        "set AWS_CA_BUNDLE to the PEM file of the CA that signed a proper server certificate"),
       ("NotValidForName", "its certificate is not valid for this host name",
        "set {var} to a name the certificate was issued for"),
       ("Expired", "its certificate has expired", "renew the server's certificate"),
       ("NotValidYet", "its certificate is not valid yet (check this machine's clock)", "fix the clock"),
       ("InvalidContentType", "the server did not answer in TLS (an http:// server?)",
        "write {var} with http:// for a server without TLS"),
       ("InvalidCertificate", "its certificate is not accepted", "check the certificate, or AWS_CA_BUNDLE"))


def redacted(err: BaseException) -> str:
    """The error's text with the secret key and session token replaced (they never reach a message)."""
    return settings().redact(str(err))


def first_line(err: BaseException) -> str:
    """The error's first line (at most 300 characters), the secret key and session token replaced."""
    text = redacted(err).strip()
    return text.splitlines()[0][:300] if text else type(err).__name__


def _request(text: str) -> str | None:
    """The request an obstore error is about: "GET", "PUT", "HEAD", "LIST", "DELETE", or None."""
    if "DeleteObjects" in text or "Error performing DELETE" in text:
        return "DELETE"
    if "list request" in text or "list-type=" in text:
        return "LIST"
    found = re.search(r"Error performing (GET|PUT|HEAD|POST)\b", text)
    return found.group(1) if found else None


def bad_credentials(err: BaseException) -> bool:
    """S3 refused the credentials themselves (an unknown key, a bad signature, an expired token)."""
    return any(code in str(err) for code in BAD_CREDENTIALS)


def denied(err: BaseException) -> bool:
    """A request refused for want of a permission (AccessDenied, 403), not for bad credentials."""
    from obstore.exceptions import PermissionDeniedError

    text = str(err)
    if bad_credentials(err):
        return False
    return isinstance(err, PermissionDeniedError) or "AccessDenied" in text or "403 Forbidden" in text


def is_refused(err: BaseException) -> bool:
    """S3 refused the request's credentials or its permission (403, a bad key or signature, an expired token)."""
    from obstore.exceptions import PermissionDeniedError, UnauthenticatedError

    return isinstance(err, (PermissionDeniedError, UnauthenticatedError)) or bad_credentials(err) or denied(err)


def network_error(uri: str, err: BaseException, option: str = "--cache") -> str | None:
    """The message for a TLS failure, a host that cannot be found, or nothing answering; None for others."""
    text, found = str(err), settings()
    where, var = found.where(), found.endpoint_from or "AWS_ENDPOINT_URL"
    tls = "InvalidCertificate" in text or "InvalidMessage" in text
    for marker, what, fix in TLS if tls else ():
        if marker in text:
            return (f"{option} {uri}: the TLS connection to {where} failed: {what} ({marker}); "
                    f"{fix.format(var=var)}")
    if "dns error" in text or "failed to lookup address" in text or "Name or service not known" in text:
        return f"{option} {uri}: the host of {where} cannot be found (DNS); check {var}, or unset it for AWS S3"
    if "error sending request" in text or "timed out" in text.lower() or "connect" in text.lower():
        return (f"{option} {uri}: nothing answers at {where} ({first_line(err)}); start the server, "
                "or set AWS_ENDPOINT_URL to its address (unset for AWS S3)")
    return None


def refused(uri: str, err: BaseException, request: str | None = None) -> str:
    """The text for a request refused for want of a permission: which request, the IAM permission it needs,
    on which resource, and the fix. ``request``: "GET", "PUT", "LIST", "DELETE" (else read from the error)."""
    bucket, prefix = split_uri(uri)
    request = request or _request(str(err)) or "GET"
    permission = PERMISSIONS.get(request, "s3:*")
    key = settings().key_id or "(not set)"
    resource = f"arn:aws:s3:::{bucket}" if request == "LIST" else f"arn:aws:s3:::{bucket}/{prefix + '/' if prefix else ''}*"
    return (f"the credentials (AWS_ACCESS_KEY_ID={key}) lack the permission {permission} "
            f"({code(redacted(err))} on {request} at {endpoint()}); grant {permission} on {resource}, or use "
            "credentials that have it")


def open_error(uri: str, err: BaseException, option: str = "--cache") -> ConfigError:
    """An S3 failure while a store opens, as the ConfigError (exit 2) that names its cause and the fix: a
    missing bucket, bad credentials, a missing permission, a TLS or DNS failure, nothing answering."""
    from obstore.exceptions import NotFoundError

    text, bucket = str(err), split_uri(uri)[0]
    if type(err).__name__ == "PanicException":
        return ConfigError(f"{option} {uri}: the S3 client cannot talk to {endpoint()} ({first_line(err)}); check "
                           "AWS_ENDPOINT_URL (http:// or https:// and a host) and AWS_REGION")
    if "NoSuchBucket" in text or isinstance(err, NotFoundError):
        return ConfigError(f"{option} {uri}: the bucket {bucket!r} does not exist at {endpoint()}; create it "
                           f"(e.g. aws s3 mb s3://{bucket}) or pass {option} another bucket")
    if denied(err):
        return ConfigError(f"{option} {uri}: {refused(uri, err)}")
    if is_refused(err):
        key = settings().key_id or os.environ.get("AWS_ACCESS_KEY_ID") or "(not set)"
        return ConfigError(f"{option} {uri}: {endpoint()} refused the credentials (AWS_ACCESS_KEY_ID={key}): "
                           f"{code(redacted(err))}; check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN")
    network = network_error(uri, err, option)
    if network is not None:
        return ConfigError(network)
    return ConfigError(f"{option} {uri}: the store at {endpoint()} cannot be read ({first_line(err)})")


def code(text: str) -> str:
    """S3's error code in a response (<Code>X</Code>, or "(code: X)"), else the message's first line."""
    if "<Code>" in text:
        return text.split("<Code>", 1)[1].split("</Code>", 1)[0]
    found = re.search(r"\(code: (\w+)\)", text)
    if found:
        return found.group(1)
    return text.strip().splitlines()[0][:200] if text.strip() else "refused"


def run_error(uri: str, what: str, err: Exception, option: str = "--cache") -> RunError:
    """An S3 failure after the store opened, as the run's error (exit 1): a missing permission, TLS, DNS or
    a dead endpoint named as such; other failures with their first line and "run again"."""
    if denied(err):
        return RunError(f"{option} {uri}: {what} was refused: {refused(uri, err)}")
    if bad_credentials(err):
        return RunError(f"{option} {uri}: {what}: {endpoint()} refused the credentials ({code(redacted(err))}); "
                        "renew AWS_SESSION_TOKEN (temporary credentials expire), or check AWS_ACCESS_KEY_ID and "
                        "AWS_SECRET_ACCESS_KEY")
    network = network_error(uri, err, option)
    if network is not None:
        return RunError(f"{network} (while {what})")
    return RunError(f"{option} {uri}: {what} failed at {endpoint()} ({first_line(err)}); run again, or pass {option} "
                    "another store")
