"""The run core: items stream through the method, and each finished record lands, at once, in every sink::

    with Evaluation(run, store=store, sinks=[mlflow_sink]) as ev:   # sinks close on every exit: FINISHED,
        ev.feed(run.examples, stop=rule)                           #   FAILED, or KILLED (Ctrl-C, SIGTERM)
    result = ev.result                                             # one MethodResult, in the order fed

Several evaluations share one pool of threads and one :class:`SpendLimit` through :func:`feed_together`, the loop
:class:`~dspy_for.experiments.tracked_run.TrackedRun` drives for every command. Per item: a stored record (matched by
content) is reused; otherwise the program runs inside its own usage block → record {inputs, gold, prediction, score |
error, usage by role, trajectory} → the judge → the store → every sink → the stop rule. An item ends scored, unparsed
(scored 0) or failed (an error, left out of accuracy: :mod:`~dspy_for.experiments.core.records`); one failing item
never stops the others. ``feed`` may be called again with more items (a sweep's chunks, a sequential's batches).

Not ``dspy.Evaluate``, which reports items only through its metric (a failed item as a 0), needs an index slipped
into the inputs and answers Ctrl-C with the partial result as if finished: here each item is one call whose record
streams out as it finishes; metrics stay DSPy metrics (``metric(example, prediction)``).
"""

from __future__ import annotations

import contextvars
import queue
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from types import TracebackType

import dspy
from dspy.utils.exceptions import AdapterParseError

from dspy_for.compat.dspy import warm_completion_path
from dspy_for.experiments.core.heap import HeapHold, frozen_heap
from dspy_for.experiments.core.item_record import Outcome, item_record
from dspy_for.experiments.core.judging import judge_item
from dspy_for.experiments.core.prepare import PreparedRun
from dspy_for.experiments.core.records import ItemResult, MethodResult, example_key, record_key
from dspy_for.experiments.core.schedule import WorkQueue, calls_per_item
from dspy_for.experiments.core.serving import Serving
from dspy_for.experiments.core.sinks import Landed, ProgressBar, RunStatus, Sink, StopRule, critical, interruptible
from dspy_for.experiments.core.spend import SpendLimit
from dspy_for.experiments.core.store import ResultStore
from dspy_for.lm.epochs import epoch
from dspy_for.lm.epochs import fresh as answered_anew
from dspy_for.lm.pricing import PRICE_ATTR, Price
from dspy_for.lm.usage import CallRecord, role, track_usage
from dspy_for.secrets import redact

__all__ = ["Evaluation", "Feed", "SpendLimit", "evaluate", "feed_together"]


def evaluate(
    run: PreparedRun,
    examples: Iterable[dspy.Example] | None = None,
    *,
    store: ResultStore | None = None,
    sinks: Sequence[Sink] = (),
    progress: bool = True,
    stop: StopRule | None = None,
    origin: str | None = None,
) -> MethodResult:
    """Run ``run.program`` on ``examples`` (default ``run.examples``) and return one record per item, in order
    (see the module docstring). With ``store``, records are kept as they land and items already in it are reused."""
    with Evaluation(run, store=store, sinks=sinks, progress=progress, origin=origin) as ev:
        ev.feed(run.examples if examples is None else examples, stop=stop)
    return ev.result


