"""One registry of inference methods and baselines, shared by `ask`, `compare` and `sweep`.

A method is a name, the roles it has (each can get its own LM), the options it accepts with their
defaults, and a factory that builds a fresh ``dspy.Module`` for a signature. Everything above this
file (CLI, comparisons, sweeps) builds programs only through :func:`build_method`, so an option
means the same thing everywhere and bad names fail early with a clear message.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import dspy

from dspy_for.errors import ConfigError
from dspy_for.lm import resolve_lm
from dspy_for.modules import Cascade, FORPrompting, ProRefine, SelfConsistency

__all__ = [
    "MethodSpec",
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
class MethodSpec:
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

    def split_options(self, options: Mapping[str, Any]) -> tuple[dict[str, Any], float | None]:
        """(the method's own options, the LM ``temperature`` if one is given for a method without that option)."""
        own = dict(options)
        if "temperature" in self.defaults:
            return own, None
        temperature = own.pop("temperature", None)
        return own, None if temperature is None else float(temperature)

    def validate_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """Names and values: unknown names, and values the method refuses (checked by building it without
        LMs, which calls nothing), fail here — before any LM call — with the option named."""
        own, temperature = self.split_options(options)
        unknown = sorted(set(own) - set(self.defaults))
        if unknown:
            allowed = ", ".join(sorted([*self.defaults, *(o for o in LM_OPTIONS if o not in self.defaults)]))
            raise ConfigError(f"Unknown option `{unknown[0]}` for method `{self.name}`. Options it accepts: {allowed}.")
        if temperature is not None and temperature < 0:
            raise ConfigError(f"`temperature` must be >= 0, got {temperature!r}.")
        merged = {**self.defaults, **own}
        try:
            self.factory("question -> answer", dict.fromkeys(self.roles), **merged)
        except ConfigError as exc:
            raise ConfigError(f"Method `{self.name}`: {exc}") from None
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"Method `{self.name}` refuses options {own}: {exc}") from None
        return merged

    def validate_roles(self, roles: Mapping[str, Any]) -> None:
        unknown = sorted(set(roles) - set(self.roles))
        if unknown:
            raise ConfigError(
                f"Method `{self.name}` has no role `{unknown[0]}`. Its roles are: {', '.join(self.roles)}. "
                "Pass `--lm SPEC` for all roles or `--role-lm ROLE=SPEC` with one of those roles."
            )


_REGISTRY: dict[str, MethodSpec] = {}


def register_method(spec: MethodSpec, *, replace: bool = False) -> MethodSpec:
    """Add a method to the registry (``replace=True`` to override one, e.g. in user code)."""
    if spec.name in _REGISTRY and not replace:
        raise ConfigError(f"Method `{spec.name}` is already registered; pass `replace=True` to override it.")
    _REGISTRY[spec.name] = spec
    return spec


def get_method(name: str) -> MethodSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(f"Unknown method `{name}`. Choose one of: {', '.join(sorted(_REGISTRY))}.") from None


def list_methods() -> list[MethodSpec]:
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def build_method(
    name: str,
    signature: str | type[dspy.Signature] = "question -> answer",
    *,
    lm: Any = None,
    role_lms: Mapping[str, Any] | None = None,
    **options: Any,
) -> dspy.Module:
    """Build a fresh program for method ``name``.

    ``lm`` (a litellm spec string, ``dspy.BaseLM`` or None) is the default for every role;
    ``role_lms`` overrides it per role. Strings go through :func:`dspy_for.make_lm`.
    """
    spec = get_method(name)
    role_lms = dict(role_lms or {})
    spec.validate_roles(role_lms)
    opts = spec.validate_options(options)
    default = resolve_lm(lm)
    lms = {r: resolve_lm(role_lms[r]) if r in role_lms else default for r in spec.roles}
    return spec.factory(signature, lms, **opts)


def _with_lm(module: dspy.Module, lm: Any) -> dspy.Module:
    if lm is not None:
        module.set_lm(lm)
    return module


