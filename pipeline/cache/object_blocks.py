"""The object store's block format (pipeline.cache.object_store): many windows' vectors in one immutable
object, named by the sha256 of its bytes. Pure functions, no network; called by the object store only.

One object, ``windows-v1/POOL/SHA256-N.lbw`` under the store's prefix, holds N windows of one pool key::

    bytes [0, 512)            magic b"LBWBLK1\\n", N (u32 LE), header length (u32 LE), JSON header
                              {"pool", "dim", "label", "kind"} padded with spaces
    bytes [512, 512 + 36 N)   the index: per window its 32-byte key (store_keys.window_key) and the
                              number of float32 values it holds (u32 LE)
    the rest                  the values, float32 little-endian, window after window, in index order

The name's SHA256 is the sha256 of every byte of the object: a reader checks it before it uses a
vector, so a damaged or truncated object is never served, and two writers that make the same block
make the same name (a create-if-absent put of it is a no-op). The first 512 + 36 N bytes, fetched
alone, tell which windows an object holds without its vectors.
"""
from __future__ import annotations

import hashlib
import json
import re
import struct

MAGIC = b"LBWBLK1\n"
PREAMBLE = 512                 # magic (8) + N (4) + header length (4) + the JSON header, space-padded
ENTRY = 36                     # per window in the index: 32-byte key + u32 value count
LAYOUT = "windows-v1"          # the folder under the prefix: another layout gets another name
_NAME = re.compile(r"^([0-9a-f]{64})-(\d+)(?:-[0-9a-f]+)?\.lbw$")


class BlockDamaged(ValueError):
    """An object's bytes are not what its name says (its sha256, its preamble or its length)."""


def pool_folder(pool: str) -> str:
    """The folder (relative to the store's prefix) of one pool key's objects: "windows-v1/POOL/"."""
    return f"{LAYOUT}/{pool}/"


def parse_name(path: str) -> tuple[str, int] | None:
    """(sha256 hex, N windows) of an object path ending in SHA256-N.lbw (a repair copy adds -HEX), or None.
    Example: "windows-v1/ab.../9f...-128.lbw" -> ("9f...", 128)."""
    found = _NAME.match(path.rsplit("/", 1)[-1])
    return None if found is None else (found.group(1), int(found.group(2)))


def index_length(n: int) -> int:
    """Bytes of an object's preamble and index: 512 + 36 N (what a ranged GET of its index reads)."""
    return PREAMBLE + ENTRY * n


def pack_block(pool: str, dim: int, label: str, kind: str, keys: list[bytes], values: list[bytes]
               ) -> tuple[str, bytes]:
    """One object holding ``values[i]`` (float32 LE bytes) for ``keys[i]`` (32 bytes each).

    Args:
        pool: the pool key (64 hex). dim: its registered length. label: for ``longbert cache``.
        kind: "vectors" (each value dim floats) or "tokens" (n_content x dim floats).

    Returns:
        (file name "SHA256-N.lbw", the object's bytes).
    """
    assert len(keys) == len(values) and all(len(k) == 32 for k in keys)
    header = json.dumps({"pool": pool, "dim": int(dim), "label": label[:300], "kind": kind}).encode()
    pre = MAGIC + struct.pack("<II", len(keys), len(header)) + header
    assert len(pre) <= PREAMBLE
    index = b"".join(k + struct.pack("<I", len(v) // 4) for k, v in zip(keys, values))
    data = b"".join([pre.ljust(PREAMBLE, b" "), index, *values])
    return f"{hashlib.sha256(data).hexdigest()}-{len(keys)}.lbw", data


def parse_index(head: bytes | memoryview, n: int) -> tuple[dict, list[tuple[bytes, int, int]]]:
    """The header and the index of an object from its first ``index_length(n)`` bytes (or all of them).

    Returns:
        (header dict, [(key, byte offset of its values in the object, number of float32 values)]).

    Raises:
        BlockDamaged: a wrong magic, another N, an unreadable header, fewer bytes than the index.
    """
    head = bytes(head[:index_length(n)])
    if len(head) < index_length(n) or head[:8] != MAGIC:
        raise BlockDamaged("its preamble or index is cut or not a longbert block")
    count, size = struct.unpack_from("<II", head, 8)
    if count != n or size > PREAMBLE - 16:
        raise BlockDamaged(f"its preamble says {count} windows, its name {n}")
    try:
        header = json.loads(head[16:16 + size])
    except ValueError:
        raise BlockDamaged("its header is not JSON") from None
    entries, offset = [], index_length(n)
    for i in range(n):
        at = PREAMBLE + ENTRY * i
        values = struct.unpack_from("<I", head, at + 32)[0]
        entries.append((head[at:at + 32], offset, values))
        offset += 4 * values
    return header, entries


def verify(sha: str, data: bytes | memoryview) -> bool:
    """True when ``data`` hashes to ``sha`` (the object's name): nothing in it was changed or cut."""
    return hashlib.sha256(data).hexdigest() == sha
