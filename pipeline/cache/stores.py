"""Window stores by URI, opened in one place: ``open_store(uri)`` looks the URI's scheme up in ``SCHEMES``
(a folder: the SQLite WindowStore; ``s3://BUCKET/PREFIX``: the object store) and imports that store's
module only then, with an install hint when its library is missing, as fsspec's registry does. Called
by the encode stage (pipeline.model.encode_stage: --cache, $LONGBERT_CACHE, cache=, the vectorizer,
Pipeline, Ray workers) and by ``longbert cache`` (pipeline.cache.store_report); no stage names a store.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass

from ..errors import ConfigError
from ..options.paths import STORE_SCHEMES, check_store_uri, store_scheme
from .store_api import Store


@dataclass(frozen=True)
class Scheme:
    """Where a scheme's store lives: ``pipeline.cache.<module>.<opener>(uri) -> Store``, imported on first
    use; ``library`` is the module it needs (``version``: the pin of pyproject.toml's ``extra``, which
    ``pip install -e '.[extra]'`` installs from a clone);
    ``env``: the prefixes of the environment variables that configure it (what Ray workers are given)."""

    module: str
    opener: str
    library: str | None = None
    extra: str | None = None
    version: str = ""
    env: tuple[str, ...] = ()


SCHEMES: dict[str, Scheme] = {
    "": Scheme("store", "open_folder"),                                  # a folder: DIR/windows.sqlite3
    "s3": Scheme("object_store", "open_s3", library="obstore", extra="s3", version=">=0.12",
                 env=("AWS_",)),  # S3, MinIO, R2...
}
assert set(SCHEMES) == {"", *STORE_SCHEMES}   # options.paths checks URIs against the same schemes


def scheme_of(uri: str) -> Scheme:
    """The ``Scheme`` that opens ``uri``. Raises ConfigError: a scheme with no store (as check_store_uri)."""
    check_store_uri(uri)
    return SCHEMES[store_scheme(uri)]


def open_store(uri: str, option: str = "--cache") -> Store:
    """Open the window store that ``uri`` names: a folder (made if missing) or ``s3://BUCKET/PREFIX``.

    A remote store is checked before this returns (its endpoint answers, the bucket exists, the
    credentials are accepted), so a bad URI fails before any model loads.

    Args:
        uri: a folder path (``~`` expanded, ``file://`` allowed) or a store URI. option: its flag, for messages.

    Returns:
        An open pipeline.cache.store_api.Store; close it with ``close()`` (the encode stage does, at a run's end).

    Raises:
        ConfigError (exit 2): an unknown scheme; the store's library is missing (naming the extra to
            install); or as the store's opener (a folder that cannot be written, an endpoint that does
            not answer, a missing bucket, missing or refused credentials).
    """
    canonical = check_store_uri(str(uri), option)
    scheme = SCHEMES[store_scheme(canonical)]
    if scheme.library is not None:
        try:
            importlib.import_module(scheme.library)
        except ImportError:
            raise ConfigError(f"{option} {canonical}: this store needs the {scheme.library} library, which is not "
                              f"installed; pip install -e '.[{scheme.extra}]' in a clone of longbert (or pip install "
                              f"'{scheme.library}{scheme.version}')") from None
    module = importlib.import_module(f"{__package__}.{scheme.module}")
    return getattr(module, scheme.opener)(canonical)


def store_env(uri: str | None) -> dict[str, str]:
    """The environment variables that configure the store ``uri`` names, as this process has them (for an
    s3:// URI every AWS_* variable set): Ray's workers are started with them, so they reach the store the
    driver checked. {} for a folder or None. Example: "s3://b/p" -> {"AWS_ENDPOINT_URL": "http://...", ...}."""
    if not uri:
        return {}
    prefixes = scheme_of(str(uri)).env
    return {k: v for k, v in os.environ.items() if prefixes and k.startswith(prefixes)}


def is_folder(uri: str | None) -> bool:
    """True when ``uri`` is a local folder's path (the SQLite store), False for a store URI or None."""
    return bool(uri) and store_scheme(str(uri)) == ""
