"""One run from its spec to its outcome: :class:`TrackedRun` owns what surrounds every run, so ``compare`` (fixed and
``--sequential``), ``advise``, each sweep trial and the sweep's final test are thin drivers of it::

    with TrackedRun(spec, name="compare-demo", tags={"dspy_for.kind": "comparison"}) as tracked:
        cell = tracked.open(dataset, method)              # prepared (and compiled), its MLflow run, its stored records
        tracked.feed([cell])                              # the one loop: every open cell side by side
        tracked.report("the table", write_table)          # a report that fails is logged, never fails the run

What it owns, written once here: the run's own MLflow run (started and ended with its status: FINISHED,
FAILED, or KILLED on Ctrl-C / SIGTERM; or a run its caller owns, such as a sweep trial's) and one nested run per cell;
each cell's sinks (the results store for resume, the MLflow sink); the one :class:`~dspy_for.experiments.core.spend.
SpendLimit` (``max_cost``) and its count of what was not started (one meaning per command: items for ``compare`` and
``advise``, trials for a sweep); the compile step, through :func:`~dspy_for.experiments.core.prepare.prepare_run`;
and the one loop that feeds cells side by side on one pool of threads
(:func:`~dspy_for.experiments.core.run.feed_together`).
"""

from __future__ import annotations

import contextlib
import logging
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any

import dspy

from dspy_for.datasets import data_hash
from dspy_for.experiments.core import (
    Evaluation,
    Feed,
    ItemResult,
    MethodResult,
    PreparedRun,
    ResultStore,
    SpendLimit,
    feed_together,
    prepare_run,
)
from dspy_for.experiments.core.compile_step import CompileNotStarted
from dspy_for.experiments.core.heap import HeapHold
from dspy_for.experiments.core.outcome import ComparisonResult
from dspy_for.experiments.core.prepare import result_key
from dspy_for.experiments.core.recheck import Recheck, recheck_cells
from dspy_for.experiments.core.serving import changed_records, settle
from dspy_for.experiments.core.sinks import RunStatus, StopRule, interruptible
from dspy_for.experiments.core.store import StoreLocks
from dspy_for.experiments.core.stored_lms import describe
from dspy_for.experiments.spec import DatasetConfig, MethodConfig
from dspy_for.experiments.spec.model import RunSpec
from dspy_for.experiments.tracking import served, store
from dspy_for.experiments.tracking.datasets import log_dataset
from dspy_for.experiments.tracking.sink import MlflowSink
from dspy_for.secrets import redact

__all__ = ["OpenCell", "TrackedRun"]

logger = logging.getLogger("dspy_for.run")


@dataclass
class OpenCell:
    """One method on one dataset, open in a tracked run: its prepared run, the MLflow run its items stream into, its
    :class:`~dspy_for.experiments.core.run.Evaluation` (its records as they land)."""

    run: PreparedRun
    run_id: str | None
    evaluation: Evaluation
    own_run: bool  # the run started ``run_id`` for this cell (and ends it)
    store: Path | None = None  # the results file its records are kept in
    traces: Mapping[str, str] = field(default_factory=dict)  # each record's MLflow trace, as its sink writes it

    @property
    def label(self) -> str:
        return self.run.method.label

    @property
    def result(self) -> MethodResult:
        """Its records so far, with where they are kept and each one's trace in this run."""
        result = self.evaluation.result
        traces = {i.key: t for i in result.items if (t := self.traces.get(i.key)) is not None}
        return replace(result, store=self.store, trace_ids=traces)


