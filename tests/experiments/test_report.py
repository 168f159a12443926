from __future__ import annotations

from types import SimpleNamespace

from dspy_for.experiments.reports.diagnostics import round_accuracy
from dspy_for.metrics import numeric_match
from dspy_for.modules.for_view import debate_diagnostics


def item(gold, answers, turns):
    return SimpleNamespace(gold=gold, answers_by_round=[{"answer": a} for a in answers], trajectory=turns)


def q(rnd, attempt, questions, violations=()):
    return {
        "type": "questions",
        "round": rnd,
        "fields": {"questions": questions, "attempt": attempt, "violations": {v: ["fix"] for v in violations}},
    }


def rev(rnd, error_found):
    return {"type": "revision", "round": rnd, "fields": {"error_found": error_found}}


def test_debate_diagnostics_counts_flips_errors_and_collapse():
    items = [
        # right, then talked out of it, then back: one right→wrong (round 1), one wrong→right (round 2)
        item(
            36.0,
            [36.0, 15.0, 36.0],
            [
                q(1, 0, ["Why 3?", "Use 4 instead."], ["Use 4 instead."]),
                q(1, 1, ["Why 3?"]),
                rev(1, True),
                q(2, 0, ["Is 12 right?"]),
                rev(2, False),
            ],
        ),
        # wrong and stays wrong, unchanged
        item(
            10.0,
            [7.0, 7.0, 7.0],
            [
                q(1, 0, ["Why 7?"]),
                rev(1, False),
                q(2, 0, ["The answer is 10."], ["The answer is 10."]),
                q(2, 1, ["Should it be 10?"], ["Should it be 10?"]),
                rev(2, False),
            ],
        ),
    ]
    d = debate_diagnostics(items, numeric_match)
    assert d["items"] == 2 and d["revisions"] == 4
    assert d["flips"] == [
        {"round": 1, "right_to_wrong": 1, "wrong_to_right": 0, "changed": 1},
        {"round": 2, "right_to_wrong": 0, "wrong_to_right": 1, "changed": 1},
    ]
    assert d["error_found_rate"] == 0.25
    # first attempts: 2 + 1 + 1 + 1 = 5 items, 2 violating; last attempts: 1 + 1 + 1 + 1 = 4 items, 1 violating
    assert d["debater_items"] == 5
    assert d["collapse_first_attempt"] == 0.4
    assert d["collapse_after_reask"] == 0.25
    assert [round(a, 2) for a, _, _ in round_accuracy(items, numeric_match)] == [0.5, 0.0, 0.5]


def test_debate_diagnostics_counts_what_keep_unless_error_set_aside():
    kept_right = {
        "type": "revision",
        "round": 1,
        "fields": {"error_found": False, "kept_previous": True, "answer": 15.0},
    }
    kept_wrong = {
        "type": "revision",
        "round": 1,
        "fields": {"error_found": False, "kept_previous": True, "answer": 36.0},
    }
    items = [
        item(36.0, [36.0, 36.0], [kept_right]),  # set aside a wrong 15, kept the right 36: saved
        item(36.0, [30.0, 30.0], [kept_wrong]),
    ]  # set aside a right 36, kept the wrong 30: cost
    d = debate_diagnostics(items, numeric_match)
    assert (d["kept_previous"], d["kept_saved"], d["kept_cost"]) == (2, 1, 1)


def test_debate_diagnostics_of_no_items_is_empty_not_an_error():
    d = debate_diagnostics([], numeric_match)
    assert d["flips"] == [] and d["collapse_first_attempt"] == 0.0 and d["error_found_rate"] == 0.0


