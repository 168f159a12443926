"""Search spaces for sweeps: parsed and validated before any trial runs.

In a sweep config each searched option is a table under ``[search]``::

    [search.rounds]
    type = "int"        # int | float | categorical
    low = 0
    high = 4
    step = 1            # optional (int/float); `log = true` for log-uniform

    [search.host]
    type = "categorical"
    choices = [true, false]

Option names must be options of the method (``MethodEntry.defaults``) or ``temperature``. With a
``compile`` table in the sweep (compile the program, then evaluate it), the compile optimizer's options
are searched under ``[search.compile.<option>]`` (e.g. TextGrad's ``steps_per_epoch`` and ``batch_size``;
see :data:`COMPILE_OPTIONS`) and reach the trial as ``compile.<option>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dspy_for.errors import ConfigError
from dspy_for.experiments.methods import get_method

__all__ = [
    "COMPILE_OPTIONS",
    "MethodChoice",
    "Param",
    "SearchSpace",
    "flatten_point",
    "parse_method_choice",
    "parse_search_space",
]

EXTRA_OPTIONS = ("temperature",)
# the compile options a sweep may search, per optimizer kind (dspy_for.optimizers.compile_program)
COMPILE_OPTIONS: dict[str, tuple[str, ...]] = {
    "textgrad": ("epochs", "steps_per_epoch", "batch_size", "gradient_memory"),
    "gepa": ("max_metric_calls",),
    "mipro": ("num_candidates", "num_trials"),
    "mipro_fewshot": ("num_candidates", "num_trials"),
    "bootstrap": ("max_bootstrapped_demos", "max_labeled_demos"),
}


def flatten_point(point: Mapping[str, Any]) -> dict[str, Any]:
    """``{rounds = 1, compile = {steps_per_epoch = 4}}`` → ``{"rounds": 1, "compile.steps_per_epoch": 4}``."""
    out: dict[str, Any] = {}
    for k, v in point.items():
        if k == "compile" and isinstance(v, Mapping):
            out.update({f"compile.{ck}": cv for ck, cv in v.items()})
        else:
            out[k] = v
    return out


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()

    def _range(self) -> tuple[float, float]:
        """``(low, high)`` of an int or float parameter (:func:`parse_search_space` always sets both)."""
        if self.low is None or self.high is None:
            raise ConfigError(f"`{self.name}` is a {self.type} parameter without `low` and `high`: set both.")
        return self.low, self.high

    def suggest(self, trial: Any, key: str | None = None) -> Any:
        key = key or self.name
        if self.type == "int":
            low, high = self._range()
            return trial.suggest_int(key, int(low), int(high), step=int(self.step or 1), log=self.log)
        if self.type == "float":
            low, high = self._range()
            return trial.suggest_float(key, float(low), float(high), step=self.step, log=self.log)
        return trial.suggest_categorical(key, list(self.choices))

    def contains(self, value: Any) -> bool:
        if self.type == "categorical":
            return any(value == c and type(value) is type(c) for c in self.choices)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.type == "int" and not isinstance(value, int):
            return False
        low, high = self._range()
        inside = float(low) <= value <= float(high)
        if inside and self.step:
            q = (value - float(low)) / float(self.step)
            inside = abs(q - round(q)) < 1e-9
        return inside


@dataclass(frozen=True)
class SearchSpace:
    params: tuple[Param, ...]

    def suggest(self, trial: Any) -> dict[str, Any]:
        return {p.name: p.suggest(trial) for p in self.params}

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.params]

    def validate_point(self, point: Mapping[str, Any], where: str = "enqueue") -> dict[str, Any]:
        """A configuration to evaluate as-is (e.g. the paper's default): every searched option, in range."""
        point = flatten_point(point)
        names = set(self.names)
        if set(point) != names:
            missing, extra = sorted(names - set(point)), sorted(set(point) - names)
            raise ConfigError(
                f"`{where}` entry {dict(point)!r} must set exactly the searched options "
                f"{sorted(names)} (missing {missing}, not searched {extra}); put options that "
                "are not searched under `fixed`."
            )
        for p in self.params:
            if not p.contains(point[p.name]):
                rng = list(p.choices) if p.type == "categorical" else f"[{p.low}, {p.high}] step {p.step or 1}"
                raise ConfigError(
                    f"`{where}` sets `{p.name}` = {point[p.name]!r}, outside its search range "
                    f"{rng}. Widen `[search.{p.name}]` or fix the value."
                )
        return dict(point)


def parse_search_space(method: str, search: Mapping[str, Any], compile_kind: str | None = None) -> SearchSpace:
    """Validate ``search`` against method ``method``'s options; raise :class:`ConfigError` with the fix."""
    allowed = set(get_method(method).defaults) | set(EXTRA_OPTIONS)
    if not search:
        raise ConfigError(
            "The sweep has no `[search]` table: add at least one option to search, e.g. "
            '[search.rounds] with type = "int", low = 0, high = 4.'
        )
    search = dict(search)
    compile_search = search.pop("compile", None)
    if compile_search is not None:
        if compile_kind is None:
            raise ConfigError(
                "`[search.compile.*]` searches compile options, but the sweep has no `compile` "
                'table: add e.g. compile = { kind = "textgrad", trainset = "train" }.'
            )
        if not isinstance(compile_search, Mapping) or not all(isinstance(v, Mapping) for v in compile_search.values()):
            raise ConfigError(
                "`[search.compile]` must hold one table per compile option, e.g. "
                "[search.compile.steps_per_epoch] with type, low, high."
            )
        known = COMPILE_OPTIONS.get(compile_kind, ())
        for name, spec in compile_search.items():
            if name not in known:
                raise ConfigError(
                    f"Unknown compile option `{name}` in [search.compile.{name}] for compile kind "
                    f"`{compile_kind}`. Searchable: {', '.join(known) or 'none'}."
                )
            search[f"compile.{name}"] = spec
            allowed.add(f"compile.{name}")
    params = []
    for name, spec in search.items():
        where = f"[search.{name}]"
        if name not in allowed:
            raise ConfigError(
                f"Unknown option `{name}` in {where} for method `{method}`. "
                f"Searchable options: {', '.join(sorted(allowed))}."
            )
        if not isinstance(spec, Mapping):
            raise ConfigError(f"{where} must be a table with `type` and its bounds or `choices`.")
        kind = spec.get("type")
        extra = set(spec) - {"type", "low", "high", "step", "log", "choices"}
        if extra:
            raise ConfigError(
                f"Unknown key `{sorted(extra)[0]}` in {where}. Allowed: type, low, high, step, log, choices."
            )
        if kind in ("int", "float"):
            low, high, step, log = spec.get("low"), spec.get("high"), spec.get("step"), bool(spec.get("log", False))
            if low is None or high is None:
                raise ConfigError(f"{where} needs `low` and `high`.")
            if low > high:
                raise ConfigError(f"{where}: `low` ({low}) is greater than `high` ({high}). Swap them.")
            if kind == "int" and not (float(low).is_integer() and float(high).is_integer()):
                raise ConfigError(f"{where}: an int range needs integer `low` and `high`.")
            if log and (low <= 0 or step not in (None, 1)):
                raise ConfigError(f"{where}: `log = true` needs `low` > 0 and no `step`.")
            if step is not None:
                if step <= 0:
                    raise ConfigError(f"{where}: `step` must be positive, got {step}.")
                span = (high - low) / step
                if abs(span - round(span)) > 1e-9:
                    raise ConfigError(f"{where}: `step` ({step}) does not divide `high - low` ({high - low}).")
            params.append(Param(name, kind, low, high, step, log))
        elif kind == "categorical":
            choices = spec.get("choices")
            if not isinstance(choices, list) or not choices:
                raise ConfigError(f"{where}: a categorical option needs a non-empty `choices` list.")
            params.append(Param(name, kind, choices=tuple(choices)))
        else:
            raise ConfigError(f'{where}: `type` must be "int", "float" or "categorical", got {kind!r}.')
    return SearchSpace(tuple(params))


@dataclass(frozen=True)
class MethodChoice:
    """Several methods in one study: ``method`` is searched and each method's options are conditional on it.

    Optuna names a method's options ``"<method>.<option>"`` (e.g. ``for.rounds``, ``prorefine.k``).
    """

    spaces: dict[str, SearchSpace]

    def suggest(self, trial: Any) -> tuple[str, dict[str, Any]]:
        method = trial.suggest_categorical("method", list(self.spaces))
        return method, {p.name: p.suggest(trial, f"{method}.{p.name}") for p in self.spaces[method].params}

    def decode(self, params: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        method = params["method"]
        prefix = f"{method}."
        return method, {k[len(prefix) :]: v for k, v in params.items() if k.startswith(prefix)}

    def validate_point(self, point: Mapping[str, Any], where: str = "enqueue") -> dict[str, Any]:
        """``{method = "for", rounds = 1, ...}`` → the trial's parameters ``{"method": "for", "for.rounds": 1}``."""
        rest = dict(point)
        method = rest.pop("method", None)
        if method not in self.spaces:
            raise ConfigError(f"`{where}` entry {dict(point)!r} needs `method` = one of {list(self.spaces)}.")
        checked = self.spaces[method].validate_point(rest, where) if self.spaces[method].params else {}
        if not self.spaces[method].params and rest:
            raise ConfigError(f"`{where}` entry {dict(point)!r}: method `{method}` has no searched options.")
        return {"method": method, **{f"{method}.{k}": v for k, v in checked.items()}}


def parse_method_choice(methods: list[str], search: Mapping[str, Any]) -> MethodChoice:
    """``[search.<method>.<option>]`` tables for a study over several methods (a method may have none)."""
    if len(set(methods)) != len(methods) or len(methods) < 2:
        raise ConfigError(f"`method` as a list needs at least two distinct methods, got {methods!r}.")
    for m in methods:
        get_method(m)
    unknown = sorted(set(search) - set(methods))
    if unknown:
        raise ConfigError(
            f"`[search.{unknown[0]}]`: with several methods, [search] has one table per method "
            f"({', '.join(methods)}), e.g. [search.{methods[0]}.<option>]."
        )
    return MethodChoice({m: parse_search_space(m, search[m]) if search.get(m) else SearchSpace(()) for m in methods})
