"""A method's anytime-valid paired test against the baseline, as a sequential comparison ended
(:class:`BaselinePair`): what ``compare --sequential`` keeps on its result, logs as ``sequential.jsonl`` and reads
back with ``load_results(run_id=...)``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from dspy_for.stats import SequentialResult

__all__ = ["BaselinePair"]


@dataclass(frozen=True)
class BaselinePair:
    """One method's sequential test against the baseline as the comparison ended: resolved (with its stopping n and
    direction) or not (with the current interval), over ``result.n`` paired items. (``advise`` tests candidates
    against each other: :class:`~dspy_for.experiments.advisor.result.CandidatePair`.)"""

    dataset: str
    method: str
    baseline: str
    result: SequentialResult

    def text(self) -> str:
        r = self.result
        interval = f"Δ {100 * r.diff:+.1f} pts, anytime-valid CI [{100 * r.low:+.1f}, {100 * r.high:+.1f}]"
        if r.resolved:
            who = self.method if r.direction > 0 else self.baseline
            return f"{self.method} vs {self.baseline}: resolved at n={r.stopped_at}, {who} better ({interval})"
        return f"{self.method} vs {self.baseline}: unresolved after n={r.n} ({interval})"

    def row(self) -> dict[str, Any]:
        """As plain data (a row of ``sequential.jsonl``)."""
        head = {"dataset": self.dataset, "method": self.method, "baseline": self.baseline}
        return {**head, **self.result.to_dict(), "text": self.text()}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> BaselinePair:
        """A pair from its row (:meth:`row`), as ``sequential.jsonl`` keeps it."""
        result = SequentialResult(**{f.name: row[f.name] for f in fields(SequentialResult)})
        return cls(str(row["dataset"]), str(row["method"]), str(row["baseline"]), result)
