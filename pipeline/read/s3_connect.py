"""The S3 connection of the inputs (``s3://BUCKET/...``): one obstore ``S3Store`` per bucket, process and
AWS settings, made by pipeline.storage (the one connection of the window store, the inputs and the outputs:
the AWS variables and profile, the endpoint's check, AWS_CA_BUNDLE, the timeouts), and S3's failures, as
pipeline.storage classifies them, as the run's errors naming the input URI and the fix, never a
credential. Called by pipeline.read.remote only.
"""
from __future__ import annotations

import os
import threading

from .. import storage
from ..errors import ConfigError, InputError, PipelineError, RunError

_STORES: dict[tuple, object] = {}
_LOCK = threading.Lock()
INSTEAD = "copy the input to a local file"   # the way out a message offers besides fixing the settings


def check_credentials(uri: str) -> None:
    """Credentials are set (the AWS variables, a profile's keys, or a role's variables) and the settings
    are well formed (pipeline.storage.check_credentials).

    Raises:
        InputError: naming the variables missing or the setting that is wrong (nothing is sent).
    """
    try:
        storage.check_credentials(uri, "input", INSTEAD)
    except ConfigError as err:
        raise InputError(str(err)) from None


def store(bucket: str):
    """The obstore S3Store of ``bucket`` for this process and these AWS settings (made on first use, again
    after a fork or a change of the AWS variables; shared by threads: obstore's calls are thread-safe).

    Raises:
        InputError: obstore is not installed (the extra to install); the AWS settings cannot be read.
    """
    key = (os.getpid(), bucket, tuple(sorted(storage.aws_env().items())))
    with _LOCK:
        if key not in _STORES:
            try:
                _STORES[key] = storage.s3_store(f"s3://{bucket}")
            except ImportError:
                raise InputError("reading s3:// inputs needs the obstore package; install it with "
                                 "`pip install -e '.[s3]'` in a clone of longbert (or pip install 'obstore>=0.12')") from None
            except ConfigError as err:
                raise InputError(f"input s3://{bucket}: {err}") from None
        return _STORES[key]


def error(uri: str, err: Exception, scanning: bool) -> PipelineError:
    """An S3 failure on input ``uri`` as the run's error: InputError (exit 2) while the inputs are
    listed and scanned, RunError (exit 1) when a block is read; each names the cause and the fix.

    Example: a 404 NoSuchBucket -> "input s3://b/x.csv: the bucket 'b' does not exist at http://...;
    check the name (aws s3 ls lists your buckets)".
    """
    from obstore.exceptions import NotFoundError, PreconditionError

    text, bucket = str(err), storage.split_uri(uri)[0]
    kind = InputError if scanning else RunError
    where = storage.endpoint()
    if "NoSuchBucket" in text:
        return kind(f"input {uri}: the bucket {bucket!r} does not exist at {where}; check the name "
                    f"(aws s3 ls lists your buckets) and {storage.endpoint_variable()}")
    if storage.denied(err):
        return kind(f"input {uri}: {storage.refused(uri, err)}")
    if storage.is_refused(err):
        return kind(f"input {uri}: {where} refused the request ({storage.code(storage.redacted(err))}); check "
                    "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, and that they may "
                    f"list and read s3://{bucket}")
    gone = isinstance(err, (NotFoundError, FileNotFoundError))   # obstore raises either for a 404
    if isinstance(err, PreconditionError) or (gone and not scanning):
        return RunError(f"input {uri}: the object changed or was removed while the run read it; its rows would mix "
                        "two versions, so the run stops: run again once it no longer changes")
    if gone:
        return kind(f"input {uri} does not exist at {where}; check the path (aws s3 ls s3://{bucket}/ "
                    "lists the bucket)")
    network = storage.network_error(uri, err, "input")
    if network is not None:
        return kind(network)
    return kind(f"input {uri}: {where} failed ({storage.first_line(err)}); run again, or {INSTEAD}")
