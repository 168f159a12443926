"""The noise floor of a finished comparison: re-run the first N stored items of each cell (method × dataset) with
DSPy's cache off, and count how many answers changed::

    rechecks = recheck_cells(spec, result, items_dir)     # after compare() finished; one Recheck per cell

Each cell is prepared again as the comparison prepared it (:func:`~dspy_for.experiments.core.prepare.prepare_run`:
the same LMs, prompts and compiled program, so the same result key) and its items run through the run core with
no results store (:class:`~dspy_for.experiments.core.run.Evaluation`), inside
:func:`~dspy_for.lm.epochs.fresh`: every LM call reaches the endpoint, and neither DSPy's cache nor the results
store keeps what it answered. What changed is the serving stack's own noise at the run's temperature (a
non-deterministic build, batching, a different build since the records were stored), which a Δ between two cells
must beat: :func:`~dspy_for.stats.noise_band` says how far it alone could move each cell's Δ.

The items are the first N of the dataset, in its order, that the cell has a stored (scored) record of; an item's
every stored epoch is re-run. A re-run whose LM call failed is an error, counted apart, never a changed answer; a
re-run that DSPy's cache served anyway (an LM that does not take ``cache=False``) is one too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from dspy_for.datasets import content_key
from dspy_for.experiments.core.cell import Cell
from dspy_for.experiments.core.prepare import PreparedRun, prepare_run
from dspy_for.experiments.core.records import ItemResult, MethodResult, record_key
from dspy_for.experiments.core.run import Evaluation, Feed
from dspy_for.experiments.core.store import ResultStore
from dspy_for.experiments.spec.model import DatasetConfig, ExperimentSpec, MethodConfig, load_examples
from dspy_for.lm.epochs import fresh
from dspy_for.secrets import redact
from dspy_for.stats import FlipRate, flip_rate, noise_band

if TYPE_CHECKING:
    import dspy

__all__ = ["Recheck", "RecheckedAnswer", "recheck_cells"]

logger = logging.getLogger("dspy_for.experiments")


@dataclass(frozen=True)
class RecheckedAnswer:
    """One stored record and its re-run: the answers as given and their scores (``rerun`` None: the re-run failed,
    ``error`` says why, or did not start)."""

    id: str
    epoch: int
    question: str
    stored: str
    stored_score: float
    rerun: str | None = None
    rerun_score: float | None = None
    error: str | None = None

    @property
    def scored(self) -> bool:
        return self.rerun_score is not None

    @property
    def changed(self) -> bool:
        return self.scored and self.rerun != self.stored

    def row(self) -> dict[str, Any]:
        return {**self.__dict__, "changed": self.changed}


@dataclass(frozen=True)
class Recheck:
    """One cell's recheck: ``asked`` items, their re-run answers, and the cell's stored Δ against the baseline
    (``delta``, ``p_value`` over ``paired_n`` items; None for the baseline or without one). ``band``: how far the
    noise of this cell and the baseline's, as rechecked, could move that Δ alone (a fraction;
    :func:`~dspy_for.stats.noise_band`; None when either has no scored re-run). ``note``: why nothing was re-run."""

    dataset: str
    split: str
    label: str
    asked: int
    answers: tuple[RecheckedAnswer, ...] = ()
    baseline: bool = False
    delta: float | None = None
    p_value: float | None = None
    paired_n: int = 0
    band: float | None = None
    note: str | None = None

    @property
    def n(self) -> int:
        """Re-run answers that were scored."""
        return sum(1 for a in self.answers if a.scored)

    @property
    def changed(self) -> int:
        """Scored re-runs whose answer differs from the stored one."""
        return sum(1 for a in self.answers if a.changed)

    @property
    def to_right(self) -> int:
        """Re-runs now scored higher than stored (wrong → right)."""
        return sum(1 for a in self.answers if a.rerun_score is not None and a.rerun_score > a.stored_score)

    @property
    def to_wrong(self) -> int:
        """Re-runs now scored lower than stored (right → wrong)."""
        return sum(1 for a in self.answers if a.rerun_score is not None and a.rerun_score < a.stored_score)

    @property
    def failed(self) -> int:
        """Re-runs that failed (an LM error): left out of every count."""
        return sum(1 for a in self.answers if a.error is not None)

    @property
    def not_run(self) -> int:
        """Stored records whose re-run did not start (``max_cost`` reached)."""
        return sum(1 for a in self.answers if not a.scored and a.error is None)

    @property
    def rate(self) -> FlipRate | None:
        """How often a re-run's score differs from the stored one, with its interval; None with nothing re-run."""
        return flip_rate(self.to_right + self.to_wrong, self.n) if self.n else None


class Ran(Protocol):
    """What a recheck reads of the comparison it follows (a
    :class:`~dspy_for.experiments.core.outcome.ComparisonResult`): its cells, records and the methods that could not
    run."""

    cells: list[Cell]
    results: dict[str, dict[str, MethodResult]]
    errors: dict[str, dict[str, str]]


