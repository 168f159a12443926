"""The cost model and its report: which pairs a grid compares, the unit (dollars, else tokens per LM), the break-even
volumes (computed by hand here) and the plot — pure functions of typed cells (their summaries)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dspy_for.experiments.core.cell import Cell
from dspy_for.experiments.core.compile_step import CompileCost
from dspy_for.experiments.core.costs import breakeven_rows, cost_unit, grid_pairs
from dspy_for.experiments.core.summarize import tokens_by_lm
from dspy_for.experiments.core.summary import Summary
from dspy_for.experiments.reports.breakeven import breakeven_figures, breakeven_lines
from dspy_for.experiments.reports.sketch import draw
from dspy_for.experiments.spec.model import MethodConfig

BOOTSTRAP = {"kind": "bootstrap"}
METHODS = [
    MethodConfig(name="cot"),
    MethodConfig(name="cot", label="cot_bootstrap", compile=BOOTSTRAP),
    MethodConfig(name="for", label="for_n1_host", options={"rounds": 1}),
    MethodConfig(name="for", label="for_bootstrap", options={"rounds": 1}, compile=BOOTSTRAP),
]


def compiled(tokens=0, by_lm=None, usd=None):
    """A compile step's cost: ``tokens`` in all, ``by_lm`` per LM, ``usd`` when its calls were priced."""
    usage = {"calls": 1, "prompt_tokens": tokens, **({"priced_calls": 1, "cost_usd": usd} if usd is not None else {})}
    return CompileCost("bootstrap", {"optimizer": usage}, tokens_by_lm=dict(by_lm or {}))


def row(method, accuracy, low, high, per_item, usd=None, compile=None):
    """A measured cell: its accuracy with its interval, tokens per item per LM, USD per item, compile cost."""
    summary = Summary(
        method=method,
        n=50,
        failed=0,
        unparsed=0,
        answers=50,
        epochs=1,
        reducer="mean",
        accuracy=accuracy,
        ci_low=low,
        ci_high=high,
        tokens_per_item=float(sum(per_item.values())),
        calls_per_item=1.0,
        reasoning_tokens_per_item=0.0,
        cost_per_item=usd,
        seconds_per_item=None,
        seconds_lower_bound=False,
        spent_tokens=0,
        cached_tokens=0,
        calls=50,
        spent_usd=usd,
        wall_time=0.0,
        reused_time=0.0,
        stats={},
        errors={},
        tokens_per_item_by_lm=dict(per_item),
        compile=compile,
    )
    return Cell("gsm8k", "val", method, method, summary)


def priced(cell, usd, compile_usd=None):
    """``cell`` at ``usd`` per item (its compile at ``compile_usd``)."""
    s = cell.summary
    c = s.compile
    again = compiled(c.tokens, c.tokens_by_lm, compile_usd) if c is not None else None
    return replace(cell, summary=replace(s, cost_per_item=usd, compile=again))


ROWS = [
    row("cot", 0.40, 0.30, 0.50, {"m-1.5b": 600}),
    row("cot_bootstrap", 0.50, 0.37, 0.63, {"m-1.5b": 1200}, compile=compiled(20_000, {"m-1.5b": 20_000})),
    row("for_n1_host", 0.50, 0.37, 0.63, {"m-1.5b": 4500}),
    Cell("gsm8k", "val", "broken", "cot", error="could not run"),
]


def test_the_grid_pairs_each_compiled_method_with_its_student_and_the_most_accurate_plain_method():
    rows = [
        *ROWS,
        row("for_bootstrap", 0.45, 0.32, 0.58, {"m-1.5b": 5000}, compile=compiled(9, {"m-1.5b": 9})),
        row("prorefine_oracle", 0.9, 0.8, 0.95, {"m-1.5b": 3000}),  # reads the gold label: never the one to beat
    ]
    oracle = MethodConfig(name="prorefine", label="prorefine_oracle", options={"verifier": "oracle"})
    assert grid_pairs([*METHODS, oracle], rows) == [
        ("gsm8k", "cot_bootstrap", "cot"),
        ("gsm8k", "cot_bootstrap", "for_n1_host"),
        ("gsm8k", "for_bootstrap", "for_n1_host"),  # its student is the most accurate plain method: once
    ]


