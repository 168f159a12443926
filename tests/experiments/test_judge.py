"""The judge wired into compare and sweep (issue 18), with scripted LMs: verdicts and scores parsed per item,
CIs and paired differences, Cohen's κ against the metric, the rule's fallback recorded, the judge's tokens
kept apart from the method's, and a sweep on a judge objective."""

from __future__ import annotations

import pytest

from dspy_for.errors import ConfigError
from dspy_for.experiments.comparison import compare
from dspy_for.experiments.reports.table import table_text
from dspy_for.experiments.sweeps.sweep import load_sweep_spec, sweep
from dspy_for.stats import cohens_kappa
from dspy_for.testing import system_text, user_text

CONFIG = """
experiment = "judged"
lm = "openai/fake-model"
baseline = "cot"
[judge]
lm = "openai/judge-model"
[[datasets]]
name = "gsm8k"
split = "sample"
first = 4
[[methods]]
name = "single"
[[methods]]
name = "cot"
"""

JUDGE_CALLS: list[str] = []


def responder(messages, max_tokens):
    sys_text, user = system_text(messages), user_text(messages)
    if "strict grader of a response" in sys_text:
        JUDGE_CALLS.append(user)
        if "Tom reads" in user:  # the judge fails on this item: the rule decides and the verdict says so
            return "I refuse to grade."
        reasoning = "0.9" if "[[ ## response ## ]]\n3 * 12" in user else "0.2"
        return {"match": "True", "reasoning_score": reasoning, "coherence_score": "0.5", "holistic_score": "0.7"}
    if "reasoning" in sys_text:  # CoT
        return {"reasoning": "3 * 12 = 36; 36 - 9 = 27", "answer": "27"}
    return {"answer": "27"}


@pytest.fixture
def scripted(install_scripted_lm):
    """Every LM the comparison builds is one scripted LM (with its DSPy cache on, in a temp dir)."""
    JUDGE_CALLS.clear()
    return install_scripted_lm(responder)


def _write(tmp_path, text=CONFIG):
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_compare_with_a_judge(scripted, tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    result = compare(_write(tmp_path), tracking_uri=uri)
    cot = result.results["gsm8k"]["cot"]
    verdicts = {i.question[:8]: i.judge for i in cot.items}
    # one call per item (an unreadable verdict is tried once more by DSPy's JSON adapter: 2 × 4 + 2)
    assert all(v is not None for v in verdicts.values()) and len(JUDGE_CALLS) == 10
    tom = next(v for q, v in verdicts.items() if q.startswith("Tom"))
    assert tom["method"] == "rule" and tom["reasoning"] is None and "AdapterParseError" in tom["error"]
    others = [v for q, v in verdicts.items() if not q.startswith("Tom")]
    assert all(v["method"] == "judge" and v["correct"] and v["reasoning"] == 0.9 for v in others)
    # the judge's tokens are its own: the method's tokens per item do not include them
    assert "judge" not in cot.usage.roles and cot.judge_usage.total.calls == 5  # 4 items, one retried
    row = next(r for r in result.rows if r["method"] == "cot")
    j = row["judge"]
    assert j["n"] == 4 and j["fallbacks"] == 1 and j["kappa_n"] == 3
    assert j["quality.reasoning"]["mean"] == pytest.approx(0.9) and j["quality.reasoning"]["n"] == 3
    assert j["judged_accuracy"]["n"] == 4 and 0 <= j["judged_accuracy"]["low"] <= j["judged_accuracy"]["high"] <= 1
    assert j["kappa"] == pytest.approx(
        cohens_kappa([True] * 3, [bool(i.score) for i in cot.items if i.judge["method"] == "judge"])
    )
    single = next(r for r in result.rows if r["method"] == "single")["judge"]
    assert single["quality.reasoning"]["mean"] == pytest.approx(0.2)  # no reasoning to read
    assert single["quality.reasoning"]["delta"] == pytest.approx(-0.7) and "p_value" in single["quality.reasoning"]
    text = table_text(result)
    assert "== gsm8k: judged ==" in text and "Cohen's κ" in text and "judge failed on 1" in text
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("judged").experiment_id])
    child = next(r for r in runs if r.data.params.get("label") == "cot")
    assert child.data.metrics["quality.reasoning"] == pytest.approx(0.9)
    assert child.data.metrics["judge.fallbacks"] == 1 and "judge.kappa" in child.data.metrics
    parent = next(r for r in runs if r.data.tags.get("dspy_for.kind") == "comparison")
    assert "judged_gsm8k.png" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    # the judge's verdicts are assessments on each item's trace, beside the metric's `correct`
    traces = client.search_traces(
        locations=[child.info.experiment_id],
        max_results=100,
        filter_string=f"metadata.`mlflow.sourceRun` = '{child.info.run_id}'",
    )
    assert len(traces) == 4
    for t in traces:
        names = {a.name: a for a in t.info.assessments}
        by_rule = names["judged_correct"].source.source_type == "CODE"
        assert ("reasoning" not in names) == by_rule  # an unreadable verdict: the rule decided, no scores
        # the judge says right; on Tom's item the rule decided, and the answer 27 is wrong there
        assert names["judged_correct"].feedback.value is (not by_rule)
        if not by_rule:
            assert names["reasoning"].feedback.value == pytest.approx(0.9)


