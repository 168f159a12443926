"""The comparison table (accuracy ± 95% CI, Δ vs baseline with the paired test's p-value, cost) and plots; the judge's
tables and plot come from :mod:`.report_judge`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich import box
from rich.table import Table
from rich.text import Text

from dspy_for.experiments.core.cell import Cell
from dspy_for.experiments.core.shown import COLUMNS, FORMATS, Column, shown_columns, table_header, table_row
from dspy_for.experiments.core.summarize import summarize
from dspy_for.experiments.core.summary import MEASURES, Summary
from dspy_for.experiments.reports.breakeven import breakeven_figures
from dspy_for.experiments.reports.compiled import breakeven_text, compile_lines, price_note
from dspy_for.experiments.reports.diagnostics import diagnostics_text, method_diagnostics, round_accuracy
from dspy_for.experiments.reports.judge import (
    JUDGE_HEADER,
    judge_figure,
    judge_lines,
    judge_table_row,
    judged_rows,
)
from dspy_for.experiments.reports.serving import serving_lines
from dspy_for.experiments.reports.sketch import Sketch
from dspy_for.experiments.spec.measures import Shown
from dspy_for.metrics import metric_for
from dspy_for.stats import mean_with_ci, smallest_resolvable_difference

if TYPE_CHECKING:
    from dspy_for.experiments.core.outcome import ComparisonResult

__all__ = [
    "COLUMNS",
    "FORMATS",
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


# ------------------------------------------------------------------------------------------- the legend


def legend(result: ComparisonResult) -> str:
    """What the columns mean, printed under each table: each shown column's declared legend line, each other
    measure's when some cell has it, and the notes of the tests and prices behind them."""
    summaries = [c.summary for c in result.cells if c.summary is not None]
    shown = {c.measure.name for c in shown_columns(result.cells)}
    reducers = "/".join(sorted({s.reducer for s in summaries if s.epochs > 1}))
    parts = []
    for m in MEASURES:
        if not m.legend:
            continue
        if m.name not in shown if m.legend_when == "column" else not any(getattr(s, m.name) for s in summaries):
            continue
        parts.append(
            m.legend.format(baseline=result.spec.baseline, reducers=reducers)
            + _NOTES.get(m.shown, _none)(summaries, result.spec.baseline)
        )
    return "; ".join(parts) + "."


def _none(summaries: list[Summary], baseline: str | None) -> str:
    return ""


def _tests_note(summaries: list[Summary], baseline: str | None) -> str:
    """The paired tests behind the Δ column's p-values, and the smallest Δ the smallest n can resolve."""
    text = f" ({_tests(summaries)})"
    sizes = sorted({s.n for s in summaries if s.n})
    binary = all(s.paired_test in (None, "mcnemar_exact") for s in summaries)  # the floor is McNemar's
    if baseline and sizes and binary:
        floor = smallest_resolvable_difference(sizes[0])
        text += (
            f"; with n={sizes[0]} no Δ under {100 * floor:.0f} points can reach p<0.05"
            if floor is not None
            else f"; n={sizes[0]} is too few for any Δ to reach p<0.05"
        )
    return text


def _price_note(summaries: list[Summary], baseline: str | None) -> str:
    note = price_note(summaries)
    return f"; {note}" if note else ""


#: what a legend line says beside its declared words, by how its value is shown
_NOTES: dict[Shown, Callable[[list[Summary], str | None], str]] = {"paired": _tests_note, "usd": _price_note}

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
        if s.spread is not None:
            sp = s.spread
            line += (
                f"; epochs disagree on {100 * sp.disagreeing:.0f}% of items (sd {sp.epoch_sd:.2f} between "
                f"epochs), sampling alone moves its accuracy ±{100 * 1.96 * sp.sampling_se:.1f} pts"
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
    lines = [pair.text() for pair in result.sequential if pair.dataset == dataset]
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
        columns = shown_columns(mine)
        header = table_header(columns)
        rows = [table_row(c, result.spec.baseline, columns) for c in mine]
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
        columns = shown_columns(mine)
        for h in table_header(columns):
            t.add_column(h, justify="left" if h == "method" else "right", no_wrap=True)
        for c in mine:
            t.add_row(*table_row(c, result.spec.baseline, columns))
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


def figures(result: ComparisonResult) -> dict[str, Sketch]:
    """The run's plots, by file name, as :class:`~dspy_for.experiments.reports.sketch.Sketch` es (``draw`` makes each
    a matplotlib ``Figure``)."""
    figs: dict[str, Sketch] = {}
    for dataset, by_label in result.results.items():
        if not by_label:
            continue
        fig = Sketch(figsize=(6, 4))
        ax = fig.subplots()
        plotted = {label: r for label, r in by_label.items() if r.n_scored}  # nothing measured: no point on the plot
        for label, r in plotted.items():
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
        if plotted:  # beside the axes: methods of similar cost never cover each other
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
            fig2 = Sketch(figsize=(5, 3.5))
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
    figs.update(breakeven_figures(result.cells, result.breakeven))
    return figs
