"""The judge's part of the comparison report: per method its judged accuracy and quality scores with 95% CIs,
the paired differences from the baseline, the judge's agreement with the dataset metric, and their plot."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dspy_for.experiments.core.judge_summary import JUDGE_SCORES, JudgeSummary
from dspy_for.experiments.core.summary import Summary
from dspy_for.experiments.reports.sketch import Sketch
from dspy_for.stats import format_p_value

if TYPE_CHECKING:
    from dspy_for.experiments.core.outcome import ComparisonResult

__all__ = [
    "JUDGE_HEADER",
    "judge_figure",
    "judge_lines",
    "judge_table_row",
    "judged_rows",
]


JUDGE_HEADER = ["method", "judged acc %", "reasoning", "coherence", "holistic"]


def judge_table_row(s: Summary) -> list[str]:
    scores = s.judge.scores if s.judge is not None else {}

    def cell(score: str, pct: bool) -> str:
        if score not in scores:
            return "-"
        e, k = scores[score], 100 if pct else 1
        fmt = "{:.1f}" if pct else "{:.2f}"
        return f"{fmt.format(k * e.mean)} [{fmt.format(k * e.low)}–{fmt.format(k * e.high)}]"

    return [s.method, cell("judged_accuracy", True), *(cell(score, False) for score in JUDGE_SCORES[1:])]


def judge_lines(result: ComparisonResult, dataset: str) -> list[str]:
    """Under the judged table: each method's differences from the baseline, and whether the judge can be
    trusted (its agreement with the dataset's metric, and how often it failed)."""
    lines = []
    spec_judge = result.spec.judge
    for summary, j in _judged(result, dataset):
        deltas = [
            f"{name.split('.')[-1]} {(100 if name == 'judged_accuracy' else 1) * e.delta:+.2f} "
            f"({format_p_value(e.p_value)})"
            for name in JUDGE_SCORES
            if (e := j.scores.get(name)) is not None and e.delta is not None and e.p_value is not None
        ]
        line = f"{summary.method}: judged {j.n}"
        if j.kappa is not None and j.agreement is not None:
            line += f"; judge vs metric: agreement {100 * j.agreement:.0f}%, Cohen's κ {j.kappa:.2f} (n={j.kappa_n})"
        if j.fallbacks:
            line += f"; judge failed on {j.fallbacks} (the metric decided)"
        if j.errors:
            line += f"; judge's LM failed on {j.errors}: not graded, graded on the next run"
        line += f"; judge tokens/item {j.tokens_per_item:,.0f}"
        if deltas:
            line += f"; Δ vs {result.spec.baseline}: " + ", ".join(deltas)
        lines.append(line)
    if lines and spec_judge is not None:
        lm = spec_judge.lm if isinstance(spec_judge.lm, str) else getattr(spec_judge.lm, "model", "judge")
        lines.insert(
            0,
            f"judge: {lm}; quality scores in [0, 1] with bootstrap 95% CIs; a κ near 0 means the "
            "judge cannot read the answers and its scores say little",
        )
    return lines


def judged_rows(result: ComparisonResult, dataset: str) -> list[Summary]:
    """The summaries of the methods on ``dataset`` the judge graded."""
    return [s for s, _ in _judged(result, dataset)]


def _judged(result: ComparisonResult, dataset: str) -> list[tuple[Summary, JudgeSummary]]:
    cells = [c for c in result.cells if c.dataset == dataset and c.summary is not None]
    return [(c.summary, c.summary.judge) for c in cells if c.summary is not None and c.summary.judge is not None]


def judge_figure(dataset: str, rows: list[Summary]) -> Sketch:
    """The four judge scores per method (grouped bars, 95% CIs)."""
    fig = Sketch(figsize=(7, 4))
    ax = fig.subplots()
    width = 0.8 / len(JUDGE_SCORES)
    for k, score in enumerate(JUDGE_SCORES):
        xs: list[float] = []
        ys: list[float] = []
        err: list[list[float]] = [[], []]
        for i, row in enumerate(rows):
            e = row.judge.scores.get(score) if row.judge is not None else None
            if e is not None:
                xs.append(i + (k - 1.5) * width)
                ys.append(e.mean)
                err[0].append(max(0.0, e.mean - e.low))
                err[1].append(max(0.0, e.high - e.mean))
        ax.bar(xs, ys, width, yerr=err, capsize=3, label=score.replace("quality.", ""))
    ax.set_xticks(range(len(rows)), [r.method for r in rows], fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("judge score (95% CI)")
    ax.set_title(f"Judged accuracy and quality on {dataset}")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return fig
