"""What an LM was built from: :func:`~dspy_for.lm.make_lm` records the spec string and options on every LM it
builds (copies keep the record), so a saved program can name the LM and build it again (:func:`made_from`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["MadeFrom", "made_from", "remember"]

_ATTR = "dspy_for_made_from"
L = TypeVar("L")


@dataclass(frozen=True)
class MadeFrom:
    """What :func:`~dspy_for.lm.make_lm` built an LM from: the ``spec`` and ``options`` as given, and the LM's request
    ``kwargs`` as built (what a later ``lm.copy(...)``, which keeps this record, changed is the difference)."""

    spec: str
    options: dict[str, Any]
    kwargs: dict[str, Any]


def made_from(lm: Any) -> MadeFrom | None:
    """The spec and options ``make_lm`` built ``lm`` (or the LM it is a copy of) from; None for any other LM."""
    origin = getattr(lm, _ATTR, None)
    return origin if isinstance(origin, MadeFrom) else None


def remember(lm: L, spec: str, options: dict[str, Any]) -> L:
    """``lm``, which ``make_lm`` just built from ``spec`` with ``options``, recording it."""
    setattr(lm, _ATTR, MadeFrom(spec, dict(options), dict(getattr(lm, "kwargs", {}) or {})))
    return lm