class Evaluation:
    """One method on one dataset as a stream of records (see the module docstring). ``origin`` names the run that
    produces the new records (an MLflow run id, or its future while the tracking store starts the run: records that
    finish before it is known land once it is), kept in each for a later reuse to point to; ``stored``: ``store``'s
    records when the caller has read them."""

    def __init__(
        self,
        run: PreparedRun,
        *,
        store: ResultStore | None = None,
        sinks: Sequence[Sink] = (),
        progress: bool = True,
        origin: str | Future[str | None] | None = None,
        stored: Mapping[str, ItemResult] | None = None,
    ) -> None:
        self.run, self.store, self._origin = run, store, origin
        self.stored = dict(stored) if stored is not None else store.load() if store is not None else {}
        self.progress = ProgressBar(run.method.label, progress)
        # the caller's sinks before the store: a record stored for resume has been handed to every sink (its trace)
        self.sinks: list[Sink] = [*sinks, *([store] if store is not None else []), self.progress]
        self.status: RunStatus | None = None
        self._items: dict[str, ItemResult] = {}  # landed, by content key
        self._order: list[str] = []  # content keys in the order fed
        self._reused_keys: set[str] = set()
        self._start = time.perf_counter()
        self.serving = Serving()  # what served this run's calls, the stack it talks to now, what it runs again
        self._restore: dict[str, int] = {}  # the record order before records were forgotten, to run again

    @property
    def origin(self) -> str | None:
        return self._origin.result() if isinstance(self._origin, Future) else self._origin

    def _origin_known(self) -> bool:
        return not isinstance(self._origin, Future) or self._origin.done()

    # ------------------------------------------------------------------------------------------ feed

    def feed(
        self, examples: Iterable[dspy.Example], stop: StopRule | None = None, limit: SpendLimit | None = None
    ) -> list[ItemResult]:
        """Run ``examples`` (those not yet landed in this evaluation) and return their records in order; with
        ``stop`` (or once ``limit`` is reached), no item starts once it returns True: what landed stays, items
        already running on other threads finish and land too (their tokens are spent), what did not start is left
        out."""
        return feed_together([Feed(self, examples, stop)], num_threads=self.run.spec.threads, limit=limit)[0]

    def _plan(self, examples: Iterable[dspy.Example], stop: StopRule | None) -> _Plan:
        """Land the stored records of ``examples`` (every epoch of each: reused) and return what is left to run."""
        epochs = range(self.run.spec.epochs)
        units = [(ex, e) for ex in {example_key(ex): ex for ex in examples}.values() for e in epochs]  # each item once
        new = [u for u in units if _unit_key(u) not in self._items]
        fresh = [u for u in new if _unit_key(u) not in self.stored]
        self.progress.expect(len(fresh))
        plan = _Plan(self, new, fresh, stop)
        for u in new:
            if _unit_key(u) in self.stored:
                self._order.append(_unit_key(u))
                self._land(self._reused(self.stored[_unit_key(u)]), (), reused=True)
                if stop is not None and stop(self.result):
                    plan.fresh = []
                    plan.halt.set()
                    break
        self._order.extend(_unit_key(u) for u in plan.fresh)
        return plan

    def _finish(self, plan: _Plan) -> list[ItemResult]:
        self._order = [k for k in self._order if k in self._items]  # a stopped feed: what did not run is left out
        if self._restore:  # records run again (:meth:`forget`) take their old places
            self._order.sort(key=lambda k: self._restore.get(k, len(self._restore)))
            self._restore = {}
        return [self._items[_unit_key(u)] for u in plan.new if _unit_key(u) in self._items]

    @property
    def result(self) -> MethodResult:
        items = [self._items[k] for k in self._order if k in self._items]
        reused = sum(self._items[k].wall_time for k in self._reused_keys)
        return MethodResult(
            label=self.run.method.label,
            items=items,
            wall_time=time.perf_counter() - self._start,
            reused_time=reused,
            reducer=self.run.spec.reducer,
            compile=self.run.compile_cost,
            lms={r: str(getattr(lm, "model", None) or type(lm).__name__) for r, lm in self.run.role_lms.items()},
            prices={
                r: p for r, lm in self.run.role_lms.items() if isinstance(p := getattr(lm, PRICE_ATTR, None), Price)
            },
            serving_now=self.serving.now,
            reran=len(self.serving.rerun & self._items.keys()),
        )

    # ----------------------------------------------------------------------------------------- close

    def close(self, status: RunStatus | None = None) -> None:
        """Close every sink once with the whole result (``status`` default: FAILED when every item failed)."""
        if self.status is not None:
            return
        result = self.result
        self.status = status or ("FAILED" if result.all_failed else "FINISHED")
        with critical():
            for sink in self.sinks:
                sink.close(result, self.status)

    def __enter__(self) -> Evaluation:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.close("KILLED" if issubclass(exc_type, KeyboardInterrupt) else "FAILED")

    # ------------------------------------------------------------------------------------------- items

    def _run_item(self, unit: _Unit) -> tuple[ItemResult, list[CallRecord]]:
        """Run the program on one epoch of one item and score it; never raises (a failing item must not lose the
        others). Epoch ``e`` runs inside :func:`~dspy_for.lm.epoch`: its LM calls are samples of their own."""
        run, (example, e) = self.run, unit
        started, t0 = time.time(), time.perf_counter()
        outcome = Outcome()
        pred = dspy.Prediction()
        anew = answered_anew() if _unit_key(unit) in self.serving.rerun else nullcontext()
        with dspy.context(lm=run.lm), epoch(e), anew, track_usage() as usage, role("task"):
            try:
                call = {**example.inputs(), "gold": example} if run.uses_labels else dict(example.inputs())
                pred = run.program(**call)
            except AdapterParseError:  # the model answered, unreadably: a wrong answer, not an error
                outcome.unparsed = True
            except Exception as exc:  # an LM call failed (after retries) or the method raised: an error
                outcome.error, outcome.error_class = redact(f"{type(exc).__name__}: {exc}"), type(exc).__name__
        failed_calls = [c for c in usage.calls if not c.ok]
        if outcome.error is None and failed_calls:  # the method swallowed a failed LM call: its answer is not trusted
            outcome.error_class = failed_calls[0].error or "LMError"
            outcome.error = f"{outcome.error_class}: {len(failed_calls)} LM call(s) failed inside the method"
        outcome.usage, outcome.wall_time = usage.to_dict(), time.perf_counter() - t0
        # its origin is stamped as it lands: the run's id may not be known yet, and no item waits for it
        record = replace(item_record(example, pred, outcome, run.metric), started_at=started, epoch=e)
        record.served_by = self.serving.saw(usage.calls)
        calls = list(usage.calls)
        if run.judge is not None:
            with track_usage() as judge_usage:
                record = judge_item(run.judge, run.judge_name, record, example)
            calls += judge_usage.calls
        return record, calls

    def forget(self, keys: Iterable[str]) -> list[dspy.Example]:
        """Drop the records this evaluation reused from the store under ``keys`` (others are ignored) and return their
        items, for the next feed to run again with their LM calls answered anew (DSPy's cache neither read nor
        written: :func:`~dspy_for.lm.epochs.fresh`); each new record lands in every sink (the store keeps it in place
        of the old one) and takes the old one's place in the result."""
        again = {k: None for k in keys if k in self._reused_keys}
        self._restore = {k: i for i, k in enumerate(self._order)}
        for k in again:
            del self.stored[k], self._items[k]
            self._reused_keys.discard(k)
        self.serving.rerun.update(again)
        self._order = [k for k in self._order if k not in again]
        items = {k.split("~", 1)[0] for k in again}  # an item's key, whichever epoch (record_key)
        return [ex for ex in self.run.examples if example_key(ex) in items]

    def _reused(self, stored: ItemResult) -> ItemResult:
        """A stored record as this run uses it: graded by this run's judge if it has none of its verdicts yet,
        and without a verdict when this run has no judge (it stays in the store, out of this run's numbers)."""
        run = self.run
        if run.judge is None:
            return replace(stored, judge=None, judge_usage={}) if stored.judge is not None else stored
        example = next((ex for ex in run.examples if example_key(ex) == stored.item_key), None)
        example = example or dspy.Example(question=stored.question, answer=stored.gold).with_inputs("question")
        return judge_item(run.judge, run.judge_name, stored, example)

    def _land(self, record: ItemResult, calls: Sequence[CallRecord], *, reused: bool) -> None:
        # a reused record is stored again only when this run's judge gave it a new verdict (a verdict dropped
        # because this run has no judge stays in the store)
        judged = self.run.judge is not None and reused and record.judge != self.stored[record.key].judge
        changed = not reused or judged
        record = record if reused else replace(record, origin=self.origin)
        self._items[record.key] = record
        (self._reused_keys.add if reused else self._reused_keys.discard)(record.key)
        landed = Landed(record, tuple(calls), reused=reused, changed=changed)
        with critical():
            for sink in self.sinks:
                sink.add(landed)


