"""Results as HTML: what a notebook shows for a comparison (one table per dataset, the columns and cells the printed
table has: :mod:`~dspy_for.experiments.core.shown`), and :func:`html_table`, which an advice's candidates and a
sweep's trials are shown with."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

from dspy_for.experiments.core.frames import Comparison
from dspy_for.experiments.core.shown import shown_columns, table_header, table_row

__all__ = ["comparison_html", "html_table"]


def _fmt(value: object, percent: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{100 * value:.1f}" if percent else f"{value:,.4g}"
    return str(value)


def html_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str]], title: str = "") -> str:
    """``rows`` as an HTML table of ``columns`` (header, key); proportions (``accuracy``, ``ci_*``, ``delta*``) in
    percent, a missing number as ``-``; every value escaped."""
    percent = {"accuracy", "ci_low", "ci_high", "delta", "delta_low", "delta_high"}
    cells = [[_fmt(r.get(k), k in percent) for _, k in columns] for r in rows]
    return _table([h for h, _ in columns], cells, title)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], title: str) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    caption = f"<caption>{html.escape(title)}</caption>" if title else ""
    return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def comparison_html(result: Comparison) -> str:
    """A comparison's cells as HTML, one table per dataset: the printed table's columns and cells."""
    tables = []
    for dataset in dict.fromkeys(c.dataset for c in result.cells):
        mine = [c for c in result.cells if c.dataset == dataset]
        columns = shown_columns(mine)
        rows = [table_row(c, result.spec.baseline, columns) for c in mine]
        title = f"{dataset} — baseline: {result.spec.baseline}" if result.spec.baseline else dataset
        tables.append(_table(table_header(columns), rows, title))
    return "".join(tables) or "<p>ComparisonResult: no cells (the run has not been reported)</p>"
