"""Exception hierarchy of dspy-for.

Every error a user can cause names the offending argument in backticks and says how to fix it,
in the style of Optuna's messages.
"""

from __future__ import annotations

import importlib

__all__ = [
    "ConfigError",
    "DatasetError",
    "DspyForError",
    "MissingDependencyError",
    "ModelError",
    "ModelNotFoundError",
    "ModelNotPulledError",
    "PathError",
    "ServerError",
    "require",
]


class DspyForError(Exception):
    """Base class of every error raised on purpose by dspy-for."""


class ConfigError(DspyForError, ValueError):
    """A user-supplied option, config value or spec is invalid."""


class DatasetError(DspyForError, ValueError):
    """A dataset is missing, empty, malformed or has no such split."""


class PathError(ConfigError):
    """A file or folder a run needs cannot be used as it is (a file where a folder belongs, a folder that cannot be
    created or written, a file that is not UTF-8): the message names the path and the fix."""


class ModelError(DspyForError):
    """Base class of problems with a local model from the registry."""


class ModelNotFoundError(ModelError, KeyError):
    """The model name is not in the registry."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ModelNotPulledError(ModelError, FileNotFoundError):
    """The model is in the registry but its GGUF file is not in the cache yet."""


class ServerError(DspyForError, RuntimeError):
    """The local llama.cpp server could not be started, reached or kept alive."""


class MissingDependencyError(DspyForError, ImportError):
    """An optional dependency is not installed; the message gives the install command."""


def require(module: str, *, extra: str, package: str | None = None):
    """Import an optional dependency lazily, or raise with the install command.

    >>> require("llama_cpp", extra="local")  # doctest: +SKIP
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - exercised in tests with a fake module name
        pkg = package or module
        raise MissingDependencyError(
            f"`{pkg}` is needed for this feature but is not installed. "
            f"Install it with `pip install 'dspy-for[{extra}]'` (or `pip install {pkg}`)."
        ) from exc
