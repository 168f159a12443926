"""The break-even volumes of a comparison's compiled methods as the table shows them and as a plot — pure
functions of its cells and of the cost model's rows (:mod:`dspy_for.experiments.core.costs`)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from dspy_for.experiments.core.cell import Cell
from dspy_for.experiments.core.costs import USD, BreakEvenRow, cost_model, method_costs
from dspy_for.experiments.core.spend import money
from dspy_for.experiments.reports.sketch import Sketch, SketchAxes
from dspy_for.lm import model_label
from dspy_for.stats import CostModel

__all__ = ["breakeven_figures", "breakeven_lines"]


def breakeven_lines(brows: Iterable[BreakEvenRow]) -> list[str]:
    """One line per break-even row, e.g. ``cot_bootstrap vs cot (USD; fixed cost $0.42): the lower cost per correct
    answer from 1,231 items on (541 to 2,980 within the accuracy intervals)`` (whole numbers of items past each
    volume)."""
    lines = []
    for r in brows:
        unit = "USD" if r.unit == USD else f"tokens of {model_label(str(r.lm))}"
        lines.append(f"{r.method} vs {r.against} ({unit}; fixed cost {_amount(r.fixed, r.unit)}): {_verdict(r)}")
    return lines


def _verdict(r: BreakEvenRow) -> str:
    volume, low, high = r.volume, r.low, r.high
    if volume is None and low is None:
        return "never the lower cost per correct answer, at any accuracy within the intervals"
    if volume is None:
        return (
            "never the lower cost per correct answer at the measured accuracies; within the accuracy intervals, from "
            f"{_items(low)} items on at best"
        )
    span = f"{_items(low)} to {_items(high)}" if high is not None else f"{_items(low)} or more, or never"
    return f"the lower cost per correct answer from {_items(volume)} items on ({span} within the accuracy intervals)"


def breakeven_figures(cells: Iterable[Cell], brows: Iterable[BreakEvenRow]) -> dict[str, Sketch]:
    """Per dataset and unit, total cost and cost per correct answer against items for each method, each break-even
    marked with its interval, named ``breakeven_<dataset>.png`` (tokens: ``breakeven_<dataset>_<lm>.png``)."""
    measured, brows = [c for c in cells if c.measured and c.summary is not None], list(brows)
    figs: dict[str, Sketch] = {}
    for dataset, unit, lm in dict.fromkeys((r.dataset, r.unit, r.lm) for r in brows):
        marks = [r for r in brows if (r.dataset, r.unit, r.lm) == (dataset, unit, lm)]
        named = {name for r in marks for name in (r.method, r.against)}
        models: dict[str, CostModel] = {}
        for c in measured:
            s = c.summary
            costs = method_costs(s, unit) if s is not None and c.dataset == dataset and c.label in named else None
            if s is not None and costs is not None:
                models[c.label] = cost_model(s, *costs.get(lm, (0.0, 0.0)))
        ends = [v for r in marks for v in (r.volume, r.high) if v]
        top = max(1000.0, 3 * max(ends, default=0.0))
        xs = [top ** (i / 200) for i in range(201)]  # 1 .. top, evenly on a log scale
        fig = Sketch(figsize=(11, 4.2), layout="constrained")
        total, per_correct = fig.subplots(1, 2)
        curves = {total: 0, per_correct: 0}  # curves drawn on each
        for label, m in sorted(models.items()):
            curves[total] += _curve(total, xs, [m.fixed + m.per_item * x for x in xs], label)
            per_item = [m.cost_per_correct(x) for x in xs]  # none without a correct answer
            curves[per_correct] += _curve(per_correct, xs, per_item, label)
        if not any(curves.values()):
            continue  # nothing has a cost to draw (every cost 0, or no correct answer)
        for r in marks:
            if r.volume is None:
                continue
            at = max(r.volume, 1.0)
            high = top if r.high is None else r.high
            y = models[r.method].cost_per_correct(at)
            if not _plottable(y):
                continue
            err = [[at - (r.low or 0.0)], [max(0.0, high - at)]]
            per_correct.errorbar([at], [y], xerr=err, fmt="o", color="black", capsize=4)
            per_correct.annotate(f"{r.method} vs {r.against}", (at, y), fontsize=7)
            total.axvline(at, color="gray", linestyle=":")
        what = "USD" if unit == USD else f"tokens of {model_label(str(lm))}"
        for ax, ylabel in ((total, f"total cost ({what})"), (per_correct, f"cost per correct answer ({what})")):
            ax.set_xscale("log")
            if curves[ax]:  # a log scale needs a positive value to show
                ax.set_yscale("log")
            ax.set_xlabel("items")
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
        total.set_title(f"{dataset}: total cost, compile included", fontsize=10)
        per_correct.set_title("cost per correct answer: break-evens (bars: accuracy intervals)", fontsize=10)
        if curves[total]:
            total.legend(fontsize=8)
        suffix = "" if unit == USD else "_" + "".join(c if c.isalnum() or c in "-." else "_" for c in str(lm))
        figs[f"breakeven_{dataset}{suffix}.png"] = fig
    return figs


# ------------------------------------------------------------------------------------------------ helpers


def _plottable(y: float) -> bool:
    return math.isfinite(y) and y > 0


def _curve(ax: SketchAxes, xs: list[float], ys: list[float], label: str) -> bool:
    """One method's curve, where it has a positive, finite cost (a log scale shows nothing else): none when it
    answered nothing right (no cost per correct answer) or cost nothing. Whether it drew one."""
    points = [(x, y) for x, y in zip(xs, ys, strict=True) if _plottable(y)]
    if points:
        ax.plot([x for x, _ in points], [y for _, y in points], label=label)
    return bool(points)


def _items(value: float | None) -> str:
    """The first whole number of items past a break-even volume (``never``: None)."""
    return "never" if value is None else f"{math.floor(value) + 1:,}"


def _amount(value: float, unit: str) -> str:
    return money(value) if unit == USD else f"{value:,.0f}"
