"""Epochs: :func:`epoch` marks the LM calls made inside it as the ``n``-th repeat of an item; :func:`rollout_for`
gives such a call its own rollout id, so each repeat is its own sample and its own DSPy cache entry.

Epoch 0 changes nothing (its calls are the calls of a run without repeats, cached as before). In epoch ``e ≥ 1`` a
call without a rollout id of its own gets ``e``; a call that has one (a self-consistency sample, a ``dspy.Refine``
attempt) gets ``r + e · EPOCH_STRIDE``, so no two epochs share a sample. dspy-for's LMs (and plain ``dspy.LM``
objects a run adopts) apply it to every call; an LM of another class can read :func:`current_epoch`.

:func:`uncached` is the other way to ask a request again: its calls neither read nor write DSPy's cache (``cache=False``
on each call), so each reaches the endpoint and its answer is not kept (a rollout id would keep it, as a new entry).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import dspy

__all__ = ["EPOCH_STRIDE", "current_epoch", "epoch", "epoch_kwargs", "rollout_for", "uncached"]

#: how far apart the rollout ids of two epochs are for calls that carry their own (samples, attempts)
EPOCH_STRIDE = 1_000_000
_EPOCH_KEY = "dspy_for_epoch"
_UNCACHED_KEY = "dspy_for_uncached"


@contextmanager
def epoch(n: int) -> Iterator[None]:
    """The LM calls made inside the block are epoch ``n`` of their item."""
    with dspy.context(**{_EPOCH_KEY: n}):
        yield


@contextmanager
def uncached() -> Iterator[None]:
    """The LM calls made inside the block neither read nor write DSPy's cache: each is sent to its endpoint."""
    with dspy.context(**{_UNCACHED_KEY: True}):
        yield


def current_epoch() -> int:
    return int(dspy.settings.get(_EPOCH_KEY) or 0)


def rollout_for(own: int | None) -> int | None:
    """The rollout id a call with rollout id ``own`` (None: none) is sent with in the current epoch."""
    e = current_epoch()
    if e == 0:
        return own
    return e if own is None else own + e * EPOCH_STRIDE


def epoch_kwargs(lm: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """A call's ``kwargs`` with the rollout id of the epoch in force (the call's own, else ``lm``'s, moved by the
    epoch) and, inside :func:`uncached`, ``cache=False``; unchanged in epoch 0 outside it."""
    own = kwargs.get("rollout_id", (getattr(lm, "kwargs", None) or {}).get("rollout_id"))
    rollout = rollout_for(own)
    out = kwargs if rollout == own else {**kwargs, "rollout_id": rollout}
    return {**out, "cache": False} if dspy.settings.get(_UNCACHED_KEY) else out
