"""``advise``'s answer for people and for MLflow: the text (the recommendation, its evidence, every candidate's fate,
the line that builds it), the frontier plot with the budget drawn in, and the parent run's metrics, tags and
artifacts."""

from __future__ import annotations

from typing import Any

from dspy_for.experiments.advisor.result import Advice, CandidateOutcome
from dspy_for.experiments.comparison import ComparisonResult
from dspy_for.experiments.reports import table as report
from dspy_for.experiments.tracking import store

__all__ = ["advice_lines", "advice_table", "frontier_figure", "log_advice"]

HEADER = ["candidate", "status", "n", "acc % [95% CI]", "tok/item", "why"]


def _acc(c: CandidateOutcome) -> str:
    r = c.result
    if r is None or not r.n_scored:
        return "-"
    lo, hi = r.ci
    return f"{100 * r.accuracy:.1f} [{100 * lo:.1f}–{100 * hi:.1f}]"


def _options(options: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in options.items())


def advice_table(advice: Advice) -> list[list[str]]:
    """One row per candidate: label (options), status, scored items (+failed), accuracy with its Wilson CI, tokens
    per item and why it left (or how its budgeted option was sized)."""
    rows = []
    for c in advice.candidates:
        r = c.result
        n = "-" if r is None else str(r.n_scored) + (f" +{r.n_failed}✗" if r.n_failed else "")
        tokens = f"{r.tokens_per_item:,.0f}" if r is not None and r.n_scored else "-"
        label = c.label + (f" ({_options(c.options)})" if c.options else "")
        rows.append([label, c.status, n, _acc(c), tokens, c.reason or c.sized])
    return rows


def _table_text(rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(HEADER)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(HEADER, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return lines


def advice_lines(advice: Advice) -> list[str]:
    """The whole answer as text lines (what the CLI prints and ``advice.txt`` holds)."""
    budget = f"budget {advice.budget:,.0f} tokens/item" if advice.budget is not None else "no budget"
    pairs = len(advice.pairs)
    level = f"α = {advice.alpha:g}" + (f" over {pairs} pair(s) ({advice.pair_alpha:.3g} each)" if pairs else "")
    lines = [
        f"advise on {advice.dataset}/{advice.split} · {budget} · margin ±{100 * advice.margin:g} points · {level}",
        f"pilot: the first {advice.pilot_items} item(s) of the seeded order measure each candidate's tokens per item"
        + (f" (CoT: {advice.cot_tokens:,.0f})" if advice.cot_tokens is not None else ""),
        *_table_text(advice_table(advice)),
    ]
    rec = advice.recommendation
    if rec is None or rec.result is None:
        lines.append(f"no recommendation: {advice.how}")
    else:
        r = rec.result
        lo, hi = r.ci
        head = "recommended" if advice.resolved else "recommended (unresolved)"
        lines.append(f"{head}: {rec.label}" + (f" ({_options(rec.options)})" if rec.options else ""))
        lines.append(f"  how: {advice.how}")
        lines.append(
            f"  accuracy {100 * r.accuracy:.1f}% [{100 * lo:.1f}–{100 * hi:.1f}] (Wilson 95%) at "
            f"{r.tokens_per_item:,.0f} tokens/item over {r.n_scored} item(s)"
        )
        if advice.budget is not None and r.tokens_per_item > advice.budget:
            lines.append(
                f"  note: over all its items it took {r.tokens_per_item:,.0f} tokens/item, "
                f"{100 * (r.tokens_per_item / advice.budget - 1):.1f}% over the budget (the pilot measured it within)"
            )
        runner = advice.runner_up
        vs = advice.pair(rec.label, runner) if runner else None
        if vs is not None:
            s = vs.result
            state = f"resolved at n={s.stopped_at}" if s.resolved else f"unresolved after n={s.n}"
            lines.append(
                f"  vs the runner-up, {runner}: Δ {100 * s.diff:+.1f} points, anytime-valid CI "
                f"[{100 * s.low:+.1f}, {100 * s.high:+.1f}] at α {s.alpha:.3g}, {state}"
            )
        lines.append(f"  items used: {advice.items_used} (pilot {advice.pilot_items}), {advice.elapsed:.0f}s")
        if advice.python_line:
            lines += ["build it:", f"  {advice.python_line}"]
    for error, count in advice.item_errors().most_common():
        lines.append(f"{count} item(s) failed: {error}")
    lines += [f"{label} could not run: {err}" for label, err in advice.could_not_run.items()]
    return lines


def frontier_figure(advice: Advice) -> Any:
    """Accuracy (95% CI) against tokens per item for every measured candidate, the budget as a dotted line; None
    when nothing was measured. A pyplot-free ``Figure`` (nothing is kept open)."""
    measured = {c.label: c.result for c in advice.candidates if c.measured and c.result is not None}
    if not measured:
        return None
    as_comparison = ComparisonResult(spec=advice.spec, results={advice.dataset: measured})
    fig = report.figures(as_comparison).get(f"frontier_{advice.dataset}.png")
    if fig is None:
        return None
    ax = fig.axes[0]
    if advice.budget is not None:
        ax.axvline(advice.budget, color="gray", linestyle=":", label=f"budget {advice.budget:,.0f}")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_title(f"advise on {advice.dataset}: " + (f"{advice.recommended}" if advice.recommended else "no pick"))
    return fig


def log_advice(parent: str, advice: Advice) -> None:
    """On the parent run: the recommendation as tags, the pairs and items used as metrics, ``advice.json``,
    ``advice.txt`` and the frontier plot."""
    tags = {
        "dspy_for.advise.recommended": advice.recommended or "none",
        "dspy_for.advise.resolved": "resolved" if advice.resolved else "unresolved",
        "dspy_for.advise.how": advice.how,
    }
    if not advice.ok:
        tags["dspy_for.failed_items"] = str(advice.n_failed)
    store.set_tags(parent, tags)
    metrics = {"advise.items_used": float(advice.items_used), "advise.pilot_items": float(advice.pilot_items)}
    for p in advice.pairs:
        key, r = f"advise.pair.{p.a}.{p.b}", p.result
        metrics.update({f"{key}.n": float(r.n), f"{key}.diff": r.diff, f"{key}.low": r.low, f"{key}.high": r.high})
        if r.stopped_at is not None:
            metrics[f"{key}.stopping_n"] = float(r.stopped_at)
    store.log_metrics(parent, metrics)
    store.log_json(parent, advice.to_dict(), "advice.json")
    store.log_text(parent, "\n".join(advice_lines(advice)) + "\n", "advice.txt")
