"""The tokenizer files of a local model folder, checked before transformers tries to build a tokenizer from
them: none at all, or a sentencepiece model without the optional package that reads it, are named as such
(transformers would build an empty vocabulary, or suggest another package). No torch, no transformers here.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from ..errors import ModelError

# the sentencepiece models transformers' slow tokenizers read: DeBERTa-v2/v3, XLM-RoBERTa and CamemBERT, ALBERT...
SENTENCEPIECE_FILES = ("spm.model", "sentencepiece.bpe.model", "spiece.model", "tokenizer.model")
# what converting one to a fast tokenizer imports: (import name, pip name)
SENTENCEPIECE_PACKAGES = (("sentencepiece", "sentencepiece"), ("google.protobuf", "protobuf"))


def has_package(module: str) -> bool:
    """True when ``module`` can be imported here (found, not imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):   # a parent package that is missing
        return False


def check_tokenizer_files(folder: Path, name: str) -> None:
    """Refuse a folder whose fast tokenizer cannot be built from its files, naming what is missing.

    A ``tokenizer.json`` is enough. Without it, transformers converts the slow tokenizer's files:
    ``vocab.txt`` (WordPiece), ``vocab.json`` with ``merges.txt`` (byte-level BPE), or a sentencepiece
    model (SENTENCEPIECE_FILES), which needs the packages sentencepiece and protobuf.

    Raises:
        ModelError (exit 2): no tokenizer file at all (e.g. "tokenizer.json and vocab.txt are both
            missing"), or a sentencepiece model only, without a package that reads it ("pip install
            sentencepiece").
    """
    if (folder / "tokenizer.json").is_file():
        return
    spm = next((f for f in SENTENCEPIECE_FILES if (folder / f).is_file()), None)
    if spm is not None:
        missing = [pip for module, pip in SENTENCEPIECE_PACKAGES if not has_package(module)]
        if missing:
            names = " and ".join(missing)
            raise ModelError(f"--model {name!r}: {folder} has no tokenizer.json, and its tokenizer is the "
                             f"sentencepiece model {spm}, which needs the optional package{'s' if len(missing) > 1 else ''}"
                             f" {names} to read: pip install {' '.join(missing)}")
        return
    if (folder / "vocab.txt").is_file() or ((folder / "vocab.json").is_file() and (folder / "merges.txt").is_file()):
        return
    raise ModelError(f"--model {name!r}: {folder} has no tokenizer files: tokenizer.json and vocab.txt are both "
                     "missing (nor is there vocab.json with merges.txt, or a sentencepiece model); copy the "
                     "tokenizer files saved with the model into the folder, or download or copy the model folder "
                     "again")
