"""Sequential comparisons (``compare --sequential``): answers as soon as the data allows.

Every method runs on the same items in one seeded order, ``batch_size`` items at a time and interleaved, so no
method runs far ahead. After each batch every pair (method, baseline) is tested on the items both scored, in
order, by an anytime-valid paired test (:class:`dspy_for.stats.PairedSequentialTest`): checking after every item
does not inflate its error rate, so a pair is *resolved* the first time its test rejects and its stopping n and
direction are final. A method whose pair is resolved stops running; the comparison stops when every pair is
resolved, at ``max_items``, or once the methods have spent ``max_total_tokens``. The error rate ``alpha`` holds over
all the pairs together: each pair is tested at ``alpha / pairs`` (Bonferroni).

A failed item is an error, never an outcome of the test: it is left out of the pair's sequence (and reported, and
run again on resume). Items already in the results store cost no LM call, so a comparison over stored results is a
replay: "at what n would this have been resolved?"
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import dspy

from dspy_for.datasets import content_key
from dspy_for.experiments.core import MethodResult
from dspy_for.experiments.core.pairs import BaselinePair
from dspy_for.experiments.spec import ExperimentSpec
from dspy_for.experiments.spec.settings import value_kind
from dspy_for.experiments.tracked_run import OpenCell, TrackedRun
from dspy_for.experiments.tracking import store
from dspy_for.stats import PairedSequentialTest, split_alpha

__all__ = ["BaselinePair", "log_outcomes", "outcome_rows", "paired_sequence", "run_sequential", "seeded_order"]


def seeded_order(examples: Sequence[dspy.Example], seed: int) -> list[dspy.Example]:
    """The items in the order a sequential comparison (and its replay) takes them: a seeded shuffle, so the
    stopping n does not depend on how the data file happens to be sorted."""
    order = list(examples)
    random.Random(seed).shuffle(order)
    return order


def paired_sequence(a: MethodResult, b: MethodResult, order: Sequence[dspy.Example]) -> list[tuple[float, float]]:
    """The (a, b) scores of the items both scored (neither failed), in ``order``."""
    mine, theirs = a.scores_by_key(), b.scores_by_key()
    keys = [content_key(ex.get("question"), ex.get("answer")) for ex in order]
    return [(mine[k], theirs[k]) for k in keys if k in mine and k in theirs]


def run_sequential(
    tracked: TrackedRun, cells: dict[str, OpenCell]
) -> tuple[dict[str, MethodResult], list[BaselinePair]]:
    """Run ``cells`` (open in ``tracked``, by label; the baseline among them) sequentially on one dataset (see the
    module docstring). Each batch runs its methods side by side through the run's one loop, under its
    ``max_cost``; the caller closes the cells."""
    spec = tracked.spec
    assert isinstance(spec, ExperimentSpec)
    baseline = spec.baseline or next(iter(cells))
    base_run = cells[baseline].run
    order = seeded_order(base_run.examples, spec.seed)[: spec.max_items or None]
    others = [label for label in cells if label != baseline]
    alpha = split_alpha(spec.alpha, len(others))
    kind = value_kind(spec.epochs, spec.reducer)
    tests = {label: PairedSequentialTest(kind=kind, alpha=alpha) for label in others}
    fed = {label: 0 for label in others}  # paired items already given to each test
    open_: set[str] = set(others)
    for start in range(0, len(order), spec.batch_size):
        batch = order[start : start + spec.batch_size]
        tracked.feed([cells[label] for label in [baseline, *sorted(open_)]], batch)
        seen = order[: start + len(batch)]
        for label in sorted(open_):
            pairs = paired_sequence(cells[label].result, cells[baseline].result, seen)
            tests[label].extend(pairs[fed[label] :])  # the new pairs, in order
            fed[label] = len(pairs)
            if tests[label].result.resolved:
                open_.discard(label)
        if not open_ or _spent(cells) >= (spec.max_total_tokens or float("inf")):
            break
        if tracked.out_of_money:
            tracked.leave_out(sum(len(order) - start - len(batch) for _ in [baseline, *open_]))
            break
    results_by_label = {label: _in_data_order(c.result, base_run.examples) for label, c in cells.items()}
    dataset = base_run.dataset.name
    outcomes = [BaselinePair(dataset, label, baseline, tests[label].result) for label in others]
    return results_by_label, outcomes


def _in_data_order(result: MethodResult, examples: Sequence[dspy.Example]) -> MethodResult:
    """``result`` with its records in the dataset's order (each item's epochs in turn), as a fixed-n run keeps
    them: the summary's seeded bootstraps then print the same numbers for the same records either way."""
    index = {content_key(ex.get("question"), ex.get("answer")): i for i, ex in enumerate(examples)}
    items = sorted(result.items, key=lambda r: (index.get(r.item_key, len(index)), r.epoch))
    return replace(result, items=items)


def _spent(cells: dict[str, OpenCell]) -> float:
    """Tokens the methods have served so far (what a cold run costs: spent plus served from cache), failed items
    included."""
    totals = (i.usage.get("total", {}) for c in cells.values() for i in c.result.items)
    return float(sum(t.get("tokens", 0) + t.get("cached_tokens", 0) for t in totals))


def outcome_rows(outcomes: list[BaselinePair]) -> list[dict[str, Any]]:
    """The pairs as plain rows (``sequential.jsonl``)."""
    return [o.row() for o in outcomes]


def log_outcomes(parent: str, outcomes: list[BaselinePair]) -> None:
    """Per pair on the parent run: its stopping n (resolved pairs), paired n, difference and interval, and a tag
    ``resolved`` / ``unresolved``; the rows in ``sequential.jsonl``."""
    metrics: dict[str, float] = {}
    tags: dict[str, str] = {}
    for o in outcomes:
        r, key = o.result, f"sequential.{o.dataset}.{o.method}"
        metrics.update({f"{key}.n": float(r.n), f"{key}.diff": r.diff, f"{key}.low": r.low, f"{key}.high": r.high})
        if r.resolved and r.stopped_at is not None:
            metrics[f"{key}.stopping_n"] = float(r.stopped_at)
        tags[key] = "resolved" if r.resolved else "unresolved"
    store.log_metrics(parent, metrics)
    store.set_tags(parent, tags)
    store.log_table(parent, outcome_rows(outcomes), "sequential.jsonl")


def __getattr__(name: str) -> Any:
    if name == "PairOutcome":  # deprecated: a method against the baseline is a BaselinePair
        warnings.warn("`PairOutcome` is now `BaselinePair`.", DeprecationWarning, stacklevel=2)
        return BaselinePair
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
