"""One registry of inference methods and baselines, shared by `ask`, `compare` and `sweep`.

A method is a name, the roles it has (each can get its own LM), the options it accepts with their
defaults, and a factory that builds a fresh ``dspy.Module`` for a signature. Everything above this
file (CLI, comparisons, sweeps) builds programs only through :func:`build_method`, so an option
means the same thing everywhere and bad names fail early with a clear message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import dspy

from dspy_for.errors import ConfigError

__all__ = [
    "MethodSpec",
    "build_method",
    "get_method",
    "list_methods",
    "register_method",
]

#: factory(signature, lms, **options) -> dspy.Module; ``lms`` maps each role to an LM or None
#: (None: the LM configured with ``dspy.configure``/``dspy.context``).
Factory = Callable[..., dspy.Module]


@dataclass(frozen=True)
class MethodSpec:
    name: str
    description: str
    factory: Factory
    roles: tuple[str, ...] = ("task",)
    defaults: Mapping[str, Any] = field(default_factory=dict)

    def validate_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(options) - set(self.defaults))
        if unknown:
            allowed = ", ".join(sorted(self.defaults)) or "(none)"
            raise ConfigError(
                f"Unknown option `{unknown[0]}` for method `{self.name}`. Options it accepts: {allowed}."
            )
        return {**self.defaults, **options}

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
        raise ConfigError(
            f"Unknown method `{name}`. Choose one of: {', '.join(sorted(_REGISTRY))}."
        ) from None


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
    from dspy_for.lm import resolve_lm

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


def _for_factory(sig: Any, lms: Mapping[str, Any], **options: Any) -> dspy.Module:
    from dspy_for.modules import FORPrompting

    return FORPrompting(sig, defender_lm=lms["defender"], debater_lm=lms["debater"], host_lm=lms["host"], **options)


register_method(
    MethodSpec(
        name="for",
        description="FOR-Prompting: Defender answers, Debater asks questions only, optional Host synthesizes.",
        factory=_for_factory,
        roles=("defender", "debater", "host"),
        defaults={"rounds": 1, "host": True, "stop": "fixed", "patience": 1, "token_budget": None,
                  "debater_mode": "questions", "guard": True},
    )
)


def _sc_factory(sig: Any, lms: Mapping[str, Any], **options: Any) -> dspy.Module:
    from dspy_for.modules.self_consistency import SelfConsistency

    return _with_lm(SelfConsistency(sig, **options), lms["task"])


def _answer_parses(args: Mapping[str, Any], pred: dspy.Prediction) -> float:
    """Label-free reward for dspy.Refine: 1.0 when the first output field is present and non-empty."""
    value = next(iter(pred.values()), None) if hasattr(pred, "values") else None
    return float(value is not None and str(value).strip() not in ("", "None"))


def _refine_factory(sig: Any, lms: Mapping[str, Any], *, N: int, threshold: float) -> dspy.Module:
    return _with_lm(dspy.Refine(dspy.ChainOfThought(sig), N=N, reward_fn=_answer_parses, threshold=threshold),
                    lms["task"])


register_method(
    MethodSpec(
        name="self_consistency",
        description="Self-consistency: k sampled CoT answers (temperature > 0), majority vote.",
        factory=_sc_factory,
        defaults={"k": 5, "temperature": 0.7},
    )
)
register_method(
    MethodSpec(
        name="refine",
        description="dspy.Refine over CoT: up to N attempts with feedback until a label-free reward is met.",
        factory=_refine_factory,
        defaults={"N": 3, "threshold": 1.0},
    )
)


def _prorefine_factory(sig: Any, lms: Mapping[str, Any], **options: Any) -> dspy.Module:
    from dspy_for.modules import ProRefine

    return ProRefine(sig, task_lm=lms["task"], feedback_lm=lms["feedback"], optimizer_lm=lms["optimizer"],
                     verifier_lm=lms["verifier"], **options)


register_method(
    MethodSpec(
        name="prorefine",
        description="ProRefine: i*k tokens per step, feedback critique, optimizer rewrites the prompt; verifier.",
        factory=_prorefine_factory,
        roles=("task", "feedback", "optimizer", "verifier"),
        defaults={"k": 10, "n": 25, "verifier": "none", "history": "stateless", "task_module": "cot"},
    )
)