def test_frontier_plot_names_every_scored_method_in_a_legend_beside_the_axes():
    """Methods of about the same cost (FOR and self-consistency at a matched budget) must stay readable:
    the names go in a legend outside the axes, not as labels on top of each other's markers."""
    from dspy_for.experiments import DatasetConfig, ExperimentSpec, MethodConfig
    from dspy_for.experiments.comparison import ComparisonResult
    from dspy_for.experiments.core import ItemResult, MethodResult
    from dspy_for.experiments.reports.sketch import draw
    from dspy_for.experiments.reports.table import figures

    def res(label, scores, tokens):
        usage = {"task": {"calls": 1, "prompt_tokens": tokens, "completion_tokens": 0, "tokens": tokens}}
        items = [ItemResult(str(i), f"q{i}", 1, {}, s, usage=usage) for i, s in enumerate(scores)]
        return MethodResult(label, items)

    failed = MethodResult("broken", [ItemResult("0", "q0", 1, {}, 0.0, error="APIConnectionError: down")])
    by_label = {
        "for_n1_host": res("for_n1_host", [1, 1, 0], 5000),
        "self_consistency": res("self_consistency", [1, 0, 1], 4900),
        "broken": failed,
    }
    spec = ExperimentSpec(lm="local/x", datasets=[DatasetConfig("gsm8k", "val")], methods=[MethodConfig("cot")])
    result = ComparisonResult(spec=spec, results={"gsm8k": by_label})
    fig = draw(figures(result)["frontier_gsm8k.png"])
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["for_n1_host", "self_consistency"]
    assert not ax.texts  # no labels drawn over the markers
    assert ax.get_legend().get_bbox_to_anchor().x0 > ax.get_window_extent().x1 - 1  # right of the axes


def test_the_compare_report_gives_a_methods_declared_diagnostics():
    """What for_measure.py printed beside the table: a FOR run's debate diagnostics, declared by its registry entry,
    are in its summary row and under the table; a method without any has none."""
    from dspy_for.experiments.core.outcome import ComparisonResult
    from dspy_for.experiments.core.records import ItemResult, MethodResult
    from dspy_for.experiments.reports.table import detail_lines, summary_cells
    from dspy_for.experiments.spec.model import DatasetConfig, ExperimentSpec, MethodConfig

    def record(i, answers, turns):
        return ItemResult(
            id=str(i),
            question=f"q{i}",
            gold=36.0,
            prediction={"answer": answers[-1]},
            score=float(answers[-1] == 36.0),
            usage={"total": {"calls": 3, "prompt_tokens": 10, "completion_tokens": 5}},
            trajectory=turns,
            answers_by_round=[{"answer": a} for a in answers],
        )

    debate = [record(0, [36.0, 15.0], [q(1, 0, ["Why 3?"]), rev(1, True)]), record(1, [36.0, 36.0], [rev(1, False)])]
    cot = [record(0, [36.0], []), record(1, [7.0], [])]
    spec = ExperimentSpec(
        datasets=[DatasetConfig("gsm8k", "sample")],
        methods=[MethodConfig("cot"), MethodConfig("for_paper", "paper_debate")],
        baseline="cot",
    )
    result = ComparisonResult(spec, results={"gsm8k": {"cot": MethodResult("cot", cot)}})
    result.results["gsm8k"]["paper_debate"] = MethodResult("paper_debate", debate)
    result.cells = summary_cells(result)
    by_method = {row["method"]: row for row in result.rows}
    assert "diagnostics" not in by_method["cot"]
    assert by_method["paper_debate"]["diagnostics"]["revisions"] == 2
    assert by_method["paper_debate"]["diagnostics"]["flips"][0]["right_to_wrong"] == 1
    line = next(x for x in detail_lines(result, "gsm8k") if x.startswith("paper_debate diagnostics:"))
    assert "revisions 2" in line and "error_found_rate 0.50" in line and "[round 1, right_to_wrong 1" in line


def test_diagnostics_text_says_none_for_an_empty_list():
    from dspy_for.experiments.reports.diagnostics import diagnostics_text

    assert diagnostics_text({"items": 2, "flips": [], "rate": 0.5}) == "items 2, flips none, rate 0.50"
    assert diagnostics_text({"flips": [{"round": 1, "changed": 0}]}) == "flips [round 1, changed 0]"
