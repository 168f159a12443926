"""`dspy-for advise` with scripted LMs: it picks the better of two unequal methods as soon as that is resolved, the
cheaper of two methods within the margin, drops a method over the budget with its measured cost, counts an LM
failure as an error (never a score), rejects bad input before any LM call, resumes from stored items, and takes a
user's JSONL data (numeric and text answers); and (``llm``) advise on 4 sample items with a real local model."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from dspy_for.cli import app
from dspy_for.datasets import load_dataset, register_jsonl
from dspy_for.errors import ConfigError
from dspy_for.experiments import advise
from dspy_for.experiments.advisor.report import advice_lines
from dspy_for.experiments.sequential import seeded_order
from dspy_for.testing import system_text, user_text

GOLD = {ex.question: ex.answer for ex in load_dataset("gsm8k", "sample")}
MODEL = os.environ.get("DSPY_FOR_TEST_MODEL", "qwen2.5-coder-0.5b")


def _gold_of(messages) -> float:
    text = user_text(messages)
    return next(g for q, g in GOLD.items() if q in text)


def cot_right_single_wrong(messages, max_tokens):
    """CoT (its prompt asks for reasoning) answers every item right; the single prompt every item wrong."""
    gold = _gold_of(messages)
    if "reasoning" in system_text(messages):
        return {"reasoning": "worked it out", "answer": str(gold)}
    return {"answer": str(gold + 1)}


def _uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/mlruns/mlflow.db"


def _sums(tmp_path: Path, n: int = 40) -> Path:
    """A user's numeric task: "What is 3 + i?" with answer 3 + i, one JSON object per line."""
    path = tmp_path / "sums.jsonl"
    path.write_text("".join(json.dumps({"question": f"What is 3 + {i}?", "answer": 3 + i}) + "\n" for i in range(n)))
    return path


def _sum_answer(messages) -> int:
    text = user_text(messages)
    i = int(text.split("What is 3 + ")[1].split("?")[0])
    return 3 + i


def test_picks_the_better_of_two_unequal_methods_and_resumes_from_stored_items(install_scripted_lm, tmp_path):
    lm = install_scripted_lm(cot_right_single_wrong)
    kwargs = {"lm": "openai/fake-model", "dataset": "gsm8k", "split": "sample", "methods": "single,cot"}
    advice = advise(**kwargs, tracking_uri=_uri(tmp_path), progress=False)
    assert advice.recommended == "cot" and advice.resolved and advice.ok
    assert "resolved best" in advice.how and advice.outcome("single").status == "resolved worse"
    assert "resolved worse than cot at n=" in advice.outcome("single").reason
    assert advice.items_used < 45  # stopped once resolved, not at the end of the 45 items
    vs = advice.pair("cot", advice.runner_up or "")
    assert advice.runner_up == "single" and vs is not None and vs.result.resolved and vs.result.diff == 1.0
    assert vs.result.n == advice.items_used - advice.pilot_items  # the tests start after the pilot
    assert advice.pair_alpha == 0.05  # one pair: the whole alpha
    assert advice.python_line == (
        'dspy_for.experiments.build_method("cot", "question -> answer: float", '
        'lm=dspy_for.make_lm("openai/fake-model", max_tokens=1024))'
    )
    text = "\n".join(advice_lines(advice))
    assert "recommended: cot" in text and "vs the runner-up, single" in text and advice.plots[0].is_file()

    from mlflow.tracking import MlflowClient

    client = MlflowClient(_uri(tmp_path))
    parent = client.get_run(advice.run_id)
    assert parent.data.tags["dspy_for.advise.recommended"] == "cot" and parent.info.status == "FINISHED"
    assert parent.data.metrics["advise.items_used"] == advice.items_used
    children = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{advice.run_id}'"
    )
    assert sorted(r.info.run_name.split(" / ")[0] for r in children) == ["cot", "single"]

    calls = len(lm.calls)
    again = advise(**kwargs, tracking_uri=_uri(tmp_path), progress=False)
    assert len(lm.calls) == calls  # every item came from the results store: no LM call
    assert again.recommended == "cot" and again.items_used == advice.items_used
    assert all(i.origin == advice.outcome("cot").result.items[0].origin for i in again.outcome("cot").result.items)


