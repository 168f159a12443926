"""``advise``: for the user's LM, task and budget, which method should they run? (See the package docstring.)

Flow: options → one validated :class:`~dspy_for.experiments.spec.ExperimentSpec` (every candidate, LM, role and
option checked before any LM call) → the items in one seeded order → an MLflow parent run → the pilot (CoT first:
its cost sizes k and N; each candidate prepared by the run path, run on the pilot's items, its records stored for
resume, dropped if over budget: :mod:`.budget`) → the rounds (:mod:`.rounds`) → the answer (:mod:`.report`). One
:class:`~dspy_for.experiments.core.SpendLimit` (``max_cost``) covers every item the session starts, pilot and rounds.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import dspy

from dspy_for.datasets import signature_for
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
)
from dspy_for.experiments.advisor.rounds import Rounds
from dspy_for.experiments.advisor.volume import (
    check_volume,
    check_volume_lms,
    compiled_candidates,
    volume_breakeven,
    volume_rows,
)
from dspy_for.experiments.comparison import prepare_tracked
from dspy_for.experiments.core import Evaluation, MethodResult, ResultStore, SpendLimit, load_examples
from dspy_for.experiments.core.plan import RunPlan, plan_advise
from dspy_for.experiments.core.prepare import PreparedRun
from dspy_for.experiments.core.sinks import interruptible
from dspy_for.experiments.core.spend import money
from dspy_for.experiments.sequential import seeded_order
from dspy_for.experiments.spec import DatasetConfig, ExperimentSpec, MethodConfig, load_spec
from dspy_for.experiments.spec.config import Overrides, task_dataset
from dspy_for.experiments.spec.settings import check_settings, value_kind
from dspy_for.experiments.tracking import store
from dspy_for.experiments.tracking.sink import MlflowSink

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
    """Which method to run with ``lm`` on a task at ``budget`` tokens (and/or ``budget_usd`` USD) per item (package
    docstring).

    The task: ``dataset`` and ``split`` (default ``val``) of a benchmark, or ``data``, a JSONL file with
    ``question`` and ``answer`` per line; ``first``: only its first N items (before the seeded order: e.g. the
    items a comparison already stored). ``methods``: candidate labels or registry names (default: every method
    that reads no gold label). ``max_items`` / ``timeout`` (seconds) bound the rounds; ``margin`` (accuracy as a
    fraction, 0.05 = 5 points) is the difference below which two methods count as equally good; ``alpha`` is the
    error rate over all the pairs tested. ``pilot``: items that measure each candidate's cost; ``batch_size``:
    items per round. ``settings``: the run settings ``advise`` takes, by their declared names
    (:mod:`~dspy_for.experiments.spec.settings`): ``num_threads``, ``max_cost`` (USD: once the session has spent it
    no item starts and the leader so far is recommended, unresolved: ``stopped_by_cost``; a re-run resumes),
    ``epochs`` (runs per item, each its own sample) made one value by ``reducer`` (mean, majority, pass_at_k),
    ``tracking_uri``, ``results_dir``. ``volume``: the items you will run; the pick among candidates within the
    margin is then the one with the lowest cost per correct answer over them, compile included; ``compile``
    (compiler kinds, e.g. ``"bootstrap,gepa"``, with ``volume``) also tries each candidate with predictors compiled
    on ``train``, a JSONL file (:mod:`.volume`). Bad input fails with :class:`~dspy_for.errors.ConfigError` before
    any LM call (``budget_usd`` with an LM that has no price too). ``dry_run=True``: the
    :class:`~dspy_for.experiments.core.plan.RunPlan` (the most the session can take) instead, with no LM built or
    called.
    """
    started = time.monotonic()
    settings = check_settings(settings, "advise", " from this advise() call")
    check_numbers(budget=budget, margin=margin, timeout=timeout, pilot=pilot, budget_usd=budget_usd)
    kinds, n_train = check_volume(volume, compile, train)
    d = replace(task_dataset(dataset, split, data, data_dir), first=first)
    chosen = select_candidates(methods)
    if train is not None and n_train is not None:
        chosen += compiled_candidates(chosen, kinds, train, n_train)
    base = ExperimentSpec(
        datasets=[d],
        methods=[MethodConfig(c.method, c.label, dict(c.options), compile=c.compile) for c in chosen],
        alpha=alpha,
        batch_size=batch_size,
        max_items=max_items,
    )
    overrides = Overrides(
        lm=lm,
        role_lms=role_lms,
        lm_options=lm_options,
        role_lm_options=role_lm_options,
        max_tokens=max_tokens,
        seed=seed,
        experiment=experiment,
        settings=settings,
    )
    spec = load_spec(base, overrides)
    if budget_usd is not None:
        check_priced_for_budget(spec)
    if volume is not None:
        check_volume_lms(spec)
    order = seeded_order(load_examples(d), spec.seed)[: spec.max_items or None]
    if spec.dry_run:  # the plan before the spend: no MLflow run, no LM
        return plan_advise(spec, order, spec.items_dir(store.tracking_root(spec.tracking_uri)), pilot=pilot)
    deadline = started + timeout if timeout is not None else math.inf

    def expired() -> bool:
        return time.monotonic() >= deadline

    root = store.setup_tracking(spec.tracking_uri, spec.experiment)
    asked = {"budget": budget, "margin": margin, "pilot": pilot, "timeout": timeout, "methods": methods}
    if budget_usd is not None:  # (only when given: the directory of an answer without them keeps its name)
        asked["budget_usd"] = budget_usd
    if volume is not None:
        asked.update(volume=volume, compile=kinds, train=str(train) if train is not None else None)
    advice = _new_advice(spec, d, asked, root / "advise", pilot_items=min(pilot, len(order)))
    tags = {"dspy_for.kind": "advise", "dspy_for.fingerprint": spec.fingerprint()}
    parent = advice.run_id = store.start_run(f"advise-{d.name}", spec.experiment, tags=tags)
    store.log_params(parent, {"spec": spec.to_dict(), "advise": asked, **store.environment_params()})
    session = _Session(spec, d, order, parent, advice, spec.items_dir(root), progress, expired)
    status = "FAILED"
    try:
        session.run(chosen)
        session.end_children("FINISHED")
        _finish(advice, started, parent)
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        session.end_children(status)
        store.end_run(parent, status)
    return advice


def _new_advice(
    spec: ExperimentSpec, d: DatasetConfig, asked: dict[str, Any], under: Path, *, pilot_items: int
) -> Advice:
    """An empty answer with its directory in ``under`` (for the plot), named by the spec's fingerprint and
    advise's own settings."""
    name = spec.fingerprint() + "-" + hashlib.sha256(json.dumps(asked, default=str).encode()).hexdigest()[:6]
    run_dir = under / name
    run_dir.mkdir(parents=True, exist_ok=True)
    return Advice(
        spec=spec,
        dataset=d.name,
        split=d.split,
        signature=signature_for(d.name),
        budget=asked["budget"],
        budget_usd=asked.get("budget_usd"),
        volume=asked.get("volume"),
        compilers=asked.get("compile") or [],
        train=asked.get("train"),
        margin=asked["margin"],
        alpha=spec.alpha,
        pilot_items=pilot_items,
        run_dir=run_dir,
        spend=SpendLimit(spec.max_cost),
    )


