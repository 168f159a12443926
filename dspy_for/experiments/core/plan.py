"""The plan before the spend: what a run will take, worked out without building an LM, starting a server or making a
call (``dry_run``: ``compare(..., dry_run=True)``, ``advise(..., dry_run=True)``, ``sweep(..., dry_run=True)``, the
commands' ``--dry-run``).

A :class:`RunPlan` has one :class:`~.plan_cells.CellPlan` per method × dataset (its compile step on a line of its
own): items to run and items already stored, and the calls, tokens, dollars and LM seconds they take, each an
estimate with a range and its source (:mod:`.plan_cells` says which evidence comes first); the run's totals; and
whether ``max_cost`` would stop it, and at about which item (:class:`CostStop`). A sweep's cells are one trial's,
over the corners of its search space, and its totals are for ``n_trials``; advise and a sequential comparison stop
early, so theirs are the most they can take (``bound``).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import dspy

from dspy_for.errors import DspyForError
from dspy_for.experiments.core.compile_fit import compile_fit
from dspy_for.experiments.core.estimates import CellEstimates, Estimate, sum_estimates
from dspy_for.experiments.core.evidence import Evidence
from dspy_for.experiments.core.plan_cells import CellPlan, compile_cell, failed_cell, items_cell
from dspy_for.experiments.core.records import unit_keys
from dspy_for.experiments.core.schedule import WorkQueue
from dspy_for.experiments.methods import get_method
from dspy_for.experiments.spec.model import DatasetConfig, ExperimentSpec, MethodConfig, RunSpec, load_examples

__all__ = ["CellPlan", "CostStop", "RunPlan", "examples_or_error", "plan_advise", "plan_compare", "side_by_side"]

#: a sweep's search space is estimated at the corners of its ranges (every choice of a categorical), at most these


@dataclass(frozen=True)
class CostStop:
    """Whether ``max_cost`` would stop the run: ``verdict`` "would stop" (the estimate reaches it), "might stop" (only
    the high end does) or "would not stop"; ``at_item``: about which of the ``of_items`` items it is reached at (0:
    during a compile step, before any item), in the order the run starts them; ``during``: the cell it is in."""

    max_cost: float
    verdict: Literal["would stop", "might stop", "would not stop"]
    at_item: int | None
    of_items: int
    during: str


@dataclass
class RunPlan:
    """What a run will take (see the module docstring); ``trials``: how many times a sweep runs its cells."""

    command: str
    cells: list[CellPlan]
    num_threads: int = 1
    max_cost: float | None = None
    trials: int = 1
    bound: str = ""
    notes: list[str] = field(default_factory=list)

    def total(self, what: Literal["calls", "tokens", "usd", "seconds"]) -> Estimate | None:
        """The run's total of one quantity (None when a cell's is unknown: an unpriced LM, an unmeasured time)."""
        parts = [getattr(c, what) for c in self.cells if c.error is None]
        total = sum_estimates(parts, "the cells' sum")
        return total.times(self.trials) if total is not None else None

    @property
    def ok(self) -> bool:
        """Every cell could be planned (a cell the run could not run has an ``error``)."""
        return all(c.error is None for c in self.cells)

    @property
    def to_run(self) -> int:
        return self.trials * sum(c.to_run for c in self.cells if c.step == "items")

    @property
    def stored(self) -> int:
        return sum(c.stored for c in self.cells if c.step == "items")

    @property
    def cost_stop(self) -> CostStop | None:
        """Whether ``max_cost`` would stop the run (None without one, or when a cell is not priced)."""
        if self.max_cost is None or any(c.usd is None for c in self.cells if c.error is None):
            return None
        return _cost_stop(self)


def _order(plan: RunPlan) -> Iterator[tuple[CellPlan, int]]:
    """The run's spending in the order it happens: (cell, items) steps — compile steps first (a run prepares every
    method before its items start), then the items, one cell after another on one thread, else costliest first
    (:mod:`~dspy_for.experiments.core.schedule`)."""
    for _ in range(plan.trials):
        cells = [c for c in plan.cells if c.error is None]
        for c in cells:
            if c.step == "compile" and c.to_run:
                yield c, 0
        items = [c for c in cells if c.step == "items" and c.to_run]
        if plan.num_threads <= 1 or plan.trials > 1:
            for c in items:
                yield from ((c, 1) for _ in range(c.to_run))
        else:  # as the run's threads start them: the cell with the most work left first (at its calls per item)
            queue = WorkQueue([(c, range(c.to_run)) for c in items], lambda c: c.calls.value / c.to_run)
            while (picked := queue.next(lambda c: True)) is not None:
                yield picked[0], 1


def _cost_stop(plan: RunPlan) -> CostStop:
    assert plan.max_cost is not None
    spent = done = 0.0
    at: tuple[int, str] | None = None
    for cell, items in _order(plan):
        assert cell.usd is not None
        spent += cell.usd.value / (cell.to_run if items else 1)
        done += items
        if at is None and spent >= plan.max_cost:
            where = f"{cell.label} on {cell.dataset}/{cell.split}"
            at = (int(done), where if items else f"the compile step of {where}")
    total = plan.total("usd")
    verdict: Literal["would stop", "might stop", "would not stop"] = "would not stop"
    if at is not None:
        verdict = "would stop"
    elif total is not None and total.high >= plan.max_cost:
        verdict = "might stop"
    return CostStop(plan.max_cost, verdict, at[0] if at else None, plan.to_run, at[1] if at else "")


# ------------------------------------------------------------------------------------------------ drivers


def examples_or_error(d: DatasetConfig) -> tuple[list[dspy.Example] | None, str | None]:
    try:
        return load_examples(d), None
    except (DspyForError, OSError) as exc:
        return None, f"the data could not be read: {type(exc).__name__}: {exc}"


def _cells(
    ev: Evidence,
    d: DatasetConfig,
    methods: Sequence[MethodConfig],
    examples: list[dspy.Example] | None,
    error: str | None,
) -> list[CellPlan]:
    out: list[CellPlan] = []
    for m in methods:
        if examples is None:
            out.append(failed_cell(d, m, "items", error or "no items"))
            continue
        if m.compile:
            out.append(compile_cell(ev, d, m, examples, methods))
        out.append(items_cell(ev, d, m, examples, methods))
    return out


def plan_compare(spec: ExperimentSpec, items_dir: Path | None, exclude: Sequence[tuple[str, str, str]] = ()) -> RunPlan:
    """A comparison's plan: every method on every dataset (``items_dir``: where the run keeps its records, see
    :meth:`~dspy_for.experiments.spec.ExperimentSpec.items_dir`; None: nothing is stored; ``exclude``: cells (dataset,
    split, label) whose own records and compiled program are not read)."""
    ev = Evidence(spec, items_dir, exclude)
    cells: list[CellPlan] = []
    notes: list[str] = []
    for d in spec.datasets:
        examples, error = examples_or_error(d)
        if examples is not None and spec.sequential:  # the order sequential.seeded_order takes them in
            random.Random(spec.seed).shuffle(examples)
            examples = examples[: spec.max_items or None]
        cells += _cells(ev, d, spec.methods, examples, error)
    bound = ""
    if spec.sequential:
        bound = (
            "a sequential comparison stops once every method is resolved against the baseline: this is the most it "
            "takes" + (f" (max_items {spec.max_items})" if spec.max_items else "")
        )
    if spec.match_budget:
        sized = [m.label for m in spec.methods if _sized(m)]
        if sized:
            notes.append(
                f"match_budget sizes {', '.join(sized)} when the run has measured its budget: estimated here "
                "with the options it is given"
            )
    if spec.judge is not None:
        notes.append("the judge's calls are not estimated")
    return RunPlan("compare", cells, spec.threads, spec.max_cost, bound=bound, notes=notes + side_by_side(spec))


def side_by_side(spec: RunSpec) -> list[str]:
    """What LM time means when items run side by side."""
    threads = spec.threads
    if threads <= 1:
        return []
    return [
        f"LM time adds up every call's seconds, and the run keeps {threads} items in flight (num_threads): its wall "
        "time is shorter"
    ]


def _sized(m: MethodConfig) -> bool:
    return get_method(m.name).sized is not None


def plan_advise(
    spec: ExperimentSpec,
    examples: list[dspy.Example],
    items_dir: Path | None,
    *,
    pilot: int,
    budget: float | None = None,
    budget_usd: float | None = None,
    students: Mapping[str, str] | None = None,
) -> RunPlan:
    """Advise's plan: every candidate on every item it may run (``examples``: the seeded order, ``max_items`` applied;
    ``items_dir``: where the run keeps its records). It stops once the recommendation is resolved: this is its bound.
    A compiled candidate (``students``: its label -> its uncompiled student's) whose student's pilot is stored and
    estimates it over ``budget`` / ``budget_usd`` with its demos is not compiled, as the run decides
    (:mod:`.compile_fit`)."""
    ev = Evidence(spec, items_dir)
    d = spec.datasets[0]
    cells = _cells(ev, d, spec.methods, examples, None)
    notes = [
        "with a budget, k and N are sized from the pilot's measured cost: estimated here at each candidate's options",
        *side_by_side(spec),
    ]
    by_label = {m.label: m for m in spec.methods}
    for label, student in (students or {}).items() if budget is not None or budget_usd is not None else ():
        units = unit_keys(examples[:pilot], spec.epochs)
        stored = ev.shared(d, by_label[student])
        fit = None
        if all(k in stored for k in units):
            m = by_label[label]
            fit = compile_fit(
                spec, m, [stored[k] for k in units], budget=budget, budget_usd=budget_usd, student_label=student
            )
        if fit is None:
            notes.append(f"{label} is compiled only if {student}'s pilot with its demos can be within the budget")
        elif not fit.fits:
            cells = [_not_compiled(c, fit.reason) if c.label == label else c for c in cells]
    bound = (
        f"advise stops once its recommendation is resolved (after a pilot of {min(pilot, len(examples))} items per "
        "candidate): this is the most it takes, every candidate on every item"
    )
    return RunPlan("advise", cells, spec.threads, spec.max_cost, bound=bound, notes=notes)


def _not_compiled(c: CellPlan, reason: str) -> CellPlan:
    """A compiled candidate's cell when it is not compiled: nothing to run, and why."""
    zero = CellEstimates.zero(f"not compiled: {reason}")
    return replace(c, to_run=0, stored=0, calls=zero.calls, tokens=zero.tokens, usd=zero.usd, seconds=zero.seconds,
                   note=f"not compiled: {reason}")  # fmt: skip
