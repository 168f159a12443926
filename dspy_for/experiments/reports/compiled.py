"""What a comparison's compiled methods cost and when each pays for itself, as the table shows it: the ``compile``
column (tokens, dollars where priced, wall seconds; ``reused`` when the compiled program came from the cache), a
line per compiled method with its cost per role and per LM, the break-even lines under the table
(:mod:`dspy_for.experiments.core.costs`) and the note that says which declared price priced stored records kept
without a cost."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from dspy_for.experiments.core.costs import USD, BreakEvenRow, breakeven_rows, cost_unit, grid_pairs
from dspy_for.experiments.core.shown import compile_cell
from dspy_for.experiments.core.spend import money
from dspy_for.experiments.core.summary import Summary
from dspy_for.experiments.reports.breakeven import breakeven_lines
from dspy_for.lm import model_label

if TYPE_CHECKING:
    from dspy_for.experiments.core.outcome import ComparisonResult

__all__ = ["breakeven_of", "breakeven_text", "compile_cell", "compile_lines", "price_note"]


def compile_lines(result: ComparisonResult, dataset: str) -> list[str]:
    """One line per compiled method on ``dataset``: its compiler, tokens by role and by LM, the items it decided on."""
    lines = []
    for cell in result.cells:
        c = cell.summary.compile if cell.summary is not None else None
        if cell.dataset != dataset or c is None:
            continue
        roles = " · ".join(f"{name} {tokens:,}" for name, tokens in c.tokens_by_role().items())
        lms = " · ".join(f"{model_label(lm)} {tokens:,}" for lm, tokens in c.tokens_by_lm.items()) or "not recorded"
        how = "reused from the cache (not spent now)" if c.reused else "compiled by this run"
        lines.append(
            f"{cell.label} compile ({c.kind}, {how}): tokens by role: {roles}; by LM: {lms}; trained on "
            f"{c.train_items} item(s), validated on {c.val_items}, {c.left_out} scored item(s) left out"
        )
    return lines


def breakeven_of(result: ComparisonResult) -> list[BreakEvenRow]:
    """The break-even rows of a comparison (:func:`~dspy_for.experiments.core.costs.breakeven_rows`): each compiled
    method against its uncompiled student and the most accurate method without a compile step, per dataset."""
    return breakeven_rows(result.cells, grid_pairs(result.spec.methods, result.cells))


def price_note(summaries: Iterable[Summary]) -> str:
    """Which declared prices priced records stored without a cost ('' when none was needed)."""
    prices = {lm: p for s in summaries for lm, p in s.priced_at.items()}
    if not prices:
        return ""
    each = ", ".join(f"{lm} {money(p.input)} / {money(p.output)}" for lm, p in sorted(prices.items()))
    return (
        f"records stored without a cost are priced from their tokens at the declared `price` (USD per million "
        f"prompt / completion tokens): {each}"
    )


def breakeven_text(result: ComparisonResult, dataset: str) -> list[str]:
    """The break-even lines under ``dataset``'s table, headed by what they say and in which unit."""
    mine = [r for r in result.breakeven if r.dataset == dataset]
    if not mine:
        return []
    summaries = [c.summary for c in result.cells if c.dataset == dataset and c.summary is not None]
    unit = (
        "USD (litellm's prices or each LM's `price`)"
        if cost_unit(summaries) == USD
        else "tokens of each LM apart (not every LM has a price: give each a `price` for one figure in USD)"
    )
    head = (
        f"break-even, in {unit}: the number of items after which the method with the larger fixed cost (its "
        "compile) has the lower total cost per correct answer; the range is over the accuracy intervals"
    )
    note = price_note(summaries)
    return [head + (f"; {note}" if note else ""), *breakeven_lines(mine)]
