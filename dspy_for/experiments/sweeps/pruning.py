"""Paired pruning (``pruner = "paired"``): a trial is pruned as soon as it is *resolved* worse than the best trial so
far on the same items.

Every trial of a sweep takes the validation items in one order, chunk by chunk, so two trials are paired item by
item. After each chunk the trial's per-item values (accuracy 0/1, or a judge score in [0, 1]) are tested against
the incumbent's on the items both ran, in order, with the anytime-valid paired test of :mod:`dspy_for.stats`
(the same one ``compare --sequential`` uses): checking after every chunk does not inflate its error rate, so a trial
pruned at level ``alpha`` is worse than the incumbent with that confidence — unlike the median pruner, which
stops a trial whose running mean is below the median of earlier trials at the same step, however few items that
mean rests on.

Why not Optuna's ``WilcoxonPruner``: it also pairs trials instance by instance, but it repeats a fixed-n Wilcoxon
signed-rank test at every step (its p-value threshold does not hold under continuous monitoring), and on 0/1
accuracy the signed ranks reduce to a sign test on the discordant items anyway — which the betting e-process here
does with a stated, anytime-valid error rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dspy_for.experiments.core import MethodResult
from dspy_for.stats import PairedSequentialTest

__all__ = ["ITEM_VALUES", "item_values", "resolved_worse"]

#: the trial user attribute holding its per-item objective values, in the sweep's item order (None: not run, or no
#: value for that item)
ITEM_VALUES = "item_values"


def item_values(result: MethodResult, objective: str, order: Sequence[str]) -> list[float | None]:
    """The trial's value of ``objective`` per item of ``order`` (content keys): the metric's score for accuracy, the
    judge's score otherwise; None for an item not run (or failed, or not graded)."""
    by_key = result.scores_by_key() if objective == "accuracy" else result.judge_values(objective)
    return [by_key.get(k) for k in order]


def resolved_worse(
    mine: Sequence[float | None], incumbent: Sequence[float | None], *, maximize: bool, alpha: float, binary: bool
) -> bool:
    """Whether an anytime-valid paired test over the items both have values for (in order) resolves this trial
    worse than the incumbent."""
    pairs = [(a, b) for a, b in zip(mine, incumbent, strict=False) if a is not None and b is not None]
    if not pairs:
        return False
    test = PairedSequentialTest(kind="binary" if binary else "bounded", alpha=alpha)
    result = test.extend(pairs)
    worse = -1 if maximize else 1  # direction is +1 when the first (this trial) is larger
    return bool(result.resolved and result.direction == worse)


def incumbent_values(study: Any, objective_index: int = 0) -> list[float | None] | None:
    """The per-item values of the best complete trial so far, if any trial completed with them."""
    from optuna.trial import TrialState

    complete = [
        t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if ITEM_VALUES in t.user_attrs
    ]
    if not complete:
        return None
    best = study.best_trial
    chosen = best if ITEM_VALUES in best.user_attrs else complete[0]
    return list(chosen.user_attrs[ITEM_VALUES])