class _Session:
    """The pilot's bookkeeping: each candidate's prepared run, MLflow child run and open :class:`Evaluation`."""

    def __init__(
        self,
        spec: ExperimentSpec,
        d: DatasetConfig,
        order: list[dspy.Example],
        parent: str,
        advice: Advice,
        items_dir: Path,
        progress: bool,
        expired: Callable[[], bool],
    ) -> None:
        self.spec, self.d, self.order, self.parent, self.advice = spec, d, order, parent, advice
        self.items_dir, self.progress, self.expired = items_dir, progress, expired
        assert advice.run_dir is not None and advice.spend is not None
        self.limit = advice.spend
        self.run_dir = advice.run_dir
        self.stack: ExitStack | None = None
        self.evaluations: dict[str, Evaluation] = {}
        self.runs: dict[str, PreparedRun] = {}
        self.children: dict[str, str] = {}  # label -> MLflow run, until ended
        self._all: dict[str, Evaluation] = {}

    def run(self, chosen: list[Candidate]) -> None:
        """The pilot, then the rounds on the items after it; their outcome into the advice."""
        a = self.advice
        with interruptible(), ExitStack() as stack:
            self.stack = stack
            self.pilot(chosen)
            rounds = Rounds(
                a.candidates,
                self.evaluations,
                self.order[a.pilot_items :],
                alpha=a.alpha,
                margin=a.margin,
                batch_size=self.spec.batch_size,
                expired=self.expired,
                limit=self.limit,
                kind=value_kind(self.spec.epochs, self.spec.reducer),
                volume=a.volume,
                dataset=a.dataset,
            )
            ending = rounds.run()
            a.pairs, a.pair_alpha = rounds.pair_outcomes(), rounds.pair_alpha
            a.recommended, a.resolved, a.how = ending.label, ending.resolved, ending.how

    def pilot(self, chosen: list[Candidate]) -> None:
        """Measure every candidate on the pilot's items, CoT first (its tokens and $ per item size k and N)."""
        a, items = self.advice, self.order[: self.advice.pilot_items]
        budgets = a.budget is not None or a.budget_usd is not None
        if budgets and any(c.sized for c in chosen) and not any(c.label == "cot" for c in chosen):
            sizing = CandidateOutcome("cot", "cot", {}, status=SIZING, reason="run on the pilot to size k and N")
            a.candidates.append(sizing)
            ev = self.open(MethodConfig(name="cot", label="cot"), sizing)
            if ev is not None:
                ev.feed(items, stop=lambda _r: self.expired(), limit=self.limit)
                sizing.result = ev.result
                self._sized_by(ev.result)
                self.close("cot")
        for c in sorted(chosen, key=lambda c: c.label != "cot"):
            out = CandidateOutcome(c.label, c.method, dict(c.options), compile=c.compile)
            a.candidates.append(out)
            if self.expired():
                out.status, out.reason = NOT_RUN, "not measured: the timeout came first"
                continue
            options, out.sized = sized_options(c, a.budget, a.cot_tokens, budget_usd=a.budget_usd, cot_cost=a.cot_cost)
            if options is None:  # too few samples or attempts fit; or CoT, which sizes them, could not be measured
                out.status, out.reason = OVER_BUDGET if a.cot_tokens is not None else FAILED, out.sized
                if out.status == OVER_BUDGET:
                    out.over = [sizing_budget(a.budget, a.budget_usd, a.cot_tokens, a.cot_cost)[1]]
                continue
            out.options = options
            ev = self.open(MethodConfig(c.method, c.label, options, compile=c.compile), out)
            if ev is None:
                continue
            ev.feed(items, stop=lambda _r: self.expired(), limit=self.limit)
            r = out.result = ev.result
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
                self.evaluations[c.label] = ev
                continue
            logger.info("%s dropped after the pilot: %s", c.label, out.reason)
            self.close(c.label)
        no_fit = None if self.evaluations else no_fit_error(a)
        if no_fit is not None:  # bad input, found by measuring (the pilot's records are stored: a re-run reuses them)
            raise no_fit

    def _sized_by(self, cot: MethodResult) -> None:
        """CoT's measured tokens and USD per item: what k and N are sized from."""
        if cot.n_scored:
            self.advice.cot_tokens, self.advice.cot_cost = cot.tokens_per_item, dollars_per_item(cot)

    def _not_measured(self) -> str:
        if self.limit.reached:
            return f"not measured: max_cost {money(self.limit.max_cost, as_given=True)} was reached first"
        return "not measured: the timeout came first"

    def open(self, m: MethodConfig, out: CandidateOutcome | None = None) -> Evaluation | None:
        """Prepare ``m`` through the run path with its MLflow child run, and open its stored records and
        :class:`Evaluation` (closed with the session); None (and ``out`` marked failed) if it cannot run."""
        assert self.stack is not None
        examples = [*self.order]  # everything it may score: a compile leaves them out
        args = (self.parent, self.run_dir, self.items_dir, self.limit)
        run, child, err = prepare_tracked(self.spec, self.d, m, examples, *args)
        if run is None or child is None:
            if out is not None and err is None:  # max_cost was reached before its compile started
                out.status, out.reason = NOT_RUN, self._not_measured().replace("not measured", "not compiled")
            elif out is not None:
                out.status, out.reason = FAILED, f"could not run: {err}"
            return None
        if out is not None:
            out.compiled = run.compiled_path
        self.runs[m.label], self.children[m.label] = run, child
        results = self.stack.enter_context(_store(self.items_dir, run).exclusive())
        sink = MlflowSink(run, child, end_run=False)
        ev = Evaluation(run, store=results, sinks=[sink], progress=self.progress, origin=child)
        self._all[m.label] = self.stack.enter_context(ev)
        return ev

    def close(self, label: str) -> None:
        ev = self._all[label]
        ev.close()
        if label in self.children:
            store.end_run(self.children.pop(label), ev.status or "FINISHED")

    def end_children(self, status: str) -> None:
        """End every MLflow child run still open: its evaluation's status (FAILED when every item failed), or
        ``status`` when the session ended otherwise (KILLED on Ctrl-C)."""
        for label in list(self.children):
            ev = self._all.get(label)
            own = ev.status if ev is not None and ev.status is not None else "FINISHED"
            store.end_run(self.children.pop(label), own if status == "FINISHED" else status)