def test_break_even_in_tokens_of_one_lm_computed_by_hand():
    assert cost_unit(c.summary for c in ROWS if c.summary is not None) == "tokens"  # no dollar cost known
    rows = breakeven_rows(ROWS, grid_pairs(METHODS, ROWS))
    by_pair = {(r.method, r.against): r for r in rows}
    # against its student: K = 600·0.5 − 1200·0.4 < 0, never (CoT stays cheaper per correct answer); at the best end
    # for the compiled one (0.63 against 0.30): K = 600·0.63 − 1200·0.30 = 18, D = 20000·0.30 -> 333.3
    never = by_pair["cot_bootstrap", "cot"]
    assert never.volume is None and never.high is None and never.low == pytest.approx(6000 / 18)
    # against FOR: K = 4500·0.5 − 1200·0.5 = 1650, D = 20000·0.5 -> 6.06; ends (0.63, 0.37) and (0.37, 0.63)
    pays = by_pair["cot_bootstrap", "for_n1_host"]
    assert pays.unit == "tokens" and pays.lm == "m-1.5b" and (pays.fixed, pays.per_item) == (20_000, 1200)
    assert pays.volume == pytest.approx(10_000 / 1650)
    assert pays.low == pytest.approx(20_000 * 0.37 / (4500 * 0.63 - 1200 * 0.37))
    assert pays.high == pytest.approx(20_000 * 0.63 / (4500 * 0.37 - 1200 * 0.63))
    hopeless = replace(never, low=None)
    assert breakeven_lines([pays, never, hopeless, replace(pays, high=None)]) == [
        "cot_bootstrap vs for_n1_host (tokens of m-1.5b; fixed cost 20,000): the lower cost per correct answer from 7 "
        "items on (4 to 14 within the accuracy intervals)",
        "cot_bootstrap vs cot (tokens of m-1.5b; fixed cost 20,000): never the lower cost per correct answer at the "
        "measured accuracies; within the accuracy intervals, from 334 items on at best",
        "cot_bootstrap vs cot (tokens of m-1.5b; fixed cost 20,000): never the lower cost per correct answer, at any "
        "accuracy within the intervals",
        "cot_bootstrap vs for_n1_host (tokens of m-1.5b; fixed cost 20,000): the lower cost per correct answer from 7 "
        "items on (4 or more, or never within the accuracy intervals)",
    ]


def test_tokens_of_different_lms_are_never_added():
    # a 0.5B task with a 1.5B compiler against ProRefine on both: one break-even per LM
    rows = [
        row(
            "cot_textgrad",
            0.2,
            0.1,
            0.3,
            {"m-0.5b": 400},
            compile=compiled(90_000, {"m-0.5b": 30_000, "m-1.5b": 60_000}),
        ),
        row(
            "prorefine",
            0.2,
            0.1,
            0.3,
            tokens_by_lm(
                {"task": 900, "feedback": 800, "optimizer": 700},
                {"task": "m-0.5b", "feedback": "m-1.5b", "optimizer": "m-1.5b"},
            ),
        ),
    ]
    got = {r.lm: r for r in breakeven_rows(rows, [("gsm8k", "cot_textgrad", "prorefine")])}
    assert set(got) == {"m-0.5b", "m-1.5b"}
    # on the 0.5B: K = (900 − 400)·0.2 = 100, D = 30000·0.2 -> 60 items; on the 1.5B: (1500)·0.2 = 300, 60000·0.2 -> 40
    assert got["m-0.5b"].volume == pytest.approx(60.0) and got["m-0.5b"].per_item_against == 900
    assert got["m-1.5b"].volume == pytest.approx(40.0) and got["m-1.5b"].per_item == 0.0
    assert got["m-1.5b"].per_item_against == 1500


def test_dollars_when_every_cost_is_priced_and_not_all_zero():
    rows = [
        row("cot", 0.40, 0.30, 0.50, {"m": 600}, usd=0.001),
        row("cot_bootstrap", 0.50, 0.37, 0.63, {"m": 1200}, usd=0.002, compile=compiled(1, {"m": 1}, usd=0.05)),
        row("for_n1_host", 0.50, 0.37, 0.63, {"m": 4500}, usd=0.009),
    ]
    assert cost_unit(c.summary for c in rows) == "usd"
    (one,) = breakeven_rows(rows, [("gsm8k", "cot_bootstrap", "for_n1_host")])
    # K = 0.009·0.5 − 0.002·0.5 = 0.0035, D = 0.05·0.5 -> 7.14 items
    assert one.unit == "usd" and one.lm is None and one.volume == pytest.approx(0.025 / 0.0035)
    assert breakeven_lines([one])[0].startswith("cot_bootstrap vs for_n1_host (USD; fixed cost $0.050): ")
    # local models priced at $0 say nothing in dollars: tokens then
    free = [priced(c, 0.0, 0.0) for c in rows]
    assert cost_unit(c.summary for c in free) == "tokens"
    assert cost_unit(c.summary for c in [priced(rows[0], None), *rows[1:]]) == "tokens"


def test_the_subject_is_the_larger_fixed_cost_and_unknown_per_lm_costs_give_no_row():
    (swapped,) = breakeven_rows(ROWS, [("gsm8k", "for_n1_host", "cot_bootstrap")])
    assert (swapped.method, swapped.against) == ("cot_bootstrap", "for_n1_host")
    old = [  # compiled before tokens per LM were recorded
        replace(c, summary=replace(c.summary, compile=compiled(20_000))) if c.label == "cot_bootstrap" else c
        for c in ROWS
    ]
    assert breakeven_rows(old, [("gsm8k", "cot_bootstrap", "cot")]) == []


def test_the_plot_draws_every_method_of_its_pairs_and_marks_each_break_even():
    rows = breakeven_rows(ROWS, grid_pairs(METHODS, ROWS))
    figs = breakeven_figures(ROWS, rows)
    assert list(figs) == ["breakeven_gsm8k_m-1.5b.png"]
    total, per_correct = draw(figs["breakeven_gsm8k_m-1.5b.png"]).axes
    assert sorted(line.get_label() for line in total.get_lines() if not line.get_label().startswith("_")) == [
        "cot",
        "cot_bootstrap",
        "for_n1_host",
    ]
    assert len(per_correct.containers) == 1  # one break-even (the other pair never breaks even): one marker
    assert total.get_xscale() == "log" and per_correct.get_yscale() == "log"
