"""The registry of methods: one :class:`MethodEntry` each — its roles (each can get its own LM), its options with their
defaults, a factory that builds a fresh ``dspy.Module`` — and all the harness knows of it: how a budget sizes it
(:class:`Sized`, :func:`budget_calls`), the settings ``advise`` tries (:class:`Preset`), how its trajectory reads (a
:class:`~dspy_for.modules.trajectory.TrajectoryView`: span names, what ``ask`` shows, diagnostics). What methods on one
module share is declared once, for the module (:data:`_BY_MODULE`). ``ask``, ``compare``, ``sweep`` and ``advise``
build programs only through an entry, so an option means the same everywhere and a bad name fails early.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import dspy

from dspy_for.errors import ConfigError
from dspy_for.lm import resolve_lm
from dspy_for.modules import Cascade, FORPrompting, ProRefine, SelfConsistency
from dspy_for.modules.for_view import FOR_VIEW
from dspy_for.modules.prorefine_view import PROREFINE_VIEW
from dspy_for.modules.refine import refine_cot
from dspy_for.modules.trajectory import TrajectoryView

__all__ = [
    "MethodEntry",
    "Preset",
    "Sized",
    "budget_calls",
    "build_method",
    "get_method",
    "list_methods",
    "module_method",
    "module_options",
    "register_method",
]

#: factory(signature, lms, **options) -> dspy.Module; ``lms`` maps each role to an LM or None
#: (None: the LM configured with ``dspy.configure``/``dspy.context``).
Factory = Callable[..., dspy.Module]
#: LM options a method without an option of that name takes as a method option (a sweep may search it)
LM_OPTIONS = ("temperature",)


def _never(options: Mapping[str, Any]) -> bool:
    return False


@dataclass(frozen=True)
class Sized:
    """How a budget of tokens per item sizes a method: ``option`` counts its calls, each costing about one CoT call
    (``k`` samples, ``N`` attempts), and it takes at least ``least`` of them."""

    option: str
    least: int = 1


def budget_calls(budget: float, per_call: float) -> int:
    """The one budget sizer: how many calls of ``per_call`` tokens (CoT's measured tokens per item) a ``budget`` of
    tokens per item buys, rounded to the nearest whole call, a half down (7.73 → 8, 7.5 → 7, 7.49 → 7; a ratio within
    1e-9 of a half counts as one): a sized method spends its budget to within half a CoT call, and a tie never goes
    over it. Compare's ``match_budget`` (the budget: the reference method's measured tokens per item) and advise's
    ``--budget`` / ``--budget-usd`` both size with it."""
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


def __getattr__(name: str) -> Any:
    if name == "MethodSpec":  # its name until the run spec, the sweep spec and LM spec strings took the word
        warnings.warn("MethodSpec is deprecated: use MethodEntry.", DeprecationWarning, stacklevel=2)
        return MethodEntry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


def _with_lm(module: dspy.Module, lm: Any) -> dspy.Module:
    if lm is not None:
        module.set_lm(lm)
    return module


register_method(
    MethodEntry(
        name="single",
        description="Single prompt: one dspy.Predict call, no reasoning field.",
        factory=lambda sig, lms: _with_lm(dspy.Predict(sig), lms["task"]),
    )
)
register_method(
    MethodEntry(
        name="cot",
        description="Chain of thought: dspy.ChainOfThought (reasoning, then the outputs).",
        factory=lambda sig, lms: _with_lm(dspy.ChainOfThought(sig), lms["task"]),
    )
)


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


_FOR_ROLES = {"defender": "defender_lm", "debater": "debater_lm", "host": "host_lm"}


#: what every method built on a module shares, declared once for the module (a :func:`module_method` may still set
#: any of it): the role of each LM parameter (None: the module's own LM, set with ``set_lm``), parameters only
#: Python code can set, whether it reads gold labels, how a budget sizes it and how its trajectory reads
_BY_MODULE: dict[type[dspy.Module], dict[str, Any]] = {
    FORPrompting: {"roles": _FOR_ROLES, "budget_reference": True, "view": FOR_VIEW},
    ProRefine: {
        "roles": {"task": "task_lm", "feedback": "feedback_lm", "optimizer": "optimizer_lm", "verifier": "verifier_lm"},
        "python_only": ("metric",),  # the oracle verifier's metric: the dataset's, given by the run with each gold
        "uses_labels": lambda options: options.get("verifier") == "oracle",
        "view": PROREFINE_VIEW,
    },
    SelfConsistency: {"roles": {"task": None}, "sized": Sized("k", least=2)},  # a vote needs two samples
    Cascade: {"roles": _FOR_ROLES},
}


def module_method(name: str, module: type[dspy.Module], description: str, **declared: Any) -> MethodEntry:
    """A registry entry for a ``dspy.Module`` whose options are its constructor's (:func:`module_options`).

    What :data:`_BY_MODULE` declares for ``module``, then ``declared`` (any :class:`MethodEntry` field, and
    ``roles``: each role → the constructor parameter that takes its LM, None for the module's own LM set with
    ``set_lm``). ``fixed`` options are always passed and are not options of this entry (e.g. ``defender_sc`` is
    ``SelfConsistency`` with ``prompt="defender"``); ``python_only`` parameters (e.g. a metric callable) cannot
    come from a config.
    """
    settings = {**_BY_MODULE.get(module, {}), **declared}
    roles: Mapping[str, str | None] = settings.pop("roles", {"task": None})
    fixed = dict(settings.pop("fixed", {}))
    lm_params = {param for param in roles.values() if param}
    defaults = module_options(module, exclude={*lm_params, *fixed, *settings.get("python_only", ())})

    def factory(sig: Any, lms: Mapping[str, Any], **options: Any) -> dspy.Module:
        lm_kwargs = {param: lms[r] for r, param in roles.items() if param}
        built = module(sig, **fixed, **options, **lm_kwargs)
        for r, param in roles.items():
            if param is None:
                _with_lm(built, lms[r])
        return built

    return MethodEntry(
        name=name,
        description=description,
        factory=factory,
        roles=tuple(roles),
        defaults=defaults,
        module=module,
        fixed=fixed,
        **settings,
    )


register_method(
    module_method(
        "for",
        FORPrompting,
        "FOR-Prompting: Defender answers, Debater asks questions only, optional Host synthesizes.",
        presets=(Preset("for", {"rounds": 1, "host": True}, "FOR N = 1 + Host"),),
    )
)
register_method(
    module_method(
        "self_consistency",
        SelfConsistency,
        "Self-consistency: k sampled CoT answers (temperature > 0), majority vote; stop early on agreement.",
        fixed={"prompt": "cot"},
        revision=1,  # 1: an unreadable sample is dropped from the vote (it used to make the item unparsed)
        presets=(
            Preset("self_consistency", {}, "k samples, majority vote"),
            Preset(
                "self_consistency_agreement",
                {"stop": "agreement"},
                "stops sampling once the vote is settled; k the cap",
            ),
        ),
    )
)
register_method(
    module_method(
        "defender_sc",
        SelfConsistency,
        "Self-consistency over FOR's step-by-step Defender prompt (same stop options as self_consistency).",
        fixed={"prompt": "defender"},
        presets=(Preset("defender_sc", {"stop": "agreement"}, "Defender prompt, stop on agreement"),),
    )
)
register_method(
    module_method(
        "cascade",
        Cascade,
        "Cascade: Defender samples, more samples on disagreement, FOR's debate with its Host only if it remains.",
    )
)
register_method(
    module_method(
        "prorefine",
        ProRefine,
        "ProRefine: i*k tokens per step, feedback critique, optimizer rewrites the prompt; verifier.",
    )
)


register_method(
    MethodEntry(
        name="refine",
        description="dspy.Refine over CoT: up to N attempts with feedback until a label-free reward is met.",
        factory=lambda sig, lms, **options: _with_lm(refine_cot(sig, **options), lms["task"]),
        defaults={"N": 3, "threshold": 1.0},
        sized=Sized("N"),  # a cap: it stops at the first attempt whose answer parses
        presets=(Preset("refine", {}, "up to N attempts"),),
    )
)


# The two papers as their authors ran them: the same modules with the papers' own prompts and settings, so either
# can be measured beside the project's version (docs/for_prompting.md, docs/prorefine.md: what differs and why).
register_method(
    module_method(
        "for_paper",
        FORPrompting,
        "FOR-Prompting as in the paper (arXiv 2510.01674): Table 3 role prompts, every revision taken, no guard, "
        "N = 1 + Host.",
        # Table 3 (Appendix A.1) prompts verbatim; Algorithm 1 takes every revision A_r; a Debater that asks
        # questions only by prompt alone (no guard); one round with the Host, the paper's small-model GSM8K setting
        # (Section 5.2)
        fixed={
            "prompts": "paper",
            "keep_unless_error": False,
            "debater_mode": "questions",
            "guard": False,
            "rounds": 1,
            "host": True,
        },
    )
)
register_method(
    module_method(
        "prorefine_paper",
        ProRefine,
        "ProRefine as in the official code (arXiv 2506.05305): its feedback and optimizer prompts, 10 tokens per "
        "step up to 250, every rewrite taken; verifier.",
        # the official prompts (deepakpandita57/ProRefine_public, prorefine.py); its schedule: tokens_per_step = 10,
        # total_tokens_to_generate = 250, i.e. step i capped at 10·i for 250 // 10 = 25 steps; no rewrite guard
        fixed={"prompts": "paper", "k": 10, "n": 25, "guard": False},
    )
)
