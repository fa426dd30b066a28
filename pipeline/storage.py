"""The connection to S3-compatible object storage, one for the window store (pipeline.cache.object_client),
the outputs (pipeline.output.places) and the inputs: an obstore S3Store configured from the standard AWS
variables only, the check that credentials are set, and S3's failures as the run's errors, each message
naming the option (--cache, --output, ...) whose URI failed. obstore is imported only when a URI is opened.

Why obstore: its ``put(mode="create")`` sends ``If-None-Match: *``, a conditional put that AWS S3, MinIO,
SeaweedFS and R2 honour, so an object is written once and two writers that race never overwrite one
another; it reads the AWS variables itself, talks to any S3-compatible endpoint, and ships as a wheel.
"""
from __future__ import annotations

import os
from datetime import timedelta

from .errors import ConfigError, RunError

CONNECT_TIMEOUT = "5s"          # a TCP connection: an endpoint where nothing listens fails in seconds
REQUEST_TIMEOUT = "120s"        # one request, body included (a 64 MiB object on a slow link)
RETRIES = {"max_retries": 3, "retry_timeout": timedelta(seconds=30)}   # then the open check fails (< 60 s)
KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
OTHER_CREDENTIALS = ("AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                     "AWS_CONTAINER_CREDENTIALS_FULL_URI")   # role credentials obstore also reads from the environment


def split_uri(uri: str) -> tuple[str, str]:
    """(bucket, prefix) of "s3://BUCKET/PREFIX" (prefix "" for a whole bucket). Example: "s3://b/x/y" -> ("b", "x/y")."""
    bucket, _, prefix = uri.split("://", 1)[1].partition("/")
    return bucket, prefix.strip("/")


def endpoint() -> str:
    """Where requests go, for messages: $AWS_ENDPOINT_URL, else AWS S3 in $AWS_REGION."""
    return os.environ.get("AWS_ENDPOINT_URL") or f"AWS S3 ({os.environ.get('AWS_REGION') or 'us-east-1'})"


def s3_store(uri: str):
    """An obstore S3Store whose paths are relative to the URI's prefix ("s3://b/x" -> keys "x/NAME"), from
    the AWS variables ($AWS_ENDPOINT_URL: any S3-compatible server; plain http allowed only there), with
    short connect timeouts and few retries so that a bad endpoint fails within a minute. Sends nothing.

    Raises:
        ModuleNotFoundError: obstore is not installed (callers name the extra to install).
    """
    from obstore.store import S3Store

    bucket, prefix = split_uri(uri)
    url = os.environ.get("AWS_ENDPOINT_URL", "")
    config = {"endpoint": url} if url else {}
    return S3Store(bucket, prefix=prefix or None, config=config,
                   client_options={"allow_http": url.startswith("http://"),
                                   "connect_timeout": CONNECT_TIMEOUT, "timeout": REQUEST_TIMEOUT},
                   retry_config=RETRIES)


def open_bucket(uri: str) -> tuple[object, str]:
    """(S3Store of the URI's bucket, its prefix): keys are then ``prefix + "/" + name``. Sends nothing.

    Example: open_bucket("s3://b/corpus/x.jsonl") -> (S3Store of b, "corpus/x.jsonl").
    """
    bucket, prefix = split_uri(uri)
    return s3_store(f"s3://{bucket}"), prefix


def check_credentials(uri: str, option: str = "--cache") -> None:
    """Credentials are set: both of AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a role's variables.

    Raises:
        ConfigError: naming the variables missing (nothing is sent).
    """
    if any(os.environ.get(v) for v in OTHER_CREDENTIALS):
        return
    missing = [v for v in KEYS if not os.environ.get(v)]
    if missing:
        raise ConfigError(f"{option} {uri}: no credentials for {endpoint()}: {' and '.join(missing)} "
                          f"{'is' if len(missing) == 1 else 'are'} not set; set {' and '.join(KEYS)} "
                          f"(and AWS_SESSION_TOKEN for temporary ones), or pass {option} a folder")


def check_bucket(store, uri: str, option: str = "--cache") -> None:
    """One LIST of at most one key through ``store``: the endpoint answers, the bucket exists, the
    credentials are accepted (check_credentials first: nothing is sent without them).

    Raises:
        ConfigError: as ``open_error``.
    """
    import obstore

    check_credentials(uri, option)
    try:
        next(iter(obstore.list(store, chunk_size=1)), None)
    except Exception as err:  # noqa: BLE001 - obstore's errors, named by the message below
        raise open_error(uri, err, option) from None


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else type(err).__name__


def is_refused(err: Exception) -> bool:
    """S3 refused the request's credentials or its permission (403, a bad key or signature, an expired token)."""
    from obstore.exceptions import PermissionDeniedError, UnauthenticatedError

    text = str(err)
    return isinstance(err, (PermissionDeniedError, UnauthenticatedError)) or any(
        c in text for c in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403 Forbidden",
                            "ExpiredToken", "InvalidToken"))


def open_error(uri: str, err: Exception, option: str = "--cache") -> ConfigError:
    """An S3 failure while a store opens, as the ConfigError (exit 2) that names its cause and the fix."""
    from obstore.exceptions import NotFoundError

    text, bucket = str(err), split_uri(uri)[0]
    if "NoSuchBucket" in text or isinstance(err, NotFoundError):
        return ConfigError(f"{option} {uri}: the bucket {bucket!r} does not exist at {endpoint()}; create it "
                           f"(e.g. aws s3 mb s3://{bucket}) or pass {option} another bucket")
    if is_refused(err):
        key = os.environ.get("AWS_ACCESS_KEY_ID") or "(not set)"
        return ConfigError(f"{option} {uri}: {endpoint()} refused the credentials (AWS_ACCESS_KEY_ID={key}): "
                           f"{_code(text)}; check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN")
    if "error sending request" in text or "timed out" in text.lower() or "connect" in text.lower():
        return ConfigError(f"{option} {uri}: nothing answers at {endpoint()} ({_first_line(err)}); start the server, "
                           "or set AWS_ENDPOINT_URL to its address (unset for AWS S3)")
    return ConfigError(f"{option} {uri}: the store at {endpoint()} cannot be read ({_first_line(err)})")


def _code(text: str) -> str:
    """S3's error code in a response (<Code>X</Code>), else the message's first line."""
    if "<Code>" in text:
        return text.split("<Code>", 1)[1].split("</Code>", 1)[0]
    return text.strip().splitlines()[0][:200] if text.strip() else "refused"


def run_error(uri: str, what: str, err: Exception, option: str = "--cache") -> RunError:
    """An S3 failure after the store opened, as the run's error (exit 1)."""
    return RunError(f"{option} {uri}: {what} failed at {endpoint()} ({_first_line(err)}); run again, or pass {option} "
                    "another store")
