"""Repeats per item (epochs): one value per item from its epochs' scores, and how much the epochs disagree.

An item answered k times is one cluster: its epochs are not k independent items. Every interval and paired test
is therefore taken over the items, on each item's value reduced from its epochs (:func:`reduce_epochs`):

* ``mean`` — the share of its epochs scored right (a value in [0, 1]; the item's expected score);
* ``majority`` — the score of the answer most of its epochs gave (ties: the answer given first);
* ``pass_at_k`` — 1 if any of its k epochs is right, else 0 (pass@k with k = the epochs run).

:func:`clustered_interval` is the interval of an accuracy over items as clusters; :func:`spread` says how much the
epochs of an item disagree and how far sampling alone moves an accuracy.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from dspy_for.errors import ConfigError

__all__ = ["REDUCERS", "Reducer", "Spread", "check_reducer", "clustered_interval", "reduce_epochs", "spread"]

Reducer = Literal["mean", "majority", "pass_at_k"]
REDUCERS: tuple[str, ...] = ("mean", "majority", "pass_at_k")


def check_reducer(reducer: str) -> None:
    if reducer not in REDUCERS:
        raise ConfigError(f"`reducer` must be one of {', '.join(REDUCERS)}, got {reducer!r}. Set e.g. reducer='mean'.")


def reduce_epochs(scores: Sequence[float], answers: Sequence[str], reducer: str = "mean") -> float:
    """One item's value from its epochs' ``scores`` (and the ``answers`` they gave, for ``majority``)."""
    check_reducer(reducer)
    if not scores:
        raise ValueError("an item needs at least one scored epoch")
    if reducer == "mean":
        return sum(scores) / len(scores)
    if reducer == "pass_at_k":
        return float(max(scores))
    if len(answers) != len(scores):
        raise ValueError("majority needs one answer per scored epoch")
    counts = Counter(answers)
    top = max(counts.values())
    winner = next(a for a in answers if counts[a] == top)  # ties: the answer given first
    return scores[answers.index(winner)]


def clustered_interval(item_values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high) of the per-item values (each item's mean over its epochs): Student's t over the n items,
    mean ± t₍ₙ₋₁₎ · s / √n, clipped to [0, 1] — the cluster-robust interval of an accuracy with the item as the
    cluster, never the k · n epochs as independent draws. One item: (mean, 0, 1)."""
    from scipy.stats import t as student_t

    xs = [float(v) for v in item_values]
    if not xs:
        raise ValueError("no item to take an interval over")
    mean = sum(xs) / len(xs)
    if len(xs) < 2:
        return mean, 0.0, 1.0
    half = float(student_t.ppf(0.5 + confidence / 2, len(xs) - 1)) * math.sqrt(_variance(xs) / len(xs))
    return mean, max(0.0, mean - half), min(1.0, mean + half)


@dataclass(frozen=True)
class Spread:
    """How the epochs of a method's items disagree.

    ``disagreeing``: the share of items (with two or more scored epochs) whose epochs' scores differ;
    ``epoch_sd``: the mean over those items of the standard deviation of their epochs' scores;
    ``sampling_se``: the standard error that sampling alone adds to the accuracy of the per-item means,
    sqrt(Σ s²ᵢ / kᵢ) / n with s²ᵢ item i's between-epoch variance — two methods whose accuracies differ by less
    than about 1.96 · sqrt(se_a² + se_b²) differ by no more than a re-draw could move them.
    """

    items: int
    disagreeing: float
    epoch_sd: float
    sampling_se: float


def spread(per_item: Sequence[Sequence[float]]) -> Spread | None:
    """The :class:`Spread` of items given as their epochs' scores; None unless some item has two or more epochs."""
    repeated = [list(s) for s in per_item if len(s) >= 2]
    if not repeated:
        return None
    variances = [_variance(s) for s in repeated]
    n = len(per_item)
    se = math.sqrt(sum(v / len(s) for v, s in zip(variances, repeated, strict=True))) / n
    return Spread(
        items=len(repeated),
        disagreeing=sum(1 for s in repeated if len(set(s)) > 1) / len(repeated),
        epoch_sd=sum(math.sqrt(v) for v in variances) / len(repeated),
        sampling_se=se,
    )


def _variance(xs: Sequence[float]) -> float:
    mean = sum(xs) / len(xs)
    return sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)
