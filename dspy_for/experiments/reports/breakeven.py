"""Compile once or pay per item: the break-even volumes of a comparison's methods and their plot — pure functions of
the summary rows (:meth:`~dspy_for.experiments.core.summary.Summary.row` with, for a method that has a compile step,
``compile`` = :meth:`~dspy_for.experiments.core.compile_step.CompileCost.row`, and ``tokens_per_item_by_lm``).

**The unit.** Dollars when every cost of the dataset's methods is priced (litellm's cost map, or the LM option
``price``: a grid on local models gives them one, e.g. a hosted model of similar size at its list price) and not all
of them are $0; else tokens, **per LM**: a token of a 0.5B model and a token of a 1.5B model cost different amounts,
so they are never added. Each LM then gets its own break-even, counting only that LM's tokens (a method that does not
call an LM costs 0 of it, fixed and per item); the volumes may disagree, and a price settles it. A method whose
compile recorded no tokens per LM (a program cached before they were) has no break-even in tokens.

**The pairs.** :func:`grid_pairs`: every compiled method against its uncompiled student and against the most accurate
method without a compile step on the same dataset. In each pair the subject is the method with the larger fixed
cost (the first of the pair on a tie): its row says after how many items it has the lower total cost per correct
answer (:func:`dspy_for.stats.break_even`), with the interval from the accuracy intervals.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dspy_for.experiments.core.spend import money
from dspy_for.experiments.core.summary import tokens_by_lm
from dspy_for.experiments.methods import get_method
from dspy_for.lm import model_label
from dspy_for.stats import CostModel, break_even

if TYPE_CHECKING:
    from dspy_for.experiments.spec.model import MethodConfig

__all__ = [
    "breakeven_figures",
    "breakeven_lines",
    "breakeven_rows",
    "cost_unit",
    "grid_pairs",
    "method_costs",
    "tokens_by_lm",
]

USD = "usd"
TOKENS = "tokens"


def cost_unit(rows: Iterable[Mapping[str, Any]]) -> str:
    """``"usd"`` when every measured method's cost per item and compile cost is priced and not all are $0, else
    ``"tokens"`` (per LM)."""
    costs: list[float | None] = []
    for row in _measured(rows):
        costs.append(row.get("cost_per_item"))
        if row.get("compile"):
            costs.append(row["compile"].get("usd"))
    if not costs or any(c is None for c in costs):
        return TOKENS
    return USD if any(c for c in costs) else TOKENS


def grid_pairs(methods: Sequence[MethodConfig], rows: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """(dataset, method, against): each compiled method against its uncompiled student (the first method of the
    same name, options and role LMs without a compile step) and against the most accurate method without one that
    reads no gold label (an oracle is an upper bound, not a method to deploy)."""
    rows = list(_measured(rows))
    pairs: list[tuple[str, str, str]] = []
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        here = {r["method"]: r for r in rows if r["dataset"] == dataset}
        plain = [m for m in methods if not m.compile and m.label in here]
        deployable = [m for m in plain if not get_method(m.name).uses_labels(m.options)]
        best = max(deployable, key=lambda m: here[m.label]["accuracy"], default=None)
        for m in methods:
            if not m.compile or m.label not in here:
                continue
            student = next(
                (s for s in plain if (s.name, s.options, s.role_lms) == (m.name, m.options, m.role_lms)), None
            )
            for other in dict.fromkeys(x.label for x in (student, best) if x is not None):
                pairs.append((dataset, m.label, other))
    return pairs


def breakeven_rows(rows: Iterable[Mapping[str, Any]], pairs: Iterable[tuple[str, str, str]]) -> list[dict[str, Any]]:
    """One row per pair and unit (:data:`USD`, or one per LM in tokens): ``method`` (the larger fixed cost),
    ``against``, ``unit``, ``lm`` (tokens: whose), both fixed and per-item costs, and ``volume`` / ``low`` / ``high``
    (:class:`~dspy_for.stats.BreakEven`: None is never)."""
    rows = list(_measured(rows))
    out: list[dict[str, Any]] = []
    for dataset, first, second in pairs:
        here = {r["method"]: r for r in rows if r["dataset"] == dataset}
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
            found = break_even(_model(here[a], fa, ca), _model(here[b], fb, cb))
            out.append(
                {
                    "dataset": dataset,
                    "method": a,
                    "against": b,
                    "unit": unit,
                    "lm": lm,
                    "fixed": fa,
                    "per_item": ca,
                    "fixed_against": fb,
                    "per_item_against": cb,
                    "volume": found.volume,
                    "low": found.low,
                    "high": found.high,
                }
            )
    return out


def breakeven_lines(brows: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per break-even row, e.g. ``cot_bootstrap vs cot (USD; fixed cost $0.42): the lower cost per correct
    answer from 1,231 items on (541 to 2,980 within the accuracy intervals)`` (whole numbers of items past each
    volume)."""
    lines = []
    for r in brows:
        unit = "USD" if r["unit"] == USD else f"tokens of {model_label(str(r['lm']))}"
        lines.append(
            f"{r['method']} vs {r['against']} ({unit}; fixed cost {_amount(r['fixed'], r['unit'])}): {_verdict(r)}"
        )
    return lines


