"""``advise``'s two budgets per item — tokens (``--budget``, prompt + completion) and dollars (``--budget-usd``) —
checked before any LM call and on the pilot.

* ``--budget-usd`` needs a price for every LM of the run (litellm's cost map, the ``price`` LM option, or a local
  model at $0): refused before any call otherwise, naming the fix.
* After the pilot a candidate whose measured tokens per item, or USD per item, exceed its budget is dropped with
  the measured figure as its reason.
* No candidate left within the budgets (and none failed): an error naming the flag(s) that excluded them and the
  cheapest measured cost — the pilot's records are kept, so a re-run with a larger budget reuses them.
"""

from __future__ import annotations

import math
from typing import Any

from dspy_for.errors import ConfigError
from dspy_for.experiments.advisor.result import OVER_BUDGET, SIZING, Advice, dollars_per_item
from dspy_for.experiments.core import MethodResult
from dspy_for.experiments.core.spend import money
from dspy_for.experiments.spec import RunSpec
from dspy_for.lm.pricing import PRICE_ATTR, Price, is_priced

__all__ = ["check_numbers", "check_priced_for_budget", "lm_priced", "no_fit_error", "over_budget"]


def lm_priced(lm: Any, options: dict[str, Any]) -> bool:
    """Whether ``lm`` (a spec string or an LM object) has a price: its spec with ``options``, or an object's given
    ``price`` or the model name litellm's cost map prices."""
    if isinstance(lm, str):
        return is_priced(lm, options)
    if isinstance(getattr(lm, PRICE_ATTR, None), Price):
        return True
    model = getattr(lm, "model", None)
    return isinstance(model, str) and is_priced(model, {})


def check_numbers(
    *, budget: float | None, margin: float, timeout: float | None, pilot: int, budget_usd: float | None = None
) -> None:
    """advise's own numbers (the budgets, the margin, the timeout, the pilot's items), before any LM call."""

    def number(value: Any) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)

    if budget is not None and not (number(budget) and budget > 0):
        raise ConfigError(
            f"`--budget` is tokens per item (prompt + completion): give a positive number, got {budget!r}."
        )
    if budget_usd is not None and not (number(budget_usd) and budget_usd > 0):
        raise ConfigError(
            f"`--budget-usd` is USD per item: give a positive number (e.g. --budget-usd 0.002), got {budget_usd!r}."
        )
    if not (number(margin) and 0 < margin < 1):
        raise ConfigError(
            f"`--margin` is an accuracy difference as a fraction in (0, 1) (0.05 = 5 points), got {margin!r}."
        )
    if timeout is not None and not (number(timeout) and timeout > 0):
        raise ConfigError(f"`--timeout` is in seconds: give a positive number, got {timeout!r}.")
    if isinstance(pilot, bool) or not isinstance(pilot, int) or pilot < 1:
        raise ConfigError(f"`pilot` is the number of items that measure each method's cost: give >= 1, got {pilot!r}.")


def check_priced_for_budget(spec: RunSpec) -> None:
    """``--budget-usd`` compares dollars: every LM of the run must have a price (before any LM call)."""
    for r in sorted(spec.method_roles()):
        lm = spec.lm_for(r)
        if not lm_priced(lm, spec.lm_options_for(r)):
            name = lm if isinstance(lm, str) else getattr(lm, "model", type(lm).__name__)
            raise ConfigError(
                f"`--budget-usd` compares USD per item, and the LM `{name}` (role `{r}`) has no price in litellm's "
                "cost map: give it one with `--lm-option price={input=0.15, output=0.60}` (USD per million prompt "
                "and completion tokens; `--role-lm-option ROLE:price=...` for one role), or use `--budget` (tokens "
                "per item) instead."
            )


def over_budget(r: MethodResult, budget: float | None, budget_usd: float | None) -> tuple[str, list[str]]:
    """Why ``r`` (a candidate measured on the pilot) is over its budgets, and the flags it is over; ``("", [])``
    when it is within them."""
    reasons, flags = [], []
    on = f"on the pilot's {r.n_scored} item(s)"
    if budget is not None and r.tokens_per_item > budget:
        reasons.append(f"{r.tokens_per_item:,.0f} tokens/item {on} > budget {budget:,.0f}")
        flags.append("--budget")
    cost = dollars_per_item(r)
    if budget_usd is not None and cost is not None and cost > budget_usd:
        reasons.append(f"{money(cost, significant=3)}/item {on} > budget {money(budget_usd, as_given=True)}/item")
        flags.append("--budget-usd")
    return "; ".join(reasons), flags


def _up(x: float) -> float:
    """``x`` rounded up to 3 significant digits (a budget raised to it fits what cost ``x``)."""
    if x <= 0:
        return x
    step = 10.0 ** (math.floor(math.log10(x)) - 2)
    return math.ceil(x / step * (1 - 1e-12)) * step


def no_fit_error(advice: Advice) -> ConfigError | None:
    """The error when every candidate was dropped by a budget (None otherwise): the flag(s) that excluded them,
    what to raise each to (the cheapest measured cost), or cheaper ``--methods``."""
    a = advice
    if (a.budget is None and a.budget_usd is None) or any(c.status not in (OVER_BUDGET, SIZING) for c in a.candidates):
        return None
    flags = {f for c in a.candidates if c.status == OVER_BUDGET for f in c.over}
    measured = [
        (c.label, c.result) for c in a.candidates if c.status == OVER_BUDGET and c.measured and c.result is not None
    ]
    parts, fixes = [], []
    if "--budget" in flags and a.budget is not None:
        parts.append(f"`--budget` {a.budget:,.0f} tokens/item")
        tokens = sorted((r.tokens_per_item, label) for label, r in measured)
        if tokens:
            parts[-1] += f" (the cheapest, {tokens[0][1]}, took {tokens[0][0]:,.0f})"
        fixes.append("raise `--budget`" + (f" to at least {math.ceil(tokens[0][0]):,}" if tokens else ""))
    if "--budget-usd" in flags and a.budget_usd is not None:
        parts.append(f"`--budget-usd` {money(a.budget_usd, as_given=True)}/item")
        dollars = sorted((cost, label) for label, r in measured if (cost := dollars_per_item(r)) is not None)
        if dollars:
            parts[-1] += f" (the cheapest, {dollars[0][1]}, cost {money(dollars[0][0], significant=3)})"
        fixes.append(
            "raise `--budget-usd`" + (f" to at least {money(_up(dollars[0][0]), significant=3)}" if dollars else "")
        )
    if not parts:
        return None
    return ConfigError(
        f"No candidate fits {' and '.join(parts)} on the first {a.pilot_items} item(s): {', or '.join(fixes)}, or "
        "choose cheaper `--methods` (the pilot's results are kept and reused)."
    )
