"""The recheck's report (:mod:`dspy_for.experiments.core.recheck`): per cell, how many re-run answers changed next
to the Δ they would have to beat, as lines to print, rows for ``recheck.jsonl`` and every re-run answer for
``recheck_answers.jsonl``; :func:`log_recheck` puts them on the comparison's MLflow run (never in the results store).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from dspy_for.experiments.core.recheck import Recheck
from dspy_for.experiments.tracking import store
from dspy_for.secrets import redact
from dspy_for.stats import format_p_value

__all__ = ["log_recheck", "recheck_answer_rows", "recheck_lines", "recheck_rows"]

logger = logging.getLogger("dspy_for.compare")


def recheck_rows(rechecks: Sequence[Recheck]) -> list[dict[str, Any]]:
    """One row per cell: its counts, its flip rate with the interval, its stored Δ and the noise band (fractions)."""
    rows = []
    for r in rechecks:
        rate = r.rate
        row: dict[str, Any] = {
            "dataset": r.dataset,
            "split": r.split,
            "method": r.label,
            "asked": r.asked,
            "rechecked": r.n,
            "changed": r.changed,
            "to_right": r.to_right,
            "to_wrong": r.to_wrong,
            "failed": r.failed,
            "not_run": r.not_run,
            "flip_rate": rate.rate if rate else None,
            "flip_rate_low": rate.low if rate else None,
            "flip_rate_high": rate.high if rate else None,
            "baseline": r.baseline,
            "delta": r.delta,
            "p_value": r.p_value,
            "paired_n": r.paired_n,
            "noise_band": r.band,
        }
        if r.note:
            row["note"] = r.note
        rows.append(row)
    return rows


def recheck_answer_rows(rechecks: Sequence[Recheck]) -> list[dict[str, Any]]:
    """Every re-run answer beside the stored one (``rerun`` None: failed, with ``error``, or not started)."""
    return [{"dataset": r.dataset, "method": r.label, **a.row()} for r in rechecks for a in r.answers]


def _pts(x: float) -> str:
    return f"{100 * x:.0f}"


def _cell_line(r: Recheck) -> str:
    head = f"{r.label} on {r.dataset} ({r.split})" + (" (baseline)" if r.baseline else "")
    if r.note:
        return f"{head}: {r.note}"
    rate = r.rate
    if rate is None:
        line = f"{head}: no re-run was scored"
    else:
        line = (
            f"{head}: {r.changed} of {r.n} answers changed ({r.to_right} wrong→right, {r.to_wrong} right→wrong; "
            f"score changed on {_pts(rate.rate)}% [{_pts(rate.low)}, {_pts(rate.high)}])"
        )
    if r.failed:
        line += f"; {r.failed} re-run(s) failed (errors, left out)"
    if r.not_run:
        line += f"; {r.not_run} not re-run (max_cost reached)"
    if r.baseline or r.delta is None:
        return line
    line += f"; its Δ {100 * r.delta:+.1f} pts"
    if r.p_value is not None:
        line += f" ({format_p_value(r.p_value)}, n={r.paired_n})"
    if r.band is None:
        return line + ": no noise band (the baseline has no scored re-run)"
    within = abs(r.delta) <= r.band
    return line + (
        f" against a noise band of ±{100 * r.band:.1f} pts: "
        + ("within it, this noise alone could make it" if within else "beyond it")
    )


def recheck_lines(rechecks: Sequence[Recheck]) -> list[str]:
    """The recheck as printed under the comparison's tables: a heading, one line per cell, what the band means."""
    if not rechecks:
        return []
    asked = rechecks[0].asked
    return [
        f"recheck: the first {asked} stored item(s) of each cell re-run with DSPy's cache off (the serving stack's "
        "own noise at the run's temperature; nothing stored)",
        *(f"  {_cell_line(r)}" for r in rechecks),
        "  score changed: % of scored re-runs now right where stored wrong or the reverse, Wilson 95% CI; noise band: "
        "how far both cells' re-run noise alone could move the Δ on its n paired items (95%, each rate at its upper "
        "bound)",
    ]


def log_recheck(run_id: str, rechecks: Sequence[Recheck]) -> None:
    """The recheck on the comparison's MLflow run: ``recheck.jsonl``, ``recheck_answers.jsonl`` and
    ``recheck.txt``. A failed write is logged, never raised (the comparison has finished)."""
    try:
        store.log_table(run_id, recheck_rows(rechecks), "recheck.jsonl")
        store.log_table(run_id, recheck_answer_rows(rechecks), "recheck_answers.jsonl")
        store.log_text(run_id, "\n".join(recheck_lines(rechecks)), "recheck.txt")
    except Exception as exc:
        logger.warning("the recheck could not be logged to MLflow: %s", redact(f"{type(exc).__name__}: {exc}"))
