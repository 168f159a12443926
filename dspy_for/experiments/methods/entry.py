"""A registry entry (:class:`MethodEntry`) and the registry: one entry per method — its roles (each can get its own
LM), its options with their defaults, a factory that builds a fresh ``dspy.Module`` — and all the harness knows of it:
how a budget sizes it (:class:`Sized`, the one sizer :func:`budget_calls`), the settings ``advise`` tries
(:class:`Preset`), how its trajectory reads (a :class:`~dspy_for.modules.trajectory.TrajectoryView`: span names, what
``ask`` shows, diagnostics). ``ask``, ``compare``, ``sweep`` and ``advise`` build programs only through an entry, so an
option means the same everywhere and a bad name fails early.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import dspy

from dspy_for.errors import ConfigError
from dspy_for.lm import resolve_lm
from dspy_for.modules.trajectory import TrajectoryView

__all__ = [
    "BUDGET_UNIT",
    "MethodEntry",
    "Preset",
    "Sized",
    "budget_calls",
    "build_method",
    "get_method",
    "list_methods",
    "module_options",
    "register_method",
]

#: factory(signature, lms, **options) -> dspy.Module; ``lms``: each role's LM (None: ``dspy.configure``'s)
Factory = Callable[..., dspy.Module]
#: LM options a method without an option of that name takes as a method option (a sweep may search it)
LM_OPTIONS = ("temperature",)
#: what a budget is counted in: each call of a sized method (a sample, an attempt) costs about one call of this method
BUDGET_UNIT = "cot"


def _never(options: Mapping[str, Any]) -> bool:
    return False


@dataclass(frozen=True)
class Sized:
    """How a budget of tokens per item sizes a method: ``option`` counts its calls, each costing about one CoT call
    (``k`` samples, ``N`` attempts), and it takes at least ``least`` of them."""

    option: str
    least: int = 1


def budget_calls(budget: float, per_call: float) -> int:
    """The one budget sizer: how many calls of ``per_call`` tokens (:data:`BUDGET_UNIT`'s measured tokens per item) a
    ``budget`` of tokens per item buys, to the nearest whole call, a half down (7.73 → 8, 7.5 → 7; within 1e-9 of a
    half counts as one): a sized method spends its budget to within half a call, and a tie never goes over it.
    Compare's ``match_budget`` (the reference method's tokens per item) and advise's budgets both size with it."""
    return math.ceil(budget / per_call - 0.5 - 1e-9)


@dataclass(frozen=True)
class Preset:
    """One setting ``advise`` measures a method at: its label, options and a note for the table."""

    label: str
    options: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True)
