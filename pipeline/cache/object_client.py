"""The object store's connection (pipeline.cache.object_store): an S3 client (obstore) configured as boto3
and the AWS CLI are (the AWS variables, then the profile in ~/.aws: pipeline.cache.aws_config), the check
made when a store opens, S3's failures as the run's errors named for what they are (a missing permission,
bad credentials, a TLS, DNS or connection failure), and a count of requests and bytes. Called by the
object store only. No message holds the secret key or the session token.

Why obstore: its ``put(mode="create")`` sends ``If-None-Match: *``, a conditional put that AWS S3, MinIO,
SeaweedFS and R2 honour, so an object is written once and two writers that race never overwrite one
another; it reads the AWS variables itself, talks to any S3-compatible endpoint, and ships as a wheel.
"""
from __future__ import annotations

import collections
import contextlib
import math
import os
import re
import threading
from datetime import timedelta

import obstore
from obstore.exceptions import (AlreadyExistsError, NotFoundError, PermissionDeniedError, PreconditionError,
                                UnauthenticatedError)
from obstore.store import S3Store

from ..errors import ConfigError, RunError
from .aws_config import KEYS, ROLE_VARIABLES, AwsSettings, missing_credentials, read_settings

CONNECT_TIMEOUT = "5s"          # a TCP connection: an endpoint where nothing listens fails in seconds
REQUEST_TIMEOUT = "120s"        # one request, body included (a 64 MiB object on a slow link)
RETRIES = {"max_retries": 3, "retry_timeout": timedelta(seconds=30)}   # then the open check fails (< 60 s)
OTHER_CREDENTIALS = ROLE_VARIABLES   # role credentials obstore also reads from the environment
Refused = (PermissionDeniedError, UnauthenticatedError)
Exists = (AlreadyExistsError, PreconditionError)


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


def check_credentials(uri: str) -> None:
    """Credentials are set: both of AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile's keys
    (AWS_PROFILE or "default", pipeline.cache.aws_config), or a role's variables; the endpoint is well formed.

    Raises:
        ConfigError: naming the variables missing, or as pipeline.cache.aws_config.read_settings (an endpoint
            without a scheme, an unknown AWS_PROFILE...); nothing is sent.
    """
    try:
        missing = missing_credentials()
        where = read_settings().where()
    except ConfigError as err:
        raise ConfigError(f"--cache {uri}: {err}") from None
    if missing:
        raise ConfigError(f"--cache {uri}: no credentials for {where}: {' and '.join(missing)} "
                          f"{'is' if len(missing) == 1 else 'are'} not set; set {' and '.join(KEYS)} "
                          "(and AWS_SESSION_TOKEN for temporary ones), or AWS_PROFILE to a profile of "
                          "~/.aws/credentials, or pass --cache a folder")


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