@dataclass
class Feed:
    """Items for one evaluation in :func:`feed_together`: ``examples``, and an optional ``stop`` rule of its own."""

    evaluation: Evaluation
    examples: Iterable[dspy.Example]
    stop: StopRule | None = None


@dataclass
class _Plan:
    """One feed in progress: the items it was given (``new``), those left to run, its stop rule and halt flag."""

    evaluation: Evaluation
    new: list[_Unit]
    fresh: list[_Unit]
    stop: StopRule | None
    halt: threading.Event = field(default_factory=threading.Event)

    def may_start(self, limit: SpendLimit | None) -> bool:
        return not self.halt.is_set() and not (limit is not None and limit.reached)


def feed_together(
    feeds: Sequence[Feed], *, num_threads: int, limit: SpendLimit | None = None, heap: HeapHold | None = None
) -> list[list[ItemResult]]:
    """Several evaluations' items on one pool of ``num_threads`` workers, side by side: each free thread starts an item
    of the evaluation with the most work left (:mod:`~dspy_for.experiments.core.schedule`), so costly methods start
    early, all end about together and a comparison takes about as long as its work, while each endpoint's
    load is kept right by its shared limit (:mod:`dspy_for.lm.transport`). Each record lands, in this thread, in its
    own evaluation's sinks as it finishes; a feed's ``stop`` rule stops its items only, ``limit`` every feed's. With
    one thread the feeds run one after another in this thread (Ctrl-C then stops the LM call at once). While threads
    run, the heap is frozen (:mod:`~dspy_for.experiments.core.heap`), until ``heap`` is released when given. Returns
    each feed's records (those of :meth:`Evaluation.feed`)."""
    with interruptible():
        plans = [f.evaluation._plan(f.examples, f.stop) for f in feeds]
        held: list[_Done] = []  # finished before their evaluation's origin was known: they land once it is
        try:
            for done in _stream(plans, num_threads, limit, heap):
                if limit is not None:
                    limit.add(done[2])
                held = _land_known([*held, done])
        finally:
            _land_known(held, wait=True)
    if limit is not None and limit.reached:
        limit.not_started += sum(
            1 for p in plans if not p.halt.is_set() for u in p.fresh if _unit_key(u) not in p.evaluation._items
        )
    return [p.evaluation._finish(p) for p in plans]


