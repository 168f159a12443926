"""The Cascade with scripted LMs: which stage answers on which inputs, tokens per stage, failures, wrappers."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import dspy
import pytest
from dspy.utils.exceptions import AdapterParseError

from dspy_for.errors import ConfigError
from dspy_for.lm.factory import configure_cache
from dspy_for.lm.usage import Usage, track_usage
from dspy_for.modules import Cascade
from dspy_for.modules.for_signatures import (
    DEBATER_INSTRUCTIONS,
    DEFENDER_INSTRUCTIONS,
    HOST_INSTRUCTIONS,
    REVISE_INSTRUCTIONS,
)
from dspy_for.testing import ScriptedLM, system_text

SIG = "question -> answer: float"
Q = "Tom has 3 boxes of 12 apples. How many apples?"
UNREADABLE = "I think it is somewhere around thirty."


def kind(messages: list[dict[str, Any]]) -> str:
    """Which prompt a call used: the Defender's (samples and the debate's A0), revise, debater or host."""
    sys = system_text(messages)
    for name, instructions in (
        ("revise", REVISE_INSTRUCTIONS),
        ("debater", DEBATER_INSTRUCTIONS),
        ("host", HOST_INSTRUCTIONS),
        ("defender", DEFENDER_INSTRUCTIONS),
    ):
        if instructions.splitlines()[0] in sys:
            return name
    raise AssertionError(f"unknown prompt: {sys[:200]}")


def scripted(
    samples: list[int | None], *, host: int = 36, fail: str | None = None, unit: bool = False, cache: bool = False
) -> ScriptedLM:
    """Defender samples answer ``samples`` in order (``None``: unreadable); the debate's A0 and revision say 15,
    its Host ``host``. ``fail``: the prompt kind whose first call raises (``"sample3"``: the third sample)."""
    answers = iter(samples)
    count: dict[str, int] = {}

    def respond(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any] | str:
        k = kind(messages)
        count[k] = count.get(k, 0) + 1
        if fail == k or (fail and fail.startswith("sample") and k == "defender" and count[k] == int(fail[6:])):
            raise ConnectionError(f"endpoint down at {fail}")
        extra = {"unit": "apples"} if unit else {}
        if k == "defender":
            answer = next(answers, 15)  # after the samples: the debate's first answer A0
            return UNREADABLE if answer is None else {"reasoning": "3 * 12", "answer": str(answer), **extra}
        if k == "debater":
            return {"questions": '["How did you count the boxes?"]'}
        if k == "revise":
            return {
                "responses": '["3 boxes"]',
                "error_found": "False",
                "error": "none",
                "reasoning": "3 * 12",
                "answer": "15",
                **extra,
            }
        return {"reasoning": "3 * 12 = 36", "answer": str(host), **extra}

    return ScriptedLM(respond, cache=cache)


def run(lm: ScriptedLM, *, use_async: bool = False, sig: str = SIG, **options: Any) -> tuple[dspy.Prediction, Usage]:
    program = Cascade(sig, **options)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter(use_json_adapter_fallback=False)), track_usage() as usage:
        pred = asyncio.run(program.acall(question=Q)) if use_async else program(question=Q)
    return pred, usage


def kinds(lm: ScriptedLM) -> list[str]:
    return [kind(c["messages"]) for c in lm.calls]


def stages(pred: dspy.Prediction) -> list[dict[str, Any]]:
    return [t for t in pred.trajectory if t["type"] == "stage"]


# ------------------------------------------------------------------------------------ each stage reached


@pytest.mark.parametrize("use_async", [False, True])
def test_unanimous_first_answers_end_at_stage_1(use_async):
    lm = scripted([36, 36])
    pred, usage = run(lm, use_async=use_async)
    assert pred.answer == 36.0
    assert kinds(lm) == ["defender", "defender"]  # no more samples, no debate
    assert pred.stats["stage"] == 1.0 and pred.stats["samples"] == 2.0
    assert pred.stats["tokens.stage1"] == usage.total.served_tokens > 0
    assert pred.stats["tokens.stage2"] == pred.stats["tokens.stage3"] == 0.0
    assert [(s["stage"], s["settled"], s["answered"]) for s in stages(pred)] == [(1, True, True)]
    assert set(usage.roles) == {"defender"}


@pytest.mark.parametrize("use_async", [False, True])
def test_disagreement_resolved_by_more_samples_ends_at_stage_2(use_async):
    lm = scripted([36, 15, 36, 36, 36, 36])
    pred, usage = run(lm, use_async=use_async)
    assert pred.answer == 36.0
    # 36 has 3 of 4 after stage 2's first batch: 15 (seen after 36) can at most tie with the 2 left of 6
    assert kinds(lm) == ["defender"] * 4
    assert pred.stats["stage"] == 2.0 and pred.stats["samples"] == 4.0 and pred.stats["support"] == 0.75
    per_call = [c.prompt_tokens + c.completion_tokens for c in usage.calls]
    assert pred.stats["tokens.stage1"] == sum(per_call[:2]) and pred.stats["tokens.stage2"] == sum(per_call[2:])
    assert pred.stats["tokens.stage3"] == 0.0
    assert [(s["stage"], s["settled"], s["answered"]) for s in stages(pred)] == [(1, False, False), (2, True, True)]
    stop = next(t for t in pred.trajectory if t["type"] == "stop")
    assert stop == {"type": "stop", "rule": "agreement", "reason": "decided", "samples": 4, "answer": 36.0, "stage": 2}


@pytest.mark.parametrize("use_async", [False, True])
def test_persistent_disagreement_goes_to_the_debate(use_async):
    lm = scripted([36, 15, 7, 15, 36, 8], host=36)
    pred, usage = run(lm, use_async=use_async)
    assert pred.answer == 36.0  # the Host's answer (the samples' majority would be 36 or 15 at 2 votes each)
    assert kinds(lm) == ["defender"] * 6 + ["defender", "debater", "revise", "host"]
    assert pred.stats["stage"] == 3.0 and pred.stats["samples"] == 6.0 and pred.stats["rounds_used"] == 1.0
    per_call = [c.prompt_tokens + c.completion_tokens for c in usage.calls]
    assert pred.stats["tokens.stage1"] == sum(per_call[:2])
    assert pred.stats["tokens.stage2"] == sum(per_call[2:6])
    assert pred.stats["tokens.stage3"] == sum(per_call[6:]) > 0
    assert sum(pred.stats[f"tokens.stage{s}"] for s in (1, 2, 3)) == usage.total.served_tokens
    assert set(usage.roles) == {"defender", "debater", "host"}
    assert [(s["stage"], s["answered"]) for s in stages(pred)] == [(1, False), (2, False), (3, True)]
    debate = next(t for t in pred.trajectory if t["type"] == "debate")
    assert [t["role"] for t in debate["turns"]] == ["defender", "debater", "defender", "host"]
    assert [t["stage"] for t in pred.trajectory if t["type"] == "sample"] == [1, 1, 2, 2, 2, 2]
    json.dumps(pred.trajectory)


def test_without_the_debate_stage_2_answers_with_its_majority():
    lm = scripted([36, 15, 7, 15, 36, 8])
    pred, _ = run(lm, debate=False)
    assert pred.answer == 36.0 and kinds(lm) == ["defender"] * 6  # 36 and 15 tie at 2: 36 was seen first
    assert pred.stats["stage"] == 2.0 and pred.stats["tokens.stage3"] == 0.0
    assert [(s["stage"], s["settled"], s["answered"]) for s in stages(pred)] == [(1, False, False), (2, False, True)]
    assert [name for name, _ in Cascade(SIG, debate=False).named_predictors()] == ["samples.defender"]


def test_no_stage_2_when_max_samples_is_first_samples():
    lm = scripted([36, 15])
    pred, _ = run(lm, max_samples=2)
    assert kinds(lm) == ["defender"] * 2 + ["defender", "debater", "revise", "host"]
    assert pred.stats["stage"] == 3.0 and pred.stats["tokens.stage2"] == 0.0
    assert [s["stage"] for s in stages(pred)] == [1, 3]


def test_an_unreadable_first_answer_is_no_agreement():
    lm = scripted([36, None, 36, 36])
    pred, _ = run(lm)
    assert kinds(lm) == ["defender"] * 4  # one readable 36 of 2 samples is not unanimous: stage 2
    assert pred.stats["stage"] == 2.0 and pred.stats["readable"] == 3.0


@pytest.mark.parametrize(("agreement", "stage"), [(0.5, 1), (0.51, 2)])
def test_the_agreement_threshold_is_inclusive(agreement, stage):
    lm = scripted([36, 15, 36, 36, 36, 36])
    pred, _ = run(lm, agreement=agreement)
    assert pred.stats["stage"] == stage


def test_stage_2_uses_its_stop_rule():
    # beta needs 4 votes to 0, or 6 to 1, ...: 36 15 then 36 36 36 gives 4 to 1 (0.89) at 5 and 5 to 1 (0.94) at 6
    lm = scripted([36, 15, 36, 36, 36, 36, 36, 36])
    pred, _ = run(lm, stop="beta", batch=1, max_samples=8, debate=False)
    assert pred.stats["samples"] == 7.0  # 6 to 1: 0.965 >= 0.95
    stop = next(t for t in pred.trajectory if t["type"] == "stop")
    assert stop["reason"] == "confident" and stop["confidence"] > 0.95


def test_no_readable_sample_and_no_debate_is_an_unreadable_item():
    with pytest.raises(AdapterParseError):
        run(scripted([None] * 6), debate=False)


# ---------------------------------------------------------------------------------------- failures


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("fail", ["sample1", "sample3", "debater", "revise", "host"])
def test_a_failure_in_any_stage_raises(fail, use_async):
    lm = scripted([36, 15, 7, 15, 36, 8], fail=fail)
    with pytest.raises(Exception, match=f"endpoint down at {fail}") as failed:
        run(lm, use_async=use_async)
    assert not isinstance(failed.value, AdapterParseError)


# ------------------------------------------------------------------------------- signatures and LMs


def test_any_signature_two_outputs():
    sig = "question -> answer: float, unit: str"
    lm = scripted([36, 15, 7, 15, 36, 8], unit=True)
    pred, _ = run(lm, sig=sig)
    assert pred.answer == 36.0 and pred.unit == "apples" and pred.stats["stage"] == 3.0
    lm = scripted([36, 36], unit=True)
    pred, _ = run(lm, sig=sig)
    assert (pred.answer, pred.unit, pred.stats["stage"]) == (36.0, "apples", 1.0)
    sys = system_text(lm.calls[0]["messages"])
    assert "`unit`" in sys and "`answer`" in sys


def test_per_role_lms_get_only_their_roles_calls():
    shared = scripted([36, 15, 7, 15, 36, 8])
    lms = {r: shared.copy(model=f"scripted-{r}") for r in ("defender", "debater", "host")}
    program = Cascade(SIG, defender_lm=lms["defender"], debater_lm=lms["debater"], host_lm=lms["host"])
    with dspy.context(adapter=dspy.ChatAdapter(use_json_adapter_fallback=False)), track_usage() as usage:
        pred = program(question=Q)
    models = {(c.role, c.model) for c in usage.calls}
    assert models == {("defender", "scripted-defender"), ("debater", "scripted-debater"), ("host", "scripted-host")}
    assert pred.stats["stage"] == 3.0


def test_inside_evaluate_with_threads():
    devset = [dspy.Example(question=f"{Q} (case {i})", answer=36.0).with_inputs("question") for i in range(4)]

    def respond(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any]:
        return {"reasoning": "3 * 12", "answer": "36"}

    lm = ScriptedLM(respond)
    evaluate = dspy.Evaluate(
        devset=devset,
        metric=lambda ex, pred, trace=None: float(pred.answer == ex.answer),
        num_threads=2,
        display_progress=False,
        max_errors=0,
    )
    with dspy.context(lm=lm):
        result = evaluate(Cascade(SIG))
    assert result.score == 100.0
    assert len(lm.calls) == 8  # unanimous first answers: two samples per item
    assert all(pred.stats["stage"] == 1.0 for _, pred, _ in result.results)


def test_inside_best_of_n_an_attempt_draws_new_samples_even_from_the_cache(tmp_path):
    # attempt 1 (rollout 0): 15 15, unanimous but rejected by the reward; attempt 2 (rollout 1): new samples 36 36
    configure_cache(tmp_path / "cache")
    lm = scripted([15, 15, 36, 36], cache=True)
    best = dspy.BestOfN(Cascade(SIG), N=2, reward_fn=lambda args, pred: float(pred.answer == 36.0), threshold=1.0)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter(use_json_adapter_fallback=False)):
        pred = best(question=Q)
    assert pred.answer == 36.0 and kinds(lm) == ["defender"] * 4
    assert pred.stats["stage"] == 1.0


def test_inside_refine():
    lm = scripted([36, 36])
    refine = dspy.Refine(Cascade(SIG), N=2, reward_fn=lambda args, pred: float(pred.answer == 36.0), threshold=1.0)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter(use_json_adapter_fallback=False)):
        pred = refine(question=Q)
    assert pred.answer == 36.0 and pred.stats["stage"] == 1.0


def test_optimizers_see_every_stage_predictor():
    names = [name for name, _ in Cascade(SIG).named_predictors()]
    assert names == ["samples.defender", "debate.defender", "debate.revise", "debate.debater", "debate.host"]


# ---------------------------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"first_samples": 0}, "`first_samples` must be a positive integer"),
        ({"first_samples": 3, "max_samples": 2}, "`max_samples` must be an integer >= `first_samples`"),
        ({"agreement": 0}, r"`agreement` must be a share in \(0, 1\]"),
        ({"agreement": 1.5}, r"`agreement` must be a share in \(0, 1\]"),
        ({"debate": "yes"}, "`debate` must be true or false"),
        ({"rounds": -1}, "`rounds` must be an integer >= 0"),
        ({"stop": "early"}, "`stop` must be one of"),
        ({"threshold": 2}, "`threshold` must be a probability"),
        ({"batch": 0}, "`batch` must be a positive integer"),
        ({"temperature": -1}, "`temperature` must be a number >= 0"),
    ],
)
def test_bad_options_are_config_errors_naming_the_option(options, message):
    with pytest.raises(ConfigError, match=message):
        Cascade(SIG, **options)


def test_building_calls_no_lm():
    lm = scripted([])
    with dspy.context(lm=lm):
        Cascade(SIG, defender_lm=lm, debater_lm=lm, host_lm=lm)
    assert lm.calls == []