class Client:
    """obstore's calls on one bucket and prefix, counted: ``requests`` (GET, PUT, LIST, DELETE) and
    ``bytes_in``/``bytes_out``; a forked child makes its own connection. Paths are relative to the prefix."""

    def __init__(self, uri: str):
        self.uri = uri
        self.bucket, self.prefix = split_uri(uri)
        self.requests: collections.Counter = collections.Counter()
        self.bytes_in = self.bytes_out = 0
        self._store, self._pid, self._lock = None, None, threading.Lock()

    def store(self) -> S3Store:
        """The S3Store of this process (made on first use, again after a fork)."""
        with self._lock:
            if self._store is None or self._pid != os.getpid():
                settings = read_settings()   # the environment and ~/.aws (pipeline.cache.aws_config)
                url = settings.obstore_config().get("endpoint", "")
                with _trusting(settings.ca_bundle):
                    self._store = S3Store(self.bucket, prefix=self.prefix or None, config=settings.obstore_config(),
                                          client_options={"allow_http": url.startswith("http://"),
                                                          "connect_timeout": CONNECT_TIMEOUT,
                                                          "timeout": REQUEST_TIMEOUT},
                                          retry_config=RETRIES)
                self._pid = os.getpid()
            return self._store

    def close(self) -> None:
        """Drop the connection (made again on the next call)."""
        with self._lock:
            self._store = None

    def list(self, prefix: str) -> list[dict]:
        """Every object under ``prefix``: dicts with "path" (relative) and "size" (bytes)."""
        found = [obj for chunk in obstore.list(self.store(), prefix=prefix, chunk_size=1000) for obj in chunk]
        self.requests["LIST"] += max(1, math.ceil(len(found) / 1000))   # S3 pages hold 1,000 keys
        return found

    def get(self, path: str, end: int | None = None) -> bytes:
        """The object's bytes, or its first ``end`` bytes (a ranged GET; fewer when the object is shorter)."""
        self.requests["GET"] += 1
        store = self.store()
        data = bytes(obstore.get(store, path).bytes() if end is None else obstore.get_range(store, path, start=0, end=end))
        self.bytes_in += len(data)
        return data

    def put_new(self, path: str, data: bytes) -> bool:
        """Write ``data`` at ``path`` only if no object is there (If-None-Match: *); False when one was."""
        self.requests["PUT"] += 1
        try:
            obstore.put(self.store(), path, data, mode="create")
        except Exists:
            return False
        self.bytes_out += len(data)
        return True

    def delete(self, paths: list[str]) -> None:
        """Delete ``paths`` (1,000 a request)."""
        for start in range(0, len(paths), 1000):
            self.requests["DELETE"] += 1
            obstore.delete(self.store(), paths[start:start + 1000])

    def first(self, prefix: str) -> dict | None:
        """The first object under ``prefix`` (one LIST of at most one key), or None when there is none."""
        self.requests["LIST"] += 1
        chunk = next(iter(obstore.list(self.store(), prefix=prefix, chunk_size=1)), None)
        return chunk[0] if chunk else None

    def check(self) -> None:
        """One LIST of at most one key: the endpoint answers, the bucket exists, the credentials are accepted.

        Raises:
            ConfigError: as ``check_credentials`` and ``open_error``.
        """
        check_credentials(self.uri)
        try:
            self.requests["LIST"] += 1
            next(iter(obstore.list(self.store(), chunk_size=1)), None)
        except Exception as err:  # noqa: BLE001 - obstore's errors, named by the message below
            raise open_error(self.uri, err) from None
        except BaseException as err:   # a panic in the Rust client (pyo3's PanicException): a message, not a trace
            if type(err).__name__ != "PanicException":
                raise
            raise open_error(self.uri, err) from None


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


def _settings() -> AwsSettings:
    try:
        return read_settings()
    except ConfigError:
        return AwsSettings()


def _text(err: BaseException) -> str:
    """The error's text with the secret key and session token replaced (they never reach a message)."""
    return _settings().redact(str(err))


def _first_line(err: BaseException) -> str:
    text = _text(err).strip()
    return text.splitlines()[0][:300] if text else type(err).__name__


def first_line(err: BaseException) -> str:
    """The error's first line (at most 300 characters), the secret key and session token replaced."""
    return _first_line(err)


def _request(text: str) -> str | None:
    """The request an obstore error is about: "GET", "PUT", "HEAD", "LIST", "DELETE", or None."""
    if "DeleteObjects" in text or "Error performing DELETE" in text:
        return "DELETE"
    if "list request" in text or "list-type=" in text:
        return "LIST"
    found = re.search(r"Error performing (GET|PUT|HEAD|POST)\b", text)
    return found.group(1) if found else None


def denied(err: BaseException) -> bool:
    """A request refused for want of a permission (AccessDenied, 403), not for bad credentials."""
    text = str(err)
    if any(code in text for code in BAD_CREDENTIALS):
        return False
    return isinstance(err, PermissionDeniedError) or "AccessDenied" in text or "403 Forbidden" in text


def _network(uri: str, err: BaseException) -> str | None:
    """The message for a TLS failure, a host that cannot be found, or nothing answering; None for others."""
    text, settings = str(err), _settings()
    where, var = settings.where(), settings.endpoint_from or "AWS_ENDPOINT_URL"
    tls = "InvalidCertificate" in text or "InvalidMessage" in text
    for marker, what, fix in TLS if tls else ():
        if marker in text:
            return (f"--cache {uri}: the TLS connection to {where} failed: {what} ({marker}); "
                    f"{fix.format(var=var)}")
    if "dns error" in text or "failed to lookup address" in text or "Name or service not known" in text:
        return (f"--cache {uri}: the host of {where} cannot be found (DNS); check {var}, or unset it for AWS S3")
    if "error sending request" in text or "timed out" in text.lower() or "connect" in text.lower():
        return (f"--cache {uri}: nothing answers at {where} ({_first_line(err)}); start the server, "
                "or set AWS_ENDPOINT_URL to its address (unset for AWS S3)")
    return None


