"""The comparison table (accuracy ± 95% CI, Δ vs baseline with the paired test's p-value, cost) and plots; the judge's
tables and plot come from :mod:`.report_judge`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich import box
from rich.table import Table
from rich.text import Text

from dspy_for.experiments.core.spend import money
from dspy_for.experiments.core.summary import Cell, Summary, summarize
from dspy_for.experiments.reports.breakeven import breakeven_figures
from dspy_for.experiments.reports.compiled import (
    breakeven_text,
    compile_cell,
    compile_legend,
    compile_lines,
    price_note,
)
from dspy_for.experiments.reports.diagnostics import diagnostics_text, method_diagnostics, round_accuracy
from dspy_for.experiments.reports.judge import (
    JUDGE_HEADER,
    judge_figure,
    judge_lines,
    judge_table_row,
    judged_rows,
)
from dspy_for.experiments.reports.serving import mixed_mark, serving_legend, serving_lines
from dspy_for.metrics import metric_for
from dspy_for.stats import format_p_value, mean_with_ci, smallest_resolvable_difference

if TYPE_CHECKING:
    from dspy_for.experiments.core.outcome import ComparisonResult

__all__ = [
    "COLUMNS",
    "Column",
    "detail_lines",
    "error_lines",
    "figures",
    "judge_lines",
    "legend",
    "rich_tables",
    "sequential_lines",
    "spend_lines",
    "split_title",
    "summary_cells",
    "table_text",
]


def summary_cells(result: ComparisonResult) -> list[Cell]:
    """One cell per method × dataset (its :class:`~dspy_for.experiments.core.summary.Summary`, paired with the
    baseline, with the method's ``diagnostics`` when its registry entry declares them), then one per method that
    could not run (``error``)."""
    cells = []
    names = {m.label: m.name for m in result.spec.methods}
    splits = {d.name: d.split for d in result.spec.datasets}
    for dataset, by_label in result.results.items():
        split = splits.get(dataset, "")
        base = by_label.get(result.spec.baseline or "")
        for r in by_label.values():
            name = names.get(r.label, r.label)
            found = method_diagnostics(name, r.scored, metric_for(dataset)) if r.label in names else None
            cells.append(Cell(dataset, split, r.label, name, summarize(r, base), diagnostics=found))
        cells += [
            Cell(dataset, split, label, names.get(label, label), error=err)
            for label, err in result.errors.get(dataset, {}).items()
        ]
    return cells


@dataclass(frozen=True)
class Column:
    """One per-method column of the comparison table, after method, n and accuracy: its header, its cell for a
    measured method (``cell(summary, baseline)``) and whether the table shows it (``shown(summaries)``)."""

    header: str
    cell: Callable[[Summary, str | None], str]
    shown: Callable[[list[Summary]], bool] = lambda summaries: True


def _priced(summaries: list[Summary]) -> bool:
    """Dollars are shown when any method's LM calls cost something (a run on local models, all $0, shows none)."""
    return any((s.cost_per_item or 0) > 0 for s in summaries)


def _delta(s: Summary, baseline: str | None) -> str:
    if s.method == baseline:
        return "(baseline)"
    if s.delta is None or s.p_value is None:
        return "-"
    return f"{100 * s.delta:+.1f} ({format_p_value(s.p_value)})"


def _seconds(s: Summary, baseline: str | None) -> str:
    value = s.seconds_per_item
    if value is None:
        return "-"
    text = f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else f"{value:,.0f}"
    return ("≥" if s.seconds_lower_bound else "") + text + ("*" if s.reused_time else "")


#: the per-method columns, in order (add one to show a new per-method number)
COLUMNS: list[Column] = [
    Column("Δ pts", _delta),
    Column("tok/item", lambda s, _: f"{s.tokens_per_item or 0:,.0f}"),
    Column("$/item", lambda s, _: money(s.cost_per_item), shown=_priced),
    Column("s/item", _seconds),
    Column("compile", lambda s, _: compile_cell(s.compile), shown=lambda ss: any(s.compile for s in ss)),
]
_LEAD = ["method", "n", "acc % [95% CI]"]


def _summaries(cells: list[Cell]) -> list[Summary]:
    """The summaries of the cells that ran (not those that could not run)."""
    return [c.summary for c in cells if c.summary is not None]


def _columns(cells: list[Cell]) -> list[Column]:
    return [c for c in COLUMNS if c.shown(_summaries(cells))]


def _header(cells: list[Cell]) -> list[str]:
    return [*_LEAD, *(c.header for c in _columns(cells))]


def _fmt_row(cell: Cell, baseline: str | None, columns: list[Column]) -> list[str]:
    blank = [""] * len(columns)
    s = cell.summary
    if s is None:
        return [cell.label, "-", "FAILED (could not run)", *blank]
    n = str(s.n) + (f"×{s.epochs}" if s.epochs > 1 else "")
    n += f" +{s.failed}✗" if s.failed else ""
    if s.accuracy is None or s.ci_low is None or s.ci_high is None:  # nothing scored: every item failed, or none ran
        return [s.method, n, "FAILED (every item)" if s.failed else "not run", *blank]
    acc = f"{100 * s.accuracy:.1f} [{100 * s.ci_low:.1f}–{100 * s.ci_high:.1f}]" + mixed_mark(s)
    return [s.method, n, acc, *(c.cell(s, baseline) for c in columns)]


def legend(result: ComparisonResult) -> str:
    """What the columns mean, printed under each table."""
    summaries = _summaries(result.cells)
    text = (
        f"n: scored items; acc: % with Wilson 95% CI; Δ: points vs {result.spec.baseline} on the items both "
        f"scored ({_tests(summaries)}); tok/item: prompt+completion tokens per scored item, cache hits at their "
        "original cost"
    )
    sizes = sorted({s.n for s in summaries if s.n})
    binary = all(s.paired_test in (None, "mcnemar_exact") for s in summaries)  # the floor is McNemar's
    if result.spec.baseline and sizes and binary:
        floor = smallest_resolvable_difference(sizes[0])
        text += (
            f"; with n={sizes[0]} no Δ under {100 * floor:.0f} points can reach p<0.05"
            if floor is not None
            else f"; n={sizes[0]} is too few for any Δ to reach p<0.05"
        )
    if _priced(summaries):
        text += (
            "; $/item: USD per scored item at litellm's prices (or the LM's `price`), cache hits at their original "
            "cost; '-': an LM without a price"
        )
        note = price_note(summaries)
        text += f"; {note}" if note else ""
    if any(s.reasoning_tokens_per_item for s in summaries):
        text += "; tok/item includes reasoning tokens (see reasoning/item below)"
    repeated = [s for s in summaries if s.epochs > 1]
    if repeated:
        reducers = sorted({s.reducer for s in repeated})
        text += (
            f"; n×k: items × epochs, each item's value the {'/'.join(reducers)} of its epochs (reducer); the CI (for "
            "means: Student's t over items) and Δ are over items as clusters; tok/item per answer"
        )
    if any(s.failed for s in summaries):
        text += "; +N✗: answers that failed (LM errors), left out of accuracy and tokens"
    text += (
        "; s/item: seconds of the method's own call per scored answer, as it ran (items run side by side overlap, "
        "so these do not add up to the run's time; answers every one of whose LM calls DSPy's cache served are left "
        "out, '-' when every answer was)"
    )
    if any(s.seconds_lower_bound for s in summaries):
        text += "; ≥: some LM calls of the timed answers were served by DSPy's cache, so a cold run takes longer"
    if any(s.reused_time for s in summaries):
        text += "; s/item*: includes results reused from an earlier run, at the time they took then"
    return text + compile_legend(summaries) + serving_legend(summaries) + "."


_TEST_NAMES = {"mcnemar_exact": "exact McNemar p", "paired_bootstrap": "paired bootstrap p over per-item values"}


def _tests(summaries: list[Summary]) -> str:
    """The paired tests behind the Δ column's p-values: exact McNemar on 0/1 values, a paired bootstrap else."""
    used = sorted({s.paired_test for s in summaries if s.paired_test}) or ["mcnemar_exact"]
    if len(used) == 1:
        return _TEST_NAMES.get(used[0], used[0])
    return "; ".join(f"{_TEST_NAMES.get(t, t)} where {'0/1' if t == 'mcnemar_exact' else 'not 0/1'}" for t in used)


def detail_lines(result: ComparisonResult, dataset: str) -> list[str]:
    """One line per method with its unparsed count, tokens per item by role and the mean of its per-item
    stats (e.g. FOR's rounds used, ProRefine's steps used and refined share), then its diagnostics, if any."""
    lines = []
    for cell in result.cells:
        s = cell.summary
        if cell.dataset != dataset or s is None or s.accuracy is None:
            continue
        line = f"{s.method}: tokens/item by role: " + " · ".join(
            f"{name} {value:,.0f}" for name, value in sorted(s.tokens_per_item_by_role.items())
        )
        line += f"; calls/item {s.calls_per_item or 0:.1f}"
        if s.reasoning_tokens_per_item:
            line += f"; reasoning/item {s.reasoning_tokens_per_item:,.0f}"
        if s.spread:
            sp = s.spread
            line += (
                f"; epochs disagree on {100 * sp['disagreeing']:.0f}% of items (sd {sp['epoch_sd']:.2f} between "
                f"epochs), sampling alone moves its accuracy ±{100 * 1.96 * sp['sampling_se']:.1f} pts"
            )
        if s.unparsed:
            line += f"; unparsed {s.unparsed} (scored wrong)"
        if s.stats:
            line += "; mean " + ", ".join(f"{key} {value:.2f}" for key, value in sorted(s.stats.items()))
        lines.append(line)
        if cell.diagnostics:
            lines.append(f"{s.method} diagnostics: {diagnostics_text(cell.diagnostics)}")
    return lines


def sequential_lines(result: ComparisonResult, dataset: str) -> list[str]:
    """A sequential comparison's pairs on ``dataset``: each resolved (at which n, which way) or not (its interval)."""
    lines = [row["text"] for row in result.sequential if row["dataset"] == dataset]
    if lines:
        alpha, pairs = result.spec.alpha, len(lines)
        lines.insert(0, f"sequential: anytime-valid paired tests at α={alpha} over {pairs} pair(s) (α/{pairs} each)")
    return lines


def error_lines(result: ComparisonResult) -> list[str]:
    """Each distinct error once, with how many items (or methods) it failed."""
    lines = [f"{count} item(s) failed: {error}" for error, count in result.item_errors().most_common()]
    verdicts = [i.judge for by_label in result.results.values() for r in by_label.values() for i in r.scored]
    judge = Counter(str(v.get("error")) for v in verdicts if v is not None and v.get("method") == "error")
    lines += [f"{count} item(s) not graded, the judge's LM failed: {error}" for error, count in judge.most_common()]
    for dataset, errs in result.errors.items():
        lines.extend(f"{label} on {dataset} could not run: {err}" for label, err in errs.items())
    return lines


def split_title(result: ComparisonResult, dataset: str) -> str:
    """A dataset's table title with the split its cells were measured on: ``gsm8k (val split)``."""
    splits = sorted({c.split for c in result.cells if c.dataset == dataset and c.split})
    return f"{dataset} ({', '.join(splits)} split)" if splits else dataset


def table_text(result: ComparisonResult) -> str:
    out = []
    for dataset in result.results:
        mine = [c for c in result.cells if c.dataset == dataset]
        header, columns = _header(mine), _columns(mine)
        rows = [_fmt_row(c, result.spec.baseline, columns) for c in mine]
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
        out.append(f"== {split_title(result, dataset)} ==")
        out.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
        out.extend("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)
        out.append(legend(result))
        out.extend(_below(result, dataset))
        judged = [judge_table_row(r) for r in judged_rows(result, dataset)]
        if judged:
            widths = [max(len(h), *(len(r[i]) for r in judged)) for i, h in enumerate(JUDGE_HEADER)]
            out.append(f"== {dataset}: judged ==")
            out.append("  ".join(h.ljust(w) for h, w in zip(JUDGE_HEADER, widths, strict=True)))
            out.extend("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in judged)
            out.extend(judge_lines(result, dataset))
    out.extend(error_lines(result))
    out.extend(spend_lines(result))
    return "\n".join(out)


def _below(result: ComparisonResult, dataset: str) -> list[str]:
    """The lines under a dataset's table: each method's details, its compile's, the break-evens, the sequential
    pairs."""
    return [
        *detail_lines(result, dataset),
        *serving_lines(result, dataset),
        *compile_lines(result, dataset),
        *breakeven_text(result, dataset),
        *sequential_lines(result, dataset),
    ]


def spend_lines(result: ComparisonResult) -> list[str]:
    """What the run spent against its ``max_cost``, and what it left out when it reached it."""
    spend = result.spend
    return [spend.line()] if spend is not None and spend.max_cost is not None else []


def rich_tables(result: ComparisonResult) -> list[Any]:
    tables = []
    for dataset in result.results:
        t = Table(
            title=f"{split_title(result, dataset)} — baseline: {result.spec.baseline}",
            box=box.SIMPLE_HEAD,
            padding=(0, 1),
            pad_edge=False,
        )
        mine = [c for c in result.cells if c.dataset == dataset]
        for h in _header(mine):
            t.add_column(h, justify="left" if h == "method" else "right", no_wrap=True)
        for c in mine:
            t.add_row(*_fmt_row(c, result.spec.baseline, _columns(mine)))
        # plain text, never rich markup: a diagnostics line's "[round 1, ...]" would read as a markup tag and vanish
        t.caption = Text("\n".join([legend(result), *_below(result, dataset)]))
        t.caption_justify = "left"
        tables.append(t)
        judged = judged_rows(result, dataset)
        if judged:
            jt = Table(title=f"{dataset} — judged", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
            for h in JUDGE_HEADER:
                jt.add_column(h, justify="left" if h == "method" else "right", no_wrap=True)
            for r in judged:
                jt.add_row(*judge_table_row(r))
            jt.caption = Text("\n".join(judge_lines(result, dataset)))
            jt.caption_justify = "left"
            tables.append(jt)
    return tables


def figures(result: ComparisonResult) -> dict[str, Any]:
    """The run's plots as matplotlib ``Figure`` objects made without pyplot, so none is kept open after its
    caller drops it (a script or notebook may call ``compare`` many times in one process)."""
    from matplotlib.figure import Figure

    figs: dict[str, Any] = {}
    for dataset, by_label in result.results.items():
        if not by_label:
            continue
        fig = Figure(figsize=(6, 4))
        ax = fig.subplots()
        for label, r in by_label.items():
            if not r.n_scored:  # nothing measured: no point on the plot
                continue
            acc, (lo, hi) = r.accuracy, r.ci
            ax.errorbar(
                [r.tokens_per_item],
                [acc],
                yerr=[[max(0.0, acc - lo)], [max(0.0, hi - acc)]],
                fmt="o",
                capsize=4,
                label=label,
            )
        ax.set_xlabel("tokens per item (prompt + completion, cold-cache cost)")
        ax.set_ylabel("accuracy (95% CI)")
        ax.set_title(f"Cost / accuracy on {dataset}")
        ax.set_ylim(-0.05, 1.05)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[1]:  # beside the axes: methods of similar cost never cover each other
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        figs[f"frontier_{dataset}.png"] = fig
        judged = judged_rows(result, dataset)
        if judged:
            figs[f"judged_{dataset}.png"] = judge_figure(dataset, judged)
        metric = metric_for(dataset)
        for label, r in by_label.items():
            if not any(i.answers_by_round for i in r.scored):
                continue
            by_round = round_accuracy(r.scored, metric)
            fig2 = Figure(figsize=(5, 3.5))
            ax2 = fig2.subplots()
            xs = list(range(len(by_round)))
            yerr = [[max(0.0, a - lo) for a, lo, _ in by_round], [max(0.0, hi - a) for a, _, hi in by_round]]
            ax2.errorbar(
                xs, [a for a, _, _ in by_round], yerr=yerr, fmt="-o", capsize=4, label="Defender A_r (no Host)"
            )
            final = mean_with_ci(r.scores)[0]
            ax2.axhline(final, color="gray", linestyle="--", label=f"{label} final")
            ax2.set_xticks(xs, [f"A{x}" for x in xs])
            ax2.set_ylabel("accuracy (95% CI)")
            ax2.set_ylim(-0.05, 1.05)
            ax2.set_title(f"{label}: accuracy by round on {dataset}")
            ax2.legend(fontsize=8)
            figs[f"rounds_{label}_{dataset}.png"] = fig2
    figs.update(breakeven_figures(result.rows, result.breakeven))
    return figs
