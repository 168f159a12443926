"""What served each cell of the comparison table: the mark of a cell whose records come from more than one serving
stack, its legend, and one line per method naming the identities (:mod:`dspy_for.lm.serving`), the stack the run
talks to now, the stored records run again and the paired items whose two answers came from different stacks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dspy_for.experiments.core.outcome import ComparisonResult

__all__ = ["MIXED_MARK", "mixed_mark", "serving_legend", "serving_lines"]

#: after the accuracy of a cell whose records more than one serving stack served
MIXED_MARK = "†"


def mixed_mark(row: dict[str, Any]) -> str:
    """:data:`MIXED_MARK` for a row whose records more than one stack served (``Summary.mixed_serving``), else ''."""
    return MIXED_MARK if row.get("mixed_serving") else ""


def serving_legend(rows: list[dict[str, Any]]) -> str:
    """The legend's words for the mark and for the pairs that mix stacks ('' when no row has them)."""
    text = ""
    if any(r.get("mixed_serving") for r in rows):
        text += (
            f"; {MIXED_MARK}: the cell's records were served by more than one stack (another model snapshot, "
            "system_fingerprint, llama-cpp-python build or model file; see 'served by' below): an answer can change "
            "with the stack alone, so part of the cell's accuracy and Δ may be the stack's; --rerun-changed runs the "
            "records another stack served again"
        )
    if any(r.get("mixed_pairs") for r in rows):
        text += "; mixed pairs: items whose two paired answers different stacks served (in the Δ's test)"
    return text


def _identities(served: dict[str, int]) -> str:
    return " · ".join(f"{identity} ({n})" for identity, n in served.items())


def serving_lines(result: ComparisonResult, dataset: str) -> list[str]:
    """One line per method on ``dataset`` whose records have serving identities (every method with
    ``rerun_changed``): each identity with its records, the stack now (or 'unknown' when nothing new ran), the records
    run again, and the paired items that mix stacks."""
    lines = []
    for row in result.rows:
        if row["dataset"] != dataset or "error" in row or not (row.get("served_by") or result.spec.rerun_changed):
            continue
        served = _identities(row.get("served_by") or {}) or "no identity reported (such records are not run again)"
        line = f"{row['method']}{mixed_mark(row)} served by: {served}"
        now = row.get("serving_now")
        if result.spec.rerun_changed or (now is not None and row.get("mixed_serving")):
            line += f"; stack now: {' · '.join(now) if now is not None else 'unknown (nothing new ran)'}"
        if result.spec.rerun_changed:
            line += f"; {row.get('reran', 0)} stored record(s) another stack served ran again"
        if row.get("mixed_pairs"):
            line += f"; mixed pairs: {row['mixed_pairs']} of {row['paired_n']} paired with {result.spec.baseline}"
        lines.append(line)
    return lines
