"""One record-to-summary function: :func:`summarize` turns one method's records into the numbers every reader
uses — the comparison table, MLflow metrics, a sweep trial's objective and user attributes, and the final test.

A record has three shapes on its way to the table, each for a reason: an
:class:`~dspy_for.experiments.core.records.ItemResult` is one item's record as stored (what a resumed run reuses);
a :class:`~dspy_for.experiments.core.records.MethodResult` is one run's records (per-item values: epochs reduced,
items paired by content for the tests); a :class:`~dspy_for.experiments.core.summary.Summary` is the numbers, each
declared where the summary holds it (its meaning, table column, frame column and MLflow metric).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from dspy_for.experiments.core.judge_summary import judge_summary
from dspy_for.experiments.core.records import ItemResult, MethodResult
from dspy_for.experiments.core.summary import Summary
from dspy_for.stats import paired_comparison

__all__ = ["summarize", "tokens_by_lm"]


def summarize(result: MethodResult, baseline: MethodResult | None = None) -> Summary:
    """The one record-to-summary function (see the module docstring). ``baseline``: pair this method with it on
    the items both scored (exact McNemar for 0/1 scores, paired bootstrap otherwise), for accuracy and for every
    judge score. With nothing scored, every number but the counts is None (absent), never 0."""
    measured = result.n_scored > 0
    lo, hi = result.ci
    n = max(1, result.n_answers)  # per answer: one scored epoch of an item
    usage = result.usage
    roles = usage.roles if measured else {}
    total = usage.total
    by_role = {name: r.served_tokens / n for name, r in roles.items()}
    served = result.cost_per_item
    cost_per_item = served if measured and not math.isnan(served) else result.declared_cost_per_item()
    declared = cost_per_item is not None and math.isnan(served)
    seconds = result.seconds_per_item
    served_by = result.served_by()
    return Summary(
        method=result.label,
        n=result.n_scored,
        failed=result.n_failed,
        unparsed=result.n_unparsed,
        answers=result.n_answers,
        epochs=result.epochs,
        reducer=result.reducer,
        accuracy=result.accuracy if measured else None,
        ci_low=lo if measured else None,
        ci_high=hi if measured else None,
        **(_paired(result, baseline) if measured else {}),
        tokens_per_item=result.tokens_per_item if measured else None,
        calls_per_item=result.calls_per_item if measured else None,
        completion_tokens_per_item=(total.completion_tokens + total.cached_completion_tokens) / n if measured else None,
        reasoning_tokens_per_item=(total.reasoning_tokens + total.cached_reasoning_tokens) / n if measured else None,
        cost_per_item=cost_per_item,
        seconds_per_item=seconds if measured and not math.isnan(seconds) else None,
        seconds_lower_bound=measured and result.seconds_partly_cached,
        spent_tokens=total.tokens,
        cached_tokens=total.cached_tokens,
        calls=total.calls,
        spent_usd=total.spent_usd if measured else None,
        wall_time=result.wall_time + result.reused_time,
        reused_time=result.reused_time,
        role_collapse_rate=_collapse(result) if measured else None,
        serving_identities=len(served_by),
        serving_now=result.serving_now,
        mixed_serving=result.mixed_serving,
        reran=result.reran,
        tokens_per_item_by_role=by_role,
        spent_tokens_per_item_by_role={name: r.tokens / n for name, r in roles.items()},
        cached_tokens_per_item_by_role={name: r.cached_tokens / n for name, r in roles.items()},
        calls_per_item_by_role={name: r.calls / n for name, r in roles.items()},
        tokens_per_item_by_lm=tokens_by_lm(by_role, result.lms),
        stats=result.stats_mean,
        spread=result.spread(),
        judge=judge_summary(result, baseline),
        compile=result.compile,
        priced_at={result.lms.get(r, r): p for r, p in result.prices.items() if usage[r].calls} if declared else {},
        errors=dict(result.error_counts()),
        served_by=served_by,
    )


def tokens_by_lm(by_role: Mapping[str, float], role_lms: Mapping[str, str]) -> dict[str, float]:
    """Tokens per item per LM from tokens per item per role (``tokens_per_item_by_role``) and each role's LM name
    (the LM's ``model``, as the compile records it); a role missing from ``role_lms`` counts under its own name."""
    out: dict[str, float] = {}
    for role_name, tokens in by_role.items():
        lm = role_lms.get(role_name, role_name)
        out[lm] = out.get(lm, 0.0) + tokens
    return out


def _collapse(result: MethodResult) -> float | None:
    """FOR: the share of scored answers whose Debater answered instead of asking (None: the method has no such
    stat)."""
    if "role_collapse" not in result.stats_mean:
        return None
    return sum(1 for i in result.scored if i.stats.get("role_collapse", 0) > 0) / max(1, result.n_answers)


def _paired(result: MethodResult, baseline: MethodResult | None) -> dict[str, Any]:
    """``delta``, ``delta_low``, ``delta_high``, ``p_value``, ``paired_n``, ``paired_test`` and ``mixed_pairs`` of
    ``result`` against ``baseline`` (none without a baseline or an item both scored)."""
    if baseline is None or baseline is result:
        return {}
    mine, theirs = result.scores_by_key(), baseline.scores_by_key()
    common = [k for k in mine if k in theirs]
    if not common:
        return {}
    p = paired_comparison([mine[k] for k in common], [theirs[k] for k in common])
    return {
        "delta": p.diff,
        "delta_low": p.low,
        "delta_high": p.high,
        "p_value": p.p_value,
        "paired_n": len(common),
        "paired_test": p.test,
        "mixed_pairs": _mixed_pairs(result, baseline, common),
    }


def _mixed_pairs(result: MethodResult, baseline: MethodResult, keys: list[str]) -> int:
    """Of the items paired on ``keys``, those whose records (each item's scored epochs) in ``result`` and in
    ``baseline`` were served by different identities: both known, and neither set within the other (a method with
    a second LM of its own adds that LM's identity without mixing)."""
    mine, theirs = result.epochs_by_item(), baseline.epochs_by_item()

    def served(records: list[ItemResult]) -> frozenset[str]:
        return frozenset(x for r in records for x in r.served_by)

    pairs = [(served(mine[k]), served(theirs[k])) for k in keys]
    return sum(1 for a, b in pairs if a and b and not (a <= b or b <= a))
