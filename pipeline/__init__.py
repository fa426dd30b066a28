"""longbert's stages package: read, then the stages tokenize, segment, dedup, encode, aggregate, rows
(each in its phase's sub-package, chained by pipeline.engine.compose.Pipeline), then write. Users import ``longbert``.

Entry points here: ``run`` (the local engine), ``load_features`` (parquet -> numpy) and
``LongBertVectorizer`` (scikit-learn).
"""
from __future__ import annotations

from .options.config import PipelineConfig
from .errors import ConfigError, InputError, ModelError, PipelineError, RunError

__all__ = ["PipelineConfig", "PipelineError", "ConfigError", "InputError", "ModelError", "RunError",
           "run", "load_features", "LongBertVectorizer"]


def __getattr__(name: str):
    # Lazy: `import pipeline` stays light (no torch) for `longbert --help` and config checks.
    if name == "run":
        from .engine.local import run
        return run
    if name == "load_features":
        from .classify.features import load_features
        return load_features
    if name == "LongBertVectorizer":
        from .classify.vectorizer import LongBertVectorizer
        return LongBertVectorizer
    raise AttributeError(name)
