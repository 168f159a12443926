"""``advise``'s answer for people and for MLflow: the text (the recommendation, its evidence, every candidate's fate,
the line that builds it, dollars where the LMs are priced, the spend against ``max_cost``), the frontier plot with
the budget drawn in, and the parent run's metrics, tags and artifacts."""

from __future__ import annotations

from typing import Any

from dspy_for.experiments.advisor.result import Advice, AtVolume, CandidateOutcome, dollars_per_item
from dspy_for.experiments.comparison import ComparisonResult
from dspy_for.experiments.core import MethodResult
from dspy_for.experiments.core.costs import USD
from dspy_for.experiments.core.shown import compile_cell
from dspy_for.experiments.core.spend import money
from dspy_for.experiments.reports import table as report
from dspy_for.experiments.reports.breakeven import breakeven_lines
from dspy_for.experiments.reports.sketch import Sketch
from dspy_for.experiments.spec.settings import value_kind
from dspy_for.experiments.tracking import store

__all__ = ["advice_lines", "advice_table", "frontier_figure", "log_advice"]

HEADER = ["candidate", "status", "n", "acc % [95% CI]", "tok/item", "why"]
COST = "$/item"  # after tok/item, when any candidate's LMs are priced


def _priced(advice: Advice) -> bool:
    """Dollars are shown when ``--budget-usd`` was given or any candidate's calls cost something (as in compare's
    table: a run on local models, all $0, shows none)."""
    return advice.budget_usd is not None or any((dollars_per_item(c.result) or 0) > 0 for c in advice.candidates)


def header(advice: Advice) -> list[str]:
    at = [f"/correct @{advice.volume:,}"] if advice.volume is not None else []
    return [*HEADER[:5], *([COST] if _priced(advice) else []), *at, HEADER[5]]


def _acc(c: CandidateOutcome) -> str:
    r = c.result
    if r is None or not r.n_scored:
        return "-"
    lo, hi = r.ci
    return f"{100 * r.accuracy:.1f} [{100 * lo:.1f}–{100 * hi:.1f}]"


def _options(options: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in options.items())


def advice_table(advice: Advice) -> list[list[str]]:
    """One row per candidate (columns :func:`header`): label (options), status, scored items (+failed), accuracy
    with its Wilson CI, tokens per item, USD per item when any LM is priced ('-' for one that is not) and why it
    left (or how its budgeted option was sized)."""
    rows = []
    priced = _priced(advice)
    at = {r.method: _per_correct(r) for r in advice.at_volume}
    for c in advice.candidates:
        r = c.result
        n = "-" if r is None else str(r.n_scored) + (f" +{r.n_failed}✗" if r.n_failed else "")
        tokens = f"{r.tokens_per_item:,.0f}" if r is not None and r.n_scored else "-"
        label = c.label + (f" ({_options(c.options)})" if c.options else "")
        cost = [money(dollars_per_item(r))] if priced else []
        volume = [at.get(c.label, "-")] if advice.volume is not None else []
        rows.append([label, c.status, n, _acc(c), tokens, *cost, *volume, c.reason or c.sized])
    return rows


def _per_correct(at: AtVolume) -> str:
    """A cost per correct answer at the volume: dollars, or tokens ('-': unknown)."""
    value = at.cost_per_correct
    if value is None:
        return "-"
    return money(value) if at.unit == USD else f"{value:,.0f} tok"


def volume_lines(advice: Advice) -> list[str]:
    """With ``--volume``: what the column means, each compiled candidate's compile and the break-even volumes."""
    if advice.volume is None:
        return []
    unit = next((r.unit for r in advice.at_volume), USD)
    lines = [
        f"/correct @{advice.volume:,}: total cost per correct answer over {advice.volume:,} items, compile included "
        f"(its first compile's cost, also when reused), in {'USD' if unit == 'usd' else 'tokens'}"
    ]
    if advice.compilers:
        lines.append(f"compiled on {advice.train} ({', '.join(advice.compilers)}): each compile once, cached")
    for c in advice.candidates:
        if c.compile and c.result is not None and c.result.compile is not None:
            lines.append(f"  {c.label} compile: {compile_cell(c.result.compile)}")
    if advice.breakeven:
        lines.append(
            "break-even: the items after which the compiled candidate has the lower total cost per correct answer "
            "(the range: over the accuracy intervals)"
        )
    lines += [f"  {line}" for line in breakeven_lines(advice.breakeven)]
    return lines


