"""Which registered methods a ``compile`` table can compile, and the one parse of such a table into a typed
:class:`CompileSpec` — its kind, the method's predictors, the splits, the limits, the optimizer LM and the optimizer's
own options checked — made before any LM is built or called (a registered method is built without LMs to read its
predictors, which calls nothing), once per distinct table: a run, its datasets and its compile step read the spec."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from dspy_for.datasets import register_jsonl
from dspy_for.datasets.user import USER_SPLIT
from dspy_for.errors import ConfigError, DatasetError
from dspy_for.experiments.methods.entry import get_method, list_methods
from dspy_for.lm import check_lm_spec
from dspy_for.optimizers import COMPILERS, check_compile_options

__all__ = ["COMPILE_KEYS", "CompileSpec", "check_compile", "compilable_methods", "predictor_names"]

#: the keys of a ``compile`` table every kind takes (the compile step reads them); any other is the optimizer's own
COMPILE_KEYS = ("kind", "data", "trainset", "valset", "train_limit", "val_limit", "optimizer_lm")


def predictor_names(name: str, options: Mapping[str, Any] | None = None) -> list[str]:
    """The named predictors of method ``name`` with ``options`` — what a compiler tunes — read from the method built
    without LMs (nothing is called)."""
    entry = get_method(name)
    own, _ = entry.split_options(options or {})
    program = entry.build("question -> answer", dict.fromkeys(entry.roles), entry.with_defaults(own))
    return [n for n, _ in program.named_predictors()]


def compilable_methods() -> list[str]:
    """The registered methods that have predictors, so a ``compile`` table can tune them."""
    return [e.name for e in list_methods() if predictor_names(e.name)]


@dataclass(frozen=True)
class CompileSpec:
    """A method's ``compile`` table, parsed and checked: what the compile step reads (see
    :mod:`dspy_for.experiments.core.compile_step` for what each means). ``trainset`` / ``valset``: splits of the run's
    dataset, or of ``data`` (a JSONL file: its one split ``all``); ``options``: the optimizer's own."""

    kind: str
    trainset: str
    valset: str
    data: str | None = None
    train_limit: int | None = None
    val_limit: int | None = None
    optimizer_lm: Any = None  # a spec string or an LM object; None: the run's LM
    options: dict[str, Any] = field(default_factory=dict)

    def check_splits(self, splits: Collection[str], *, label: str) -> None:
        """``trainset`` and ``valset`` name splits of a dataset with ``splits`` (with ``data``: its file's)."""
        if self.data is not None:
            return
        keys = ("trainset", "valset") if COMPILERS[self.kind].uses_valset else ("trainset",)
        for key in keys:
            if getattr(self, key) not in splits:
                raise ConfigError(
                    f"`compile` of method `{label}`: `{key}` must name a split of the dataset: one of "
                    f"{', '.join(splits)}, got {getattr(self, key)!r}."
                )


def check_compile(
    name: str,
    options: Mapping[str, Any],
    table: Any,
    *,
    label: str | None = None,
    splits: Collection[str] | None = None,
) -> CompileSpec | None:
    """The ``compile`` table of method ``name`` (with ``options``; ``label``: how the run names it) parsed into a
    :class:`CompileSpec`, checked before any LM call: a :class:`ConfigError` naming the fix otherwise. ``splits``: the
    dataset's splits, when known, that ``trainset`` and ``valset`` must name (with ``data``, a JSONL file read and
    checked here: its one split ``all``). None: no compile step. Parsed once per distinct table (a cache)."""
    if table is None:
        return None
    where = f"`compile` of method `{label or name}`"
    if not isinstance(table, Mapping):
        raise ConfigError(f'{where} must be a table, e.g. compile = {{ kind = "bootstrap" }}, got {table!r}.')
    spec = _parsed(name, _key(options), _key(table), label or name, _Held(options, table))
    if splits is not None:
        spec.check_splits(splits, label=label or name)
    return spec


class _Held:
    """The table and options themselves, beside their JSON keys in the parse cache (not part of the key)."""

    def __init__(self, options: Mapping[str, Any], table: Mapping[str, Any]) -> None:
        self.options, self.table = options, table

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Held)

    def __hash__(self) -> int:
        return 0


def _key(value: Mapping[str, Any]) -> str:
    """A table as a cache key: its JSON, an LM object by its identity."""
    return json.dumps(value, sort_keys=True, default=lambda o: f"<{type(o).__name__} {id(o)}>")


@lru_cache(maxsize=256)
def _parsed(name: str, _options: str, _table: str, label: str, held: _Held) -> CompileSpec:
    return _parse(name, held.options, held.table, f"`compile` of method `{label}`")


def _parse(name: str, options: Mapping[str, Any], table: Mapping[str, Any], where: str) -> CompileSpec:
    kind = table.get("kind")
    if kind not in COMPILERS:
        raise ConfigError(f"{where} needs `kind` = one of {', '.join(COMPILERS)}, got {kind!r}.")
    predictors = predictor_names(name, options)
    if not predictors:
        raise ConfigError(
            f"{where}: method `{name}` has no predictors, so a compiler has nothing to tune. Drop its `compile` "
            f"table, or compile a method that has predictors: {', '.join(compilable_methods())}."
        )
    defaults = {"trainset": "train", "valset": "val"} if COMPILERS[kind].uses_valset else {"trainset": "train"}
    splits: tuple[str, ...] | None = None
    if table.get("data") is not None:
        splits, defaults = _train_file(table["data"], where), dict.fromkeys(defaults, USER_SPLIT)
    for key, default in defaults.items():
        split = table.get(key, default)
        if not isinstance(split, str) or (splits is not None and split not in splits):
            known = f": one of {', '.join(splits)}" if splits is not None else ""
            raise ConfigError(f"{where}: `{key}` must name a split of the dataset{known}, got {split!r}.")
    for key in ("train_limit", "val_limit"):
        value = table.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"{where}: `{key}` must be a positive integer (items), got {value!r}.")
    if isinstance(table.get("optimizer_lm"), str):
        check_lm_spec(table["optimizer_lm"])
    own = {k: v for k, v in table.items() if k not in COMPILE_KEYS}
    try:
        check_compile_options(kind, own)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    named = own.get("predictors")
    if kind == "textgrad" and named is not None and (isinstance(named, str) or not isinstance(named, list)):
        raise ConfigError(f"{where}: `predictors` must be a list of predictor names, e.g. [{predictors[0]!r}].")
    unknown = [p for p in named or () if p not in predictors]
    if unknown:
        raise ConfigError(
            f"{where}: method `{name}` has no predictor `{unknown[0]}` (in `predictors`). Its predictors: "
            f"{', '.join(predictors)}."
        )
    return CompileSpec(
        kind=kind,
        trainset=table.get("trainset", defaults["trainset"]),
        valset=table.get("valset", USER_SPLIT if splits is not None else "val"),
        data=table.get("data"),
        train_limit=table.get("train_limit"),
        val_limit=table.get("val_limit"),
        optimizer_lm=table.get("optimizer_lm"),
        options=own,
    )


def _train_file(data: Any, where: str) -> tuple[str, ...]:
    """The splits of a ``compile`` table's ``data`` file (read and checked now): its one split ``all``."""
    if not isinstance(data, str) or not data.strip():
        raise ConfigError(
            f"{where}: `data` must be the path of a JSONL file (question / answer per line), got {data!r}."
        )
    try:
        register_jsonl(data)
    except DatasetError as exc:
        raise ConfigError(f"{where}: `data`: {exc}") from None
    return (USER_SPLIT,)
