"""The keys records are stored and matched under: an item's content key, with its epoch for a repeat."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dspy_for.datasets import content_key

__all__ = ["example_key", "record_key", "unit_keys"]


def record_key(item_key: str, epoch: int) -> str:
    """The key a record is stored and matched under: the item's, with ``~epoch`` for a repeat (epoch ≥ 1)."""
    return item_key if epoch == 0 else f"{item_key}~{epoch}"


def example_key(example: Any) -> str:
    """The key an item is matched by: its content (question and gold)."""
    return content_key(example.get("question"), example.get("answer"))


def unit_keys(examples: Iterable[Any], epochs: int) -> list[str]:
    """The record keys of ``examples`` (each item once, matched by content) × ``epochs``: what a run of them stores."""
    return [record_key(k, e) for k in dict.fromkeys(example_key(ex) for ex in examples) for e in range(epochs)]
