"""Results as HTML: what a notebook shows for a comparison (one table per dataset, read from the cell frame's rows:
:func:`~dspy_for.experiments.core.frames.cell_rows`), an advice (its candidates) and a sweep (its trials)."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dspy_for.experiments.core.frames import cell_rows, trial_rows

if TYPE_CHECKING:
    from dspy_for.experiments.core.outcome import ComparisonResult

__all__ = ["advice_html", "comparison_html", "html_table", "sweep_html"]


def _fmt(value: Any, percent: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{100 * value:.1f}" if percent else f"{value:,.4g}"
    return str(value)


def html_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str]], title: str = "") -> str:
    """``rows`` as an HTML table of ``columns`` (header, key); proportions (``accuracy``, ``ci_*``, ``delta*``) in
    percent, a missing number as ``-``; every value escaped."""
    percent = {"accuracy", "ci_low", "ci_high", "delta", "delta_low", "delta_high"}
    head = "".join(f"<th>{html.escape(h)}</th>" for h, _ in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(k), k in percent))}</td>" for _, k in columns) + "</tr>"
        for r in rows
    )
    caption = f"<caption>{html.escape(title)}</caption>" if title else ""
    return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_SUMMARY_HTML = [
    ("method", "method"),
    ("n", "n"),
    ("failed", "failed"),
    ("acc %", "accuracy"),
    ("95% CI low", "ci_low"),
    ("95% CI high", "ci_high"),
    ("Δ pts", "delta"),
    ("p", "p_value"),
    ("tok/item", "tokens_per_item"),
    ("$/item", "cost_per_item"),
    ("s/item", "seconds_per_item"),
]


def comparison_html(result: ComparisonResult) -> str:
    """A comparison's cells as HTML, one table per dataset (what a notebook shows for it)."""
    rows = cell_rows(result)
    tables = []
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        mine = [r for r in rows if r["dataset"] == dataset]
        title = f"{dataset} — baseline: {result.spec.baseline}" if result.spec.baseline else dataset
        tables.append(html_table(mine, _SUMMARY_HTML, title))
    return "".join(tables) or "<p>ComparisonResult: no cells (the run has not been reported)</p>"


def advice_html(advice: Any) -> str:
    """An advice's candidates as HTML (status, accuracy, tokens and dollars per item), the recommended one first."""
    rows = [{**c.row(), "recommended": "yes" if c.label == advice.recommended else ""} for c in advice.candidates]
    rows.sort(key=lambda r: r["recommended"] != "yes")
    columns = [("candidate", "label"), ("method", "method"), ("status", "status"), ("recommended", "recommended")]
    columns += [c for c in _SUMMARY_HTML if c[1] in ("n", "failed", "accuracy", "ci_low", "ci_high")]
    columns += [("tok/item", "tokens_per_item"), ("$/item", "cost_per_item"), ("why", "reason")]
    return html_table(rows, columns, f"advice on {advice.dataset} ({advice.split})")


def sweep_html(result: Any) -> str:
    """A sweep's trials as HTML: number, state, objective value(s) and options."""
    rows = trial_rows(result.study, list(result.spec.objectives))
    keys = list(dict.fromkeys(k for r in rows for k in r if k.startswith("options.")))
    columns = [("trial", "trial"), ("state", "state"), *((o, o) for o in result.spec.objectives)]
    return html_table(rows, [*columns, *((k.removeprefix("options."), k) for k in keys)], f"study {result.spec.study}")
