"""The one place that turns an LM spec into a ``dspy.LM`` (``make_lm``).

(Initial version by the lead; the LM-layer owner extends it with `local/<name>` resolution and
cache isolation between servers.)
"""

from __future__ import annotations

from typing import Any

import dspy

from dspy_for.lm.usage import UsageRecordingMixin

__all__ = ["LM", "make_lm", "resolve_lm"]


class LM(UsageRecordingMixin, dspy.LM):
    """A ``dspy.LM`` that records every call into :func:`dspy_for.lm.usage.track_usage`."""


def make_lm(spec: str | dspy.BaseLM, **options: Any) -> dspy.BaseLM:
    """Build an LM from a litellm model string (temperature 0 and the DSPy cache by default)."""
    if isinstance(spec, dspy.BaseLM):
        return spec
    options.setdefault("temperature", 0.0)
    return LM(spec, **options)


def resolve_lm(lm: str | dspy.BaseLM | None) -> dspy.BaseLM | None:
    """None stays None (use the configured LM); strings go through :func:`make_lm`."""
    if lm is None or isinstance(lm, dspy.BaseLM):
        return lm
    if isinstance(lm, str):
        return make_lm(lm)
    from dspy_for.errors import ConfigError

    raise ConfigError(f"Expected an LM spec string or a `dspy.BaseLM`, got {type(lm).__name__}: {lm!r}.")
