"""The one run path: a spec → :func:`prepare_run` → :func:`evaluate` → per-item records.

``compare``, every sweep trial, the sweep's ``--final-test`` and the measurement scripts all call these two
functions, so an option, a slice, an LM, a compile step and a failure mean the same thing everywhere::

    run = prepare_run(spec, dataset, method)          # examples · metric · signature · LM per role · program
    result = evaluate(run, run.examples, store=...)   # per item: record {inputs, gold, prediction,
                                                      #   score | error, usage by role, trajectory}

Every item runs through ``dspy.Evaluate`` inside :func:`~dspy_for.lm.usage.track_usage`, so each record
carries its own usage per role. An item ends scored, unparsed (scored 0) or failed (an error, excluded
from accuracy; see :mod:`dspy_for.experiments.records`); one failing item never stops the others.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError
from tqdm.auto import tqdm

from dspy_for.datasets import content_key, signature_for
from dspy_for.experiments.compile_step import compile_for_run, compile_settings
from dspy_for.experiments.judging import judge_items
from dspy_for.experiments.methods import build_method, get_method
from dspy_for.experiments.records import ItemResult, MethodResult, ResultStore
from dspy_for.experiments.spec import (
    DatasetConfig,
    LMSpec,
    MethodConfig,
    RunSpec,
    load_examples,
    prompts_fingerprint,
)
from dspy_for.judges import RUBRICS, Judge
from dspy_for.lm import make_lm
from dspy_for.lm.usage import role, track_usage
from dspy_for.metrics import metric_for
from dspy_for.secrets import redact

__all__ = ["PreparedRun", "build_lms", "evaluate", "load_examples", "prepare_run", "role_lm"]

Metric = Callable[..., Any]
OnRecord = Callable[[ItemResult], None]

logger = logging.getLogger("dspy_for.experiments")


@dataclass
class PreparedRun:
    """Everything one method needs to run on one dataset, built once from the spec."""

    spec: RunSpec
    dataset: DatasetConfig
    method: MethodConfig
    options: dict[str, Any]  # the method's own options (an LM temperature is on the LMs)
    examples: list[dspy.Example]
    metric: Metric
    signature: str
    lm: dspy.BaseLM  # the default LM (what roles without their own use; also dspy.context's)
    role_lms: dict[str, dspy.BaseLM]
    program: dspy.Module
    uses_labels: bool
    key: str  # names the per-item results (see RunSpec.item_key)
    compile_usage: dict[str, Any] | None = None
    judge: Judge | None = None  # grades every scored item (the spec's [judge]); its calls are role `judge`
    judge_name: str = ""  # the judge's LM as recorded with each verdict (a verdict by another judge is redone)

    @property
    def roles(self) -> tuple[str, ...]:
        return get_method(self.method.name).roles


def role_lm(spec: RunSpec, lm: LMSpec, role_name: str | None, temperature: float | None = None) -> dspy.BaseLM:
    """The one place a run builds an LM: ``lm`` (a spec string, or a user's LM object used as is) with the run's
    ``max_tokens``, cache and the LM options of ``role_name`` (None: the options every role shares)."""
    if isinstance(lm, dspy.BaseLM):
        return lm.copy(temperature=temperature) if temperature is not None else lm
    options = spec.lm_options_for(role_name) if role_name else spec.lm_options
    opts = {"max_tokens": spec.max_tokens, "cache": spec.cache, **options}
    if temperature is not None:
        opts["temperature"] = temperature
    return make_lm(lm, **opts)


def build_lms(
    spec: RunSpec, method: MethodConfig, temperature: float | None = None
) -> tuple[dspy.BaseLM, dict[str, dspy.BaseLM]]:
    """The LM of every role of ``method`` (and the run's default LM), each built once per distinct setting."""
    built: dict[str, dspy.BaseLM] = {}

    def make(lm: LMSpec, role_name: str | None) -> dspy.BaseLM:
        options = spec.lm_options_for(role_name) if role_name else spec.lm_options
        key = json.dumps([lm if isinstance(lm, str) else id(lm), options], sort_keys=True, default=str)
        if key not in built:
            built[key] = role_lm(spec, lm, role_name, temperature)
        return built[key]

    default = make(spec.lm, None)
    roles = get_method(method.name).roles
    return default, {r: make(spec.lm_for(r, method.role_lms), r) for r in roles}


def prepare_run(
    spec: RunSpec,
    dataset: DatasetConfig,
    method: MethodConfig,
    *,
    examples: list[dspy.Example] | None = None,
    compile_dir: Path | None = None,
) -> PreparedRun:
    """Build one method's run: its examples, metric, signature, LM per role, program and optional compile.

    ``examples`` (default: :func:`load_examples` of ``dataset``) may be passed when the caller has them.
    ``compile_dir``: where a compiled program is kept, so a resumed run does not compile again.
    """
    registered = get_method(method.name)
    options, temperature = registered.split_options(method.options)
    options = registered.validate_options(options)
    sig = signature_for(dataset.name)
    metric = metric_for(dataset.name)
    default, role_lms = build_lms(spec, method, temperature)
    program = build_method(method.name, sig, lm=default, role_lms=role_lms, **options)
    key = spec.item_key(
        dataset, method, method.options, registered.roles, prompts_fingerprint(program), registered.revision
    )
    run = PreparedRun(
        spec=spec,
        dataset=dataset,
        method=method,
        options=options,
        examples=examples if examples is not None else load_examples(dataset),
        metric=metric,
        signature=sig,
        lm=default,
        role_lms=role_lms,
        program=program,
        uses_labels=registered.uses_labels(options),
        key=key,
    )
    if method.compile:
        optimizer_lm = role_lm(spec, compile_settings(method).get("optimizer_lm", spec.lm), "optimizer")
        run.program, run.compile_usage = compile_for_run(run, compile_dir, optimizer_lm)
    if spec.judge is not None:
        run.judge = Judge(role_lm(spec, spec.judge.lm, "judge"), fallback=metric, rubrics=spec.judge.rubrics or RUBRICS)
        # a verdict is reused only from this judge: the same LM and the same grading prompt
        run.judge_name = json.dumps(
            {
                **spec.role_settings(["judge"], {"judge": spec.judge.lm}),
                "prompt": prompts_fingerprint(run.judge.predictor),
            },
            sort_keys=True,
        )
    return run


# ----------------------------------------------------------------------------------------- evaluate


@dataclass
class _Outcome:
    """What running one item produced besides its prediction."""

    usage: dict[str, dict[str, float]]
    wall_time: float
    error: str | None = None
    error_class: str | None = None
    unparsed: bool = False


class _ItemRunner(dspy.Module):
    """Runs the program on one item inside its own usage block and hands the outcome to ``on_outcome``;
    never raises (a failing item must not lose the others)."""

    def __init__(
        self,
        program: dspy.Module,
        golds: list[dspy.Example],
        pass_labels: bool,
        on_outcome: Callable[[int, _Outcome], None],
    ) -> None:
        super().__init__()
        self.program = program
        self.golds, self.pass_labels, self.on_outcome = golds, pass_labels, on_outcome

    def forward(self, _item: int, **inputs: Any) -> dspy.Prediction:
        start = time.perf_counter()
        error = error_class = None
        unparsed = False
        pred = dspy.Prediction()
        with track_usage() as usage, role("task"):
            try:
                call = {**inputs, "gold": self.golds[_item]} if self.pass_labels else inputs
                pred = self.program(**call)
            except AdapterParseError:  # the model answered, unreadably: a wrong answer, not an error
                unparsed = True
            except Exception as exc:  # an LM call failed (after retries) or the method raised: an error
                error, error_class = redact(f"{type(exc).__name__}: {exc}"), type(exc).__name__
        failed_calls = [c for c in usage.calls if not c.ok]
        if error is None and failed_calls:  # the method swallowed a failed LM call: its answer is not trusted
            error_class = getattr(failed_calls[0], "error_class", None) or "LMError"
            error = f"{error_class}: {len(failed_calls)} LM call(s) failed inside the method"
        self.on_outcome(_item, _Outcome(usage.to_dict(), time.perf_counter() - start, error, error_class, unparsed))
        return pred


def evaluate(
    run: PreparedRun,
    examples: Iterable[dspy.Example] | None = None,
    *,
    store: ResultStore | None = None,
    progress: bool = True,
    on_record: OnRecord | None = None,
) -> MethodResult:
    """Run ``run.program`` on ``examples`` (default ``run.examples``) through ``dspy.Evaluate`` and return
    one record per item, in order. With ``store``, finished records are appended as they finish and items
    already in it (matched by content) are reused; ``on_record`` sees every new record as it finishes."""
    examples = list(run.examples if examples is None else examples)
    done = store.load() if store else {}
    todo = [ex for ex in examples if content_key(ex.get("question"), ex.get("answer")) not in done]
    outcomes: dict[int, _Outcome] = {}
    fresh: dict[str, ItemResult] = {}
    lock = threading.Lock()

    def keep_outcome(i: int, outcome: _Outcome) -> None:
        with lock:
            outcomes[i] = outcome

    # our own progress bar: dspy.Evaluate's would show a failed item as a score of 0 in its running average
    bar = tqdm(total=len(todo), desc=run.method.label, disable=not progress or not todo, dynamic_ncols=True)

    def score(devex: dspy.Example, pred: dspy.Prediction, trace: Any = None) -> float:
        i = int(devex["_item"])
        record = _record(todo[i], pred, outcomes.get(i), run.metric)
        with lock:
            fresh[record.key] = record
            bar.set_postfix_str(_progress(fresh.values()), refresh=False)
            bar.update(1)  # refreshes the bar, postfix included
        if store is not None:
            store.append(record)
        if on_record is not None:
            on_record(record)
        return record.score

    start = time.perf_counter()
    scored: dict[str, float] = {}
    if todo:
        devset = [
            dspy.Example(**ex.inputs(), _item=i).with_inputs(*ex.inputs().keys(), "_item") for i, ex in enumerate(todo)
        ]
        evaluator = dspy.Evaluate(
            devset=devset,
            metric=score,
            num_threads=run.spec.num_threads,
            display_progress=False,
            display_table=False,
            max_errors=len(devset) + 1,
            failure_score=0.0,
            provide_traceback=False,
        )
        with dspy.context(lm=run.lm), _without_evaluate_summary():
            result = evaluator(_ItemRunner(run.program, todo, run.uses_labels, keep_outcome))
        bar.close()
        scored = {
            content_key(todo[int(ex["_item"])].get("question"), todo[int(ex["_item"])].get("answer")): s
            for ex, _, s in result.results
        }
    items = []
    for ex in examples:
        key = content_key(ex.get("question"), ex.get("answer"))
        item = fresh.get(key) or done.get(key)
        if item is None:  # dspy.Evaluate itself lost the item: keep it visible as an error
            item = _record(ex, dspy.Prediction(), _Outcome({}, 0.0, "not evaluated", "EvaluateError"), run.metric)
        elif key in scored and item.score != scored[key]:
            raise RuntimeError(f"dspy.Evaluate scored item {item.id} {scored[key]} but the record says {item.score}")
        items.append(item)
    if run.judge is not None:
        items = judge_items(run, items, store, progress)
    else:  # verdicts stored by an earlier judged run stay in the store, out of this run's numbers
        items = [replace(i, judge=None, judge_usage={}) if i.judge is not None else i for i in items]
    reused = sum(done[i.key].wall_time for i in items if i.key in done and i.key not in fresh)
    return MethodResult(label=run.method.label, items=items, wall_time=time.perf_counter() - start, reused_time=reused)


class _EvaluateSummaryFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Average Metric")


@contextmanager
def _without_evaluate_summary() -> Iterator[None]:
    """Hide dspy.Evaluate's "Average Metric: x / n" line: it counts failed items as 0 (our records don't)."""
    log = logging.getLogger("dspy.evaluate.evaluate")
    quiet = _EvaluateSummaryFilter()
    log.addFilter(quiet)
    try:
        yield
    finally:
        log.removeFilter(quiet)


def _progress(records: Iterable[ItemResult]) -> str:
    """``acc 42.0% of 50 scored, 2 failed``: accuracy over scored items only, failures counted apart."""
    scores = [r.score for r in records if not r.failed]
    failed = sum(1 for r in records if r.failed)
    text = f"acc {sum(scores) / len(scores):.1%} of {len(scores)} scored" if scores else "none scored yet"
    return text + (f", {failed} failed" if failed else "")


_SKIP_FIELDS = {"trajectory", "usage", "stats", "answers_by_round"}


def _record(example: dspy.Example, pred: dspy.Prediction, outcome: _Outcome | None, metric: Metric) -> ItemResult:
    outcome = outcome or _Outcome({}, 0.0, "not run", "EvaluateError")
    error, error_class, score = outcome.error, outcome.error_class, 0.0
    if error is None and not outcome.unparsed:
        try:
            score = float(metric(example, pred))
        except Exception as exc:  # a metric that cannot read the answer: a bug to see, not a wrong answer
            error, error_class = f"metric failed: {type(exc).__name__}: {exc}", type(exc).__name__
    stats = pred.get("stats") if error is None else None
    return ItemResult(
        id=str(example.get("id")),
        question=str(example.get("question", "")),
        gold=example.get("answer"),
        prediction=_jsonable_fields(pred),
        score=score,
        error=error,
        usage=outcome.usage,
        trajectory=pred.get("trajectory"),
        answers_by_round=pred.get("answers_by_round"),
        stats={k: float(v) for k, v in (stats or {}).items()},
        wall_time=outcome.wall_time,
        error_class=error_class,
        unparsed=outcome.unparsed,
    )


def _jsonable_fields(pred: dspy.Prediction) -> dict[str, Any]:
    out = {}
    for k, v in pred.items():
        if k in _SKIP_FIELDS or k.startswith("_"):
            continue
        try:
            json.dumps(v)
            out[k] = v
        except TypeError:
            out[k] = str(v)
    return out


def with_options(method: MethodConfig, options: Mapping[str, Any]) -> MethodConfig:
    """``method`` with other options (e.g. sized to a matched budget), same label and LMs."""
    return replace(method, options=dict(options))
