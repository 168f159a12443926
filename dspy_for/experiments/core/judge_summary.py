"""The judge's view of one method, declared and computed: :class:`JudgeSummary` (how many items it graded, how
often it failed, how far it agrees with the dataset's metric, its tokens) with a :class:`JudgeScore` per score it
gave, each number a declared :class:`~dspy_for.experiments.spec.measures.Measure` (its MLflow metric, its frame
column under ``judge.``); :func:`judge_summary` makes it from one method's records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from dspy_for.experiments.core.records import MethodResult
from dspy_for.experiments.spec.measures import Measure
from dspy_for.stats import bootstrap_interval, cohens_kappa, mean_with_ci, paired_comparison

__all__ = ["JUDGE_SCORES", "JudgeScore", "JudgeSummary", "judge_summary"]

#: the judge's scores, in the order its table shows them
JUDGE_SCORES = ("judged_accuracy", "quality.reasoning", "quality.coherence", "quality.holistic")


@dataclass(frozen=True)
class JudgeScore:
    """One judge score of one method: its mean with a 95% interval and, against the baseline, the paired
    difference."""

    mean: Annotated[float, Measure("the score's mean over the judged items", metric="{key}")]
    low: Annotated[
        float,
        Measure("its 95% interval (Wilson for judged accuracy, bootstrap for quality), low end", metric="{key}_ci_low"),
    ]
    high: Annotated[float, Measure("high end", metric="{key}_ci_high")]
    n: Annotated[int, Measure("items with this score", unit="items", aggregated="count")]
    delta: Annotated[float | None, Measure("minus the baseline's, on the items both have it")] = None
    p_value: Annotated[float | None, Measure("the paired test's p (exact McNemar for 0/1, else paired bootstrap)")] = (
        None
    )
    paired_n: Annotated[int, Measure("items paired with the baseline", unit="items", aggregated="count")] = 0

    def row(self) -> dict[str, Any]:
        """As plain data (the pair's numbers only when it was paired)."""
        out: dict[str, Any] = {"mean": self.mean, "low": self.low, "high": self.high, "n": self.n}
        if self.paired_n:
            out.update(delta=self.delta, p_value=self.p_value, paired_n=self.paired_n)
        return out


@dataclass(frozen=True)
class JudgeSummary:
    """The judge's view of one method: how many items it graded, how often it failed, how far it agrees with the
    dataset's metric, its own tokens, and each score (:data:`JUDGE_SCORES`) it gave."""

    n: Annotated[int, Measure("items the judge graded", unit="items", aggregated="count")]
    errors: Annotated[int, Measure("scored items the judge's LM failed on (graded on the next run)", unit="items")]
    fallbacks: Annotated[
        int, Measure("items the rule decided because the judge failed", unit="items", metric="judge.fallbacks")
    ]
    tokens_per_item: Annotated[
        float,
        Measure(
            "the judge's tokens per judged item (apart from the method's)",
            unit="tokens",
            metric="tokens_per_item.judge",
        ),
    ]
    kappa: Annotated[
        float | None, Measure("Cohen's κ of the judge against the dataset's metric", metric="judge.kappa")
    ] = None
    agreement: Annotated[
        float | None,
        Measure("share of items where the judge and the metric agree", unit="proportion", metric="judge.agreement"),
    ] = None
    kappa_n: Annotated[int, Measure("items κ is over (those the judge itself decided)", unit="items")] = 0
    scores: Annotated[dict[str, JudgeScore], Measure("each score the judge gave", frame="", key="score")] = field(
        default_factory=dict
    )

    def row(self) -> dict[str, Any]:
        """As plain data: its counts, κ when measured, and each score by its name."""
        out: dict[str, Any] = {
            "n": self.n,
            "errors": self.errors,
            "fallbacks": self.fallbacks,
            "tokens_per_item": self.tokens_per_item,
        }
        if self.kappa is not None:
            out.update(kappa=self.kappa, agreement=self.agreement, kappa_n=self.kappa_n)
        return {**out, **{name: score.row() for name, score in self.scores.items()}}


def judge_summary(r: MethodResult, base: MethodResult | None) -> JudgeSummary | None:
    """The judge's view of one method: per score its mean with a 95% CI (Wilson for judged accuracy,
    bootstrap for the quality scores) and n, the paired difference from ``base`` (exact McNemar / paired
    bootstrap) with p; how often the rule decided because the judge failed; the judge's agreement with the
    dataset metric (Cohen's κ over the items it judged); and the judge's tokens per item (apart from the
    method's own). None when no item was judged."""
    judged = [(i.judge, i.score) for i in r.scored if i.judge is not None and i.judge.get("method") != "error"]
    if not judged and not r.judge_errors:
        return None
    by_judge = [(verdict, score) for verdict, score in judged if verdict.get("method") == "judge"]
    kappa: dict[str, Any] = {}
    if by_judge:
        agree = [bool(verdict.get("correct")) for verdict, _ in by_judge]
        rule = [bool(score) for _, score in by_judge]
        kappa = {
            "kappa": cohens_kappa(agree, rule),
            "agreement": sum(a == b for a, b in zip(agree, rule, strict=True)) / len(by_judge),
            "kappa_n": len(by_judge),
        }
    return JudgeSummary(
        n=len(judged),
        errors=r.judge_errors,
        fallbacks=sum(1 for verdict, _ in judged if verdict.get("method") == "rule"),
        tokens_per_item=r.judge_usage.total.served_tokens / max(1, len(judged)),
        scores={score: entry for score in JUDGE_SCORES if (entry := _score(r, base, score)) is not None},
        **kappa,
    )


def _score(r: MethodResult, base: MethodResult | None, score: str) -> JudgeScore | None:
    values = r.judge_values(score)
    if not values:
        return None
    xs = list(values.values())
    mean = sum(xs) / len(xs)
    lo, hi = mean_with_ci(xs)[1:] if score == "judged_accuracy" else bootstrap_interval(xs)
    paired: dict[str, Any] = {}
    if base is not None and base is not r:
        theirs = base.judge_values(score)
        common = [k for k in values if k in theirs]
        if common:
            p = paired_comparison([values[k] for k in common], [theirs[k] for k in common])
            paired = {"delta": p.diff, "p_value": p.p_value, "paired_n": len(common)}
    return JudgeScore(mean=mean, low=lo, high=hi, n=len(xs), **paired)
