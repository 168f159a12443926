"""The registered methods: the baselines, the project's methods and the two papers' as their authors ran them. What
every method built on one module shares — its roles, Python-only parameters, gold-label use, how a budget sizes it and
how its trajectory reads — is declared once, for the module (:data:`_BY_MODULE`), and read by :func:`module_method`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dspy

from dspy_for.experiments.methods.entry import MethodEntry, Preset, Sized, module_options, register_method, with_lm
from dspy_for.modules import Cascade, FORPrompting, ProRefine, SelfConsistency
from dspy_for.modules.for_view import FOR_VIEW
from dspy_for.modules.prorefine_view import PROREFINE_VIEW
from dspy_for.modules.refine import refine_cot

__all__ = ["module_method"]


register_method(
    MethodEntry(
        name="single",
        description="Single prompt: one dspy.Predict call, no reasoning field.",
        factory=lambda sig, lms: with_lm(dspy.Predict(sig), lms["task"]),
    )
)
register_method(
    MethodEntry(
        name="cot",
        description="Chain of thought: dspy.ChainOfThought (reasoning, then the outputs).",
        factory=lambda sig, lms: with_lm(dspy.ChainOfThought(sig), lms["task"]),
    )
)


_FOR_ROLES = {"defender": "defender_lm", "debater": "debater_lm", "host": "host_lm"}


def _for_calls(o: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """FOR: A0, then per round the Debater (asked twice when the guard re-asks) and a revision when it asked
    something; a stop rule or a token budget may end the debate after its first round (a budget: before it)."""
    n, asks = o["rounds"], 2 if o["guard"] and o["debater_mode"] == "questions" else 1
    least = 0 if o["token_budget"] is not None else n if o["stop"] == "fixed" else min(n, 1)
    return {"defender": (1, 1 + n), "debater": (least, asks * n), "host": (int(o["host"]), int(o["host"]))}


def _sc_calls(o: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """Self-consistency: ``k`` samples; a stop rule draws at least one batch (``agreement``: a majority of k)."""
    k, batch = o["k"], o["batch"]
    least = {"fixed": k, "agreement": -(-(k // 2 + 1) // batch) * batch}.get(o["stop"], batch)
    return {"task": (min(k, least), k)}


def _cascade_calls(o: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """Cascade: ``first_samples`` Defender samples, up to ``max_samples``, then FOR's debate with its Host."""
    n = o["rounds"] if o["debate"] else 0
    return {
        "defender": (o["first_samples"], o["max_samples"] + n),
        "debater": (0, 2 * n),
        "host": (0, 1 if o["debate"] else 0),
    }


def _prorefine_calls(o: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """ProRefine: a verifier that accepts the first answer ends it; else up to ``n`` capped steps (task, feedback,
    optimizer), ending early at end-of-sequence, then the final answer."""
    n, gated = o["n"], o["verifier"] != "none"
    return {
        "task": (1, n + 1 + int(gated)),
        "feedback": (0 if gated else 1, n),
        "optimizer": (0 if gated else 1, n),
        "verifier": (1, 1) if o["verifier"] == "llm" else (0, 0),
    }


#: what every method built on a module shares, declared once for the module (a :func:`module_method` may still set
#: any of it): the role of each LM parameter (None: the module's own LM, set with ``set_lm``), parameters only
#: Python code can set, whether it reads gold labels, how a budget sizes it and how its trajectory reads
_BY_MODULE: dict[type[dspy.Module], dict[str, Any]] = {
    FORPrompting: {"roles": _FOR_ROLES, "budget_reference": True, "view": FOR_VIEW, "calls": _for_calls},
    ProRefine: {
        "roles": {"task": "task_lm", "feedback": "feedback_lm", "optimizer": "optimizer_lm", "verifier": "verifier_lm"},
        "python_only": ("metric",),  # the oracle verifier's metric: the dataset's, given by the run with each gold
        "uses_labels": lambda options: options.get("verifier") == "oracle",
        "view": PROREFINE_VIEW,
        "calls": _prorefine_calls,
    },
    # a vote needs two samples
    SelfConsistency: {"roles": {"task": None}, "sized": Sized("k", least=2), "calls": _sc_calls},
    Cascade: {"roles": _FOR_ROLES, "calls": _cascade_calls},
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
                with_lm(built, lms[r])
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
        factory=lambda sig, lms, **options: with_lm(refine_cot(sig, **options), lms["task"]),
        defaults={"N": 3, "threshold": 1.0},
        sized=Sized("N"),  # a cap: it stops at the first attempt whose answer parses
        calls=lambda o: {"task": (1, o["N"])},
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