def test_a_judge_added_later_grades_stored_items_without_rerunning_the_method(scripted, tmp_path):
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    compare(_write(tmp_path, CONFIG.replace('[judge]\nlm = "openai/judge-model"\n', "")), tracking_uri=uri)
    method_calls = len(scripted.calls)
    result = compare(_write(tmp_path), tracking_uri=uri)
    assert len(scripted.calls) - method_calls == len(JUDGE_CALLS) == 10  # only the judge ran
    assert all(i.judge is not None for i in result.results["gsm8k"]["cot"].items)
    compare(_write(tmp_path), tracking_uri=uri)
    assert len(JUDGE_CALLS) == 10  # verdicts are stored with the items: a re-run grades nothing again
    # the same items without a judge: the stored verdicts stay in the store, out of this run's numbers
    stores = {p: p.read_text() for p in (tmp_path / "mlruns" / "compare" / "items").rglob("*.jsonl")}
    unjudged = compare(_write(tmp_path, CONFIG.replace('[judge]\nlm = "openai/judge-model"\n', "")), tracking_uri=uri)
    assert {p: p.read_text() for p in stores} == stores  # nothing written: no verdict-less copy shadows a verdict
    assert all(i.judge is None for i in unjudged.results["gsm8k"]["cot"].items)
    assert not any("judge" in r for r in unjudged.rows) and "judged" not in table_text(unjudged)
    rejudged = compare(_write(tmp_path), tracking_uri=uri)
    assert len(JUDGE_CALLS) == 10 and next(r for r in rejudged.rows if r["method"] == "cot")["judge"]["n"] == 4


def test_judge_lm_flag_and_bad_judge_configs(tmp_path):
    from dspy_for.experiments.spec.config import load_spec

    spec = load_spec(
        _write(tmp_path, CONFIG.replace('[judge]\nlm = "openai/judge-model"\n', "")), judge_lm="openai/other-judge"
    )
    assert spec.judge is not None and spec.judge.lm == "openai/other-judge"
    with pytest.raises(ConfigError, match="Unknown rubric `style`"):
        load_spec(_write(tmp_path, CONFIG.replace('lm = "openai/judge-model"', 'lm = "openai/j"\nrubrics = ["style"]')))
    with pytest.raises(ConfigError, match="no provider prefix"):
        load_spec(_write(tmp_path), judge_lm="judge-model")


SWEEP = """
method = "for"
study = "judged"
lm = "openai/fake"
n_trials = 3
chunk_size = 2
objectives = ["quality.reasoning", "tokens_per_item"]
sampler = "nsga2"
[judge]
lm = "openai/judge"
[dataset]
name = "gsm8k"
split = "sample"
first = 2
[search.rounds]
type = "int"
low = 0
high = 2
"""


def test_a_sweep_on_a_judge_objective(scripted, tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(SWEEP)
    result = sweep(path, tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    complete = [t for t in result.study.trials if t.state.name == "COMPLETE"]
    assert len(complete) == 3 and all(len(t.values) == 2 for t in complete)
    assert all(t.values[0] == t.user_attrs["objective.quality.reasoning"] for t in complete)
    path.write_text(SWEEP.replace('[judge]\nlm = "openai/judge"\n', ""))
    with pytest.raises(ConfigError, match="is a judge score"):
        load_sweep_spec(path)


def test_cohens_kappa():
    assert cohens_kappa([True, False, True, False], [True, False, True, False]) == 1.0
    assert cohens_kappa([True, True, False, False], [True, False, True, False]) == 0.0
    assert cohens_kappa([True, True], [True, True]) == 1.0


def test_an_lm_failure_of_the_judge_is_an_error_never_a_rule_verdict(scripted, tmp_path):
    """Unreadable verdicts fall back to the rule (the paper's rule, recorded); a judge that cannot be reached
    grades nothing: those items are errors, the run is not ok, and the next run grades them."""
    real = scripted.responder

    def judge_down(messages, max_tokens):
        if "strict grader of a response" in system_text(messages):
            raise RuntimeError("judge endpoint down")
        return real(messages, max_tokens)

    scripted.responder = judge_down
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    result = compare(_write(tmp_path), tracking_uri=uri)
    cot = result.results["gsm8k"]["cot"]
    assert cot.judge_errors == 4 and all(i.judge["method"] == "error" for i in cot.items)
    assert not result.ok and result.judge_errors == 8
    row = next(r for r in result.rows if r["method"] == "cot")["judge"]
    assert row["n"] == 0 and row["errors"] == 4 and "judged_accuracy" not in row  # no number, not the rule's
    assert "8 item(s) not graded, the judge's LM failed: LMUnexpectedError" in table_text(result)
    scripted.responder = real
    again = compare(_write(tmp_path), tracking_uri=uri)
    assert again.ok and all(i.judge["method"] in ("judge", "rule") for i in again.results["gsm8k"]["cot"].items)
