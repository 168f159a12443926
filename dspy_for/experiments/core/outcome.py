"""What every run's outcome tells alike: ``compare``'s :class:`ComparisonResult`, ``sweep``'s
:class:`~dspy_for.experiments.sweeps.SweepResult` and ``advise``'s :class:`~dspy_for.experiments.advisor.Advice` all
answer :class:`RunOutcome`, and the command line ends each of
them the same way."""

from __future__ import annotations

import html
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from dspy_for.experiments.core.cell import Cell
from dspy_for.experiments.core.costs import BreakEvenRow
from dspy_for.experiments.core.frames import comparison_frame, comparisons_frame
from dspy_for.experiments.core.frames_html import comparison_html
from dspy_for.experiments.core.pairs import BaselinePair
from dspy_for.experiments.core.recheck import Recheck
from dspy_for.experiments.core.records import MethodResult
from dspy_for.experiments.core.spend import SpendLimit
from dspy_for.experiments.spec.model import ExperimentSpec

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ComparisonResult", "ComparisonResults", "Outcome", "RunOutcome"]


class RunOutcome(Protocol):
    """Items scored (right or wrong), failed (an error, never a score) and unparsed (scored wrong); what the run
    spent against its ``max_cost`` (``spend``) and whether that left work out (``stopped_by_cost``, one meaning:
    :attr:`SpendLimit.stopped <dspy_for.experiments.core.spend.SpendLimit.stopped>`); ``ok``: nothing failed and
    nothing asked for was left out, so every number shown was measured over everything asked for."""

    @property
    def n_scored(self) -> int: ...

    @property
    def n_failed(self) -> int: ...

    @property
    def n_unparsed(self) -> int: ...

    @property
    def spend(self) -> SpendLimit | None: ...

    @property
    def stopped_by_cost(self) -> bool: ...

    @property
    def ok(self) -> bool: ...


class Outcome:
    """What the outcome of ``compare`` and of ``advise`` count alike over their methods' records
    (:meth:`method_results`): the items scored, failed and unparsed, each distinct error, and whether ``max_cost``
    left items out (the shared part of :class:`~dspy_for.experiments.core.outcome.RunOutcome`)."""

    spend: SpendLimit | None

    def method_results(self) -> list[MethodResult]:
        raise NotImplementedError

    @property
    def n_scored(self) -> int:
        return sum(r.n_scored for r in self.method_results())

    @property
    def n_failed(self) -> int:
        return sum(r.n_failed for r in self.method_results())

    @property
    def n_unparsed(self) -> int:
        return sum(r.n_unparsed for r in self.method_results())

    @property
    def stopped_by_cost(self) -> bool:
        """``max_cost`` was reached with items left out (a later run resumes them)."""
        return self.spend is not None and self.spend.stopped

    def item_errors(self) -> Counter[str]:
        """Each distinct item error (secrets masked) with how many items it failed."""
        total: Counter[str] = Counter()
        for r in self.method_results():
            total.update(r.error_counts())
        return total


@dataclass
class ComparisonResult(Outcome):
    """What ``compare`` returns (a :class:`~dspy_for.experiments.core.outcome.RunOutcome`): every method's records
    per dataset, methods that could not run, the cells the table shows, the MLflow parent run and the plots.
    ``config``: the config file it ran from, as given (None: a spec object)."""

    spec: ExperimentSpec
    results: dict[str, dict[str, MethodResult]] = field(default_factory=dict)  # dataset -> label -> result
    errors: dict[str, dict[str, str]] = field(default_factory=dict)  # a method that could not run at all
    #: one per method × dataset, in the spec's order, then the methods that could not run (set once the run is reported)
    cells: list[Cell] = field(default_factory=list)
    run_id: str | None = None
    run_dir: Path | None = None
    plots: list[Path] = field(default_factory=list)
    sequential: list[BaselinePair] = field(default_factory=list)  # a sequential comparison's pairs
    spend: SpendLimit | None = None  # what the run spent, against its ``max_cost``
    #: each compiled method's break-even volumes against its student and the most accurate uncompiled method
    #: (:func:`~dspy_for.experiments.core.costs.breakeven_rows`)
    breakeven: list[BreakEvenRow] = field(default_factory=list)
    #: records the config asks for that the results store does not have, by dataset and label (set by
    #: :func:`~dspy_for.experiments.load_results` for an incomplete cell; a run's own result leaves it empty)
    missing: dict[str, dict[str, int]] = field(default_factory=dict)
    #: with ``recheck = N``: each cell's first N stored items re-run with DSPy's cache off
    #: (:func:`~dspy_for.experiments.core.recheck.recheck_cells`)
    recheck: list[Recheck] = field(default_factory=list)
    config: str | None = None

    def method_results(self) -> list[MethodResult]:
        return [r for by_label in self.results.values() for r in by_label.values()]

    @property
    def rows(self) -> list[dict[str, object]]:
        """The cells as plain data (:meth:`~dspy_for.experiments.core.cell.Cell.row`): ``summary.jsonl``."""
        return [c.row() for c in self.cells]

    @property
    def judge_errors(self) -> int:
        return sum(r.judge_errors for r in self.method_results())

    def to_pandas(self, level: str = "items") -> pd.DataFrame:
        """The result as a pandas data frame: ``items`` (one row per item × method × epoch), ``cells`` (one row per
        method × dataset: the printed table's numbers) or ``pairs`` (each paired test); see
        :mod:`~dspy_for.experiments.core.frames` and the column reference."""
        return comparison_frame(self, level)

    def _repr_html_(self) -> str:
        """The table in a notebook: one HTML table per dataset."""
        return comparison_html(self)

    @property
    def ok(self) -> bool:
        """No failed item, no item the judge's LM failed on, no method that could not run and no item left out by
        ``max_cost``, no re-run of a recheck that failed: every number printed is a measured one, over every item
        asked for."""
        return (
            self.n_failed == 0
            and self.judge_errors == 0
            and not any(self.errors.values())
            and not self.stopped_by_cost
            and not any(r.failed for r in self.recheck)
        )


@dataclass
class ComparisonResults(Outcome):
    """Several comparisons loaded together (``load_results([config_a, config_b])``): one result whose frames line up
    — the same columns, each of one type, the methods ordered as the tables are — and keep each record two of them
    share once, naming every config that used it (:func:`~dspy_for.experiments.core.frames.comparisons_frame`).
    ``parts``: each comparison, in the order given."""

    parts: list[ComparisonResult]
    spend: SpendLimit | None = None

    def method_results(self) -> list[MethodResult]:
        return [r for p in self.parts for r in p.method_results()]

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.parts)

    def to_pandas(self, level: str = "items") -> pd.DataFrame:
        """The comparisons as one data frame at ``level`` (``items``, ``cells`` or ``pairs``), as
        :meth:`ComparisonResult.to_pandas` gives each."""
        return comparisons_frame(self.parts, level)

    def _repr_html_(self) -> str:
        """Each comparison's tables, under its config."""
        return "".join(f"<h4>{html.escape(p.config or p.spec.experiment)}</h4>{comparison_html(p)}" for p in self.parts)