def refused(uri: str, err: BaseException, request: str | None = None) -> str:
    """The text for a request refused for want of a permission: which request, the IAM permission it needs,
    on which resource, and the fix. ``request``: "GET", "PUT", "LIST", "DELETE" (else read from the error)."""
    bucket, prefix = split_uri(uri)
    request = request or _request(str(err)) or "GET"
    permission = PERMISSIONS.get(request, "s3:*")
    key = _settings().key_id or "(not set)"
    resource = f"arn:aws:s3:::{bucket}" if request == "LIST" else f"arn:aws:s3:::{bucket}/{prefix + '/' if prefix else ''}*"
    return (f"the credentials (AWS_ACCESS_KEY_ID={key}) lack the permission {permission} "
            f"({_code(_text(err))} on {request} at {endpoint()}); grant {permission} on {resource}, or use "
            "credentials that have it")


def open_error(uri: str, err: BaseException) -> ConfigError:
    """An S3 failure while a store opens, as the ConfigError (exit 2) that names its cause and the fix: a
    missing bucket, bad credentials, a missing permission, a TLS or DNS failure, nothing answering."""
    text, bucket = str(err), split_uri(uri)[0]
    if type(err).__name__ == "PanicException":
        return ConfigError(f"--cache {uri}: the S3 client cannot talk to {endpoint()} ({_first_line(err)}); check "
                           "AWS_ENDPOINT_URL (http:// or https:// and a host) and AWS_REGION")
    if "NoSuchBucket" in text or isinstance(err, NotFoundError):
        return ConfigError(f"--cache {uri}: the bucket {bucket!r} does not exist at {endpoint()}; create it "
                           f"(e.g. aws s3 mb s3://{bucket}) or pass --cache another bucket")
    if denied(err):
        return ConfigError(f"--cache {uri}: {refused(uri, err)}")
    if isinstance(err, Refused) or any(c in text for c in (*BAD_CREDENTIALS, "403 Forbidden")):
        key = _settings().key_id or os.environ.get("AWS_ACCESS_KEY_ID") or "(not set)"
        return ConfigError(f"--cache {uri}: {endpoint()} refused the credentials (AWS_ACCESS_KEY_ID={key}): "
                           f"{_code(_text(err))}; check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN")
    network = _network(uri, err)
    if network is not None:
        return ConfigError(network)
    return ConfigError(f"--cache {uri}: the store at {endpoint()} cannot be read ({_first_line(err)})")


def _code(text: str) -> str:
    """S3's error code in a response (<Code>X</Code>, or "(code: X)"), else the message's first line."""
    if "<Code>" in text:
        return text.split("<Code>", 1)[1].split("</Code>", 1)[0]
    found = re.search(r"\(code: (\w+)\)", text)
    if found:
        return found.group(1)
    return text.strip().splitlines()[0][:200] if text.strip() else "refused"


def run_error(uri: str, what: str, err: Exception) -> RunError:
    """An S3 failure after the store opened, as the run's error (exit 1): a missing permission, TLS, DNS or
    a dead endpoint named as such; other failures with their first line and "run again"."""
    if denied(err):
        return RunError(f"--cache {uri}: {what} was refused: {refused(uri, err)}")
    if any(code in str(err) for code in BAD_CREDENTIALS):
        return RunError(f"--cache {uri}: {what}: {endpoint()} refused the credentials ({_code(_text(err))}); "
                        "renew AWS_SESSION_TOKEN (temporary credentials expire), or check AWS_ACCESS_KEY_ID and "
                        "AWS_SECRET_ACCESS_KEY")
    network = _network(uri, err)
    if network is not None:
        return RunError(f"{network} (while {what})")
    return RunError(f"--cache {uri}: {what} failed at {endpoint()} ({_first_line(err)}); run again, or pass --cache "
                    "another store")
