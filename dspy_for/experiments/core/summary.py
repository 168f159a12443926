"""One record-to-summary function: :func:`summarize` turns one method's records into the numbers every reader
uses — the comparison table, MLflow metrics, a sweep trial's objective and user attributes, and the final test.

Numbers are over the *scored* items only; failed items are errors, counted apart and never a score. When no
item was scored, accuracy, its interval and every cost are ``None`` (absent), never 0.

A record has three shapes on its way to the table, each for a reason: an
:class:`~dspy_for.experiments.core.records.ItemResult` is one item's record as stored (what a resumed run reuses);
a :class:`~dspy_for.experiments.core.records.MethodResult` is one run's records (per-item values: epochs reduced,
items paired by content for the tests); a :class:`Summary` is the numbers, named as the table's row has them —
:meth:`Summary.row` is it as plain data, :meth:`Summary.metrics` the flat floats MLflow takes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from dspy_for.experiments.core.records import MethodResult
from dspy_for.stats import bootstrap_interval, cohens_kappa, mean_with_ci, paired_comparison

__all__ = ["JUDGE_SCORES", "Cell", "Summary", "judge_summary", "summarize", "tokens_by_lm"]

JUDGE_SCORES = ("judged_accuracy", "quality.reasoning", "quality.coherence", "quality.holistic")


@dataclass(frozen=True)
class Summary:
    """One method's numbers (see the module docstring), named as the table's row has them."""

    method: str  # the method's label
    n: int  # scored items
    failed: int
    unparsed: int
    accuracy: float | None
    ci_low: float | None
    ci_high: float | None
    tokens_per_item: float | None  # served tokens (spent + from cache): what a cold run costs
    calls_per_item: float | None
    tokens_per_item_by_role: dict[str, float]
    spent_tokens: int  # spent now (not served from cache), over the scored items
    cached_tokens: int
    #: USD per scored item (what a cold run costs, like tokens/item); None when an LM call is not priced
    cost_per_item: float | None
    spent_usd: float | None  # USD spent now over the scored items (cache hits cost nothing); None: not priced
    reasoning_tokens_per_item: float | None  # of the completion tokens, those reasoning models spent reasoning
    epochs: int  # repeats per item (1: none); ``n`` counts items, ``answers`` their scored epochs
    reducer: str  # how an item's epochs made its value (mean, majority, pass_at_k)
    answers: int
    spread: dict[str, float] | None  # how the epochs disagree (:class:`~dspy_for.stats.Spread`); None without repeats
    calls: int
    #: the method's own seconds per scored answer (each record's call on its item, as it ran: a reused record keeps
    #: its time); comparable across methods that share one pool, where ``wall_time`` is not
    seconds_per_item: float | None
    #: ``seconds_per_item`` counts answers some of whose LM calls DSPy's cache served: a lower bound on a cold run's
    seconds_lower_bound: bool
    wall_time: float  # the run's (its pool's, shared by the methods run side by side), plus reused records' own
    reused_time: float
    stats: dict[str, float]
    errors: dict[str, int]
    judge: dict[str, Any] = field(default_factory=dict)
    #: against the baseline on the items both scored (matched by content): the difference in accuracy, its interval,
    #: the paired test's p-value (exact McNemar for 0/1 scores, else a paired bootstrap) and the items paired
    delta: float | None = None
    delta_low: float | None = None
    delta_high: float | None = None
    p_value: float | None = None
    paired_n: int = 0
    paired_test: str | None = None  # "mcnemar_exact" or "paired_bootstrap": which test gave p_value
    role_collapse_rate: float | None = None
    per_role: dict[str, dict[str, float]] = field(default_factory=dict)  # per scored item: served/spent/cached, calls
    #: tokens per scored item of each LM (its model name): a token of one model is never added to another's
    tokens_per_item_by_lm: dict[str, float] = field(default_factory=dict)
    #: the method's compile step (:meth:`~dspy_for.experiments.core.compile_step.CompileCost.row`; None: none)
    compile: dict[str, Any] | None = None
    #: when ``cost_per_item`` was priced from the tokens at the LMs' declared ``price`` (records kept without a
    #: cost): each LM's price, ``{model: {input, output}}`` in USD per million tokens; empty otherwise
    priced_at: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def measured(self) -> bool:
        return self.n > 0

    def metrics(self) -> dict[str, float]:
        """MLflow metrics: every measured number; with nothing scored, only the counts."""
        if not self.measured:
            return {"n": 0.0, "failed_items": float(self.failed)}
        assert self.accuracy is not None and self.ci_low is not None and self.ci_high is not None
        out = {
            "accuracy": self.accuracy,
            "accuracy_ci_low": self.ci_low,
            "accuracy_ci_high": self.ci_high,
            "n": float(self.n),
            "failed_items": float(self.failed),
            "unparsed_items": float(self.unparsed),
            "wall_time": self.wall_time,
            "tokens_per_item": float(self.tokens_per_item or 0.0),
            "calls_per_item": float(self.calls_per_item or 0.0),
        }
        if self.seconds_per_item is not None:  # every answer served from the cache: absent, never 0
            out["seconds_per_item"] = self.seconds_per_item
        if self.cost_per_item is not None and self.spent_usd is not None:  # unpriced: absent, never 0
            out.update({"cost_per_item_usd": self.cost_per_item, "cost_usd": self.spent_usd})
        if self.reasoning_tokens_per_item:
            out["reasoning_tokens_per_item"] = self.reasoning_tokens_per_item
        if self.spread is not None:
            out.update({"epochs": float(self.epochs), "answers": float(self.answers)})
            out.update({f"epochs.{k}": float(v) for k, v in self.spread.items()})
        for role_name, r in self.per_role.items():
            out[f"tokens_per_item.{role_name}"] = r["served"]
            out[f"tokens_per_item.{role_name}.spent"] = r["spent"]
            out[f"tokens_per_item.{role_name}.cached"] = r["cached"]
            out[f"calls_per_item.{role_name}"] = r["calls"]
        out.update({f"mean.{k}": v for k, v in self.stats.items()})
        if self.role_collapse_rate is not None:
            out["role_collapse_rate"] = self.role_collapse_rate
        for score in JUDGE_SCORES:
            if score in self.judge:
                e = self.judge[score]
                out.update({score: e["mean"], f"{score}_ci_low": e["low"], f"{score}_ci_high": e["high"]})
        if self.judge:
            out.update(
                {
                    "judge.fallbacks": float(self.judge["fallbacks"]),
                    "tokens_per_item.judge": self.judge["tokens_per_item"],
                }
            )
            if "kappa" in self.judge:
                out.update({"judge.kappa": self.judge["kappa"], "judge.agreement": self.judge["agreement"]})
        return out

    def row(self) -> dict[str, Any]:
        """The summary as plain data (the table's row, ``summary.jsonl``, the final test): its fields, but the
        per-role numbers (MLflow's metrics have them) and an empty ``judge``."""
        out = asdict(self)
        out.pop("per_role")
        if not out["judge"]:
            out.pop("judge")
        return out


@dataclass(frozen=True)
class Cell:
    """One method on one dataset as every report shows it (the table's row, a frame's cell, ``summary.jsonl``): its
    :class:`Summary`, paired with the baseline, or the error that kept it from running (``summary`` None)."""

    dataset: str
    split: str
    label: str  # the method's label in the run
    method: str  # its registry name
    summary: Summary | None = None
    error: str | None = None  # the method could not run at all
    diagnostics: dict[str, Any] | None = None  # what the method's registry entry declares it reports

    @property
    def measured(self) -> bool:
        """Scored items to report on (False: could not run, every item failed, or none started)."""
        return self.summary is not None and self.summary.accuracy is not None

    def row(self) -> dict[str, Any]:
        """The cell as plain data (``summary.jsonl``): :meth:`Summary.row` with its dataset and split, its
        ``diagnostics`` when there are any; ``{dataset, split, method, error}`` for a method that could not run."""
        head = {"dataset": self.dataset, "split": self.split}
        if self.summary is None:
            return {**head, "method": self.label, "error": self.error}
        row = {**head, **self.summary.row()}
        return {**row, "diagnostics": self.diagnostics} if self.diagnostics is not None else row


def summarize(result: MethodResult, baseline: MethodResult | None = None) -> Summary:
    """The one record-to-summary function (see the module docstring). ``baseline``: pair this method with it on
    the items both scored (exact McNemar for 0/1 scores, paired bootstrap otherwise), for accuracy and for every
    judge score."""
    measured = result.n_scored > 0
    lo, hi = result.ci
    n = max(1, result.n_answers)  # per answer: one scored epoch of an item
    usage = result.usage
    per_role = {
        name: {
            "served": r.served_tokens / n,
            "spent": r.tokens / n,
            "cached": r.cached_tokens / n,
            "calls": r.calls / n,
        }
        for name, r in usage.roles.items()
    }
    collapse = None
    if measured and "role_collapse" in result.stats_mean:
        collapse = sum(1 for i in result.scored if i.stats.get("role_collapse", 0) > 0) / n
    total = usage.total
    served_usd = total.served_cost_usd
    cost_per_item = served_usd / n if measured and served_usd is not None else None
    priced_at: dict[str, dict[str, float]] = {}
    if measured and cost_per_item is None and (declared := result.declared_cost_per_item()) is not None:
        cost_per_item = declared
        priced_at = {result.lms.get(r, r): asdict(p) for r, p in result.prices.items() if usage[r].calls}
    return Summary(
        method=result.label,
        n=result.n_scored,
        failed=result.n_failed,
        unparsed=result.n_unparsed,
        accuracy=result.accuracy if measured else None,
        ci_low=lo if measured else None,
        ci_high=hi if measured else None,
        tokens_per_item=result.tokens_per_item if measured else None,
        calls_per_item=result.calls_per_item if measured else None,
        tokens_per_item_by_role={name: r["served"] for name, r in per_role.items()} if measured else {},
        spent_tokens=total.tokens,
        cached_tokens=total.cached_tokens,
        cost_per_item=cost_per_item,
        spent_usd=total.spent_usd if measured else None,
        reasoning_tokens_per_item=(
            (total.reasoning_tokens + total.cached_reasoning_tokens) / max(1, result.n_answers) if measured else None
        ),
        epochs=result.epochs,
        reducer=result.reducer,
        answers=result.n_answers,
        spread=asdict(spread) if (spread := result.spread()) is not None else None,
        calls=total.calls,
        seconds_per_item=seconds if measured and not math.isnan(seconds := result.seconds_per_item) else None,
        seconds_lower_bound=measured and result.seconds_partly_cached,
        wall_time=result.wall_time + result.reused_time,
        reused_time=result.reused_time,
        stats=result.stats_mean,
        errors=dict(result.error_counts()),
        judge=judge_summary(result, baseline),
        **(_paired(result, baseline) if measured else {}),
        role_collapse_rate=collapse,
        per_role=per_role if measured else {},
        tokens_per_item_by_lm=tokens_by_lm({k: r["served"] for k, r in per_role.items()}, result.lms)
        if measured
        else {},
        compile=result.compile.row() if result.compile is not None else None,
        priced_at=priced_at,
    )


def tokens_by_lm(by_role: Mapping[str, float], role_lms: Mapping[str, str]) -> dict[str, float]:
    """Tokens per item per LM from tokens per item per role (``tokens_per_item_by_role``) and each role's LM name
    (the LM's ``model``, as the compile records it); a role missing from ``role_lms`` counts under its own name."""
    out: dict[str, float] = {}
    for role_name, tokens in by_role.items():
        lm = role_lms.get(role_name, role_name)
        out[lm] = out.get(lm, 0.0) + tokens
    return out


def _paired(result: MethodResult, baseline: MethodResult | None) -> dict[str, Any]:
    """``delta``, ``delta_low``, ``delta_high``, ``p_value``, ``paired_n`` and ``paired_test`` of ``result`` against
    ``baseline`` (none without a baseline or an item both scored)."""
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
    }


def judge_summary(r: MethodResult, base: MethodResult | None) -> dict[str, Any]:
    """The judge's view of one method: per score its mean with a 95% CI (Wilson for judged accuracy,
    bootstrap for the quality scores) and n, the paired difference from ``base`` (exact McNemar / paired
    bootstrap) with p; how often the rule decided because the judge failed; the judge's agreement with the
    dataset metric (Cohen's κ over the items it judged); and the judge's tokens per item (apart from the
    method's own). Empty when no item was judged."""
    judged = [(i.judge, i.score) for i in r.scored if i.judge is not None and i.judge.get("method") != "error"]
    if not judged and not r.judge_errors:
        return {}
    out: dict[str, Any] = {
        "n": len(judged),
        "errors": r.judge_errors,
        "fallbacks": sum(1 for verdict, _ in judged if verdict.get("method") == "rule"),
        "tokens_per_item": r.judge_usage.total.served_tokens / max(1, len(judged)),
    }
    by_judge = [(verdict, score) for verdict, score in judged if verdict.get("method") == "judge"]
    if by_judge:
        agree = [bool(verdict.get("correct")) for verdict, _ in by_judge]
        rule = [bool(score) for _, score in by_judge]
        out["kappa"] = cohens_kappa(agree, rule)
        out["agreement"] = sum(a == b for a, b in zip(agree, rule, strict=True)) / len(by_judge)
        out["kappa_n"] = len(by_judge)
    for score in JUDGE_SCORES:
        values = r.judge_values(score)
        if not values:
            continue
        xs = list(values.values())
        mean = sum(xs) / len(xs)
        lo, hi = mean_with_ci(xs)[1:] if score == "judged_accuracy" else bootstrap_interval(xs)
        entry: dict[str, Any] = {"mean": mean, "low": lo, "high": hi, "n": len(xs)}
        if base is not None and base is not r:
            theirs = base.judge_values(score)
            common = [k for k in values if k in theirs]
            if common:
                paired = paired_comparison([values[k] for k in common], [theirs[k] for k in common])
                entry.update(delta=paired.diff, p_value=paired.p_value, paired_n=len(common))
        out[score] = entry
    return out
