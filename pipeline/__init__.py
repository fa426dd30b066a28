"""longbert's stages package: read, then the stages tokenize, segment, dedup, encode, aggregate, rows
(pipeline.engine.stages, chained by pipeline.engine.compose.Pipeline), then write. Users import ``longbert``.

Entry points here: ``run`` (the local engine), ``Extractor`` (the whole block function, for the
engines), ``load_features`` (parquet -> numpy) and ``LongBertVectorizer`` (scikit-learn).
"""
from __future__ import annotations

from .options.config import PipelineConfig
from .errors import ConfigError, InputError, ModelError, PipelineError, RunError

__all__ = ["PipelineConfig", "PipelineError", "ConfigError", "InputError", "ModelError", "RunError",
           "run", "Extractor", "load_features", "LongBertVectorizer"]


def __getattr__(name: str):
    # Lazy: `import pipeline` stays light (no torch) for `longbert --help` and config checks.
    if name == "run":
        from .engine.compose import run
        return run
    if name == "Extractor":
        from .engine.compose import Extractor
        return Extractor
    if name == "load_features":
        from .classify.features import load_features
        return load_features
    if name == "LongBertVectorizer":
        from .classify.vectorizer import LongBertVectorizer
        return LongBertVectorizer
    raise AttributeError(name)
