"""The model folder as an input, checked before anything loads: config.json parses, every weight file
is whole (a safetensors header that parses and tensors whose bytes are all there), the shard index names
files that exist; then the stored tensor names and shapes against those the model's config builds.
No torch here: ``longbert stats`` runs the file checks.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelError

AGAIN = "download or copy the model folder again"
HEADER_LIMIT = 100_000_000   # bytes: the safetensors format refuses a longer header
SHOWN = 3                    # names quoted in a message
# bytes per element of each safetensors dtype (the format's spec, safetensors 0.8)
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8,
               "U32": 4, "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1}
_WEIGHT_SUFFIXES = (".safetensors", ".safetensors.index.json")


@dataclass(frozen=True)
class Expected:
    """What a model built from its config holds (pipeline.model.load.expected_tensors, from a meta-device model)."""

    shapes: dict[str, tuple[int, ...]]   # state_dict name -> shape, e.g. "encoder.layer.0.output.dense.weight"
    modules: frozenset[str]              # the base model's top-level children ("embeddings", "encoder", "pooler")
    buffers: frozenset[str]              # buffer names, persistent or not ("embeddings.position_ids")
    prefix: str                          # base_model_prefix ("bert"): task checkpoints store "bert.<name>"
    pooler: tuple[str, ...] = ()         # the family's pooler weights, benign when absent and unused


def weight_files(folder: Path) -> list[Path]:
    """The checkpoint's weight files: *.safetensors (+ index), else pytorch_model*.bin (+ index)."""
    files = sorted(p for p in folder.iterdir() if p.is_file())
    st = [p for p in files if p.name.endswith(_WEIGHT_SUFFIXES)]
    return st or [p for p in files if p.name.startswith("pytorch_model") and p.name.endswith((".bin", ".bin.index.json"))]


def model_sha256(folder: str | Path) -> str | None:
    """sha256 of config.json and the weight files of a model folder, in name order; each file enters as
    its name, a NUL byte and its bytes. None when the folder holds no config.json or no weights.

    Example: the default model's folder -> a 64-hex-digit string, the same on every machine.
    """
    folder = Path(folder)
    config = folder / "config.json"
    weights = weight_files(folder) if folder.is_dir() else []
    if not config.is_file() or not weights:
        return None
    return _sha256_files(folder_identity(folder))


def folder_identity(folder: str | Path) -> tuple[tuple[str, int, int], ...] | None:
    """(path, size in bytes, mtime in ns) of config.json and each weight file, in name order: what
    ``model_sha256`` is cached by, read with a stat per file (no byte is read). None when the
    folder holds no config.json or no weights. A folder saved again in place gives another identity.
    """
    folder = Path(folder)
    config = folder / "config.json"
    weights = weight_files(folder) if folder.is_dir() else []
    if not config.is_file() or not weights:
        return None
    return tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in (config, *weights))


@functools.lru_cache(maxsize=16)
def _sha256_files(files: tuple[tuple[str, int, int], ...]) -> str:
    """Cached on (path, size, mtime) so one process hashes a checkpoint once."""
    digest = hashlib.sha256()
    for path, _, _ in files:
        digest.update(Path(path).name.encode() + b"\0")
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()


def damaged(file: Path, why: str, name: str) -> ModelError:
    """The error for a file of the model folder that is cut or damaged."""
    return ModelError(f"--model {name!r}: {file.name} in {file.parent} is cut or damaged ({why}); {AGAIN}")


def read_json(file: Path, name: str) -> dict:
    """A JSON object file of the model folder (config.json, an index...).

    Raises:
        ModelError: the file is missing, not UTF-8, not JSON (a cut copy), or not an object.
    """
    if not file.is_file():
        raise ModelError(f"--model {name!r}: {file.parent} has no {file.name}; {AGAIN}")
    try:
        value = json.loads(file.read_bytes())
    except (UnicodeDecodeError, ValueError) as err:
        raise damaged(file, f"not valid JSON: {err}", name) from None
    if not isinstance(value, dict):
        raise damaged(file, f"a JSON {type(value).__name__}, not an object", name)
    return value


