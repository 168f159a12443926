"""The one walker over JSON-like values (mappings, lists, tuples; dataclasses on request): what masks secrets,
makes values JSON-able, describes LM objects in a spec, finds them, and flattens params — each a leaf function
on top of :func:`walk`, :func:`leaves` or :func:`flat_items`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["flat_items", "jsonable", "leaves", "walk"]


def _children(value: Any, with_dataclasses: bool) -> Mapping[Any, Any] | list[Any] | None:
    if with_dataclasses and dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return value
    if isinstance(value, list | tuple):
        return list(value)
    return None


def walk(
    value: Any, leaf: Callable[[Any], Any], *, with_dataclasses: bool = False, key: Callable[[Any], Any] = lambda k: k
) -> Any:
    """``value`` rebuilt (mappings as dicts with ``key`` applied to their keys, lists and tuples as lists,
    dataclasses as dicts when ``with_dataclasses``) with ``leaf`` applied to everything else."""
    children = _children(value, with_dataclasses)
    if isinstance(children, Mapping):
        return {key(k): walk(v, leaf, with_dataclasses=with_dataclasses, key=key) for k, v in children.items()}
    if isinstance(children, list):
        return [walk(v, leaf, with_dataclasses=with_dataclasses, key=key) for v in children]
    return leaf(value)


def leaves(value: Any, *, with_dataclasses: bool = False) -> Iterator[Any]:
    """Every leaf of ``value`` (see :func:`walk`), depth first."""
    children = _children(value, with_dataclasses)
    if children is None:
        yield value
        return
    for v in children.values() if isinstance(children, Mapping) else children:
        yield from leaves(v, with_dataclasses=with_dataclasses)


def flat_items(value: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``{"a": {"b": 1}, "c": [2]}`` → ``("a.b", 1), ("c", [2])``: nested mappings flattened to dotted keys."""
    for k, v in value.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            yield from flat_items(v, key + ".")
        else:
            yield key, v


def _jsonable_leaf(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


def jsonable(value: Any) -> Any:
    """``value`` if it is JSON-serializable, else the same structure with what is not (keys included) turned into
    text."""
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return walk(value, _jsonable_leaf, key=str)
