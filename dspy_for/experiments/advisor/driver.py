"""``advise``: for the user's LM, task and budget, which method should they run? (See the package docstring.)

Flow: options → one validated :class:`~dspy_for.experiments.spec.ExperimentSpec` (every candidate, LM, role and
option checked before any LM call) → the items in one seeded order → an MLflow parent run → the pilot (CoT first:
its cost sizes k and N; each candidate prepared by the run path, run on the pilot's items, its records stored for
resume, dropped if over budget: :mod:`.budget`) → the rounds (:mod:`.rounds`) → the answer (:mod:`.report`). One
:class:`~dspy_for.experiments.core.SpendLimit` (``max_cost``) covers every item the run starts, pilot and rounds.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import dspy

from dspy_for.experiments.advisor.budget import check_numbers, check_priced_for_budget, no_fit_error, over_budget
from dspy_for.experiments.advisor.candidates import (
    Candidate,
    select_candidates,
    sized_options,
    sizing_budget,
    spec_line,
)
from dspy_for.experiments.advisor.report import frontier_figure, log_advice
from dspy_for.experiments.advisor.result import (
    FAILED,
    NOT_RUN,
    OVER_BUDGET,
    RECOMMENDED,
    SIZING,
    Advice,
    CandidateOutcome,
    dollars_per_item,
    new_advice,
)
from dspy_for.experiments.advisor.rounds import Rounds
from dspy_for.experiments.advisor.volume import (
    check_volume,
    check_volume_lms,
    compiled_candidates,
    volume_breakeven,
    volume_rows,
)
from dspy_for.experiments.core import MethodResult, load_examples
from dspy_for.experiments.core.compile_fit import CompileFit, compile_fit
from dspy_for.experiments.core.folders import check_results_dir
from dspy_for.experiments.core.plan import RunPlan, plan_advise
from dspy_for.experiments.core.spend import money
from dspy_for.experiments.sequential import seeded_order
from dspy_for.experiments.spec import DatasetConfig, ExperimentSpec, MethodConfig, load_spec
from dspy_for.experiments.spec.config import Overrides, task_dataset
from dspy_for.experiments.spec.settings import check_settings, value_kind
from dspy_for.experiments.tracked_run import OpenCell, TrackedRun
from dspy_for.experiments.tracking import store

__all__ = ["MARGIN", "advise"]

logger = logging.getLogger("dspy_for.advise")

#: the default margin: two methods whose accuracies differ by less than 5 points (anytime-valid CI) are as good
MARGIN = 0.05


def advise(
    *,
    lm: str | dspy.BaseLM,
    role_lms: Mapping[str, str | dspy.BaseLM] | Sequence[str] | None = None,
    lm_options: Mapping[str, Any] | Sequence[str] | None = None,
    role_lm_options: Mapping[str, Mapping[str, Any]] | Sequence[str] | None = None,
    budget: float | None = None,
    dataset: str | None = None,
    split: str | None = None,
    data: str | Path | None = None,
    methods: str | Sequence[str] | None = None,
    max_items: int | None = None,
    timeout: float | None = None,
    first: int | None = None,
    data_dir: str | None = None,
    margin: float = MARGIN,
    alpha: float = 0.05,
    pilot: int = 4,
    batch_size: int = 4,
    seed: int = 0,
    max_tokens: int | None = None,
    budget_usd: float | None = None,
    experiment: str = "advise",
    progress: bool = True,
    volume: int | None = None,
    compile: str | Sequence[str] | None = None,
    train: str | Path | None = None,
    **settings: Any,
) -> Advice | RunPlan:
    """Which method to run with ``lm`` on a task at ``budget`` tokens (and/or ``budget_usd`` USD) per item: every
    candidate measured on a pilot, then in rounds of anytime-valid paired tests until the pick is resolved (the
    package docstring; each parameter: ``docs/reference.md``, section ``advise``).

    The task: ``dataset`` and ``split``, or ``data`` (a JSONL file); ``methods``: the candidates (default: every
    method that reads no gold label); ``volume``, ``compile`` and ``train``: the cost per correct answer over the
    items you will run, compiled candidates included (:mod:`.volume`). ``settings``: the run settings ``advise``
    takes, by their declared names (:mod:`~dspy_for.experiments.spec.settings`). Bad input fails with
    :class:`~dspy_for.errors.ConfigError` before any LM call; ``dry_run=True`` returns the
    :class:`~dspy_for.experiments.core.plan.RunPlan` instead, with no LM built or called."""
    started = time.monotonic()
    settings = check_settings(settings, "advise", " from this advise() call")
    check_numbers(budget=budget, margin=margin, timeout=timeout, pilot=pilot, budget_usd=budget_usd)
    kinds, n_train = check_volume(volume, compile, train)
    d = replace(task_dataset(dataset, split, data, data_dir), first=first)
    chosen = _candidates(methods, kinds, train, n_train)
    lms = Overrides(lm=lm, role_lms=role_lms, lm_options=lm_options, role_lm_options=role_lm_options)
    run = replace(lms, max_tokens=max_tokens, seed=seed, experiment=experiment, settings=settings)
    spec = _spec(d, chosen, run, alpha=alpha, batch_size=batch_size, max_items=max_items)
    _check_priced(spec, budget_usd=budget_usd, volume=volume)
    order = seeded_order(load_examples(d), spec.seed)[: spec.max_items or None]
    if spec.dry_run:  # the plan before the spend: no MLflow run, no LM
        items_dir = spec.items_dir(store.tracking_root(spec.tracking_uri))
        students = {c.label: c.student for c in chosen if c.student is not None}
        return plan_advise(spec, order, items_dir, pilot=pilot, budget=budget, budget_usd=budget_usd, students=students)
    asked = {"budget": budget, "margin": margin, "pilot": pilot, "timeout": timeout, "methods": methods}
    if budget_usd is not None:  # (only when given: the directory of an answer without them keeps its name)
        asked["budget_usd"] = budget_usd
    if volume is not None:
        asked.update(volume=volume, compile=kinds, train=str(train) if train is not None else None)
    return _run(spec, d, order, chosen, asked, started=started, progress=progress)


def _candidates(
    methods: str | Sequence[str] | None, kinds: list[str], train: str | Path | None, n_train: int | None
) -> list[Candidate]:
    """The candidates named (default: every method that reads no gold label) and, with ``--compile``, each compiled
    on ``train``."""
    chosen = select_candidates(methods)
    if train is not None and n_train is not None:
        chosen += compiled_candidates(chosen, kinds, train, n_train)
    return chosen


def _spec(
    d: DatasetConfig,
    chosen: list[Candidate],
    overrides: Overrides,
    *,
    alpha: float,
    batch_size: int,
    max_items: int | None,
) -> ExperimentSpec:
    """The one validated spec of the run: every candidate on the task, with the LMs and settings given."""
    methods = [MethodConfig(c.method, c.label, dict(c.options), compile=c.compile) for c in chosen]
    base = ExperimentSpec(datasets=[d], methods=methods, alpha=alpha, batch_size=batch_size, max_items=max_items)
    return load_spec(base, overrides)


def _check_priced(spec: ExperimentSpec, *, budget_usd: float | None, volume: int | None) -> None:
    """A budget in USD needs every LM priced; costs at a volume need USD, or the tokens of one LM."""
    if budget_usd is not None:
        check_priced_for_budget(spec)
    if volume is not None:
        check_volume_lms(spec)


def _run(
    spec: ExperimentSpec,
    d: DatasetConfig,
    order: list[dspy.Example],
    chosen: list[Candidate],
    asked: dict[str, Any],
    *,
    started: float,
    progress: bool,
) -> Advice:
    """The advice, measured: its MLflow run, the pilot and the rounds (until ``asked``'s timeout, if any), then its
    recommendation and record."""
    timeout = asked["timeout"]
    deadline = started + timeout if timeout is not None else math.inf

    def expired() -> bool:
        return time.monotonic() >= deadline

    root = store.setup_tracking(spec.tracking_uri, spec.experiment, traces=spec.traces)
    items_dir = spec.items_dir(root)
    check_results_dir(items_dir, lambda: plan_advise(spec, order, items_dir, pilot=asked["pilot"]))
    advice = new_advice(spec, d, asked, root / "advise", pilot_items=min(asked["pilot"], len(order)))
    tags = {"dspy_for.kind": "advise", "dspy_for.fingerprint": spec.fingerprint()}
    tracked = TrackedRun(
        spec,
        items_dir=items_dir,
        name=f"advise-{d.name}",
        tags=tags,
        params={"advise": asked},
        run_dir=advice.run_dir,
        progress=progress,
        shared_records=True,
    )
    with tracked:
        advice.run_id, advice.spend = tracked.run_id, tracked.limit
        _Advising(tracked, d, order, advice, expired).run(chosen)
        _finish(advice, started, tracked)
    return advice


class _Advising:
    """The pilot, then the rounds, over one tracked run: each candidate an open cell, side by side."""

    def __init__(
        self,
        tracked: TrackedRun,
        d: DatasetConfig,
        order: list[dspy.Example],
        advice: Advice,
        expired: Callable[[], bool],
    ) -> None:
        self.tracked, self.d, self.order, self.advice, self.expired = tracked, d, order, advice, expired
        self.cells: dict[str, OpenCell] = {}  # label -> open cell, for every candidate still in the running

    def run(self, chosen: list[Candidate]) -> None:
        """The pilot, then the rounds on the items after it; their outcome into the advice."""
        a, spec = self.advice, self.tracked.spec
        assert isinstance(spec, ExperimentSpec)
        self.pilot(chosen)
        rounds = Rounds(
            a.candidates,
            self.tracked,
            self.cells,
            self.order[a.pilot_items :],
            alpha=a.alpha,
            margin=a.margin,
            batch_size=spec.batch_size,
            expired=self.expired,
            kind=value_kind(spec.epochs, spec.reducer),
            volume=a.volume,
            dataset=a.dataset,
        )
        ending = rounds.run()
        a.pairs, a.pair_alpha = rounds.pair_outcomes(), rounds.pair_alpha
        a.recommended, a.resolved, a.how = ending.label, ending.resolved, ending.how

    def pilot(self, chosen: list[Candidate]) -> None:
        """Measure every candidate on the pilot's items, side by side in three steps: CoT first (its tokens and $ per
        item size k and N), then the uncompiled candidates, then the compiled ones whose uncompiled pilot with the
        demos their compile adds is estimated within the budget (:meth:`compiled_fit`: one that cannot be is never
        compiled)."""
        a = self.advice
        budgets = a.budget is not None or a.budget_usd is not None
        if budgets and any(c.sized for c in chosen) and not any(c.label == "cot" for c in chosen):
            sizing = CandidateOutcome("cot", "cot", {}, status=SIZING, reason="run on the pilot to size k and N")
            a.candidates.append(sizing)
            cell = self.open(MethodConfig(name="cot", label="cot"), sizing)
            if cell is not None:
                self.feed_pilot([cell])
                sizing.result = cell.result
                self._sized_by(cell.result)
                self.tracked.close(cell)
        cot = [c for c in chosen if c.label == "cot"]
        students = [c for c in chosen if c.label != "cot" and c.compile is None]
        compiled = [c for c in chosen if c.label != "cot" and c.compile is not None]
        for step in (cot, students, compiled):
            opened = [(c, out, cell) for c in step for out, cell in [self.start(c)] if cell is not None]
            self.feed_pilot([cell for _, _, cell in opened])
            for c, out, cell in opened:
                self.judge_pilot(c, out, cell)
        no_fit = None if self.cells else no_fit_error(a)
        if no_fit is not None:  # bad input, found by measuring (the pilot's records are stored: a re-run reuses them)
            raise no_fit

    def start(self, c: Candidate) -> tuple[CandidateOutcome, OpenCell | None]:
        """``c``'s outcome, in the answer, and its open cell when it is to run on the pilot."""
        a = self.advice
        out = CandidateOutcome(c.label, c.method, dict(c.options), compile=c.compile)
        a.candidates.append(out)
        if self.expired():
            out.status, out.reason = NOT_RUN, "not measured: the timeout came first"
            return out, None
        student = next((s for s in a.candidates if s.label == c.student), None) if c.student else None
        if student is not None and student.status == OVER_BUDGET:
            out.status, out.over = OVER_BUDGET, list(student.over)
            out.reason = f"not compiled: {student.label}, its uncompiled program, is over the budget ({student.reason})"
            return out, None
        if student is not None and (fit := self.compiled_fit(c, student)) is not None and not fit.fits:
            out.status, out.over, out.reason = OVER_BUDGET, fit.over, f"not compiled: {fit.reason}"
            return out, None
        options, out.sized = sized_options(c, a.budget, a.cot_tokens, budget_usd=a.budget_usd, cot_cost=a.cot_cost)
        if options is None:  # too few samples or attempts fit; or CoT, which sizes them, could not be measured
            out.status, out.reason = OVER_BUDGET if a.cot_tokens is not None else FAILED, out.sized
            if out.status == OVER_BUDGET:
                out.over = [sizing_budget(a.budget, a.budget_usd, a.cot_tokens, a.cot_cost)[1]]
            return out, None
        out.options = options
        return out, self.open(MethodConfig(c.method, c.label, options, compile=c.compile), out)

    def compiled_fit(self, c: Candidate, student: CandidateOutcome) -> CompileFit | None:
        """Whether compiled candidate ``c`` can be within the budgets, from its student's pilot and its demos
        (:mod:`~dspy_for.experiments.core.compile_fit`: the estimate ``--dry-run`` makes from the same records)."""
        a = self.advice
        if student.result is None or (a.budget is None and a.budget_usd is None):
            return None
        m = MethodConfig(c.method, c.label, dict(c.options), compile=c.compile)
        spec = self.tracked.spec
        return compile_fit(
            spec, m, student.result.items, budget=a.budget, budget_usd=a.budget_usd, student_label=student.label
        )

    def feed_pilot(self, cells: list[OpenCell]) -> None:
        if cells:
            self.tracked.feed(cells, self.order[: self.advice.pilot_items], stop=lambda _r: self.expired())

    def judge_pilot(self, c: Candidate, out: CandidateOutcome, cell: OpenCell) -> None:
        """Keep ``c`` in the running after its pilot, or drop it (over the budget, or nothing scored)."""
        a = self.advice
        r = out.result = cell.result
        if c.label == "cot":
            self._sized_by(r)
        over, out.over = over_budget(r, a.budget, a.budget_usd) if r.n_scored else ("", [])
        if not r.n_scored:
            error = next(iter(r.error_counts()), "")
            out.status = FAILED if r.n_failed else NOT_RUN
            out.reason = f"every pilot item failed: {error}" if r.n_failed else self._not_measured()
        elif over:
            out.status, out.reason = OVER_BUDGET, over
        else:
            self.cells[c.label] = cell
            return
        logger.info("%s dropped after the pilot: %s", c.label, out.reason)
        self.tracked.close(cell)

    def _sized_by(self, cot: MethodResult) -> None:
        """CoT's measured tokens and USD per item: what k and N are sized from."""
        if cot.n_scored:
            self.advice.cot_tokens, self.advice.cot_cost = cot.tokens_per_item, dollars_per_item(cot)

    def _not_measured(self) -> str:
        if self.tracked.out_of_money:
            return f"not measured: max_cost {money(self.tracked.limit.max_cost, as_given=True)} was reached first"
        return "not measured: the timeout came first"

    def open(self, m: MethodConfig, out: CandidateOutcome) -> OpenCell | None:
        """``m`` opened in the tracked run (prepared through the run path, compiled, with its MLflow child run and
        stored records); None (and ``out`` marked) if it cannot run."""
        cell = self.tracked.open(self.d, m, [*self.order])  # everything it may score: a compile leaves them out
        if cell is None:
            err = self.tracked.error(self.d, m)
            if err is None:  # max_cost was reached before its compile started
                out.status, out.reason = NOT_RUN, self._not_measured().replace("not measured", "not compiled")
            else:
                out.status, out.reason = FAILED, f"could not run: {err}"
            return None
        out.compiled = cell.run.compiled_path
        return cell


def _finish(advice: Advice, started: float, tracked: TrackedRun) -> None:
    """The recommendation's status and Python line, items used, the plot and the parent run's record (a plot or
    record that fails is logged; the answer stands)."""
    rec = advice.recommendation
    if rec is not None:
        rec.status = RECOMMENDED
        advice.python_line = spec_line(advice.spec, rec.method, advice.signature, rec.options)
    keys = {i.item_key for c in advice.candidates if c.result is not None for i in c.result.items}  # epochs: once
    advice.items_used = len(keys)
    if advice.volume is not None:
        advice.at_volume = volume_rows(advice)
        advice.breakeven = volume_breakeven(advice)
    advice.elapsed = time.monotonic() - started
    parent = tracked.run_id  # None: the tracking store could not start it (its warning said why)
    tracked.report("the frontier plot", lambda: _frontier(advice, parent))
    if parent is not None:
        tracked.report("the answer's record", lambda: log_advice(parent, advice))


def _frontier(advice: Advice, parent: str | None) -> None:
    fig = frontier_figure(advice)
    if fig is not None and advice.run_dir is not None:
        path = advice.run_dir / f"frontier_{advice.dataset}.png"
        store.log_figure(parent, fig, path)  # drawn where the store is served
        advice.plots.append(path)
