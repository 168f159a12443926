"""The methods ``advise`` weighs: every registered method that reads no gold label, at the settings its registry entry
declares (:attr:`~dspy_for.experiments.methods.MethodEntry.presets`; none: one, at its defaults), its budgeted option
sized to the budget from CoT's measured cost, and the exact Python line that builds the one it picks.

A *candidate* is a label, a registry method and its options. A method a budget sizes (its entry's ``sized``: k
samples, N attempts) gets k = the *sizing budget* / CoT's tokens per item, to the nearest whole call (the one sizer,
:func:`~dspy_for.experiments.methods.budget_calls`), and is dropped when that is fewer calls than it takes. The sizing
budget (tokens per item) is the token budget; with ``budget_usd`` (USD per item) and CoT's measured USD per item it is
min(budget, budget_usd / CoT's $/item × CoT's tokens per item) — the tokens the dollars buy at CoT's rate (a free
CoT, e.g. a local model, leaves it at the token budget). Without either budget, k and N keep the registry's defaults.
A method whose options read the gold label (ProRefine's oracle verifier) is never a candidate: it cannot be deployed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dspy_for.errors import ConfigError
from dspy_for.experiments.core.spend import money
from dspy_for.experiments.methods import BUDGET_UNIT, Preset, budget_calls, get_method, list_methods
from dspy_for.experiments.spec import RunSpec

__all__ = ["Candidate", "python_line", "select_candidates", "sized_options", "sizing_budget", "spec_line"]


@dataclass(frozen=True)
class Candidate:
    """One setting of a registered method that ``advise`` measures."""

    label: str
    method: str  # the registry name
    options: Mapping[str, Any] = field(default_factory=dict)
    sized: str | None = None  # the option sized to the budget from CoT's tokens per item ("k" or "N")
    note: str = ""
    compile: dict[str, Any] | None = None  # its compile table (``--compile``: see :mod:`.volume`); None: not compiled
    student: str | None = None  # a compiled candidate: the label of the candidate it compiles


def _all_candidates() -> list[Candidate]:
    out = []
    for entry in list_methods():
        sized = entry.sized.option if entry.sized is not None else None
        for p in entry.presets or (Preset(entry.name),):
            if not entry.uses_labels({**entry.defaults, **p.options}):
                out.append(Candidate(p.label, entry.name, dict(p.options), sized, p.note))
    return sorted(out, key=lambda c: c.method != BUDGET_UNIT)  # measured first: its cost sizes k and N


def select_candidates(methods: str | Sequence[str] | None) -> list[Candidate]:
    """The candidates: all of them (``None``), or those ``methods`` names — a candidate label or a registry method
    name (``"for"`` is FOR N = 1 + Host), comma-separated or a list. An unknown or repeated name fails here."""
    every = _all_candidates()
    if methods is None:
        return every
    names = [m.strip() for m in methods.split(",")] if isinstance(methods, str) else [str(m).strip() for m in methods]
    names = [n for n in names if n]
    if not names:
        raise ConfigError(f"`--methods` is empty: give candidate names, e.g. `{','.join(c.label for c in every[:3])}`.")
    by_label = {c.label: c for c in every}
    chosen: list[Candidate] = []
    for name in names:
        c = by_label.get(name) or next((c for c in every if c.method == name), None)
        if c is None:
            try:
                spec = get_method(name)
            except ConfigError:
                raise ConfigError(
                    f"`--methods`: unknown method `{name}`. Choose from: {', '.join(by_label)} "
                    "(or any registered method name)."
                ) from None
            raise ConfigError(
                f"`--methods`: `{name}` reads each item's gold label with its default options ({spec.description}) "
                "and cannot be deployed: drop it."
            )
        if c in chosen:
            raise ConfigError(f"`--methods` names `{c.label}` twice: give each method once.")
        chosen.append(c)
    return chosen


def sizing_budget(
    budget: float | None, budget_usd: float | None, cot_tokens: float | None, cot_cost: float | None
) -> tuple[float | None, str]:
    """The sizing budget in tokens per item (module docstring) and the flag that sets it (``--budget`` or
    ``--budget-usd``); ``(None, "")`` when neither budget bounds it."""
    by_usd = None
    if budget_usd is not None and cot_tokens is not None and cot_cost is not None and cot_cost > 0:
        by_usd = budget_usd / cot_cost * cot_tokens
    if by_usd is not None and (budget is None or by_usd < budget):
        return by_usd, "--budget-usd"
    return (budget, "--budget") if budget is not None else (None, "")


def sized_options(
    c: Candidate,
    budget: float | None,
    cot_tokens: float | None,
    *,
    budget_usd: float | None = None,
    cot_cost: float | None = None,
) -> tuple[dict[str, Any] | None, str]:
    """``c``'s options with its sized option set from the sizing budget by the registry's one sizer (module
    docstring; ``(None, reason)`` when it leaves too few samples or attempts), and how it was sized (empty when
    nothing was)."""
    options = dict(c.options)
    if c.sized is None or (budget is None and budget_usd is None):
        return options, ""
    if cot_tokens is None or not cot_tokens > 0:
        return None, "not sized: CoT's cost could not be measured on the pilot (every item failed)"
    tokens, flag = sizing_budget(budget, budget_usd, cot_tokens, cot_cost)
    if tokens is None:  # only --budget-usd, and CoT costs nothing (or has no price): dollars do not bound it
        cot = "costs $0/item" if cot_cost is not None else "has no $/item (an LM without a price)"
        return options, f"not sized: CoT {cot}, so `--budget-usd` leaves {c.sized} at its default"
    entry = get_method(c.method)
    n = budget_calls(tokens, cot_tokens)
    if flag == "--budget-usd" and budget_usd is not None and cot_cost is not None:
        source = f"{money(budget_usd, as_given=True)} / CoT's {money(cot_cost, significant=3)} per item on the pilot"
        how = f"{c.sized} = {source} → {n} (--budget-usd: {tokens:,.0f} tokens/item at CoT's rate)"
    else:
        how = f"{c.sized} = {tokens:,.0f} / {cot_tokens:,.0f} → {n} (budget / CoT's tokens per item on the pilot)"
    sized = entry.sized_to(options, tokens, cot_tokens)
    if sized is None:
        return None, f"over budget: {how}; it needs {c.sized} ≥ {entry.sized.least if entry.sized else 1}"
    return sized, how


def _lm_text(lm: Any, options: Mapping[str, Any]) -> str:
    if not isinstance(lm, str):
        return "lm"  # a user's LM object: the name the caller gave it
    args = "".join(f", {k}={_py(v)}" for k, v in options.items())
    return f"dspy_for.make_lm({_py(lm)}{args})"


def _py(value: Any) -> str:
    """A plain value as Python source in the house style (double-quoted strings; True / False / None)."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_py(k)}: {_py(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_py(v) for v in value) + "]"
    return repr(value)