_Done = tuple[_Plan, ItemResult, list[CallRecord]]


def _land_known(done: list[_Done], *, wait: bool = False) -> list[_Done]:
    """Land each record of ``done`` whose evaluation knows its origin (``wait``: every one, waiting for it), in order,
    then its feed's stop rule; return those held back."""
    held: list[_Done] = []
    for plan, record, calls in done:
        ev = plan.evaluation
        if not wait and (not ev._origin_known() or any(p is plan for p, _, _ in held)):
            held.append((plan, record, calls))
            continue
        ev._land(record, calls, reused=False)
        if plan.stop is not None and not plan.halt.is_set() and plan.stop(ev.result):
            plan.halt.set()
    return held


def _stream(plans: list[_Plan], num_threads: int, limit: SpendLimit | None, heap: HeapHold | None) -> Iterator[_Done]:
    """Each item's (plan, record, LM calls) as it finishes (see :func:`feed_together`). Once a plan halts (or the
    limit is reached) none of its items starts; items already running are still yielded as they finish."""
    if num_threads <= 1 or sum(len(p.fresh) for p in plans) <= 1:
        for plan in plans:
            for unit in plan.fresh:
                if not plan.may_start(limit):
                    break
                yield (plan, *plan.evaluation._run_item(unit))
        return
    warm_completion_path(lm for p in plans for lm in p.evaluation.run.lms)  # imports paid here, not in the threads
    with frozen_heap(heap):  # what exists now (modules, programs, data) is not walked by the collector meanwhile
        pool = ThreadPoolExecutor(max_workers=num_threads, thread_name_prefix="dspy-for-item")
        todo: WorkQueue[_Plan, _Unit] = WorkQueue([(p, p.fresh) for p in plans], _prior_calls)
        pending: dict[Future[tuple[ItemResult, list[CallRecord]]], _Plan] = {}
        finished: queue.SimpleQueue[Future[tuple[ItemResult, list[CallRecord]]]] = queue.SimpleQueue()

        def start_next() -> None:  # one item per free thread, so none waits in a queue to start after a halt
            picked = todo.next(lambda plan: plan.may_start(limit))
            if picked is not None:
                plan, unit = picked
                future = pool.submit(contextvars.copy_context().run, plan.evaluation._run_item, unit)
                pending[future] = plan
                future.add_done_callback(finished.put)  # each item's end, in order, at O(1): no wait over all

        for _ in range(num_threads):
            start_next()
        try:
            while pending:
                future = finished.get()
                plan = pending.pop(future)
                record, calls = future.result()
                todo.finished(plan, calls)
                yield plan, record, calls
                start_next()
        finally:  # interrupted: start nothing more; items already running end in the background
            pool.shutdown(wait=False, cancel_futures=True)


#: one epoch of one item: what runs, lands and is stored as one record
_Unit = tuple[dspy.Example, int]


def _prior_calls(plan: _Plan) -> float:
    return calls_per_item(plan.evaluation.run.method.name, plan.evaluation.run.options)


def _unit_key(unit: _Unit) -> str:
    return record_key(example_key(unit[0]), unit[1])
