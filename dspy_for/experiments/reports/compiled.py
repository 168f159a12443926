"""What a comparison's compiled methods cost and when each pays for itself, as the table shows it: the ``compile``
column (tokens, dollars where priced, wall seconds; ``reused`` when the compiled program came from the cache), a
line per compiled method with its cost per role and per LM, the break-even lines under the table
(:mod:`.breakeven`) and the note that says which declared price priced stored records kept without a cost."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from dspy_for.experiments.core.spend import money
from dspy_for.experiments.reports.breakeven import USD, breakeven_lines, breakeven_rows, cost_unit, grid_pairs
from dspy_for.lm import model_label

if TYPE_CHECKING:
    from dspy_for.experiments.core.outcome import ComparisonResult
    from dspy_for.experiments.core.summary import Summary

__all__ = [
    "breakeven_of",
    "breakeven_text",
    "compile_cell",
    "compile_legend",
    "compile_lines",
    "price_note",
]


def compile_cell(c: Mapping[str, Any] | None) -> str:
    """A compile step's cost (:meth:`~dspy_for.experiments.core.compile_step.CompileCost.row`) as the table shows it:
    ``41,230 tok · $0.082 · 95s``, ``(reused)`` after it when the compiled program came from the cache; '-' without
    a compile step."""
    if not c:
        return "-"
    parts = [f"{c['tokens']:,} tok"]
    if c.get("usd") is not None:
        parts.append(money(c["usd"]))
    if c.get("seconds") is not None:
        parts.append(f"{c['seconds']:.1f}s" if c["seconds"] < 10 else f"{c['seconds']:,.0f}s")
    return " · ".join(parts) + (" (reused)" if c.get("reused") else "")


def compile_legend(summaries: Iterable[Summary]) -> str:
    """The ``compile`` column's part of the legend ('' when no method compiles)."""
    if not any(s.compile for s in summaries):
        return ""
    return (
        "; compile: what the method's compile step cost once (prompt+completion tokens of every LM it called, USD "
        "where every call is priced, wall seconds), 'reused' when the compiled program came from the cache: its "
        "first compile's cost, not spent by this run"
    )


def compile_lines(result: ComparisonResult, dataset: str) -> list[str]:
    """One line per compiled method on ``dataset``: its compiler, tokens by role and by LM, the items it decided on."""
    lines = []
    for cell in result.cells:
        c = cell.summary.compile if cell.summary is not None else None
        if cell.dataset != dataset or not c:
            continue
        roles = " · ".join(f"{name} {tokens:,}" for name, tokens in c["tokens_by_role"].items())
        lms = " · ".join(f"{model_label(lm)} {tokens:,}" for lm, tokens in c["tokens_by_lm"].items()) or "not recorded"
        how = "reused from the cache (not spent now)" if c["reused"] else "compiled by this run"
        lines.append(
            f"{cell.label} compile ({c['kind']}, {how}): tokens by role: {roles}; by LM: {lms}; trained on "
            f"{c['train_items']} item(s), validated on {c['val_items']}, {c['left_out']} scored item(s) left out"
        )
    return lines


def breakeven_of(result: ComparisonResult) -> list[dict[str, Any]]:
    """The break-even rows of a comparison (:func:`~.breakeven.breakeven_rows`): each compiled method against its
    uncompiled student and the most accurate method without a compile step, per dataset."""
    return breakeven_rows(result.rows, grid_pairs(result.spec.methods, result.rows))


def price_note(summaries: Iterable[Summary]) -> str:
    """Which declared prices priced records stored without a cost ('' when none was needed)."""
    prices: dict[str, Mapping[str, float]] = {}
    for s in summaries:
        prices.update(s.priced_at)
    if not prices:
        return ""
    each = ", ".join(f"{lm} {money(p['input'])} / {money(p['output'])}" for lm, p in sorted(prices.items()))
    return (
        f"records stored without a cost are priced from their tokens at the declared `price` (USD per million "
        f"prompt / completion tokens): {each}"
    )


def breakeven_text(result: ComparisonResult, dataset: str) -> list[str]:
    """The break-even lines under ``dataset``'s table, headed by what they say and in which unit."""
    mine = [r for r in result.breakeven if r["dataset"] == dataset]
    if not mine:
        return []
    rows = [r for r in result.rows if r["dataset"] == dataset]
    unit = (
        "USD (litellm's prices or each LM's `price`)"
        if cost_unit(rows) == USD
        else "tokens of each LM apart (not every LM has a price: give each a `price` for one figure in USD)"
    )
    head = (
        f"break-even, in {unit}: the number of items after which the method with the larger fixed cost (its "
        "compile) has the lower total cost per correct answer; the range is over the accuracy intervals"
    )
    note = price_note(c.summary for c in result.cells if c.dataset == dataset and c.summary is not None)
    return [head + (f"; {note}" if note else ""), *breakeven_lines(mine)]