def for_and_cot_right_but_one(wrong_question: str):
    """FOR's roles and CoT answer every sum right, except CoT on ``wrong_question``."""

    def respond(messages, max_tokens):
        system, answer = system_text(messages), _sum_answer(messages)
        if "You are the Debater" in system:
            return {"questions": ["How did you add?"]}
        if "asked questions about your previous answer" in system:
            return {
                "responses": ["Checked."],
                "error_found": "False",
                "error": "none",
                "reasoning": "ok",
                "answer": str(answer),
            }
        if "Defender" not in system and "Host" not in system and wrong_question in user_text(messages):
            return {"reasoning": "slip", "answer": str(answer + 1)}
        return {"reasoning": "added", "answer": str(answer)}

    return respond


def test_picks_the_cheaper_of_two_methods_within_the_margin(install_scripted_lm, tmp_path):
    data = _sums(tmp_path)
    pilot_item = seeded_order(load_dataset(register_jsonl(data).name, "all"), 0)[0]
    install_scripted_lm(for_and_cot_right_but_one(pilot_item.question))
    advice = advise(lm="openai/fake-model", data=data, methods="cot,for", margin=0.25, tracking_uri=_uri(tmp_path))
    cot, for_ = advice.outcome("cot").result, advice.outcome("for").result
    assert cot is not None and for_ is not None
    assert for_.accuracy > cot.accuracy  # FOR leads (CoT missed a pilot item) ...
    assert for_.tokens_per_item > cot.tokens_per_item
    assert advice.recommended == "cot" and advice.resolved  # ... but within the margin, the cheaper wins
    assert "indistinguishable" in advice.how and "±25 points" in advice.how
    vs = advice.pair("cot", "for")
    assert vs is not None and vs.result.low >= -0.25 and vs.result.high <= 0.25 and not vs.result.resolved
    assert advice.items_used < 40 and advice.outcome("for").status == "in the running"


def test_a_method_over_the_budget_is_dropped_with_its_measured_cost(install_scripted_lm, tmp_path):
    install_scripted_lm(for_and_cot_right_but_one("no such question"))
    data = _sums(tmp_path, 12)
    advice = advise(
        lm="openai/fake-model", data=data, methods="cot,for,self_consistency", budget=250, tracking_uri=_uri(tmp_path)
    )
    cot, for_, sc = (advice.outcome(label) for label in ("cot", "for", "self_consistency"))
    assert for_.status == "over budget" and for_.result is not None and for_.result.n == advice.pilot_items == 4
    assert f"{for_.result.tokens_per_item:,.0f} tokens/item on the pilot's 4 item(s) > budget 250" in for_.reason
    # k = 250 / CoT's ~143 tokens to the nearest whole call = 2 (the one sizer: compare's match_budget sizes so too);
    # two samples measure over the budget on the pilot, so the budget drops it
    assert advice.cot_tokens is not None and 125 < advice.cot_tokens <= 250 and sc.options == {"k": 2}
    assert sc.status == "over budget" and sc.result is not None and "tokens/item on the pilot's 4 item(s)" in sc.reason
    assert advice.recommended == "cot" and advice.resolved and "only candidate" in advice.how
    assert cot.result is not None and cot.result.n == 4  # the pilot only: nothing left to compare it with
    assert "over budget" in "\n".join(advice_lines(advice))

    with pytest.raises(ConfigError, match=r"No candidate fits `--budget` 10 .* raise `--budget` to at least"):
        advise(lm="openai/fake-model", data=data, methods="cot,for", budget=10, tracking_uri=_uri(tmp_path))


def single_fails_on_some_items(messages, max_tokens):
    """CoT right; the single prompt wrong, and its LM call fails outright on every third sample problem."""
    gold = _gold_of(messages)
    if "reasoning" in system_text(messages):
        return {"reasoning": "worked it out", "answer": str(gold)}
    if int(gold) % 3 == 0:
        raise ConnectionError("server went away")
    return {"answer": str(gold + 1)}