def recheck_cells(
    spec: ExperimentSpec, result: Ran, items_dir: Path, feed: Callable[[list[Feed]], object]
) -> list[Recheck]:
    """Re-run the first ``spec.recheck`` stored items of every cell of ``result`` with DSPy's cache off (see the
    module docstring) through ``feed`` (the run's one loop:
    :meth:`~dspy_for.experiments.tracked_run.TrackedRun.recheck`, under its ``max_cost``); one :class:`Recheck` per
    method × dataset, in the spec's order. Nothing is written to the results store or DSPy's cache."""
    n = spec.recheck or 0
    if n < 1:
        return []
    cells = {(c.dataset, c.label): c for c in result.cells}
    shells: list[Recheck] = []
    plans: list[tuple[int, Evaluation, list[ItemResult]]] = []
    for d in spec.datasets:
        examples: list[dspy.Example] | None = None
        for m in spec.methods:
            cell = cells.get((d.name, m.label))
            shell = Recheck(d.name, d.split, m.label, n, baseline=m.label == spec.baseline)
            if cell is not None and cell.summary is not None:
                s = cell.summary
                shell = replace(shell, delta=s.delta, p_value=s.p_value, paired_n=s.paired_n)
            stored = _stored(result, d, m)
            if stored is None:
                error = result.errors.get(d.name, {}).get(m.label)
                shells.append(replace(shell, note=f"could not run: {error}" if error else "did not run"))
                continue
            if not stored:
                shells.append(replace(shell, note="no stored items to re-run"))
                continue
            run, why = _prepared(spec, d, m, examples, items_dir)
            if run is None:
                shells.append(replace(shell, note=why))
                continue
            examples = run.examples
            chosen = _first_stored(examples, stored, n)
            records = [stored[k] for ex in chosen for k in _keys(ex, spec.epochs) if k in stored]
            plans.append((len(shells), Evaluation(run, progress=True), records))
            shells.append(shell)
    _rerun(plans, feed)
    done = [*shells]
    for index, ev, records in plans:
        rerun = {r.key: r for r in ev.result.items}
        done[index] = replace(shells[index], answers=tuple(_answer(s, rerun.get(s.key)) for s in records))
    return _with_bands(done)


def _stored(result: Ran, d: DatasetConfig, m: MethodConfig) -> dict[str, ItemResult] | None:
    """The cell's stored records (scored or unparsed; failed ones are not kept) by record key; None: it did not
    run."""
    found = result.results.get(d.name, {}).get(m.label)
    if found is None:
        return None
    return {r.key: r for r in found.items if not r.failed}


def _prepared(
    spec: ExperimentSpec, d: DatasetConfig, m: MethodConfig, examples: list[dspy.Example] | None, items_dir: Path
) -> tuple[PreparedRun | None, str]:
    """The cell's run prepared again (its examples loaded unless given; its compiled program read back, not compiled
    again) with no judge, when it has the result key its stored records are kept under; else None and why."""
    try:
        examples = examples if examples is not None else load_examples(d)
        run = prepare_run(spec, d, m, examples=examples, compile_dir=items_dir / d.name / d.split)
    except Exception as exc:  # the method cannot be built now (an LM, a compiled program gone)
        return None, f"could not be prepared again: {redact(f'{type(exc).__name__}: {exc}')}"
    if not ResultStore.in_dir(items_dir, d.name, d.split, m.label, run.key).path.is_file():
        return None, (
            "prepared again, it has another result key than its stored records (e.g. `match_budget` sized its "
            "options from this run's costs): not re-run"
        )
    return replace(run, judge=None, judge_name=""), ""


def _first_stored(examples: list[dspy.Example], stored: dict[str, ItemResult], n: int) -> list[dspy.Example]:
    """The first ``n`` examples, in the dataset's order, with a stored record (epoch 0, or any epoch)."""
    keys = {r.item_key for r in stored.values()}
    out: list[dspy.Example] = []
    seen: set[str] = set()
    for ex in examples:
        key = content_key(ex.get("question"), ex.get("answer"))
        if key in keys and key not in seen:
            seen.add(key)
            out.append(ex)
            if len(out) == n:
                break
    return out


def _keys(example: dspy.Example, epochs: int) -> list[str]:
    item = content_key(example.get("question"), example.get("answer"))
    return [record_key(item, e) for e in range(epochs)]


def _rerun(plans: list[tuple[int, Evaluation, list[ItemResult]]], feed: Callable[[list[Feed]], object]) -> None:
    """Every cell's chosen items side by side (as the comparison ran them), DSPy's cache off."""
    if not plans:
        return
    with fresh():
        try:
            feed([Feed(ev, _examples_of(ev.run, records)) for _, ev, records in plans])
        finally:
            for _, ev, _ in plans:
                ev.close()


def _examples_of(run: PreparedRun, records: list[ItemResult]) -> list[dspy.Example]:
    wanted = {r.item_key for r in records}
    return [ex for ex in run.examples if content_key(ex.get("question"), ex.get("answer")) in wanted]


def _answer(stored: ItemResult, rerun: ItemResult | None) -> RecheckedAnswer:
    base = RecheckedAnswer(stored.id, stored.epoch, stored.question, stored.answer, stored.score)
    if rerun is None:
        return base
    if rerun.failed:
        return replace(base, error=rerun.error)
    if rerun.usage.get("total", {}).get("cached_calls"):
        return replace(base, error="served from DSPy's cache: this LM does not take `cache=False`, not re-run")
    return replace(base, rerun=rerun.answer, rerun_score=rerun.score)


def _with_bands(rechecks: list[Recheck]) -> list[Recheck]:
    """Each non-baseline cell with the band its own and its baseline's noise could move its Δ in."""
    base = {r.dataset: r for r in rechecks if r.baseline}
    out = []
    for r in rechecks:
        b = base.get(r.dataset)
        rates = [r.rate, b.rate if b is not None else None]
        if not r.baseline and r.paired_n and all(x is not None for x in rates):
            r = replace(r, band=noise_band([x for x in rates if x is not None], r.paired_n))
        out.append(r)
    return out
