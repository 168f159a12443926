"""How an LM's model is named where people read it (tables, report lines): :func:`model_label`."""

from __future__ import annotations

from dspy_for.lm.registry import list_models
from dspy_for.lm.server import alias_for

__all__ = ["model_label"]


#: the alias suffix of the separate prompt-caching server older versions ran (records it made keep it)
_OLD_PROMPT_CACHE_SUFFIX = "-pc64"


def model_label(model: str) -> str:
    """An LM's model name as a user wrote it: the local server's route (``hosted_vllm/<alias>``, what DSPy and the
    records name) back to ``local/<name>`` (``local/<name> (prompt cache)`` for records of the separate prompt-caching
    server older versions ran); any other unchanged. For what is shown only: records, keys and costs keep the route,
    which names the model file too."""
    route, _, alias = model.partition("/")
    if route != "hosted_vllm" or not alias:
        return model
    for entry in list_models():
        if alias == alias_for(entry.name):
            return f"local/{entry.name}"
        if alias == alias_for(entry.name) + _OLD_PROMPT_CACHE_SUFFIX:
            return f"local/{entry.name} (prompt cache)"
    return model
