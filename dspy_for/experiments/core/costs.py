"""Compile once or pay per item: the cost model the comparison reports and ``advise`` decides with — each method's
fixed cost (its compile) and cost per item, read off its :class:`~dspy_for.experiments.core.summary.Summary`, and
after how many items one with a larger fixed cost has the lower total cost per correct answer.

**The unit.** Dollars when every cost of the dataset's methods is priced (litellm's cost map, or the LM option
``price``: a grid on local models gives them one, e.g. a hosted model of similar size at its list price) and not all
of them are $0; else tokens, **per LM**: a token of a 0.5B model and a token of a 1.5B model cost different amounts,
so they are never added. Each LM then gets its own break-even, counting only that LM's tokens (a method that does not
call an LM costs 0 of it, fixed and per item); the volumes may disagree, and a price settles it. A method whose
compile recorded no tokens per LM (a program cached before they were) has no break-even in tokens.

**The pairs.** :func:`grid_pairs`: every compiled method against its uncompiled student and against the most accurate
method without a compile step on the same dataset. In each pair the subject is the method with the larger fixed
cost (the first of the pair on a tie): its :class:`BreakEvenRow` says after how many items it has the lower total
cost per correct answer (:func:`dspy_for.stats.break_even`), with the interval from the accuracy intervals.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from dspy_for.experiments.core.cell import Cell
from dspy_for.experiments.core.summary import Summary
from dspy_for.experiments.methods import get_method
from dspy_for.experiments.spec.model import MethodConfig
from dspy_for.stats import CostModel, break_even

__all__ = [
    "TOKENS",
    "USD",
    "BreakEvenRow",
    "Unit",
    "breakeven_rows",
    "cost_at",
    "cost_model",
    "cost_unit",
    "grid_pairs",
    "method_costs",
]

Unit = Literal["usd", "tokens"]
USD: Unit = "usd"
TOKENS: Unit = "tokens"


@dataclass(frozen=True)
class BreakEvenRow:
    """One pair in one unit: ``method`` (the larger fixed cost) against ``against``; ``lm``: whose tokens (None in
    USD); both fixed and per-item costs; ``volume`` / ``low`` / ``high`` as :class:`~dspy_for.stats.BreakEven`
    (None: never)."""

    dataset: str
    method: str
    against: str
    unit: Unit
    lm: str | None
    fixed: float
    per_item: float
    fixed_against: float
    per_item_against: float
    volume: float | None
    low: float | None
    high: float | None

    def row(self) -> dict[str, Any]:
        """As plain data (``breakeven.jsonl``)."""
        return asdict(self)


def cost_unit(summaries: Iterable[Summary]) -> Unit:
    """:data:`USD` when every measured method's cost per item and compile cost is priced and not all are $0, else
    :data:`TOKENS` (per LM)."""
    costs: list[float | None] = []
    for s in summaries:
        if not s.measured:
            continue
        costs.append(s.cost_per_item)
        if s.compile is not None:
            costs.append(s.compile.usd)
    if not costs or any(c is None for c in costs):
        return TOKENS
    return USD if any(c for c in costs) else TOKENS


def method_costs(s: Summary, unit: Unit) -> dict[str | None, tuple[float, float]] | None:
    """{LM (None for USD): (fixed cost, cost per item)} of one measured method in ``unit``; None when unknown."""
    compiled = s.compile
    if unit == USD:
        if s.cost_per_item is None:
            return None
        fixed_usd = (compiled.usd or 0.0) if compiled is not None else 0.0
        return {None: (fixed_usd, s.cost_per_item)}
    fixed = dict(compiled.tokens_by_lm) if compiled is not None else {}
    if compiled is not None and compiled.tokens and not fixed:
        return None  # compiled before tokens per LM were recorded
    per_item = s.tokens_per_item_by_lm
    return {lm: (float(fixed.get(lm, 0)), float(per_item.get(lm, 0.0))) for lm in {*fixed, *per_item}}


def cost_model(s: Summary, fixed: float, per_item: float) -> CostModel:
    """``s``'s accuracy (with its interval) at these costs."""
    assert s.accuracy is not None, "a cost model needs a measured accuracy"
    return CostModel(fixed, per_item, s.accuracy, s.ci_low, s.ci_high)


def cost_at(summaries: Sequence[Summary], s: Summary, volume: int) -> float | None:
    """What ``s``'s method costs per correct answer over ``volume`` items, its compile included, in the unit of
    ``summaries`` (:func:`cost_unit`); None when unknown or when it answered nothing right (no finite cost per
    correct answer)."""
    costs = method_costs(s, cost_unit(summaries)) if s.measured else None
    if costs is None or not s.accuracy:
        return None
    fixed = sum(f for f, _ in costs.values())  # one unit: USD, or the tokens of the run's one LM
    per_item = sum(c for _, c in costs.values())
    return CostModel(fixed, per_item, s.accuracy).cost_per_correct(volume)


def grid_pairs(methods: Sequence[MethodConfig], cells: Iterable[Cell]) -> list[tuple[str, str, str]]:
    """(dataset, method, against): each compiled method against its uncompiled student (the first method of the
    same name, options and role LMs without a compile step) and against the most accurate method without one that
    reads no gold label (an oracle is an upper bound, not a method to deploy)."""
    measured = [c for c in cells if c.measured]
    pairs: list[tuple[str, str, str]] = []
    for dataset in dict.fromkeys(c.dataset for c in measured):
        here = {c.label: _summary(c) for c in measured if c.dataset == dataset}
        plain = [m for m in methods if not m.compile and m.label in here]
        deployable = [m for m in plain if not get_method(m.name).uses_labels(m.options)]
        best = max(deployable, key=lambda m: here[m.label].accuracy or 0.0, default=None)
        for m in methods:
            if not m.compile or m.label not in here:
                continue
            student = next(
                (s for s in plain if (s.name, s.options, s.role_lms) == (m.name, m.options, m.role_lms)), None
            )
            for other in dict.fromkeys(x.label for x in (student, best) if x is not None):
                pairs.append((dataset, m.label, other))
    return pairs


def breakeven_rows(cells: Iterable[Cell], pairs: Iterable[tuple[str, str, str]]) -> list[BreakEvenRow]:
    """One row per pair and unit (:data:`USD`, or one per LM in tokens); see :class:`BreakEvenRow`."""
    measured = [c for c in cells if c.measured]
    out: list[BreakEvenRow] = []
    for dataset, first, second in pairs:
        here = {c.label: _summary(c) for c in measured if c.dataset == dataset}
        if first not in here or second not in here:
            continue
        unit = cost_unit(here.values())
        x, y = method_costs(here[first], unit), method_costs(here[second], unit)
        if x is None or y is None:
            continue
        for lm in sorted(set(x) | set(y), key=str):
            fx, cx = x.get(lm, (0.0, 0.0))
            fy, cy = y.get(lm, (0.0, 0.0))
            if not (fx or cx or fy or cy):
                continue
            (a, fa, ca), (b, fb, cb) = ((first, fx, cx), (second, fy, cy))
            if fy > fx:
                (a, fa, ca), (b, fb, cb) = (b, fb, cb), (a, fa, ca)
            found = break_even(cost_model(here[a], fa, ca), cost_model(here[b], fb, cb))
            out.append(BreakEvenRow(dataset, a, b, unit, lm, fa, ca, fb, cb, found.volume, found.low, found.high))
    return out


def _summary(cell: Cell) -> Summary:
    assert cell.summary is not None
    return cell.summary