def _verdict(r: Mapping[str, Any]) -> str:
    volume, low, high = r["volume"], r["low"], r["high"]
    if volume is None and low is None:
        return "never the lower cost per correct answer, at any accuracy within the intervals"
    if volume is None:
        return (
            "never the lower cost per correct answer at the measured accuracies; within the accuracy intervals, from "
            f"{_items(low)} items on at best"
        )
    span = f"{_items(low)} to {_items(high)}" if high is not None else f"{_items(low)} or more, or never"
    return f"the lower cost per correct answer from {_items(volume)} items on ({span} within the accuracy intervals)"


def breakeven_figures(rows: Iterable[Mapping[str, Any]], brows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Per dataset and unit, total cost and cost per correct answer against items for each method, each break-even
    marked with its interval: matplotlib ``Figure`` objects made without pyplot, named ``breakeven_<dataset>.png``
    (tokens: ``breakeven_<dataset>_<lm>.png``)."""
    from matplotlib.figure import Figure

    rows, brows = list(_measured(rows)), list(brows)
    figs: dict[str, Any] = {}
    for dataset, unit, lm in dict.fromkeys((r["dataset"], r["unit"], r["lm"]) for r in brows):
        marks = [r for r in brows if (r["dataset"], r["unit"], r["lm"]) == (dataset, unit, lm)]
        named = {name for r in marks for name in (r["method"], r["against"])}
        models = {}
        for r in rows:
            costs = method_costs(r, unit) if r["dataset"] == dataset and r["method"] in named else None
            if costs is not None:
                models[r["method"]] = _model(r, *costs.get(lm, (0.0, 0.0)))
        ends = [v for r in marks for v in (r["volume"], r["high"]) if v]
        top = max(1000.0, 3 * max(ends, default=0.0))
        xs = [top ** (i / 200) for i in range(201)]  # 1 .. top, evenly on a log scale
        fig = Figure(figsize=(11, 4.2), layout="constrained")
        total, per_correct = fig.subplots(1, 2)
        for label, m in sorted(models.items()):
            _curve(total, xs, [m.fixed + m.per_item * x for x in xs], label)
            _curve(per_correct, xs, [m.cost_per_correct(x) for x in xs], label)  # none without a correct answer
        if not total.lines and not per_correct.lines:
            continue  # nothing has a cost to draw (every cost 0, or no correct answer)
        for r in marks:
            if r["volume"] is None:
                continue
            at = max(r["volume"], 1.0)
            high = top if r["high"] is None else r["high"]
            y = models[r["method"]].cost_per_correct(at)
            if not _plottable(y):
                continue
            err = [[at - (r["low"] or 0.0)], [max(0.0, high - at)]]
            per_correct.errorbar([at], [y], xerr=err, fmt="o", color="black", capsize=4)
            per_correct.annotate(f"{r['method']} vs {r['against']}", (at, y), fontsize=7)
            total.axvline(at, color="gray", linestyle=":")
        what = "USD" if unit == USD else f"tokens of {model_label(str(lm))}"
        for ax, ylabel in ((total, f"total cost ({what})"), (per_correct, f"cost per correct answer ({what})")):
            ax.set_xscale("log")
            if ax.lines:  # a log scale needs a positive value to show
                ax.set_yscale("log")
            ax.set_xlabel("items")
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
        total.set_title(f"{dataset}: total cost, compile included", fontsize=10)
        per_correct.set_title("cost per correct answer: break-evens (bars: accuracy intervals)", fontsize=10)
        if total.get_legend_handles_labels()[1]:
            total.legend(fontsize=8)
        suffix = "" if unit == USD else "_" + "".join(c if c.isalnum() or c in "-." else "_" for c in str(lm))
        figs[f"breakeven_{dataset}{suffix}.png"] = fig
    return figs


# ------------------------------------------------------------------------------------------------ helpers


def _plottable(y: float) -> bool:
    return math.isfinite(y) and y > 0


def _curve(ax: Any, xs: list[float], ys: list[float], label: str) -> None:
    """One method's curve, where it has a positive, finite cost (a log scale shows nothing else): none when it
    answered nothing right (no cost per correct answer) or cost nothing."""
    points = [(x, y) for x, y in zip(xs, ys, strict=True) if _plottable(y)]
    if points:
        ax.plot([x for x, _ in points], [y for _, y in points], label=label)


def _measured(rows: Iterable[Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
    return (r for r in rows if "error" not in r and r.get("accuracy") is not None)


def method_costs(row: Mapping[str, Any], unit: str) -> dict[str | None, tuple[float, float]] | None:
    """{LM (None for USD): (fixed cost, cost per item)} of one method in ``unit``; None when unknown."""
    compiled = row.get("compile") or {}
    if unit == USD:
        return {None: (float(compiled.get("usd") or 0.0), float(row["cost_per_item"]))}
    fixed: Mapping[str, float] = compiled.get("tokens_by_lm") or {}
    if compiled.get("tokens") and not fixed:
        return None  # compiled before tokens per LM were recorded
    if "tokens_per_item_by_lm" not in row:
        return None
    per_item: Mapping[str, float] = row["tokens_per_item_by_lm"] or {}
    return {lm: (float(fixed.get(lm, 0)), float(per_item.get(lm, 0.0))) for lm in {*fixed, *per_item}}


def _model(row: Mapping[str, Any], fixed: float, per_item: float) -> CostModel:
    return CostModel(fixed, per_item, row["accuracy"], row.get("ci_low"), row.get("ci_high"))


def _items(value: float | None) -> str:
    """The first whole number of items past a break-even volume (``never``: None)."""
    return "never" if value is None else f"{math.floor(value) + 1:,}"


def _amount(value: float, unit: str) -> str:
    return money(value) if unit == USD else f"{value:,.0f}"
