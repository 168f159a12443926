"""A run's plan as the commands print it (``--dry-run``): one row per cell (a compile step on a row of its own) with
its items to run and stored, its calls, tokens, dollars and LM time, each an estimate with its range, and where the
estimate comes from; then the totals, whether ``max_cost`` would stop the run, and the plan's notes. A pure function
of a :class:`~dspy_for.experiments.core.plan.RunPlan`."""

from __future__ import annotations

import io
from collections.abc import Callable

from rich import box
from rich.console import Console
from rich.table import Table

from dspy_for.experiments.core.estimates import Estimate
from dspy_for.experiments.core.plan import RunPlan
from dspy_for.experiments.core.spend import money

__all__ = ["duration", "duration_text", "estimate_text", "plan_lines", "plan_table", "plan_text"]


_UNITS = ((90.0, 1.0, "s"), (90 * 60.0, 60.0, "min"), (float("inf"), 3600.0, "h"))


def _unit(seconds: float) -> tuple[float, str]:
    return next((size, name) for limit, size, name in _UNITS if seconds < limit)


def duration(seconds: float) -> str:
    """Seconds as a person reads a duration: ``45 s``, ``12 min``, ``2.5 h``."""
    size, name = _unit(seconds)
    return f"{seconds / size:.1f} h" if name == "h" else f"{seconds / size:.0f} {name}"


def _count(x: float) -> str:
    return f"{x:,.0f}"


def _usd(x: float) -> str:
    return money(x)


def estimate_text(e: Estimate | None, f: Callable[[float], str] = _count, missing: str = "-") -> str:
    """``value (low–high)``; an exact value alone; ``missing`` when unknown."""
    if e is None:
        return missing
    if e.low == e.high == e.value:
        return f(e.value)
    return f"{f(e.value)} ({f(e.low)}–{f(e.high)})"


def duration_text(e: Estimate | None, missing: str = "not measured") -> str:
    """A duration estimate in the unit of its value: ``33 min (7–45)``."""
    if e is None:
        return missing
    size, name = _unit(e.value)
    digits = 1 if name == "h" else 0
    if e.low == e.high == e.value:
        return duration(e.value)
    return f"{e.value / size:.{digits}f} {name} ({e.low / size:.{digits}f}–{e.high / size:.{digits}f})"


def plan_table(plan: RunPlan) -> Table:
    """The cells and the totals as a table (a cell with nothing to run shows only what is stored)."""
    per = " per trial" if plan.trials > 1 else ""
    table = Table(title=f"plan: {plan.command}{per} (estimate (low–high))", box=box.SIMPLE_HEAD)
    for name in ("dataset", "method", "step", "to run", "stored", "calls", "tokens", "$", "LM time", "source"):
        right = name in ("to run", "stored", "calls", "tokens", "$", "LM time")
        table.add_column(name, justify="right" if right else "left", overflow="fold")
    for c in plan.cells:
        where = f"{c.dataset}/{c.split}"
        if c.error is not None:
            table.add_row(where, c.label, c.step, "", "", "", "", "", "", f"cannot run: {c.error}")
            continue
        if not c.to_run:
            note = c.note or ("the compiled program is stored: reused" if c.step == "compile" else "")
            table.add_row(where, c.label, c.step, "0", str(c.stored), "", "", "", "", note)
            continue
        source = (f"{c.note}; " if c.note else "") + c.source
        table.add_row(
            where,
            c.label,
            c.step,
            str(c.to_run),
            str(c.stored),
            estimate_text(c.calls),
            estimate_text(c.tokens),
            estimate_text(c.usd, _usd, "not priced"),
            duration_text(c.seconds),
            source,
        )
    return table


def plan_lines(plan: RunPlan) -> list[str]:
    """The totals, ``max_cost``'s verdict, the bound (advise, a sequential comparison) and the notes."""
    trials = f" for {plan.trials} trials" if plan.trials > 1 else ""
    lines = [
        f"total{trials}: {plan.to_run} item(s) to run, {plan.stored} stored; "
        f"calls {estimate_text(plan.total('calls'))}, tokens {estimate_text(plan.total('tokens'))}, "
        f"{estimate_text(plan.total('usd'), _usd, 'dollars not priced')}, "
        f"LM time {duration_text(plan.total('seconds'))}"
    ]
    stop = plan.cost_stop
    if stop is not None:
        line = f"max_cost {money(stop.max_cost, as_given=True)}: {stop.verdict}"
        if stop.at_item == 0:
            line += f" the run in {stop.during}: no item would start (of {stop.of_items})"
        elif stop.at_item is not None:
            line += f" the run at about item {stop.at_item} of {stop.of_items} (in {stop.during})"
        total = plan.total("usd")
        if total is not None:
            line += f"; the estimate {estimate_text(total, _usd)}"
        lines.append(line)
    elif plan.max_cost is not None:
        lines.append(f"max_cost {money(plan.max_cost, as_given=True)}: an LM has no price, so it cannot be checked")
    if plan.bound:
        lines.append(f"at most: {plan.bound}")
    lines += [f"note: {n}" for n in plan.notes]
    lines.append("dry run: no LM was built or called; run the same command without --dry-run to run it")
    return lines


def plan_text(plan: RunPlan) -> str:
    """The plan as plain text (the table, then :func:`plan_lines`), e.g. for a log or a file."""
    console = Console(width=400, record=True, file=io.StringIO())
    console.print(plan_table(plan))
    return console.export_text().rstrip() + "\n" + "\n".join(plan_lines(plan)) + "\n"
