"""Whether a compiled program can be within a per-item budget, decided before it is compiled: from the records of its
uncompiled program (its *student*, e.g. ``advise``'s pilot of it) and the demos its compile step puts in each call's
prompt, as the plan estimates a compiled program (:func:`~.plan_cells.with_demos`) — so a compile whose program would
be dropped as over the budget is never started, and ``--dry-run`` (reading the same stored records) shows the same
decision as the run.

A program whose compile adds no demos (GEPA, MIPROv2 without demos, TextGrad rewrite instructions) is estimated at its
student's cost; one whose student records are missing or all failed is not judged here (its own pilot judges it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dspy_for.experiments.core.estimates import CellEstimates, sample_estimates
from dspy_for.experiments.core.evidence import found_in, role_prices
from dspy_for.experiments.core.plan_cells import demo_count, with_demos
from dspy_for.experiments.core.records import ItemResult
from dspy_for.experiments.core.spend import money
from dspy_for.experiments.spec.model import MethodConfig, RunSpec

__all__ = ["CompileFit", "compile_fit"]


@dataclass(frozen=True)
class CompileFit:
    """A compiled program's estimated cost per item (``per_item``: its calls, tokens and dollars, None when not
    priced) and, when it is over a budget, why (``reason``) and the flags it is over (``over``); ``reason`` is empty
    when it can be within them."""

    per_item: CellEstimates
    reason: str
    over: list[str]

    @property
    def fits(self) -> bool:
        return not self.reason


def compile_fit(
    spec: RunSpec,
    method: MethodConfig,
    student: Iterable[ItemResult],
    *,
    budget: float | None,
    budget_usd: float | None,
    student_label: str,
) -> CompileFit | None:
    """``method`` (with a compile step) as its student's records ``student`` (labelled ``student_label`` in the
    reason) and its compile's demos estimate it, against ``budget`` tokens and ``budget_usd`` USD per item (the mean
    per item, as a pilot is judged); None when no student record was scored."""
    records = list(student)
    found = found_in(records, f"{student_label}'s records", "uncompiled")
    if found is None:
        return None
    demos = demo_count(method)
    found = with_demos(found, demos)
    prices = role_prices(spec, method, {r for cost in found.costs for r in cost})
    e = sample_estimates(found.costs, 1, prices, found.source)
    basis = f"{student_label} on {len(found.costs)} item(s)" + (f" with {demos} demos a prompt" if demos else "")
    reasons, over = [], []
    if budget is not None and e.tokens.value > budget:
        reasons.append(f"{e.tokens.value:,.0f} tokens/item estimated ({basis}) > budget {budget:,.0f}")
        over.append("--budget")
    if budget_usd is not None and e.usd is not None and e.usd.value > budget_usd:
        reasons.append(
            f"{money(e.usd.value, significant=3)}/item estimated ({basis}) > budget {money(budget_usd, as_given=True)}"
            "/item"
        )
        over.append("--budget-usd")
    return CompileFit(e, "; ".join(reasons), over)