def test_an_lm_failure_is_an_error_never_a_score(install_scripted_lm, tmp_path):
    install_scripted_lm(single_fails_on_some_items)
    advice = advise(
        lm="openai/fake-model", dataset="gsm8k", split="sample", methods="single,cot", tracking_uri=_uri(tmp_path)
    )
    single = advice.outcome("single").result
    assert single is not None and single.n_failed > 0 and not advice.ok
    assert advice.n_failed == single.n_failed and single.n_scored + single.n_failed == single.n
    assert all(i.score == 0.0 for i in single.items if i.failed)  # recorded as errors, left out of accuracy
    assert any("server went away" in e for e in advice.item_errors())
    vs = advice.pair("cot", "single")
    assert vs is not None
    scored_after_pilot = [i for i in single.items[advice.pilot_items :] if not i.failed]
    assert vs.result.n == len(scored_after_pilot)  # the test saw the failed items as nothing, not as losses
    assert advice.recommended == "cot"
    assert any(
        f"{advice.n_failed} item(s) failed: " in line and "server went away" in line for line in advice_lines(advice)
    )

    args = ["advise", "--lm", "openai/fake-model", "--dataset", "gsm8k", "--split", "sample", "--methods", "single,cot"]
    result = CliRunner().invoke(app, [*args, "--tracking-uri", _uri(tmp_path)])
    assert result.exit_code == 1 and "item(s) failed" in result.output and "recommended: cot" in result.output


def test_the_timeout_ends_the_rounds_with_the_leader_unresolved(install_scripted_lm, tmp_path, monkeypatch):
    from dspy_for.experiments.advisor import driver

    now = [0.0]
    monkeypatch.setattr(driver, "time", SimpleNamespace(monotonic=lambda: now[0]))

    def both_right_one_second_a_call(messages, max_tokens):
        now[0] += 1.0
        return {"reasoning": "worked it out", "answer": str(_gold_of(messages))}

    install_scripted_lm(both_right_one_second_a_call)
    advice = advise(
        lm="openai/fake-model",
        dataset="gsm8k",
        split="sample",
        methods="single,cot",
        timeout=30,
        tracking_uri=_uri(tmp_path),
    )
    assert not advice.resolved and "unresolved" in advice.how and "the timeout" in advice.how
    assert advice.recommended in ("single", "cot") and advice.outcome(advice.recommended).status == "recommended"
    assert advice.items_used == 4 + 3 * 4  # the pilot and three rounds: the clock passed 30 s in the third
    assert "recommended (unresolved)" in "\n".join(advice_lines(advice))


def test_ctrl_c_leaves_every_mlflow_run_killed_and_a_rerun_resumes(install_scripted_lm, tmp_path):
    calls = [0]

    def interrupted_on_the_tenth_call(messages, max_tokens):
        calls[0] += 1
        if calls[0] == 10:
            raise KeyboardInterrupt
        return cot_right_single_wrong(messages, max_tokens)

    install_scripted_lm(interrupted_on_the_tenth_call)
    kwargs = {"lm": "openai/fake-model", "dataset": "gsm8k", "split": "sample", "methods": "single,cot"}
    with pytest.raises(KeyboardInterrupt):
        advise(**kwargs, tracking_uri=_uri(tmp_path))
    from mlflow.tracking import MlflowClient

    client = MlflowClient(_uri(tmp_path))
    runs = client.search_runs([client.get_experiment_by_name("advise").experiment_id])
    assert len(runs) == 3 and {r.info.status for r in runs} == {"KILLED"}  # the parent and both children
    killed = {r.info.run_id for r in runs}
    advice = advise(**kwargs, tracking_uri=_uri(tmp_path))
    assert advice.recommended == "cot" and advice.ok
    records = [i for label in ("single", "cot") for i in advice.outcome(label).result.items]  # type: ignore[union-attr]
    assert sum(i.origin in killed for i in records) == 9  # the 9 items finished before Ctrl-C: reused, not re-run


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"data": "missing.jsonl"}, r"`--data`: Data file .*missing.jsonl` does not exist"),
        ({"data": "no_answer.jsonl"}, r"line 2: no `answer`"),
        ({"data": "sums.jsonl", "methods": "cot,magic"}, r"`--methods`: unknown method `magic`"),
        ({"data": "sums.jsonl", "methods": "cot,cot"}, r"names `cot` twice"),
        ({"data": "sums.jsonl", "dataset": "gsm8k"}, r"Give the task once.*Both were given"),
        ({}, r"Give the task once"),
        ({"data": "sums.jsonl", "split": "val"}, r"`--split` applies to `--dataset`"),
        ({"data": "sums.jsonl", "budget": -5}, r"`--budget` is tokens per item"),
        ({"data": "sums.jsonl", "margin": 5}, r"`--margin`"),
        ({"data": "sums.jsonl", "timeout": 0}, r"`--timeout`"),
        ({"data": "sums.jsonl", "max_items": 0}, r"`max_items` must be a positive integer"),
        ({"data": "sums.jsonl", "methods": "cot", "role_lms": ["debater=openai/x"]}, r"no role `debater`"),
        ({"dataset": "gsm8k", "split": "nope"}, r"Unknown split `nope`"),
    ],
)
def test_bad_input_fails_before_any_lm_call(install_scripted_lm, tmp_path, kwargs, message):
    lm = install_scripted_lm(cot_right_single_wrong)
    _sums(tmp_path, 5)
    _write(tmp_path, "no_answer.jsonl", '{"question": "a?", "answer": 1}\n{"question": "b?"}\n')
    with pytest.raises(ConfigError, match=message):
        advise(lm="openai/fake-model", tracking_uri=_uri(tmp_path), **kwargs)
    assert lm.calls == [] and lm.built == []  # no LM was even built


