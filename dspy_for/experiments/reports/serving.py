"""What served each cell of the comparison table: the mark of a cell whose records come from more than one serving
stack, its legend, and one line per method naming the identities (:mod:`dspy_for.lm.serving`), the stack the run
talks to now, the stored records run again and the paired items whose two answers came from different stacks."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dspy_for.experiments.core.outcome import ComparisonResult
    from dspy_for.experiments.core.summary import Summary

__all__ = ["MIXED_MARK", "mixed_mark", "serving_legend", "serving_lines"]

#: after the accuracy of a cell whose records more than one serving stack served
MIXED_MARK = "†"


def mixed_mark(summary: Summary) -> str:
    """:data:`MIXED_MARK` for a cell whose records more than one stack served (``Summary.mixed_serving``), else ''."""
    return MIXED_MARK if summary.mixed_serving else ""


def serving_legend(summaries: list[Summary]) -> str:
    """The legend's words for the mark and for the pairs that mix stacks ('' when no cell has them)."""
    text = ""
    if any(s.mixed_serving for s in summaries):
        text += (
            f"; {MIXED_MARK}: the cell's records were served by more than one stack (another model snapshot, "
            "system_fingerprint, local server build or slots, or model file; see 'served by' below): an answer can "
            "change with the stack alone, so part of the cell's accuracy and Δ may be the stack's; --rerun-changed "
            "runs the records another stack served again"
        )
    if any(s.mixed_pairs for s in summaries):
        text += "; mixed pairs: items whose two paired answers different stacks served (in the Δ's test)"
    return text


def serving_lines(result: ComparisonResult, dataset: str) -> list[str]:
    """One line per method on ``dataset`` whose records have serving identities (every method with
    ``rerun_changed``): each identity with its records, the stack now (or 'unknown' when nothing new ran), the records
    run again, and the paired items that mix stacks."""
    lines = []
    rerun = result.spec.rerun_changed
    for cell in result.cells:
        s = cell.summary
        if cell.dataset != dataset or s is None or not (s.served_by or rerun):
            continue
        served = _identities(s.served_by) or "no identity reported (such records are not run again)"
        line = f"{s.method}{mixed_mark(s)} served by: {served}"
        now = s.serving_now
        if rerun or (now is not None and s.mixed_serving):
            line += f"; stack now: {' · '.join(now) if now is not None else 'unknown (nothing new ran)'}"
        if rerun:
            line += f"; {s.reran} stored record(s) another stack served ran again"
        if s.mixed_pairs:
            line += f"; mixed pairs: {s.mixed_pairs} of {s.paired_n} paired with {result.spec.baseline}"
        lines.append(line)
    return lines


def _identities(served: dict[str, int]) -> str:
    return " · ".join(f"{identity} ({n})" for identity, n in served.items())
