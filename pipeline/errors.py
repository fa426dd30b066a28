"""The one error family of longbert: problems a user can fix, each with the exit code the CLI gives it."""
from __future__ import annotations


class PipelineError(Exception):
    """A problem the user can fix. The CLI prints ``str(err)`` and exits with ``exit_code``.

    Exit codes (the contract in README "Exit codes"): 2 before the run starts (nothing loaded,
    nothing written), 1 when it fails part-way (no output that looks complete is left).
    """

    exit_code = 1


class ConfigError(PipelineError):
    """An option or a config file is wrong; raised before any model is loaded. Exit 2."""

    exit_code = 2


class ParamError(ConfigError, ValueError):
    """A stage or pipeline parameter name that does not exist (``set_params``). Exit 2.

    A ValueError too, as scikit-learn's ``set_params`` raises for an invalid parameter.
    """


class InputError(PipelineError):
    """An input file cannot be read as asked (missing, bad bytes, bad CSV, missing column). Exit 2."""

    exit_code = 2


class TextError(InputError, ValueError):
    """A text that cannot be embedded (empty, not a string, non-finite result).

    A ValueError too, so scikit-learn code that catches ValueError for bad input catches it.
    """


class TextsTypeError(TextError, TypeError):
    """The texts are not a list of texts (a bare string, a dict, a generator, a frame of two columns...).

    A TypeError; also a TextError (so an InputError and a ValueError), as a bare string was before.
    """


class ModelError(PipelineError):
    """The model or tokenizer cannot be loaded as asked (not found, pickle-only, no pooler). Exit 2."""

    exit_code = 2


class RunError(PipelineError):
    """The run failed part-way (a row-level problem under --strict, a write that failed). Exit 1."""

    exit_code = 1


class StoreWarning(UserWarning):
    """The window store left something out and the run went on: a damaged stored object (its windows
    encoded again), or new windows not stored (credentials that may only read). The CLI prints it as
    one ``Warning:`` line."""