def test_bad_input_exits_2_from_the_command_line(install_scripted_lm, tmp_path):
    lm = install_scripted_lm(cot_right_single_wrong)
    result = CliRunner().invoke(app, ["advise", "--lm", "openai/fake-model", "--data", str(tmp_path / "none.jsonl")])
    assert result.exit_code == 2 and "--data" in result.output and lm.calls == []


def text_answers(messages, max_tokens):
    """Capitals, answered with an article and a full stop (normalized exact match accepts them)."""
    capital = {"France": "Paris", "Italy": "Rome", "Spain": "Madrid", "Japan": "Tokyo"}
    country = next(c for c in capital if c in user_text(messages))
    return {"reasoning": "known", "answer": f"The {capital[country]}."}


def test_user_jsonl_with_text_answers_is_scored_by_normalized_exact_match(install_scripted_lm, tmp_path):
    install_scripted_lm(text_answers)
    rows = [("France", "Paris"), ("Italy", "rome"), ("Spain", "Madrid"), ("Japan", "Tokyo")] * 3
    data = _write(
        tmp_path,
        "capitals.jsonl",
        "".join(
            json.dumps({"question": f"Capital of {c} ({i})?", "answer": a}) + "\n" for i, (c, a) in enumerate(rows)
        ),
    )
    advice = advise(lm="openai/fake-model", data=data, methods="cot", pilot=12, tracking_uri=_uri(tmp_path))
    assert advice.dataset == "jsonl_capitals" and advice.split == "all"
    assert advice.signature == "question -> answer: str" and '"question -> answer: str"' in (advice.python_line or "")
    cot = advice.outcome("cot").result
    assert cot is not None and cot.n == 12 and cot.accuracy == 1.0  # "The Paris." == "Paris" after normalizing


def test_user_jsonl_with_numeric_answers_uses_the_numeric_rule(install_scripted_lm, tmp_path):
    install_scripted_lm(lambda messages, max_tokens: {"reasoning": "r", "answer": f"{_sum_answer(messages)}.0"})
    data = _sums(tmp_path, 6)
    advice = advise(lm="openai/fake-model", data=data, methods="cot", pilot=6, tracking_uri=_uri(tmp_path))
    assert advice.signature == "question -> answer: float" and advice.dataset == "jsonl_sums"
    cot = advice.outcome("cot").result
    assert cot is not None and cot.n == 6 and cot.accuracy == 1.0


@pytest.mark.llm
def test_advise_on_two_sample_items_with_a_real_local_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    advice = advise(
        lm=f"local/{MODEL}",
        dataset="gsm8k",
        split="sample",
        methods="single,cot",
        max_items=2,
        max_tokens=384,
        tracking_uri=_uri(tmp_path),
    )
    assert advice.ok and advice.items_used == 2 and advice.recommended in ("single", "cot")
    assert all(c.result is not None and c.result.n == 2 for c in advice.candidates)
    assert advice.python_line and f'"local/{MODEL}"' in advice.python_line and advice.plots