def _store(items_dir: Path, run: PreparedRun) -> ResultStore:
    """``run``'s results store: its own file, or — when it has none yet — a file of the same result key kept under
    another label (e.g. by ``compare``: the same method, options, LMs, prompts and data give the same records)."""
    own = ResultStore.in_dir(items_dir, run.dataset.name, run.dataset.split, run.method.label, run.key)
    if own.path.is_file():
        return own
    others = sorted(own.path.parent.glob(f"*.{run.key}.jsonl")) if own.path.parent.is_dir() else []
    if others:
        logger.info("%s: reusing the stored records of %s (same result key)", run.method.label, others[0].name)
        return ResultStore(others[0])
    return own


def _finish(advice: Advice, started: float, parent: str) -> None:
    """The recommendation's status and Python line, items used, the plot and the parent run's record."""
    rec = advice.recommendation
    if rec is not None:
        rec.status = RECOMMENDED
        advice.python_line = spec_line(advice.spec, rec.method, advice.signature, rec.options)
    keys = {i.item_key for c in advice.candidates if c.result is not None for i in c.result.items}  # epochs: once
    advice.items_used = len(keys)
    if advice.volume is not None:
        advice.at_volume = volume_rows(advice)
        advice.breakeven = volume_breakeven(advice, advice.at_volume)
    advice.elapsed = time.monotonic() - started
    fig = frontier_figure(advice)
    if fig is not None and advice.run_dir is not None:
        path = advice.run_dir / f"frontier_{advice.dataset}.png"
        fig.savefig(path, dpi=120, bbox_inches="tight")
        store.log_figure(parent, fig, path.name)
        advice.plots.append(path)
    log_advice(parent, advice)
