"""What served each cell of the comparison table (a cell whose records come from more than one serving stack is
marked :data:`MIXED_MARK`, its legend line declared with ``Summary.mixed_serving``): one line per method naming the
identities (:mod:`dspy_for.lm.serving`), the stack the run talks to now, the stored records run again and the paired
items whose two answers came from different stacks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dspy_for.experiments.core.shown import MIXED_MARK, mixed_mark

if TYPE_CHECKING:
    from dspy_for.experiments.core.outcome import ComparisonResult

__all__ = ["MIXED_MARK", "mixed_mark", "serving_lines"]


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