def _table_text(head: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return lines


def advice_lines(advice: Advice, *, spend: bool = True) -> list[str]:
    """The whole answer as text lines (``advice.txt``; the CLI prints them, then the spend line as every run command
    does: ``spend=False``)."""
    budgets = [f"budget {advice.budget:,.0f} tokens/item"] if advice.budget is not None else []
    budgets += [f"budget {money(advice.budget_usd, as_given=True)}/item"] if advice.budget_usd is not None else []
    budget = " · ".join(budgets) or "no budget"
    budget += f" · volume {advice.volume:,} items" if advice.volume is not None else ""
    pairs = len(advice.pairs)
    level = f"α = {advice.alpha:g}" + (f" over {pairs} pair(s) ({advice.pair_alpha:.3g} each)" if pairs else "")
    lines = [
        f"advise on {advice.dataset}/{advice.split} · {budget} · margin ±{100 * advice.margin:g} points · {level}",
        _pilot_line(advice),
        *_table_text(header(advice), advice_table(advice)),
    ]
    lines += volume_lines(advice)
    rec = advice.recommendation
    if rec is None or rec.result is None:
        lines.append(f"no recommendation: {advice.how}")
    else:
        r = rec.result
        lo, hi = r.ci
        head = "recommended" if advice.resolved else "recommended (unresolved)"
        lines.append(f"{head}: {rec.label}" + (f" ({_options(rec.options)})" if rec.options else ""))
        lines.append(f"  how: {advice.how}")
        cost = dollars_per_item(r) if _priced(advice) else None
        lines.append(
            f"  accuracy {100 * r.accuracy:.1f}% [{100 * lo:.1f}–{100 * hi:.1f}] ({_interval(r)} 95%) at "
            f"{r.tokens_per_item:,.0f} tokens/item"
            + (f" and {money(cost)}/item" if cost is not None else "")
            + f" over {r.n_scored} item(s)"
            + (f", {r.epochs} epochs each ({r.reducer})" if r.epochs > 1 else "")
        )
        if advice.budget is not None and r.tokens_per_item > advice.budget:
            lines.append(
                f"  note: over all its items it took {r.tokens_per_item:,.0f} tokens/item, "
                f"{100 * (r.tokens_per_item / advice.budget - 1):.1f}% over the budget (the pilot measured it within)"
            )
        if advice.budget_usd is not None and cost is not None and cost > advice.budget_usd:
            lines.append(
                f"  note: over all its items it cost {money(cost)}/item, over the budget "
                f"{money(advice.budget_usd, as_given=True)}/item (the pilot measured it within)"
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
        at = next((r for r in advice.at_volume if r.method == rec.label), None)
        if at is not None and advice.volume is not None:
            lines.append(f"  over {advice.volume:,} items: {_per_correct(at)} per correct answer, compile included")
        if advice.python_line:
            lines += ["build it:", f"  {advice.python_line}"]
        if rec.compiled is not None:
            lines.append(
                f'  then load its compiled program: dspy_for.optimizers.load_compiled(program, "{rec.compiled}")'
            )
    for error, count in advice.item_errors().most_common():
        lines.append(f"{count} item(s) failed: {error}")
    lines += [f"{label} could not run: {err}" for label, err in advice.could_not_run.items()]
    if spend and advice.spend is not None and advice.spend.max_cost is not None:
        lines.append(advice.spend.line())
    return lines


def _pilot_line(advice: Advice) -> str:
    what = "tokens (and $) per item" if _priced(advice) else "tokens per item"
    line = f"pilot: the first {advice.pilot_items} item(s) of the seeded order measure each candidate's {what}"
    if advice.cot_tokens is None:
        return line
    cost = f", {money(advice.cot_cost)}/item" if advice.cot_cost is not None and _priced(advice) else ""
    return f"{line} (CoT: {advice.cot_tokens:,.0f}{cost})"


def _interval(r: MethodResult) -> str:
    """The accuracy interval's name: over items as clusters when epochs are averaged, else Wilson's."""
    return "clustered" if value_kind(r.epochs, r.reducer) == "bounded" else "Wilson"


def frontier_figure(advice: Advice) -> Sketch | None:
    """Accuracy (95% CI) against tokens per item for every measured candidate, the budget as a dotted line; None
    when nothing was measured."""
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
    if advice.stopped_by_cost:
        tags["dspy_for.advise.stopped_by_cost"] = "true"
    store.set_tags(parent, tags)
    metrics = {"advise.items_used": float(advice.items_used), "advise.pilot_items": float(advice.pilot_items)}
    metrics.update(_cost_metrics(advice))
    for p in advice.pairs:
        key, r = f"advise.pair.{p.a}.{p.b}", p.result
        metrics.update({f"{key}.n": float(r.n), f"{key}.diff": r.diff, f"{key}.low": r.low, f"{key}.high": r.high})
        if r.stopped_at is not None:
            metrics[f"{key}.stopping_n"] = float(r.stopped_at)
    store.log_metrics(parent, metrics)
    store.log_json(parent, advice.to_dict(), "advice.json")
    store.log_text(parent, "\n".join(advice_lines(advice)) + "\n", "advice.txt")


def _cost_metrics(advice: Advice) -> dict[str, float]:
    """USD per item of each measured candidate and of the recommendation, and what the session spent (each absent
    when an LM call had no price)."""
    out = {}
    for c in advice.candidates:
        if (cost := dollars_per_item(c.result)) is not None:
            out[f"advise.{c.label}.cost_per_item_usd"] = cost
    for r in advice.at_volume:
        if r.cost_per_correct is not None:
            out[f"advise.{r.method}.cost_per_correct_at_volume"] = r.cost_per_correct
    rec = advice.recommendation
    if rec is not None and (cost := dollars_per_item(rec.result)) is not None:
        out["advise.cost_per_item_usd"] = cost
    s = advice.spend
    if s is not None and s.unpriced_calls == 0:
        out["advise.spent_usd"] = s.total
    return out