class MethodEntry:
    """One registered method (see the module docstring)."""

    name: str
    description: str
    factory: Factory
    roles: tuple[str, ...] = ("task",)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    #: whether the method, with these options, reads each item's gold label (it is then given ``gold=``,
    #: and its results are marked ``label_using``: an upper bound, not a deployable method)
    uses_labels: Callable[[Mapping[str, Any]], bool] = _never
    #: bumped when the method's code changes what it answers for the same options and prompts; part of the
    #: result key when non-zero, so per-item results stored by the old code are not reused
    revision: int = 0
    #: the module a :func:`module_method` builds (its constructor declares the options), options it always
    #: passes, and constructor parameters that only Python code can set
    module: type[dspy.Module] | None = None
    fixed: Mapping[str, Any] = field(default_factory=dict)
    python_only: tuple[str, ...] = ()
    #: how a budget sizes it (None: its compute is its own, whatever the budget)
    sized: Sized | None = None
    #: compare's ``match_budget`` gives the sized methods the measured tokens per item of the run's first method
    #: with this set (FOR-Prompting's: the budget the FOR paper's reviewers asked the baselines to match)
    budget_reference: bool = False
    #: the settings ``advise`` measures it at (none given: one, at its defaults, labelled with its name)
    presets: tuple[Preset, ...] = ()
    #: how its trajectory reads (span names, what ``ask`` shows, diagnostics); None: a plain prediction
    view: TrajectoryView | None = None
    #: its LM calls per item from its options (over its defaults and fixed options), by role: (fewest, most) of its
    #: own steps (rounds, samples, attempts); what a dry run estimates a method without stored records from. None:
    #: one call of each role
    calls: Callable[[Mapping[str, Any]], Mapping[str, tuple[int, int]]] | None = None

    def split_options(self, options: Mapping[str, Any]) -> tuple[dict[str, Any], float | None]:
        """(the method's own options, the LM ``temperature`` if one is given for a method without that option)."""
        own = dict(options)
        if "temperature" in self.defaults:
            return own, None
        temperature = own.pop("temperature", None)
        return own, None if temperature is None else float(temperature)

    def with_defaults(self, own: Mapping[str, Any]) -> dict[str, Any]:
        """The method's own options (no LM ``temperature``) over its defaults; an unknown name fails, naming it."""
        unknown = sorted(set(own) - set(self.defaults))
        if unknown:
            allowed = ", ".join(sorted([*self.defaults, *(o for o in LM_OPTIONS if o not in self.defaults)]))
            raise ConfigError(f"Unknown option `{unknown[0]}` for method `{self.name}`. Options it accepts: {allowed}.")
        return {**self.defaults, **own}

    def build(self, signature: Any, lms: Mapping[str, Any], options: Mapping[str, Any]) -> dspy.Module:
        """A fresh program from the factory (``options``: :meth:`with_defaults`'s); a value the method refuses fails
        as a :class:`~dspy_for.errors.ConfigError` naming the method."""
        try:
            return self.factory(signature, lms, **options)
        except ConfigError as exc:
            raise ConfigError(f"Method `{self.name}`: {exc}") from None
        except (TypeError, ValueError) as exc:
            own = {k: v for k, v in options.items() if k not in self.defaults or self.defaults[k] != v}
            raise ConfigError(f"Method `{self.name}` refuses options {own}: {exc}") from None

    def calls_per_item(self, options: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
        """Its LM calls per item with ``options``, by role: (fewest, most), from :attr:`calls`."""
        own, _ = self.split_options(options)
        if self.calls is None:
            return {r: (1, 1) for r in self.roles}
        return {r: (int(lo), int(hi)) for r, (lo, hi) in self.calls({**self.with_defaults(own), **self.fixed}).items()}

    def validate_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """Names and values: unknown names, and values the method refuses (checked by building it without
        LMs, which calls nothing), fail here — before any LM call — with the option named. Returns the options
        over the defaults (an LM ``temperature`` left out)."""
        own, temperature = self.split_options(options)
        merged = self.with_defaults(own)
        if temperature is not None and temperature < 0:
            raise ConfigError(f"`temperature` must be >= 0, got {temperature!r}.")
        self.build("question -> answer", dict.fromkeys(self.roles), merged)
        return merged

    def validate_roles(self, roles: Mapping[str, Any]) -> None:
        unknown = sorted(set(roles) - set(self.roles))
        if unknown:
            raise ConfigError(
                f"Method `{self.name}` has no role `{unknown[0]}`. Its roles are: {', '.join(self.roles)}. "
                "Pass `--lm SPEC` for all roles or `--role-lm ROLE=SPEC` with one of those roles."
            )

    def sized_to(self, options: Mapping[str, Any], budget: float, per_call: float) -> dict[str, Any] | None:
        """``options`` with the sized option set to :func:`budget_calls` ``(budget, per_call)``; None when that is
        fewer calls than the method takes (``Sized.least``). ``options`` unchanged for a method no budget sizes."""
        if self.sized is None:
            return dict(options)
        n = budget_calls(budget, per_call)
        return None if n < self.sized.least else {**options, self.sized.option: n}


_REGISTRY: dict[str, MethodEntry] = {}


def register_method(entry: MethodEntry, *, replace: bool = False) -> MethodEntry:
    """Add a method to the registry (``replace=True`` to override one, e.g. in user code)."""
    if entry.name in _REGISTRY and not replace:
        raise ConfigError(f"Method `{entry.name}` is already registered; pass `replace=True` to override it.")
    _REGISTRY[entry.name] = entry
    return entry


def get_method(name: str) -> MethodEntry:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(f"Unknown method `{name}`. Choose one of: {', '.join(sorted(_REGISTRY))}.") from None


def list_methods() -> list[MethodEntry]:
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def build_method(
    name: str,
    signature: str | type[dspy.Signature] = "question -> answer",
    *,
    lm: Any = None,
    role_lms: Mapping[str, Any] | None = None,
    **options: Any,
) -> dspy.Module:
    """Build a fresh program for method ``name`` (its options and roles checked as it is built).

    ``lm`` (a litellm spec string, ``dspy.BaseLM`` or None) is the default for every role;
    ``role_lms`` overrides it per role. Strings go through :func:`dspy_for.make_lm`.
    """
    entry = get_method(name)
    role_lms = dict(role_lms or {})
    entry.validate_roles(role_lms)
    own, _ = entry.split_options(options)
    merged = entry.with_defaults(own)
    default = resolve_lm(lm)
    lms = {r: resolve_lm(role_lms[r]) if r in role_lms else default for r in entry.roles}
    return entry.build(signature, lms, merged)


def with_lm(module: dspy.Module, lm: Any) -> dspy.Module:
    """``module`` with ``lm`` set as its LM (None: left to ``dspy.configure``)."""
    if lm is not None:
        module.set_lm(lm)
    return module


def module_options(module: type[dspy.Module], *, exclude: Iterable[str] = ()) -> dict[str, Any]:
    """The options a module's constructor declares, with their defaults: every parameter after the signature
    except ``exclude`` (its LM parameters, fixed options, Python-only ones). The one declaration of a method's
    options — config keys, validation, the sweep's search space and the docs all read it from here."""
    params = list(inspect.signature(module.__init__).parameters.values())[2:]  # self, signature
    skip = set(exclude)
    return {
        p.name: p.default
        for p in params
        if p.name not in skip and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.default is not p.empty
    }