class TrackedRun:
    """One run (see the module docstring).

    ``name`` and ``tags``: the run's own MLflow run, started when it opens, with the spec and the
    environment as params (plus ``params``); or ``run_id``, an MLflow run the caller owns (a sweep trial's, the
    sweep's parent for its final test), which every cell then streams into. ``cells``: each cell gets an MLflow run
    of its own nested under the run's, its params, dataset and program logged (else the cells stream into the
    run's own). ``store``: records are kept in, and reused from, the results store (``items_dir``);
    ``shared_records``: a cell with no records of its own reuses those another label kept under the same result key
    (``advise`` after ``compare``: the same method, options, LMs, prompts and data give the same records). ``earlier``
    and ``left_out``: what others sharing ``max_cost`` spent before (a sweep's other trials) and what the count of
    what was not started counts."""

    def __init__(
        self,
        spec: RunSpec,
        *,
        items_dir: Path | None = None,
        name: str | None = None,
        tags: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        run_dir: Path | None = None,
        cells: bool = True,
        store: bool = True,
        progress: bool = True,
        shared_records: bool = False,
        earlier: float = 0.0,
        left_out: str = "item(s) not started",
    ) -> None:
        self.spec, self.items_dir, self.run_dir = spec, items_dir, run_dir
        self.limit = SpendLimit(spec.max_cost, earlier=earlier, left_out=left_out)
        self.errors: dict[tuple[str, str], str] = {}  # (dataset, label) -> the error that kept it from running
        self._raised: dict[tuple[str, str], Exception] = {}
        self.status: RunStatus | None = None
        self._name, self._tags, self._params = name, dict(tags or {}), dict(params or {})
        self._run, self._own_run = run_id, run_id is None and name is not None  # its MLflow run (or the token for it)
        self._cells, self._store, self._progress, self._shared = cells, store, progress, shared_records
        self._open: list[OpenCell] = []
        self._locks = StoreLocks()  # the results stores' locks, held while their cells are open
        self._heap = HeapHold()  # frozen from the first threaded feed to the run's end (its report too)
        self._stack = ExitStack()
        self._stack.callback(self._locks.release_all)
        self._stack.callback(self._heap.release)

    # ----------------------------------------------------------------------------------------- the run

    @property
    def run_id(self) -> str | None:
        """The run's MLflow run: its own, or its caller's (None: it has none, or the tracking store could not start
        it). Where the command line's tracking process starts it, it is waited for here, not before the items."""
        return served.run_id(self._run)

    def __enter__(self) -> TrackedRun:
        self._stack.enter_context(interruptible())
        if self._own_run:
            assert self._name is not None
            store.setup_tracking(self.spec.tracking_uri, self.spec.experiment, traces=self.spec.traces)  # once made
            time_ = time.strftime("%Y-%m-%dT%H:%M:%S")
            params = {"spec": {**self.spec.to_dict(), "time": time_}, **self._params, **store.environment_params()}
            _end_stale_runs(self.spec.experiment)
            self._run = store.start_run(self._name, self.spec.experiment, tags=self._tags)
            store.log_params(self._run, params)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            status: RunStatus = "FINISHED"
        else:
            status = "KILLED" if issubclass(exc_type, KeyboardInterrupt) else "FAILED"
        try:
            for cell in list(self._open):
                self.close(cell, None if status == "FINISHED" else status)
        finally:
            self.status = status
            if self._own_run and self._run is not None:
                store.end_run(self._run, status)
            served.settle()  # every write of the run made (by the command line's tracking process) before it ends
            self._stack.__exit__(exc_type, exc, tb)

    # --------------------------------------------------------------------------------------------- cells

    def open(self, d: DatasetConfig, m: MethodConfig, examples: list[dspy.Example] | None = None) -> OpenCell | None:
        """Prepare ``m`` on ``d`` (compiled when it has a compile step; the compile's spend counts against
        ``max_cost``, and once that is reached no new compile starts), open its MLflow run, stored records and
        evaluation; or None when it cannot run: the error in :attr:`errors`, or — a compile ``max_cost`` kept from
        starting — its items counted as not started and its run ended KILLED."""
        child = self._run
        if self._cells and self._run is not None:
            tags = {"dspy_for.method": m.name, "dspy_for.dataset": d.name}
            child = store.start_run(f"{m.label} / {d.name}", self.spec.experiment, parent_id=self._run, tags=tags)
        own = child is not None and child != self._run
        compile_dir = self.items_dir / d.name / d.split if self.items_dir is not None and self._store else None
        results = self._results_store(d, m.label, result_key(self.spec, d, m))  # its key: no LM built
        try:
            stored = self._take(results)  # held before anything is built: what is stored decides what is
            run = prepare_run(
                self.spec, d, m, examples=examples, compile_dir=compile_dir, limit=self.limit, stored=stored
            )
            if own and child is not None:
                _log_run(run, child, self.run_dir)
        except CompileNotStarted as exc:  # max_cost was reached first: left out, as items that did not start
            self._let_go(results)
            self.leave_out(exc.items)
            if own and child is not None:
                store.set_tags(child, {"dspy_for.not_started": str(exc)})
                store.end_run(child, "KILLED")
            logger.warning("%s on %s: %s", m.label, d.name, exc)
            return None
        except Exception as exc:  # the method could not run at all (a bad compile step, an LM that cannot be built)
            self._let_go(results)
            err = self.errors[(d.name, m.label)] = redact(f"{type(exc).__name__}: {exc}")
            self._raised[(d.name, m.label)] = exc
            if own and child is not None:
                store.set_tags(child, {"error": err})
                store.log_text(child, traceback.format_exc(), "error.txt")
                store.end_run(child, "FAILED")
            logger.error("method %s on %s failed: %s", m.label, d.name, err)
            return None
        sink = MlflowSink(run, child, end_run=False) if child is not None else None
        sinks = [sink] if sink is not None else []
        origin = served.future_id(child)  # the MLflow run's id (its future while the tracking store starts it)
        ev = Evaluation(run, store=results, stored=stored, sinks=sinks, progress=self._progress, origin=origin)
        store_path = results.path if results is not None else None
        cell = OpenCell(run, child, ev, own, store_path, sink.trace_ids if sink is not None else {})
        self._open.append(cell)
        return cell

    def feed(
        self,
        cells: Sequence[OpenCell],
        examples: Iterable[dspy.Example] | None = None,
        stop: StopRule | None = None,
    ) -> list[list[ItemResult]]:
        """The one loop: ``examples`` (default: each cell's own) through every cell of ``cells`` side by side on one
        pool of threads, under the run's ``max_cost`` (``stop``: each cell's own stop rule). Returns each cell's
        new records."""
        items = list(examples) if examples is not None else None
        return self._feed([Feed(c.evaluation, c.run.examples if items is None else items, stop) for c in cells])

    def settle(self, cells: Sequence[OpenCell], *, rerun: bool = False) -> None:
        """What served the records of ``cells`` (fed side by side): each one's stack now; with ``rerun``
        (``rerun_changed``), the reused records another stack served run again, side by side, on the stack now."""
        settle([c.evaluation for c in cells])
        if rerun:
            again = [(c, c.evaluation.forget(changed_records(c.evaluation))) for c in cells]
            self._feed([Feed(c.evaluation, items) for c, items in again if items])

    def recheck(self, result: ComparisonResult) -> list[Recheck]:
        """The noise floor (``recheck = N``): each cell's first N stored items run again with DSPy's cache off,
        side by side through the run's loop and under its ``max_cost``; their answers are reported (and logged on
        its MLflow run by the caller), never stored (:mod:`~dspy_for.experiments.core.recheck`)."""
        assert self.items_dir is not None, "a recheck reads the stored records"
        return recheck_cells(result.spec, result, self.items_dir, self._feed)

    def _feed(self, feeds: list[Feed]) -> list[list[ItemResult]]:
        return feed_together(feeds, num_threads=self.spec.threads, limit=self.limit, heap=self._heap) if feeds else []

    def close(self, cell: OpenCell, status: RunStatus | None = None) -> None:
        """Close ``cell``'s evaluation (its sinks get the whole result) and end its MLflow run with its status
        (FAILED when every item failed), or ``status`` when the run ended otherwise."""
        if cell not in self._open:
            return
        self._open.remove(cell)
        try:
            cell.evaluation.close(status)
        finally:
            if cell.evaluation.store is not None:
                self._locks.release(cell.evaluation.store)
            if cell.own_run and cell.run_id is not None:
                store.end_run(cell.run_id, status or cell.evaluation.status or "FINISHED")

    def error(self, d: DatasetConfig, m: MethodConfig) -> str | None:
        """Why ``m`` could not run on ``d`` (None: it ran, or was not opened)."""
        return self.errors.get((d.name, m.label))

    def raise_error(self, d: DatasetConfig, m: MethodConfig) -> None:
        """Raise again what kept ``m`` from running on ``d``, if anything did (a driver for which that ends it)."""
        if (exc := self._raised.get((d.name, m.label))) is not None:
            raise exc

    # ------------------------------------------------------------------------------------------- spend

    @property
    def out_of_money(self) -> bool:
        """``max_cost`` is reached: no item (and no compile) starts."""
        return self.limit.reached

    def leave_out(self, count: int) -> None:
        """``count`` more left out because ``max_cost`` was reached (what they are: the limit's ``left_out``)."""
        if self.limit.reached:
            self.limit.not_started += count

    # ----------------------------------------------------------------------------------------- reports

    def report(self, what: str, write: Callable[[], None]) -> bool:
        """Run ``write`` (a table, a plot, an export of the finished run): when it fails, the failure is logged (and
        tagged on the run's MLflow run) and the run goes on — its items, table and MLflow runs stay. True when
        it was written."""
        try:
            with served.waited():  # its writes to the tracking store waited for: one that fails fails the report
                write()
        except Exception as exc:
            error = redact(f"{type(exc).__name__}: {exc}")
            logger.warning("%s could not be written (the run's results are kept): %s", what, error)
            if self._run is not None:
                with contextlib.suppress(Exception):  # a tracking store that fails too: the warning above says it
                    store.set_tags(self._run, {f"dspy_for.report_failed.{_tag(what)}": error[:500]})
            return False
        return True

    # ----------------------------------------------------------------------------------------- helpers

    def _take(self, results: ResultStore | None) -> dict[str, ItemResult] | None:
        """Hold ``results`` (read again the stores let go of while waiting for it: what others finished) and read
        its records; None when the run keeps none."""
        if results is None:
            return None
        for again in self._locks.take(results):
            for c in self._open:
                if c.evaluation.store is again:
                    c.evaluation.stored = again.load()
        return results.load()

    def _let_go(self, results: ResultStore | None) -> None:
        if results is not None:
            self._locks.release(results)

    def _results_store(self, d: DatasetConfig, label: str, key: str) -> ResultStore | None:
        """The results store of ``label`` on ``d`` under result key ``key``: its own file, or — with ``shared_records``,
        when it has none yet — a file of the same key kept under another label; None when the run keeps no
        records."""
        if not self._store or self.items_dir is None:
            return None
        own = ResultStore.in_dir(self.items_dir, d.name, d.split, label, key)
        if own.path.is_file() or not self._shared:
            return own
        others = sorted(own.path.parent.glob(f"*.{key}.jsonl")) if own.path.parent.is_dir() else []
        if others:
            logger.info("%s: reusing the stored records of %s (same result key)", label, others[0].name)
            return ResultStore(others[0])
        return own


