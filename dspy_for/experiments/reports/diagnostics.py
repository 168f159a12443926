"""The accuracy of every answer prefix A_0..A_N of a run whose records keep ``answers_by_round`` (one N-round FOR run
gives every no-Host prefix), and a method's own diagnostics: what its registry entry's trajectory view says of one
run's records (e.g. a FOR debate's flips, named errors and role collapse), as plain data and as one line."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import dspy

from dspy_for.experiments.methods import get_method
from dspy_for.stats import mean_with_ci

__all__ = ["diagnostics_text", "method_diagnostics", "round_accuracy", "round_scores"]


def round_scores(items: list[Any], metric: Any, rounds: int | None = None) -> list[list[float]]:
    """Per-item scores of every prefix A_0..A_{rounds-1} from one run's ``answers_by_round``.

    A debate that ended early (nothing new to ask) keeps its last answer for the later prefixes.
    ``rounds`` defaults to the longest ``answers_by_round``.
    """
    if rounds is None:
        rounds = max((len(i.answers_by_round or []) for i in items), default=0)
    out = []
    for k in range(rounds):
        scores = []
        for it in items:
            answers = it.answers_by_round or [{}]
            pred = dspy.Prediction(**answers[min(k, len(answers) - 1)])
            scores.append(float(metric(dspy.Example(answer=it.gold), pred)))
        out.append(scores)
    return out


def round_accuracy(items: list[Any], metric: Any) -> list[tuple[float, float, float]]:
    """Accuracy (with CI) of every prefix A_0..A_N from one run's ``answers_by_round``."""
    return [mean_with_ci(scores) for scores in round_scores(items, metric)]


def method_diagnostics(method: str, items: list[Any], metric: Callable[..., Any]) -> dict[str, Any] | None:
    """What ``method``'s registry entry says of one run's scored records (None: it declares no diagnostics, or
    nothing was scored)."""
    view = get_method(method).view
    if view is None or view.diagnostics is None or not items:
        return None
    return view.diagnostics(items, metric)


def diagnostics_text(value: Any) -> str:
    """Diagnostics as one line: ``name value`` pairs, numbers to two decimals, lists of tables in brackets."""
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {diagnostics_text(v)}" for k, v in value.items())
    if isinstance(value, list):
        return " ".join(f"[{diagnostics_text(v)}]" for v in value) or "none"  # e.g. no rounds: no flips
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)
