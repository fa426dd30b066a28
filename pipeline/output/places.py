"""Where a DIR/ output lives: a local folder (``Folder``) or an S3 prefix (``Prefix``) behind the same few
operations, so that the parts sink (pipeline.output.write: manifest, resume, overwrite), the output lock
(pipeline.output.lock) and ``load_features`` are written once. ``place_of(output)`` picks one by the
output's scheme; nothing is made or sent until an operation is called.

Every operation names an object by its name inside the place ("part-00003.parquet"); a put is atomic
(a reader sees the old object or the new one, never a part of one): locally a temporary file fsynced and
renamed, on S3 one PUT, or a multipart upload completed at its end.
"""
from __future__ import annotations

import io
import os
import shutil
import tempfile
from pathlib import Path

from ..errors import ConfigError, RunError
from ..options.paths import store_scheme
from .durable import fsync_dir, replace_durably

OPTION = "--output"


class Folder:
    """A local folder. ``location``: the folder as given (messages); ``path``: it as a Path."""

    remote = False

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.location = str(self.path)

    def where(self, name: str) -> str:
        """``name`` inside the place, for messages. Example: "out/part-00000.parquet"."""
        return str(self.path / name)

    def make(self) -> None:
        """Create the folder (and its parents) if missing."""
        self.path.mkdir(parents=True, exist_ok=True)

    def exists(self, name: str = "") -> bool:
        """``name`` is there ("": the folder holds anything)."""
        return (self.path / name).exists() if name else bool(self.names())

    def names(self) -> dict[str, int]:
        """name -> size in bytes of every entry directly in the folder (sub-folders end in "/", size 0);
        {} when the folder does not exist."""
        if not self.path.is_dir():
            return {}
        return {e.name + ("/" if e.is_dir() else ""): (0 if e.is_dir() else e.stat().st_size)
                for e in self.path.iterdir()}

    def get(self, name: str) -> bytes:
        """The bytes of ``name``. Raises FileNotFoundError: there is none."""
        return (self.path / name).read_bytes()

    def reader(self, name: str):
        """What pyarrow reads ``name`` from (a path here: pq.read_metadata / read_table take it)."""
        return self.path / name

    def put(self, name: str, data: bytes) -> None:
        """Write ``data`` at ``name``, replacing what is there, atomically and durably."""
        tmp = self.path / f".{name}.partial"
        tmp.write_bytes(data)
        replace_durably(tmp, self.path / name)

    def put_new(self, name: str, data: bytes) -> bool:
        """Create ``name`` holding ``data`` only if nothing is there; False when something was."""
        try:
            fd = os.open(self.path / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return True

    def size(self, name: str) -> int | None:
        """The size of ``name`` in bytes, or None when there is none."""
        try:
            return (self.path / name).stat().st_size
        except FileNotFoundError:
            return None

    def spool(self, name: str) -> Path:
        """A local file to write ``name`` into before ``upload``: a hidden ``.NAME.PID.partial`` in the folder
        (this process's id: two attempts at one block, a retried Ray task beside a dying one, never write
        into one file). Example: "_part-00003.parquet.pending" -> ".part-00003.4242.partial"."""
        return self.path / f".{name.removesuffix('.parquet.pending').lstrip('_')}.{os.getpid()}.partial"

    def upload(self, spooled: Path, name: str) -> int:
        """Move a finished local file (``spool``'s) to ``name`` durably; returns its size in bytes."""
        size = spooled.stat().st_size
        replace_durably(spooled, self.path / name)
        return size

    def rename(self, old: str, new: str) -> None:
        """Give ``old`` the name ``new`` (replacing any ``new``)."""
        os.replace(self.path / old, self.path / new)

    def delete(self, names: list[str]) -> None:
        """Remove ``names`` (those already gone are skipped)."""
        for name in names:
            (self.path / name).unlink(missing_ok=True)

    def sync(self) -> None:
        """Flush the folder's entries (renames, removals) to the disk."""
        fsync_dir(self.path)

    def clean_spool(self) -> None:
        """Remove half-written spool files (``.part-*.partial``) left by this run or a killed one."""
        for stale in self.path.glob(".part-*.partial"):
            stale.unlink()


class _Readable(io.RawIOBase):
    """obstore's ReadableFile as the file object pyarrow asks for (ranged GETs: a footer costs one)."""

    def __init__(self, f):
        super().__init__()
        self._f = f

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def readinto(self, buffer) -> int:
        data = memoryview(self._f.read(len(buffer)))
        buffer[:len(data)] = data
        return len(data)


class Prefix:
    """An S3 prefix ``s3://BUCKET/PREFIX`` (the connection of pipeline.storage: the AWS variables). Names
    are keys under ``PREFIX/``; nothing outside it is listed, written or deleted. An S3 failure part-way is
    a RunError naming --output and the endpoint (never the credentials)."""

    remote = True

    def __init__(self, uri: str, option: str = OPTION):
        self.location = uri.rstrip("/")
        self.option = option   # the flag or argument that named the URI, for messages
        self._store, self._spool = None, None

    def __getstate__(self) -> dict:
        """A pickled prefix (sent to a worker) carries its URI only; the connection is made again there."""
        return {**self.__dict__, "_store": None, "_spool": None}

    def where(self, name: str) -> str:
        """Example: "s3://b/out/part-00000.parquet"."""
        return f"{self.location}/{name}"

    def store(self):
        """The S3Store rooted at the prefix (made on first use)."""
        if self._store is None:
            from ..storage import s3_store

            self._store = s3_store(self.location)
        return self._store

    def _fail(self, what: str, err: Exception) -> RunError:
        from ..storage import run_error

        return run_error(self.location + "/", what, err, self.option)

    def check(self) -> None:
        """Before the run: credentials set, the endpoint answers, the bucket exists, the key is accepted.

        Raises:
            ConfigError (exit 2): naming --output and what is wrong (pipeline.storage.open_error).
        """
        from ..storage import check_bucket, check_credentials, open_error

        uri = self.location + "/"
        check_credentials(uri, self.option)   # obstore refuses to make a store without them
        try:
            store = self.store()
        except Exception as err:  # noqa: BLE001 - obstore's configuration errors, named by open_error
            raise open_error(uri, err, self.option) from None
        check_bucket(store, uri, self.option)

    def make(self) -> None:
        """Nothing to make: a prefix exists once an object is under it."""

    def exists(self, name: str = "") -> bool:
        """``name`` is there ("": any object is under the prefix)."""
        return name in self.names() if name else bool(self.names())

    def names(self) -> dict[str, int]:
        """key under the prefix -> size in bytes; objects deeper down are named by their first folder
        ("sub/", size 0), as a folder's entries are."""
        import obstore

        try:
            found = [o for chunk in obstore.list(self.store(), chunk_size=1000) for o in chunk]
        except Exception as err:  # noqa: BLE001 - obstore's errors, named by run_error
            raise self._fail("listing the output", err) from None
        out = {}
        for obj in found:
            first, sep, _ = obj["path"].partition("/")
            out[first + sep] = 0 if sep else obj["size"]
        return out

    def get(self, name: str) -> bytes:
        """The bytes of ``name``. Raises FileNotFoundError: there is none."""
        import obstore

        try:
            return bytes(obstore.get(self.store(), name).bytes())
        except FileNotFoundError:
            raise
        except Exception as err:  # noqa: BLE001
            raise self._fail(f"reading {name}", err) from None

    def reader(self, name: str):
        """A file object pyarrow reads ``name`` from with ranged GETs (a part's footer: one GET)."""
        import obstore

        try:
            return _Readable(obstore.open_reader(self.store(), name))
        except FileNotFoundError:
            raise
        except Exception as err:  # noqa: BLE001
            raise self._fail(f"reading {name}", err) from None

    def put(self, name: str, data: bytes) -> None:
        """One PUT of ``data`` at ``name``, replacing what is there."""
        import obstore

        try:
            obstore.put(self.store(), name, data)
        except Exception as err:  # noqa: BLE001
            raise self._fail(f"writing {name}", err) from None

    def put_new(self, name: str, data: bytes) -> bool:
        """A conditional PUT (If-None-Match: *): False when an object is already at ``name``.

        Raises:
            ConfigError: the credentials may not write there (a check before the run: the lock is its first put).
            RunError: any other S3 failure.
        """
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        from ..storage import is_refused, open_error

        try:
            obstore.put(self.store(), name, data, mode="create")
        except (AlreadyExistsError, PreconditionError):
            return False
        except Exception as err:  # noqa: BLE001
            if is_refused(err):
                raise open_error(self.location + "/", err, self.option) from None
            raise self._fail(f"writing {name}", err) from None
        return True

    def get_tagged(self, name: str) -> tuple[bytes, str]:
        """(the bytes of ``name``, its ETag), for ``put_if``. Raises FileNotFoundError: there is none."""
        import obstore

        try:
            found = obstore.get(self.store(), name)
            return bytes(found.bytes()), found.meta["e_tag"]
        except FileNotFoundError:
            raise
        except Exception as err:  # noqa: BLE001
            raise self._fail(f"reading {name}", err) from None

    def put_if(self, name: str, data: bytes, e_tag: str) -> bool:
        """Replace ``name`` only if it is still the version ``e_tag`` (If-Match); False when it changed."""
        import obstore
        from obstore.exceptions import PreconditionError

        try:
            obstore.put(self.store(), name, data, mode={"e_tag": e_tag})
        except (PreconditionError, FileNotFoundError):
            return False
        except Exception as err:  # noqa: BLE001
            raise self._fail(f"writing {name}", err) from None
        return True

    def size(self, name: str) -> int | None:
        """The size of the object ``name`` in bytes (one HEAD), or None when there is none."""
        import obstore

        try:
            return int(obstore.head(self.store(), name)["size"])
        except FileNotFoundError:
            return None
        except Exception as err:  # noqa: BLE001
            raise self._fail(f"reading {name}", err) from None

    def spool(self, name: str) -> Path:
        """A local file to write ``name`` into before ``upload``, in a temporary folder of this place."""
        if self._spool is None:
            self._spool = Path(tempfile.mkdtemp(prefix="longbert-parts-"))
        return self._spool / f"{name}.partial"

    def upload(self, spooled: Path, name: str) -> int:
        """Upload a finished local file to ``name`` (one PUT, or a multipart upload completed at its end,
        so the object appears whole or not at all) and remove the local file; returns its size in bytes."""
        import obstore

        size = spooled.stat().st_size
        try:
            obstore.put(self.store(), name, spooled)
        except Exception as err:  # noqa: BLE001
            raise self._fail(f"writing {name}", err) from None
        spooled.unlink()
        return size

    def rename(self, old: str, new: str) -> None:
        """A server-side copy to ``new``, then ``old`` deleted (no bytes pass through this machine)."""
        import obstore

        try:
            obstore.copy(self.store(), old, new)
            obstore.delete(self.store(), old)
        except Exception as err:  # noqa: BLE001
            raise self._fail(f"renaming {old} to {new}", err) from None

    def delete(self, names: list[str]) -> None:
        """Delete the objects ``names`` (1,000 a request; a missing one is no error)."""
        import obstore

        try:
            for start in range(0, len(names), 1000):
                obstore.delete(self.store(), names[start:start + 1000])
        except Exception as err:  # noqa: BLE001
            raise self._fail("deleting old parts", err) from None

    def sync(self) -> None:
        """Nothing to flush: an object is durable when its PUT returns."""

    def clean_spool(self) -> None:
        """Remove the local temporary folder of parts not yet uploaded."""
        if self._spool is not None:
            shutil.rmtree(self._spool, ignore_errors=True)
            self._spool = None


Place = Folder | Prefix


def is_uri(output: str | Path) -> bool:
    """True for an object-storage output ("s3://b/out/"), False for a local path."""
    return store_scheme(str(output)) != ""


def output_env(output: str | Path | Place | None) -> dict[str, str]:
    """The AWS_* variables of this process when ``output`` is on object storage (pipeline.storage.aws_env),
    else {}: a Ray actor that writes its parts there is started with them. Example: "s3://b/out/" ->
    {"AWS_ENDPOINT_URL": ..., ...}; "out/" -> {}."""
    from ..storage import aws_env

    remote = output.remote if isinstance(output, (Folder, Prefix)) else bool(output) and is_uri(output)
    return aws_env() if remote else {}


def place_of(output: str | Path | Place, option: str = OPTION) -> Place:
    """The place of a DIR/ output: a ``Prefix`` for ``s3://BUCKET/PREFIX/``, else a ``Folder``; a place
    is returned as it is. ``option``: the flag or argument that named it, for messages. Sends nothing,
    makes nothing.

    Raises:
        ConfigError: a URI scheme other than s3:// (no output is written there).
    """
    if isinstance(output, (Folder, Prefix)):
        return output
    scheme = store_scheme(str(output))
    if scheme == "":
        return Folder(output)
    if scheme != "s3":
        raise ConfigError(f"{option} {str(output)!r}: no output is written to {scheme}:// URIs; pass a local path "
                          "or s3://BUCKET/PREFIX/")
    return Prefix(str(output), option)