def _end_stale_runs(experiment: str) -> None:
    """End KILLED the experiment's MLflow runs that a process that is gone left RUNNING, and say so in one line."""
    store.end_stale_runs(experiment, _say_ended)


def _say_ended(ended: dict[str, list[str]]) -> None:
    if ended:
        logger.warning(
            "ended %d MLflow run(s) left RUNNING by a run whose process is gone (pid %s): marked KILLED",
            sum(len(ids) for ids in ended.values()),
            ", ".join(ended),
        )


def _tag(what: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in what.lower()).strip("_")


def _log_run(run: PreparedRun, run_id: str, run_dir: Path | None) -> None:
    """A cell's params, tags, dataset input and program (as prepared, compiled if it has a compile step)."""
    d, m = run.dataset, run.method
    params = {
        "method": m.name,
        "label": m.label,
        "options": m.options,
        "lm": {r: describe(run.role_lms[r]) for r in run.roles},
        "dataset": d.name,
        "split": d.split,
        "source": run.examples[0].get("source") if run.examples else "",
        "n": len(run.examples),
        "seed": d.seed,
        "data_hash": data_hash(run.examples),
        "compile": m.compile or {},
    }
    store.log_params(run_id, params)
    store.set_tags(run_id, {"dspy_for.label_using": str(run.uses_labels)})
    log_dataset(run, run_id=run_id)
    if run_dir is not None:
        program_path = run_dir / d.name / f"{m.label}.program.json"
        program_path.parent.mkdir(parents=True, exist_ok=True)
        run.program.save(str(program_path))
        store.log_artifact(run_id, program_path)