def python_line(
    method: str,
    signature: str,
    options: Mapping[str, Any],
    lm: Any,
    lm_options: Mapping[str, Any],
    role_lms: Mapping[str, tuple[Any, Mapping[str, Any]]] | None = None,
) -> str:
    """The one line that builds ``method`` as measured: its signature, its options, the LM with the run's options
    (``max_tokens`` and the user's LM options) and a per-role LM where a role had its own."""
    parts = [_py(method), _py(signature), f"lm={_lm_text(lm, lm_options)}"]
    if role_lms:
        inner = ", ".join(f"{_py(r)}: {_lm_text(spec, opts)}" for r, (spec, opts) in role_lms.items())
        parts.append(f"role_lms={{{inner}}}")
    parts += [f"{k}={_py(v)}" for k, v in options.items()]
    return f"dspy_for.experiments.build_method({', '.join(parts)})"


def spec_line(spec: RunSpec, method: str, signature: str, options: Mapping[str, Any]) -> str:
    """:func:`python_line` for ``method`` as a run of ``spec`` builds it: the run's ``max_tokens`` and cache, the LM
    options of every role, and a role's own LM (or options) where it differs from the default."""

    def lm_options(role_name: str | None) -> dict[str, Any]:
        options = spec.lm_options_for(role_name) if role_name else dict(spec.lm_options)
        run = {"max_tokens": spec.max_tokens} if spec.max_tokens is not None else {}
        return {**run, **({} if spec.cache else {"cache": False}), **options}

    default = (spec.lm, lm_options(None))
    roles = {}
    for role_name in get_method(method).roles:
        own = (spec.lm_for(role_name), lm_options(role_name))
        if own != default:
            roles[role_name] = own
    return python_line(method, signature, options, spec.lm, default[1], roles)
