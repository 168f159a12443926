"""Evaluate one program on a list of examples: per-item results, usage and resume.

Every item runs through ``dspy.Evaluate`` (threads, progress bar) inside :func:`track_usage`, so each
item carries its own usage per role. A failing item is recorded with its error and scored 0; it never
stops the others. With ``results_path`` finished items are appended to a JSONL file as they finish and
skipped when the run is started again (items that failed are retried).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import dspy

from dspy_for.lm.usage import Usage, role, track_usage
from dspy_for.stats import mean_with_ci

__all__ = ["ItemResult", "MethodResult", "evaluate_method", "load_items"]

Metric = Callable[..., Any]


@dataclass
class ItemResult:
    id: str
    question: str
    gold: Any
    prediction: dict[str, Any]
    score: float
    error: str | None = None
    usage: dict[str, dict[str, float]] = field(default_factory=dict)
    trajectory: list[dict[str, Any]] | None = None
    answers_by_round: list[dict[str, Any]] | None = None
    stats: dict[str, float] = field(default_factory=dict)
    wall_time: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), default=str, ensure_ascii=False)


@dataclass
class MethodResult:
    label: str
    items: list[ItemResult]
    wall_time: float = 0.0

    @property
    def n(self) -> int:
        return len(self.items)

    @property
    def n_failed(self) -> int:
        return sum(1 for i in self.items if i.error)

    @property
    def scores(self) -> list[float]:
        return [i.score for i in self.items]

    @property
    def accuracy(self) -> float:
        return mean_with_ci(self.scores)[0]

    @property
    def ci(self) -> tuple[float, float]:
        _, lo, hi = mean_with_ci(self.scores)
        return lo, hi

    @property
    def usage(self) -> Usage:
        total = Usage()
        for item in self.items:
            total.merge(Usage.from_dict(item.usage))
        return total

    def per_item(self, counter: str = "served_tokens", role_name: str | None = None) -> float:
        """Mean per item of a usage counter (``served_tokens`` = what a cold run costs, ``tokens`` = spent)."""
        if not self.items:
            return 0.0
        u = self.usage
        r = u[role_name] if role_name else u.total
        value = getattr(r, counter)
        return float(value) / self.n

    @property
    def tokens_per_item(self) -> float:
        return self.per_item("served_tokens")

    @property
    def calls_per_item(self) -> float:
        return self.per_item("calls")

    @property
    def stats_mean(self) -> dict[str, float]:
        keys = sorted({k for i in self.items for k in i.stats})
        return {k: sum(i.stats.get(k, 0.0) for i in self.items) / max(1, self.n) for k in keys}


def load_items(path: Path) -> dict[str, ItemResult]:
    """Finished items of an earlier (possibly killed) run; a torn last line is ignored."""
    done: dict[str, ItemResult] = {}
    if not path.is_file():
        return done
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            item = ItemResult(**json.loads(line))
        except (json.JSONDecodeError, TypeError):
            continue
        if not item.error:
            done[item.id] = item
    return done


class _Tracked(dspy.Module):
    """Runs the program on one example with usage tracking; never raises."""

    def __init__(self, program: dspy.Module, pass_labels: bool) -> None:
        super().__init__()
        self.program = program
        self.pass_labels = pass_labels

    def forward(self, **kwargs: Any) -> dspy.Prediction:
        gold = kwargs.pop("_gold", None)
        start = time.perf_counter()
        with track_usage() as usage, role("task"):
            try:
                call = {**kwargs, "gold": gold} if self.pass_labels else kwargs
                pred = self.program(**call)
                error = None
            except Exception as exc:  # one failing item must not lose the others
                pred, error = dspy.Prediction(), f"{type(exc).__name__}: {exc}"
        pred._dspy_for_usage = usage.to_dict()
        pred._dspy_for_error = error
        pred._dspy_for_wall = time.perf_counter() - start
        return pred


def _prediction_fields(pred: dspy.Prediction) -> dict[str, Any]:
    skip = {"trajectory", "usage", "stats", "answers_by_round"}
    out = {}
    for k, v in pred.items():
        if k in skip or k.startswith("_"):
            continue
        try:
            json.dumps(v)
            out[k] = v
        except TypeError:
            out[k] = str(v)
    return out


def evaluate_method(
    program: dspy.Module,
    examples: Iterable[dspy.Example],
    *,
    metric: Metric,
    num_threads: int = 1,
    progress: bool = True,
    results_path: Path | None = None,
    desc: str = "",
    pass_labels: bool = False,
) -> MethodResult:
    """Run ``program`` on ``examples`` and score it with ``metric``; see the module docstring.

    ``pass_labels=True`` hands each item's gold example to the program as ``gold=`` (label-using
    methods such as ProRefine's oracle verifier).
    """
    examples = list(examples)
    done = load_items(results_path) if results_path else {}
    todo = [ex for ex in examples if str(ex.get("id")) not in done]
    lock = threading.Lock()
    fresh: dict[str, ItemResult] = {}
    if results_path:
        results_path.parent.mkdir(parents=True, exist_ok=True)

    def scored(example: dspy.Example, pred: dspy.Prediction, trace: Any = None) -> float:
        error = getattr(pred, "_dspy_for_error", None)
        score = 0.0
        if not error:
            try:
                score = float(metric(example, pred))
            except Exception as exc:
                error = f"metric failed: {type(exc).__name__}: {exc}"
        item = ItemResult(
            id=str(example.get("id")),
            question=str(example.get("question", "")),
            gold=example.get("answer"),
            prediction=_prediction_fields(pred),
            score=score,
            error=error,
            usage=getattr(pred, "_dspy_for_usage", {}) or {},
            trajectory=pred.get("trajectory") if hasattr(pred, "get") else None,
            answers_by_round=pred.get("answers_by_round") if hasattr(pred, "get") else None,
            stats={k: float(v) for k, v in (pred.get("stats") or {}).items()} if hasattr(pred, "get") else {},
            wall_time=float(getattr(pred, "_dspy_for_wall", 0.0)),
        )
        with lock:
            fresh[item.id] = item
            if results_path:
                with results_path.open("a", encoding="utf-8") as f:
                    f.write(item.to_json() + "\n")
        return score

    start = time.perf_counter()
    if todo:
        devset = [
            dspy.Example(**{k: ex[k] for k in ex.inputs()}, _gold=ex).with_inputs(*ex.inputs().keys(), "_gold")
            for ex in todo
        ]
        gold_of = {id(d): ex for d, ex in zip(devset, todo, strict=True)}
        evaluator = dspy.Evaluate(
            devset=devset,
            metric=lambda d, pred, trace=None: scored(gold_of[id(d)], pred, trace),
            num_threads=num_threads,
            display_progress=progress,
            display_table=False,
            max_errors=len(devset) + 1,
            failure_score=0.0,
            provide_traceback=False,
        )
        evaluator(_Tracked(program, pass_labels))
    items = []
    for ex in examples:
        key = str(ex.get("id"))
        item = fresh.get(key) or done.get(key)
        if item is None:  # the evaluator itself failed on this item (should not happen): keep it visible
            item = ItemResult(id=key, question=str(ex.get("question", "")), gold=ex.get("answer"),
                              prediction={}, score=0.0, error="not evaluated")
        items.append(item)
    return MethodResult(label=desc, items=items, wall_time=time.perf_counter() - start)
