"""How a summary's measures are written where a person reads them — the comparison table's columns, as text (the
CLI, ``summary.txt``) and as HTML (a notebook): each column is a declared measure with a ``header``
(:data:`~dspy_for.experiments.core.summary.MEASURES`), written as its ``shown`` says (:data:`FORMATS`); a cell that
was not measured says why where its accuracy would be."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dspy_for.experiments.core.cell import Cell
from dspy_for.experiments.core.compile_step import CompileCost
from dspy_for.experiments.core.spend import money
from dspy_for.experiments.core.summary import MEASURES, Summary
from dspy_for.experiments.spec.measures import Measure, Shown
from dspy_for.stats import format_p_value

__all__ = [
    "COLUMNS",
    "FORMATS",
    "MIXED_MARK",
    "Column",
    "compile_cell",
    "mixed_mark",
    "shown_columns",
    "table_header",
    "table_row",
]

#: after the accuracy of a cell whose records more than one serving stack served
MIXED_MARK = "†"


def mixed_mark(summary: Summary) -> str:
    """:data:`MIXED_MARK` for a cell whose records more than one stack served (``Summary.mixed_serving``), else ''."""
    return MIXED_MARK if summary.mixed_serving else ""


def compile_cell(c: CompileCost | None) -> str:
    """A compile step's cost as the table shows it: ``41,230 tok · $0.082 · 95s``, ``(reused)`` after it when the
    compiled program came from the cache; '-' without a compile step."""
    if c is None:
        return "-"
    parts = [f"{c.tokens:,} tok"]
    if c.usd is not None:
        parts.append(money(c.usd))
    if c.seconds is not None:
        parts.append(f"{c.seconds:.1f}s" if c.seconds < 10 else f"{c.seconds:,.0f}s")
    return " · ".join(parts) + (" (reused)" if c.reused else "")


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _items(s: Summary, m: Measure, baseline: str | None) -> str:
    """Scored items, ``×k`` with repeats, ``+N✗`` with failed records."""
    return str(s.n) + (f"×{s.epochs}" if s.epochs > 1 else "") + (f" +{s.failed}✗" if s.failed else "")


def _interval(s: Summary, m: Measure, baseline: str | None) -> str:
    if s.accuracy is None or s.ci_low is None or s.ci_high is None:
        return "-"
    return f"{100 * s.accuracy:.1f} [{100 * s.ci_low:.1f}–{100 * s.ci_high:.1f}]" + mixed_mark(s)


def _paired(s: Summary, m: Measure, baseline: str | None) -> str:
    if s.method == baseline:
        return "(baseline)"
    if s.delta is None or s.p_value is None:
        return "-"
    return f"{100 * s.delta:+.1f} ({format_p_value(s.p_value)})"


def _seconds(s: Summary, m: Measure, baseline: str | None) -> str:
    value = s.seconds_per_item
    if value is None:
        return "-"
    text = f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else f"{value:,.0f}"
    return ("≥" if s.seconds_lower_bound else "") + text + ("*" if s.reused_time else "")


def _compile(s: Summary, m: Measure, baseline: str | None) -> str:
    value = getattr(s, m.name)
    return compile_cell(value if isinstance(value, CompileCost) else None)


def _tokens(s: Summary, m: Measure, baseline: str | None) -> str:
    return f"{_number(getattr(s, m.name)) or 0:,.0f}"


def _usd(s: Summary, m: Measure, baseline: str | None) -> str:
    return money(_number(getattr(s, m.name)))


def _plain(s: Summary, m: Measure, baseline: str | None) -> str:
    value = getattr(s, m.name)
    return "-" if value is None else f"{value:,.4g}" if isinstance(value, float) else str(value)


#: how each kind of value (a measure's ``shown``) is written in the table
FORMATS: dict[Shown, Callable[[Summary, Measure, str | None], str]] = {
    "items": _items,
    "interval": _interval,
    "paired": _paired,
    "seconds": _seconds,
    "compile": _compile,
    "tokens": _tokens,
    "usd": _usd,
}


@dataclass(frozen=True)
class Column:
    """One column of the comparison table after the method's label: a measure with a ``header``
    (:data:`~dspy_for.experiments.core.summary.MEASURES`), its cell for a measured method (``cell(summary,
    baseline)``) and whether the table shows it (``shown(summaries)``)."""

    measure: Measure

    @property
    def header(self) -> str:
        return self.measure.header or self.measure.name

    def cell(self, s: Summary, baseline: str | None) -> str:
        return FORMATS.get(self.measure.shown, _plain)(s, self.measure, baseline)

    def shown(self, summaries: list[Summary]) -> bool:
        return self.measure.column_when == "always" or any(getattr(s, self.measure.name) for s in summaries)


#: the table's columns, in the order the measures are declared
COLUMNS: list[Column] = [Column(m) for m in MEASURES if m.header]


def shown_columns(cells: list[Cell]) -> list[Column]:
    """The columns a table of ``cells`` shows."""
    summaries = [c.summary for c in cells if c.summary is not None]
    return [c for c in COLUMNS if c.shown(summaries)]


def table_header(columns: list[Column]) -> list[str]:
    return ["method", *(c.header for c in columns)]


_STATUS = {"not run": "not run", "failed": "FAILED (every item)", "could not run": "FAILED (could not run)"}


def table_row(cell: Cell, baseline: str | None, columns: list[Column]) -> list[str]:
    """A measured cell's values; else its items (``-`` when it could not run) and, where its accuracy would be, why
    it has none (not run, every item failed, could not run)."""
    s = cell.summary
    if s is not None and s.measured:
        return [cell.label, *(c.cell(s, baseline) for c in columns)]
    out = [cell.label]
    for c in columns:
        if c.measure.shown == "items":
            out.append(c.cell(s, baseline) if s is not None else "-")
        else:
            out.append(_STATUS[cell.status] if c.measure.shown == "interval" else "")
    return out
