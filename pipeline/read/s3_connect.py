"""The S3 connection of the inputs (``s3://BUCKET/...``): one obstore ``S3Store`` per bucket and process,
configured from the standard AWS variables as the window store's (pipeline.cache.object_client), and
S3's failures as the run's errors, naming the URI and the fix, never a credential. Called by
pipeline.read.remote only.

The settings (endpoint, plain http for an ``http://`` endpoint, timeouts, retries) are those of the window
store's client, so one set of variables serves the store, the inputs and the outputs; read/ sits below
cache/ and cannot import it, hence this small copy of its connection part.
"""
from __future__ import annotations

import os
import threading
from datetime import timedelta

from ..errors import InputError, PipelineError, RunError

CONNECT_TIMEOUT = "5s"          # a TCP connection: an endpoint where nothing listens fails in seconds
REQUEST_TIMEOUT = "120s"        # one request, body included
RETRIES = {"max_retries": 3, "retry_timeout": timedelta(seconds=30)}   # a bad endpoint fails well within 60 s
KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
OTHER_CREDENTIALS = ("AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                     "AWS_CONTAINER_CREDENTIALS_FULL_URI")   # role credentials obstore also reads from the environment
SECRETS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")   # never shown in a message

_STORES: dict[tuple[int, str, str], object] = {}
_LOCK = threading.Lock()


def endpoint() -> str:
    """Where requests go, for messages: $AWS_ENDPOINT_URL, else AWS S3 in $AWS_REGION."""
    return os.environ.get("AWS_ENDPOINT_URL") or f"AWS S3 ({os.environ.get('AWS_REGION') or 'us-east-1'})"


def check_credentials(uri: str) -> None:
    """Credentials are set: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a role's variables.

    Raises:
        InputError: naming the variables missing (nothing is sent).
    """
    if any(os.environ.get(v) for v in OTHER_CREDENTIALS):
        return
    missing = [v for v in KEYS if not os.environ.get(v)]
    if missing:
        raise InputError(f"input {uri}: no credentials for {endpoint()}: {' and '.join(missing)} "
                         f"{'is' if len(missing) == 1 else 'are'} not set; set {' and '.join(KEYS)} "
                         "(and AWS_SESSION_TOKEN for temporary ones), or copy the input to a local file")


def store(bucket: str):
    """The obstore S3Store of ``bucket`` for this process (made on first use, again after a fork;
    shared by threads: obstore's calls are thread-safe).

    Raises:
        InputError: obstore is not installed (the extra to install).
    """
    url = os.environ.get("AWS_ENDPOINT_URL", "")
    key = (os.getpid(), bucket, url)
    with _LOCK:
        if key not in _STORES:
            try:
                from obstore.store import S3Store
            except ImportError:
                raise InputError("reading s3:// inputs needs the obstore package; install it with "
                                 "`pip install -e '.[s3]'` in a clone of longbert (or pip install 'obstore>=0.12')") from None
            _STORES[key] = S3Store(bucket, config={"endpoint": url} if url else {},
                                   client_options={"allow_http": url.startswith("http://"),
                                                   "connect_timeout": CONNECT_TIMEOUT, "timeout": REQUEST_TIMEOUT},
                                   retry_config=RETRIES)
        return _STORES[key]


def scrub(text: str) -> str:
    """``text`` with the value of every credential variable replaced by '***' (messages quote S3's answers)."""
    for name in SECRETS:
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return scrub(text.splitlines()[0][:300] if text else type(err).__name__)


def _code(text: str) -> str | None:
    """S3's error code in a response (<Code>X</Code>), else None."""
    return text.split("<Code>", 1)[1].split("</Code>", 1)[0] if "<Code>" in text else None


_REFUSED = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "ExpiredToken", "InvalidToken")


def error(uri: str, err: Exception, scanning: bool) -> PipelineError:
    """An S3 failure on input ``uri`` as the run's error: InputError (exit 2) while the inputs are
    listed and scanned, RunError (exit 1) when a block is read; each names the cause and the fix.

    Example: a 404 NoSuchBucket -> "input s3://b/x.csv: the bucket 'b' does not exist at http://...;
    check the name (aws s3 ls lists your buckets)".
    """
    from obstore.exceptions import NotFoundError, PermissionDeniedError, PreconditionError, UnauthenticatedError

    text, bucket = str(err), uri.split("://", 1)[1].split("/", 1)[0]
    kind = InputError if scanning else RunError
    code = _code(text)
    if code == "NoSuchBucket":
        return kind(f"input {uri}: the bucket {bucket!r} does not exist at {endpoint()}; check the name "
                    "(aws s3 ls lists your buckets) and AWS_ENDPOINT_URL")
    if isinstance(err, (PermissionDeniedError, UnauthenticatedError)) or code in _REFUSED or "403 Forbidden" in text:
        return kind(f"input {uri}: {endpoint()} refused the request ({code or 'access denied'}); check "
                    "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, and that they may "
                    f"list and read s3://{bucket}")
    gone = isinstance(err, (NotFoundError, FileNotFoundError))   # obstore raises either for a 404
    if isinstance(err, PreconditionError) or (gone and not scanning):
        return RunError(f"input {uri}: the object changed or was removed while the run read it; its rows would mix "
                        "two versions, so the run stops: run again once it no longer changes")
    if gone:
        return kind(f"input {uri} does not exist at {endpoint()}; check the path (aws s3 ls s3://{bucket}/ "
                    "lists the bucket)")
    lower = text.lower()
    if "error sending request" in lower or "timed out" in lower or "connect" in lower or "dns" in lower:
        return kind(f"input {uri}: nothing answers at {endpoint()} ({_first_line(err)}); start the server, or "
                    "set AWS_ENDPOINT_URL to its address (unset for AWS S3)")
    return kind(f"input {uri}: {endpoint()} failed ({_first_line(err)}); run again, or copy the input to a local file")
