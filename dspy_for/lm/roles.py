"""Roles: :func:`role` names the role (defender, debater, task, ...) of the LM calls made inside it;
:func:`current_role` is the role in force (:data:`DEFAULT_ROLE` outside any :func:`role` block)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import dspy

__all__ = ["DEFAULT_ROLE", "current_role", "role"]

DEFAULT_ROLE = "lm"
_ROLE_KEY = "dspy_for_role"


@contextmanager
def role(name: str) -> Iterator[None]:
    """Attribute LM calls made inside the block to role ``name``."""
    with dspy.context(**{_ROLE_KEY: name}):
        yield


def current_role() -> str:
    return dspy.settings.get(_ROLE_KEY) or DEFAULT_ROLE
