"""Self-consistency with a scripted LM: the vote, unreadable samples, LM failures, the stop rules, the record."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterator

import dspy
import pytest
from dspy.utils.exceptions import AdapterParseError

from dspy_for.errors import ConfigError
from dspy_for.lm.factory import configure_cache
from dspy_for.modules import SelfConsistency
from dspy_for.modules.for_signatures import DEFENDER_INSTRUCTIONS, defender_signature
from dspy_for.modules.self_consistency import beta_confidence
from dspy_for.testing import ScriptedLM, system_text

Q = "Tom has 3 boxes of 12 apples. How many apples?"
UNREADABLE = "I think it is somewhere around thirty."  # no field headers: the adapter cannot parse it


def sampled(answers: list[int | None]) -> ScriptedLM:
    """One response per sample, in order: ``None`` is an unreadable sample (no JSON retry: see ``run``)."""
    it: Iterator[int | None] = iter(answers)

    def respond(messages, max_tokens):
        answer = next(it)
        return UNREADABLE if answer is None else {"reasoning": "3 * 12", "answer": str(answer)}

    return ScriptedLM(respond)


def run(lm: ScriptedLM, k: int, *, use_async: bool = False) -> dspy.Prediction:
    program = SelfConsistency("question -> answer: float", k=k)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter(use_json_adapter_fallback=False)):
        if use_async:
            return asyncio.run(program.acall(question=Q))
        return program(question=Q)


@pytest.mark.parametrize("use_async", [False, True])
def test_the_majority_answer_wins(use_async):
    pred = run(sampled([36, 15, 36, 36, 15]), k=5, use_async=use_async)
    assert pred.answer == 36.0
    assert pred.stats == {"samples": 5.0, "readable": 5.0, "agreement": 0.6}


@pytest.mark.parametrize("use_async", [False, True])
def test_an_unreadable_sample_casts_no_vote(use_async):
    # 2 readable 15s outvote 1 readable 36; the two unreadable samples are dropped, not counted as answers
    lm = sampled([None, 15, 36, None, 15])
    pred = run(lm, k=5, use_async=use_async)
    assert pred.answer == 15.0
    assert pred.stats == {"samples": 5.0, "readable": 3.0, "agreement": pytest.approx(2 / 3)}
    assert len(lm.calls) == 5  # every sample was drawn: an unreadable one does not end the vote


@pytest.mark.parametrize("use_async", [False, True])
def test_no_readable_sample_makes_the_item_unreadable(use_async):
    with pytest.raises(AdapterParseError):
        run(sampled([None, None, None]), k=3, use_async=use_async)


def test_a_failed_lm_call_is_raised_not_voted_around():
    answers = iter([36, 36])

    def respond(messages, max_tokens):
        answer = next(answers, None)
        if answer is None:
            raise ConnectionError("endpoint down")
        return {"reasoning": "3 * 12", "answer": str(answer)}

    with pytest.raises(Exception, match="endpoint down") as failed:  # DSPy wraps it as an LM error
        run(ScriptedLM(respond), k=3)
    assert not isinstance(failed.value, AdapterParseError)  # an error of the run, never an unreadable answer


# ------------------------------------------------------------------------------ what is recorded per item


@pytest.mark.parametrize("use_async", [False, True])
def test_each_sample_and_the_stop_reason_are_recorded(use_async):
    pred = run(sampled([36, None, 15, 36]), k=4, use_async=use_async)
    samples = [t for t in pred.trajectory if t["type"] == "sample"]
    assert [(s["index"], s["readable"], s["answer"]) for s in samples] == [
        (0, True, 36.0),
        (1, False, None),
        (2, True, 15.0),
        (3, True, 36.0),
    ]
    assert "parse_error" in samples[1]
    assert pred.trajectory[-1] == {"type": "stop", "rule": "fixed", "reason": "cap", "samples": 4, "answer": 36.0}
    json.dumps(pred.trajectory)  # stored as is by the run core


def test_fixed_samples_use_rollout_ids_0_to_k_minus_1_at_the_temperature(monkeypatch):
    lm = sampled([36, 36, 36])
    program = SelfConsistency("question -> answer: float", k=3, temperature=0.9)
    seen = []
    original = dspy.ChainOfThought.__call__

    def spy(self, *args, **kwargs):
        seen.append(kwargs.get("config"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(dspy.ChainOfThought, "__call__", spy)
    with dspy.context(lm=lm):
        program(question=Q)
    assert seen == [{"rollout_id": i, "temperature": 0.9} for i in range(3)]
    assert [name for name, _ in program.named_predictors()] == ["cot.predict"]


# ---------------------------------------------------------------------------------------- the stop rules


def adaptive(answers: list[int | None], *, use_async: bool = False, **options) -> tuple[dspy.Prediction, ScriptedLM]:
    lm = sampled(answers)
    program = SelfConsistency("question -> answer: float", **options)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter(use_json_adapter_fallback=False)):
        pred = asyncio.run(program.acall(question=Q)) if use_async else program(question=Q)
    return pred, lm


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize(
    ("stop", "options", "drawn"),
    [
        ("agreement", {"batch": 2}, 4),  # 4 of 8 agree: the 4 left can at most tie, and a tie goes to the first seen
        ("agreement", {"batch": 1}, 4),
        ("beta", {"batch": 1}, 4),  # P = 31/32 >= 0.95 at 4 votes to 0; 15/16 at 3
        ("beta", {"batch": 3}, 6),  # checked after 3 (15/16) and 6 samples
        ("window", {"batch": 2}, 2),  # the first window is unanimous
        ("window", {"batch": 3}, 3),
    ],
)
def test_unanimous_samples_stop_early(stop, options, drawn, use_async):
    pred, lm = adaptive([36] * 8, k=8, stop=stop, use_async=use_async, **options)
    assert len(lm.calls) == drawn < 8
    assert pred.answer == 36.0
    assert pred.stats == {"samples": float(drawn), "readable": float(drawn), "agreement": 1.0, "k": 8.0}
    reason = {"agreement": "decided", "beta": "confident", "window": "unanimous_window"}[stop]
    assert pred.trajectory[-1]["reason"] == reason and pred.trajectory[-1]["samples"] == drawn


@pytest.mark.parametrize("stop", ["agreement", "beta", "window"])
@pytest.mark.parametrize(("k", "batch"), [(8, 2), (7, 2), (5, 3)])
def test_split_samples_run_to_k_and_never_past_it(stop, k, batch):
    pred, lm = adaptive([36, 15] * 8, k=k, stop=stop, batch=batch)
    assert len(lm.calls) == k  # the last batch is cut at the cap
    assert pred.stats["samples"] == k and pred.trajectory[-1]["reason"] == "cap"
    assert pred.answer == 36.0  # a tie goes to the answer seen first, as in the fixed vote


def test_agreement_stops_when_a_later_answer_can_at_most_tie():
    # after 4 of 6: 36 has 3, 15 (seen after 36) has 1: with 2 left 15 can tie at 3, and a tie goes to 36
    pred, lm = adaptive([36, 15, 36, 36, 15, 15], k=6, stop="agreement", batch=2)
    assert len(lm.calls) == 4 and pred.answer == 36.0


def test_agreement_does_not_stop_when_an_earlier_answer_could_tie_and_win():
    # after 4 of 6: 36 has 3, 15 (seen before 36) has 1: with 2 left 15 can tie at 3 and win the tie, as it does
    pred, lm = adaptive([15, 36, 36, 36, 15, 15], k=6, stop="agreement", batch=2)
    assert len(lm.calls) == 6 and pred.answer == 15.0
    fixed, _ = adaptive([15, 36, 36, 36, 15, 15], k=6)
    assert fixed.answer == 15.0


def test_agreement_gives_the_fixed_runs_answer_on_every_sequence():
    rng = random.Random(30)
    for _ in range(200):
        k, batch = rng.randint(1, 8), rng.randint(1, 3)
        answers = [rng.choice([36, 15, 7, None]) for _ in range(k)]
        if all(a is None for a in answers):
            continue
        fixed, _ = adaptive(answers, k=k)
        early, lm = adaptive(answers, k=k, stop="agreement", batch=batch)
        assert early.answer == fixed.answer, (answers, batch)
        assert len(lm.calls) <= k
        assert early.trajectory[:-1] == fixed.trajectory[: len(lm.calls)]  # a prefix of the fixed run's samples


def test_agreement_waits_for_a_readable_sample():
    # 2 unreadable samples decide nothing; at 4, 36 has 2 votes and a new answer could only tie at 2 (and lose)
    pred, lm = adaptive([None, None, 36, 36, 36, 36], k=6, stop="agreement", batch=2)
    assert len(lm.calls) == 4 and pred.answer == 36.0
    assert pred.stats == {"samples": 4.0, "readable": 2.0, "agreement": 1.0, "k": 6.0}


def test_beta_confidence_is_adaptive_consistencys_beta_integral():
    from scipy.stats import beta

    for v1 in range(0, 12):
        for v2 in range(0, v1 + 1):
            assert beta_confidence(v1, v2) == pytest.approx(beta.sf(0.5, v1 + 1, v2 + 1), abs=1e-12)
    assert beta_confidence(4, 0) == 31 / 32 and beta_confidence(3, 0) == 15 / 16


@pytest.mark.parametrize(("threshold", "drawn"), [(31 / 32, 4), (31 / 32 + 1e-9, 5), (15 / 16 - 1e-9, 3)])
def test_beta_stops_at_its_threshold_inclusive(threshold, drawn):
    pred, lm = adaptive([36] * 8, k=8, stop="beta", batch=1, threshold=threshold)
    assert len(lm.calls) == drawn
    assert pred.trajectory[-1]["confidence"] == pytest.approx(beta_confidence(drawn, 0))


def test_beta_counts_the_runner_up():
    # 36 36 15 36 36 36: at 6 samples 5 to 1 gives 0.9375 < 0.95; at 7, 6 to 1 gives 0.965
    pred, lm = adaptive([36, 36, 15, 36, 36, 36, 36, 36], k=8, stop="beta", batch=1)
    assert len(lm.calls) == 7 and pred.answer == 36.0


def test_window_needs_one_whole_readable_window():
    # windows of 3: (36 15 36) split, (36 None 36) has an unreadable sample, (36 36 36) unanimous
    pred, lm = adaptive([36, 15, 36, 36, None, 36, 36, 36, 36, 15], k=10, stop="window", batch=3)
    assert len(lm.calls) == 9 and pred.answer == 36.0
    assert pred.stats == {"samples": 9.0, "readable": 8.0, "agreement": 7 / 8, "k": 10.0}


def test_the_answer_is_the_majority_of_all_samples_not_the_window():
    # windows of 2: (15 7), (15 8) split, (36 36) unanimous: stop; over all six 15 and 36 tie, 15 seen first
    pred, lm = adaptive([15, 7, 15, 8, 36, 36, 36, 36], k=8, stop="window", batch=2)
    assert len(lm.calls) == 6 and pred.answer == 15.0


def test_an_adaptive_run_still_raises_a_failed_lm_call():
    answers = iter([36, 15])

    def respond(messages, max_tokens):
        answer = next(answers, None)
        if answer is None:
            raise ConnectionError("endpoint down")
        return {"reasoning": "3 * 12", "answer": str(answer)}

    with pytest.raises(Exception, match="endpoint down"), dspy.context(lm=ScriptedLM(respond)):
        SelfConsistency("question -> answer: float", k=6, stop="agreement")(question=Q)


# ------------------------------------------------------------------------------ the Defender's prompt


@pytest.mark.parametrize("use_async", [False, True])
def test_defender_prompt_samples_with_fors_defender_signature(use_async):
    pred, lm = adaptive([36, 36, 15], k=3, prompt="defender", use_async=use_async)
    program = SelfConsistency("question -> answer: float", prompt="defender")
    assert [name for name, _ in program.named_predictors()] == ["defender"]
    expected = defender_signature(dspy.ensure_signature("question -> answer: float"))
    assert program.defender.signature.instructions == expected.instructions
    assert list(program.defender.signature.output_fields) == ["reasoning", "answer"]
    assert all(DEFENDER_INSTRUCTIONS.splitlines()[0] in system_text(c["messages"]) for c in lm.calls)
    assert pred.answer == 36.0 and pred.stats["samples"] == 3.0


# ---------------------------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"stop": "early"}, "`stop` must be one of"),
        ({"batch": 0}, "`batch` must be a positive integer"),
        ({"batch": 1, "stop": "window"}, "`batch` is the window"),
        ({"threshold": 0.5}, "`threshold` must be a probability"),
        ({"threshold": 1.0}, "`threshold` must be a probability"),
        ({"prompt": "host"}, "`prompt` must be 'cot'"),
        ({"k": 0}, "`k` must be a positive integer"),
    ],
)
def test_bad_options_are_config_errors_naming_the_option(options, message):
    with pytest.raises(ConfigError, match=message):
        SelfConsistency("question -> answer: float", **options)


def test_inside_best_of_n_each_attempt_draws_new_samples_even_from_the_cache(tmp_path):
    configure_cache(tmp_path / "cache")
    answers = iter([15, 15, 36, 36])  # attempt 1 gets 15s (rejected), attempt 2 new samples
    lm = ScriptedLM(lambda messages, max_tokens: {"reasoning": "3 * 12", "answer": str(next(answers))}, cache=True)
    program = SelfConsistency("question -> answer: float", k=2)
    best = dspy.BestOfN(program, N=2, reward_fn=lambda args, pred: float(pred.answer == 36.0), threshold=1.0)
    with dspy.context(lm=lm):
        pred = best(question=Q)
    assert pred.answer == 36.0 and len(lm.calls) == 4


def test_dspys_batch_runs_a_program_over_examples():
    """`batch` (samples between stop checks) does not hide DSPy's `Module.batch(examples)`."""
    lm = ScriptedLM(lambda messages, max_tokens: {"reasoning": "3 * 12", "answer": "36"})
    program = SelfConsistency("question -> answer: float", k=2, stop="window", batch=2)
    with dspy.context(lm=lm):
        preds = program.batch([dspy.Example(question=Q).with_inputs("question")] * 2, num_threads=1)
    assert [p.answer for p in preds] == [36.0, 36.0] and program.batch_size == 2
