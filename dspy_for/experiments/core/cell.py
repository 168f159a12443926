"""One method on one dataset as every report shows it: a :class:`Cell` holds its
:class:`~dspy_for.experiments.core.summary.Summary` (paired with the baseline), or the error that kept it from
running, and says which it is (:attr:`Cell.status`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from dspy_for.experiments.core.summary import Summary

__all__ = ["Cell", "CellStatus"]

CellStatus = Literal["measured", "not run", "failed", "could not run"]


@dataclass(frozen=True)
class Cell:
    """One method on one dataset as every report shows it (the table's row, a frame's cell, ``summary.jsonl``): its
    :class:`Summary`, paired with the baseline, or the error that kept it from running (``summary`` None)."""

    dataset: str
    split: str
    label: str  # the method's label in the run
    method: str  # its registry name
    summary: Summary | None = None
    error: str | None = None  # the method could not run at all
    diagnostics: dict[str, Any] | None = None  # what the method's registry entry declares it reports

    @property
    def measured(self) -> bool:
        """Scored items to report on (False: could not run, every item failed, or none started)."""
        return self.summary is not None and self.summary.accuracy is not None

    @property
    def status(self) -> CellStatus:
        """``measured``; ``not run`` (no record: nothing started, or none stored); ``failed`` (every record an
        error); ``could not run`` (the method could not be built or compiled: :attr:`error`)."""
        s = self.summary
        if s is None:
            return "could not run"
        if s.measured:
            return "measured"
        return "failed" if s.failed else "not run"

    def row(self) -> dict[str, Any]:
        """The cell as plain data (``summary.jsonl``): :meth:`Summary.row` with its dataset and split, its
        ``diagnostics`` when there are any; ``{dataset, split, method, error}`` for a method that could not run."""
        head = {"dataset": self.dataset, "split": self.split}
        if self.summary is None:
            return {**head, "method": self.label, "error": self.error}
        row = {**head, **self.summary.row()}
        return {**row, "diagnostics": self.diagnostics} if self.diagnostics is not None else row
