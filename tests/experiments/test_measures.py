"""Every number a summary reports is declared once, where the summary holds it, and every reader derives from the
declarations: the MLflow metrics, the comparison table's columns and legend, the cell frame's columns (with their
types) and the column reference — so a measure added to the summary reaches each of them with no other edit."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import pytest

from dspy_for.experiments.core.frame_columns import CELL_COLUMNS, fixed_names, reference_tables
from dspy_for.experiments.core.records import ItemResult, MethodResult
from dspy_for.experiments.core.shown import COLUMNS
from dspy_for.experiments.core.summarize import summarize
from dspy_for.experiments.core.summary import MEASURES, Summary
from dspy_for.experiments.spec.measures import Measure, measures_of, metrics_of, reference_rows

USAGE = {
    "task": {
        "calls": 2,
        "prompt_tokens": 300,
        "completion_tokens": 120,
        "reasoning_tokens": 20,
        "cached_calls": 1,
        "cached_prompt_tokens": 100,
        "cached_completion_tokens": 30,
        "priced_calls": 2,
        "cost_usd": 0.002,
        "cached_cost_usd": 0.001,
        "wall_time": 1.5,
    }
}


def _summary() -> Summary:
    items = [
        ItemResult(f"q{i}", f"question {i}", 1, {"answer": "1"}, float(i % 2), usage=USAGE, wall_time=1.0 + i)
        for i in range(4)
    ]
    return summarize(MethodResult("cot", items, lms={"task": "m"}))


def test_every_summary_field_but_the_label_is_a_declared_measure():
    declared = {m.name for m in MEASURES}
    assert {f.name for f in dataclasses.fields(Summary)} - declared == {"method"}
    assert all(m.meaning for m in MEASURES)


def test_every_declared_metric_is_logged_when_measured_and_absent_when_not():
    s = _summary()
    metrics = s.metrics()
    for m in MEASURES:
        value = getattr(s, m.name)
        if m.metric is None or m.keyed or value is None:
            continue
        assert metrics[m.metric] == pytest.approx(float(value)), m.name
    assert metrics["tokens_per_item.task"] == pytest.approx(s.tokens_per_item_by_role["task"])
    unmeasured = summarize(MethodResult("cot", []))
    assert unmeasured.accuracy is None and "accuracy" not in unmeasured.metrics()  # absent, never 0


def test_every_measure_with_a_header_is_a_table_column_in_order():
    assert [c.measure.name for c in COLUMNS] == [m.name for m in MEASURES if m.header]
    assert [c.header for c in COLUMNS] == ["n", "acc % [95% CI]", "Δ pts", "tok/item", "$/item", "s/item", "compile"]


def test_every_measure_in_the_frame_is_a_cell_column_of_its_declared_type_and_in_the_reference():
    names = fixed_names(CELL_COLUMNS)
    table = "\n".join(reference_tables()["frame.cells"])
    for m in MEASURES:
        if not m.in_frame:
            continue
        if not m.keyed and not (m.nested and measures_of(m.nested)):
            assert m.name in names, m.name
        assert f"`{m.column}" in table, m.name


@dataclasses.dataclass(frozen=True)
class Grown:
    answers_per_minute: Annotated[float | None, Measure("answers per minute", unit="1/min", metric="apm")] = None


def test_a_measure_declared_on_a_new_field_reaches_the_metrics_and_the_reference():
    """The machinery, on a dataclass of its own: one annotated field is all a measure needs."""
    assert metrics_of(Grown(2.5)) == {"apm": 2.5} and metrics_of(Grown()) == {}
    assert reference_rows(measures_of(Grown), detail=True) == [
        "| `answers_per_minute` | number, or missing | 1/min |  |  | `apm` | answers per minute |"
    ]