def read_header(file: Path, name: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The tensors of one safetensors file, {name: (dtype, shape)}, checked against the file's size.

    The format: 8 bytes little-endian header length N, N bytes of JSON {name: {dtype, shape,
    data_offsets: [begin, end)}}, then the data; the tensors tile the data exactly, in offset order.

    Raises:
        ModelError: naming the file: shorter than its header says, a header that is not JSON, a tensor
            whose bytes do not match its dtype and shape, or data that ends before the last tensor.
    """
    size = file.stat().st_size
    with open(file, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise damaged(file, f"{size} bytes, shorter than the 8-byte header length", name)
        (n,) = struct.unpack("<Q", head)
        if n > HEADER_LIMIT or 8 + n > size:
            raise damaged(file, f"its header says {n:,} bytes, the file holds {size - 8:,} after the length", name)
        raw = fh.read(n)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as err:
        raise damaged(file, f"its header is not valid JSON: {err}", name) from None
    if not isinstance(header, dict):
        raise damaged(file, "its header is not a JSON object", name)
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {}
    spans: list[tuple[int, int, str]] = []
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        why = _entry_problem(entry)
        if why:
            raise damaged(file, f"tensor {key!r}: {why}", name)
        tensors[key] = (entry["dtype"], tuple(entry["shape"]))
        spans.append((*entry["data_offsets"], key))
    data, end = size - 8 - n, 0
    for begin, stop, key in sorted(spans):
        if begin != end:
            raise damaged(file, f"tensor {key!r} starts at data byte {begin:,}, after a gap or overlap at {end:,}", name)
        end = stop
    if end != data:
        what = "cut: its tensors need" if end > data else "its tensors cover"
        raise damaged(file, f"{what} {end:,} data bytes, the file holds {data:,}", name)
    return tensors


def _entry_problem(entry) -> str | None:
    """Why one header entry is not a tensor the data can hold (None: it is)."""
    if not isinstance(entry, dict):
        return "not an object"
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in DTYPE_BYTES:
        return f"unknown dtype {dtype!r}"
    if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
        return f"shape {shape!r} is not a list of sizes"
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int and o >= 0 for o in offsets)):
        return f"data_offsets {offsets!r} are not [begin, end)"
    if offsets[1] - offsets[0] != math.prod(shape) * DTYPE_BYTES[dtype]:
        return f"{offsets[1] - offsets[0]:,} bytes for a {dtype} tensor of shape {shape}"
    return None


def stored_tensors(folder: Path, name: str) -> dict[str, tuple[str, tuple[int, ...]]] | None:
    """Every tensor of a safetensors checkpoint folder, {name: (dtype, shape)}, after checking each
    weight file (read_header) and, for a sharded one, its index. None: no safetensors (pickle only).

    Read once per process while the weight files keep their size and modification time: the run's
    pre-flight (pipeline.model.facts.model_facts) and the load's key check (pipeline.model.load) share one read.

    Raises:
        ModelError: a damaged weight file or index, a shard the index names that is missing, or a
            tensor the index places in a shard that does not hold it.
    """
    files = [p for p in weight_files(folder) if ".safetensors" in p.name]
    if not files:
        return None
    stamp = (str(Path(folder).resolve()), tuple((p.name, *_size_time(p)) for p in files))
    if stamp not in _STORED:
        _STORED.clear()   # one model's tensors at a time
        _STORED[stamp] = _read_tensors(folder, files, name)
    return _STORED[stamp]


_STORED: dict[tuple, dict] = {}   # (folder, its weight files' (name, inode, size, mtime, ctime)) -> stored_tensors


def _size_time(path: Path) -> tuple[int, ...]:
    st = path.stat()
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _read_tensors(folder: Path, files: list[Path], name: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """stored_tensors without the memo: the headers (and the index) read and checked."""
    index = next((p for p in files if p.name.endswith(".index.json")), None)
    if index is None:  # transformers reads model.safetensors alone
        if not (folder / "model.safetensors").is_file():
            raise ModelError(f"--model {name!r}: {folder} holds {', '.join(p.name for p in files[:SHOWN])} but "
                             f"neither model.safetensors nor the index of its shards (model.safetensors.index.json); "
                             f"{AGAIN}")
        return read_header(folder / "model.safetensors", name)
    weight_map = read_json(index, name).get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise damaged(index, "no weight_map of tensor names to shard files", name)
    shards: dict[str, dict] = {}
    for shard in dict.fromkeys(weight_map.values()):
        path = folder / shard
        if Path(shard).name != shard or not path.is_file():
            raise ModelError(f"--model {name!r}: the shard {shard} that {index.name} names is missing from "
                             f"{folder}; {AGAIN} (every shard the index names)")
        shards[shard] = read_header(path, name)
    tensors = {}
    for key, shard in weight_map.items():
        if key not in shards[shard]:
            raise damaged(index, f"it places {key!r} in {shard}, which does not hold it", name)
        tensors[key] = shards[shard][key]
    return tensors


FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")  # what a weight may be stored as (transformers casts among them)
Stored = dict[str, tuple[str | None, tuple[int, ...]]]   # stored name -> (safetensors dtype or None, shape)


def key_problems(stored: Stored, expected: Expected, need_pooler: bool) -> tuple[list[str], list[str], list[str]]:
    """(missing, foreign, mismatched) names: what the model would not get from the checkpoint.

    ``stored`` maps stored names to (dtype, shape); dtype None: not known (transformers' report). A
    name under the base-model prefix ("bert.encoder...") counts as its unprefixed name, as transformers
    loads it. Missing: expected names not stored, except the
    pooler when it is not used. Foreign: stored names inside the model's own modules that it does not
    hold (a config with fewer layers than the weights), buffers excepted; tensors of task heads beside
    the encoder ("cls.predictions.bias") are ignored, as transformers ignores them. Mismatched:
    "name: stored (a, b), config.json gives (c, d)", or a weight stored as an integer dtype.

    Example: a BERT saved under "backbone." -> every expected name missing, no foreign name (the
    stored names are outside the model's modules).
    """
    strip = expected.prefix and expected.prefix not in expected.modules and \
        any(k.startswith(expected.prefix + ".") for k in stored)
    cut = len(expected.prefix) + 1
    seen = {(k[cut:] if strip and k.startswith(expected.prefix + ".") else k): s for k, s in stored.items()}
    optional = () if need_pooler else expected.pooler
    missing = [k for k in expected.shapes if k not in seen and k not in optional]
    foreign = [k for k in seen if k not in expected.shapes and k not in expected.buffers
               and k.split(".", 1)[0] in expected.modules]
    mismatched = [f"{k}: stored {tuple(s)}, config.json gives {expected.shapes[k]}" for k, (_, s) in seen.items()
                  if k in expected.shapes and tuple(s) != tuple(expected.shapes[k])]
    mismatched += [f"{k}: stored as {d}, a weight needs floating point" for k, (d, _) in seen.items()
                   if k in expected.shapes and d is not None and d not in FLOAT_DTYPES]
    return missing, foreign, mismatched


def check_keys(stored: Stored, expected: Expected, need_pooler: bool, where: str, name: str) -> None:
    """Refuse a checkpoint that would leave any weight of the model randomly initialised.

    Args:
        stored: {stored tensor name: (dtype, shape)}; expected: the model its config builds;
        where: the weight files, for the message (e.g. "model.safetensors").

    Raises:
        ModelError: missing, foreign or mismatched names (key_problems), naming the first few and the fix.
    """
    missing, foreign, mismatched = key_problems(stored, expected, need_pooler)
    if mismatched:
        raise ModelError(f"--model {name!r}: config.json does not match the weights in {where} "
                         f"({len(mismatched)} weights differ: {'; '.join(mismatched[:SHOWN])}); use the config.json "
                         f"saved with these weights, or {AGAIN}")
    if missing:
        hint = _prefix_hint(missing, stored)
        fix = ("Save the model with transformers' save_pretrained under its own parameter names" if hint else
               "Use the config.json saved with these weights (its model_type and sizes)")
        raise ModelError(f"--model {name!r}: {len(missing)} of the model's {len(expected.shapes)} weights are not in "
                         f"{where} ({_some(missing)}), so they would be random{hint}. {fix}, or {AGAIN}")
    if foreign:
        raise ModelError(f"--model {name!r}: {where} holds {len(foreign)} tensors the model its config.json "
                         f"describes does not have ({_some(foreign)}); use the config.json saved with these "
                         f"weights (num_hidden_layers and the sizes), or {AGAIN}")


def _some(names: list[str]) -> str:
    more = f", ... {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more


def _prefix_hint(missing: Iterable[str], stored: dict) -> str:
    """'; the checkpoint stores them under the prefix 'backbone.'' when that explains every missing name."""
    missing = list(missing)
    for key in stored:
        if key.endswith("." + missing[0]):
            prefix = key[: -len(missing[0])]
            if all(prefix + m in stored for m in missing):
                return f"; the checkpoint stores them under the prefix {prefix!r}, which the model does not use"
    return ""


# sizes config.json must give as positive integers (transformers' common names, and DistilBERT's)
SIZES = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
         "max_position_embeddings", "dim", "n_layers", "n_heads", "hidden_dim")


def check_sizes(raw: dict, name: str) -> None:
    """Raise ModelError naming config.json when one of its SIZES is not a positive integer (e.g. a
    hand-edited "hidden_size": "32" or -1), before transformers reads it into a config class."""
    for key in SIZES:
        value = raw.get(key)
        if key in raw and (type(value) is not int or value <= 0):
            raise ModelError(f"--model {name!r}: config.json gives {key} = {value!r}, not a positive integer; "
                             f"use the config.json saved with the model, or {AGAIN}")


def vocab_rows(tok, mcfg, cls_id: int, sep_id: int, name: str) -> int | None:
    """The rows of the model's embedding table when the tokenizer has ids beyond them, else None.

    A document that uses such an id gets a row error (pipeline.text.tokenize); an id that every window uses
    ([CLS], [SEP], the padding) is refused. Example: the default tokenizer plus one added token (id
    30522) with a table of 30,522 rows -> 30522.

    Raises:
        ModelError: the first/last token or the pad token of the tokenizer is beyond the table.
    """
    rows = getattr(mcfg, "vocab_size", None)
    if not isinstance(rows, int) or max(tok.get_vocab().values(), default=0) < rows:
        return None
    for what, tid in (("first", cls_id), ("last", sep_id), ("padding", tok.pad_token_id)):
        if tid is not None and tid >= rows:
            raise ModelError(f"--model {name!r}: the tokenizer's {what} token {tok.convert_ids_to_tokens(tid)!r} "
                             f"has id {tid}, beyond the model's embedding table of {rows:,} rows (config.json "
                             "vocab_size), and every window uses it; use the tokenizer saved with this model, or "
                             "resize the model's embeddings to the tokenizer (resize_token_embeddings) and save both")
    return rows


def check_tokenizer_kind(folder: Path, tok, name: str) -> None:
    """Without tokenizer_config.json, transformers builds the family's default tokenizer class, which may
    read tokenizer.json as another kind (a RoBERTa folder's WordPiece file as BPE): refused, not run."""
    file = folder / "tokenizer.json"
    if (folder / "tokenizer_config.json").exists() or not file.is_file():
        return
    saved = str((read_json(file, name).get("model") or {}).get("type"))
    built = type(tok.backend_tokenizer.model).__name__
    if saved != built:
        raise ModelError(f"--model {name!r}: {folder} has no tokenizer_config.json, and without it its tokenizer.json "
                         f"({saved}) loads as another tokenizer ({built}); download or copy the model folder again "
                         "with its tokenizer_config.json")


def _config_errors() -> tuple[type[BaseException], ...]:
    """What reading a config raises: transformers' own errors, and huggingface_hub's strict-dataclass checks
    of a value's type (``"vocab_size": 74.5``)."""
    try:
        from huggingface_hub.errors import StrictDataclassError
    except ImportError:
        return (OSError, ValueError, TypeError, KeyError, AttributeError)
    return (OSError, ValueError, TypeError, KeyError, AttributeError, StrictDataclassError)


CONFIG_ERRORS = _config_errors()


def check_architectures(raw: dict, base_class: str | tuple | None, name: str) -> None:
    """Refuse a config.json whose model_type contradicts its own ``architectures`` (a BERT checkpoint's
    config edited to "roberta" builds a model with the same tensor names that numbers positions otherwise).

    ``base_class``: the family's base model class (transformers' MODEL_MAPPING_NAMES, e.g. "BertModel");
    each architecture must start with its stem ("Bert": BertModel, BertForMaskedLM...). Nothing is
    checked without architectures or a known class.

    Raises:
        ModelError: no architecture starts with the family's stem.
    """
    archs = raw.get("architectures")
    if not isinstance(base_class, str) or not base_class.endswith("Model") or not isinstance(archs, list) or not archs:
        return
    stem = base_class[: -len("Model")].lower()
    if not any(isinstance(a, str) and a.lower().startswith(stem) for a in archs):
        raise ModelError(f"--model {name!r}: config.json gives model_type {raw.get('model_type')!r} but its "
                         f"architectures are {archs}, of another family; use the config.json saved with the model, "
                         f"or {AGAIN}")