register_method(
    MethodSpec(
        name="single",
        description="Single prompt: one dspy.Predict call, no reasoning field.",
        factory=lambda sig, lms: _with_lm(dspy.Predict(sig), lms["task"]),
    )
)
register_method(
    MethodSpec(
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


def module_method(
    name: str,
    module: type[dspy.Module],
    description: str,
    *,
    roles: Mapping[str, str | None],
    fixed: Mapping[str, Any] | None = None,
    python_only: tuple[str, ...] = (),
    uses_labels: Callable[[Mapping[str, Any]], bool] = _never,
    revision: int = 0,
) -> MethodSpec:
    """A registry entry for a ``dspy.Module`` whose options are its constructor's (:func:`module_options`).

    ``roles`` maps each role to the constructor parameter that takes its LM (None: the module's own LM, set with
    ``set_lm``); ``fixed`` options are always passed and are not options of this entry (e.g. ``defender_sc`` is
    ``SelfConsistency`` with ``prompt="defender"``); ``python_only`` parameters (e.g. a metric callable) cannot
    come from a config.
    """
    fixed = dict(fixed or {})
    lm_params = {param for param in roles.values() if param}
    defaults = module_options(module, exclude={*lm_params, *fixed, *python_only})

    def factory(sig: Any, lms: Mapping[str, Any], **options: Any) -> dspy.Module:
        lm_kwargs = {param: lms[r] for r, param in roles.items() if param}
        built = module(sig, **fixed, **options, **lm_kwargs)
        for r, param in roles.items():
            if param is None:
                _with_lm(built, lms[r])
        return built

    return MethodSpec(
        name=name,
        description=description,
        factory=factory,
        roles=tuple(roles),
        defaults=defaults,
        uses_labels=uses_labels,
        revision=revision,
        module=module,
        fixed=fixed,
        python_only=python_only,
    )


register_method(
    module_method(
        "for",
        FORPrompting,
        "FOR-Prompting: Defender answers, Debater asks questions only, optional Host synthesizes.",
        roles={"defender": "defender_lm", "debater": "debater_lm", "host": "host_lm"},
    )
)
register_method(
    module_method(
        "self_consistency",
        SelfConsistency,
        "Self-consistency: k sampled CoT answers (temperature > 0), majority vote; stop early on agreement.",
        roles={"task": None},
        fixed={"prompt": "cot"},
        revision=1,  # 1: an unreadable sample is dropped from the vote (it used to make the item unparsed)
    )
)
register_method(
    module_method(
        "defender_sc",
        SelfConsistency,
        "Self-consistency over FOR's step-by-step Defender prompt (same stop options as self_consistency).",
        roles={"task": None},
        fixed={"prompt": "defender"},
    )
)
register_method(
    module_method(
        "cascade",
        Cascade,
        "Cascade: Defender samples, more samples on disagreement, FOR's debate with its Host only if it remains.",
        roles={"defender": "defender_lm", "debater": "debater_lm", "host": "host_lm"},
    )
)
register_method(
    module_method(
        "prorefine",
        ProRefine,
        "ProRefine: i*k tokens per step, feedback critique, optimizer rewrites the prompt; verifier.",
        roles={"task": "task_lm", "feedback": "feedback_lm", "optimizer": "optimizer_lm", "verifier": "verifier_lm"},
        python_only=("metric",),  # the oracle verifier's metric: the dataset's, given by the run with each gold
        uses_labels=lambda options: options.get("verifier") == "oracle",
    )
)


def _answer_parses_reward(signature: Any) -> Callable[[Mapping[str, Any], dspy.Prediction], float]:
    """Label-free reward for dspy.Refine: 1.0 when every output field of the task's ``signature`` is present
    and non-empty (the reasoning ChainOfThought adds does not count), else 0.0."""
    outputs = list(dspy.ensure_signature(signature).output_fields)

    def answer_parses(args: Mapping[str, Any], pred: dspy.Prediction) -> float:
        return float(all(str(pred.get(name, "")).strip() not in ("", "None") for name in outputs))

    return answer_parses


def _refine_factory(sig: Any, lms: Mapping[str, Any], *, N: int, threshold: float) -> dspy.Module:
    if isinstance(N, bool) or not isinstance(N, int) or N < 1:
        raise ConfigError(f"`N` must be a positive integer (attempts), got {N!r}.")
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise ConfigError(f"`threshold` must be a number, got {threshold!r}.")
    reward = _answer_parses_reward(sig)
    return _with_lm(dspy.Refine(dspy.ChainOfThought(sig), N=N, reward_fn=reward, threshold=threshold), lms["task"])


register_method(
    MethodSpec(
        name="refine",
        description="dspy.Refine over CoT: up to N attempts with feedback until a label-free reward is met.",
        factory=_refine_factory,
        defaults={"N": 3, "threshold": 1.0},
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
        roles={"defender": "defender_lm", "debater": "debater_lm", "host": "host_lm"},
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
        roles={"task": "task_lm", "feedback": "feedback_lm", "optimizer": "optimizer_lm", "verifier": "verifier_lm"},
        # the official prompts (deepakpandita57/ProRefine_public, prorefine.py); its schedule: tokens_per_step = 10,
        # total_tokens_to_generate = 250, i.e. step i capped at 10·i for 250 // 10 = 25 steps; no rewrite guard
        fixed={"prompts": "paper", "k": 10, "n": 25, "guard": False},
        python_only=("metric",),
        uses_labels=lambda options: options.get("verifier") == "oracle",
    )
)
