from __future__ import annotations

import dspy
import pytest

from dspy_for.errors import ConfigError
from dspy_for.modules import FORPrompting
from dspy_for.optimizers import TextGrad, compile_program
from dspy_for.testing import ScriptedLM, system_text, user_text

TRAIN = [dspy.Example(question=f"What is {i} + {i}?", answer=float(2 * i)).with_inputs("question") for i in range(1, 7)]


def metric(example, pred, trace=None):
    return float(pred.answer == example.answer)


def make_lm(good_marker="GOOD", step_outputs=None, log=None):
    """Task answers correctly iff its instruction contains `good_marker`; the Step role returns
    `step_outputs` in turn."""
    outputs = iter(step_outputs or [])

    def respond(messages, max_tokens):
        sys = system_text(messages)
        if "improves the INSTRUCTION" in sys or "optimization system that improves" in sys:
            if log is not None:
                log.append(("gradient", user_text(messages)))
            return {"feedback": "Ask for careful addition."}
        if "Improve the INSTRUCTION" in sys:
            if log is not None:
                log.append(("step", user_text(messages)))
            return {"new_instruction": next(outputs)}
        q = user_text(messages)
        n = int(q.split("What is ")[1].split(" +")[0])
        return {"reasoning": "add", "answer": str(2 * n if good_marker in sys else 0)}

    return ScriptedLM(respond)


def test_a_step_that_lowers_val_is_reverted_and_one_that_raises_it_is_kept():
    lm = make_lm(step_outputs=["Answer BAD.", "Answer GOOD.", "Answer BAD again."])
    dspy.configure(lm=lm)
    student = dspy.ChainOfThought("question -> answer: float")
    student.predict.signature = student.predict.signature.with_instructions("Answer GOOD initially.")
    tg = TextGrad(metric, batch_size=2, epochs=1, steps_per_epoch=3, seed=1)
    compiled = tg.compile(student, trainset=TRAIN, valset=TRAIN[:3])
    h = compiled.textgrad_history
    assert [row["reverted"] for row in h] == [False, True, False, True]
    assert [row["val_score"] for row in h] == [1.0, 0.0, 1.0, 0.0]
    assert h[2]["instructions"] == {"predict": "Answer GOOD."}
    assert compiled.predict.signature.instructions == "Answer GOOD."
    assert student.predict.signature.instructions == "Answer GOOD initially."  # student not mutated
    assert set(compiled.compile_usage) >= {"task", "gradient", "optimizer", "total"}


def test_equal_val_is_kept_strictly_lower_reverts():
    lm = make_lm(step_outputs=["Still GOOD. [[ ## completed ## ]]"])  # echoed DSPy markers are stripped
    dspy.configure(lm=lm)
    student = dspy.ChainOfThought("question -> answer: float")
    student.predict.signature = student.predict.signature.with_instructions("GOOD")
    compiled = TextGrad(metric, batch_size=2, epochs=1, steps_per_epoch=1).compile(student, trainset=TRAIN)
    assert compiled.textgrad_history[-1]["reverted"] is False
    assert compiled.predict.signature.instructions == "Still GOOD."


def test_seeded_minibatches_memory_and_constraints_reach_the_prompts():
    logs = []
    for _ in range(2):
        log = []
        dspy.configure(lm=make_lm(step_outputs=["GOOD a", "GOOD b", "GOOD c"], log=log))
        student = dspy.ChainOfThought("question -> answer: float")
        TextGrad(
            metric,
            batch_size=2,
            epochs=1,
            steps_per_epoch=3,
            seed=7,
            gradient_memory=1,
            constraints=["Keep it under 50 words."],
            validation_revert=False,
        ).compile(student, trainset=TRAIN)
        logs.append(log)
    assert logs[0] == logs[1]  # same seed, same minibatches and prompts
    steps = [text for kind, text in logs[0] if kind == "step"]
    assert all("Keep it under 50 words." in s for s in steps)
    assert "Ask for careful addition." not in steps[0].split("past_feedback")[1].split("constraints")[0]
    assert "Ask for careful addition." in steps[1].split("past_feedback")[1]


def test_variables_chosen_by_name_and_works_on_for_prompting_roles():
    lm = make_lm(step_outputs=["Debater: ask about each GOOD step."] * 4)
    dspy.configure(lm=lm)
    student = FORPrompting("question -> answer: float", rounds=1)
    before = {n: p.signature.instructions for n, p in student.named_predictors()}
    compiled = TextGrad(
        metric, batch_size=1, epochs=1, steps_per_epoch=1, predictors=["debater"], validation_revert=False
    ).compile(student, trainset=TRAIN[:2])
    after = {n: p.signature.instructions for n, p in compiled.named_predictors()}
    assert after["debater"] == "Debater: ask about each GOOD step."
    assert {n: after[n] for n in ("defender", "revise", "host")} == {
        n: before[n] for n in ("defender", "revise", "host")
    }
    with pytest.raises(ConfigError, match="Unknown predictor `judge`"):
        TextGrad(metric, predictors=["judge"]).compile(student, trainset=TRAIN)


def test_bad_arguments():
    with pytest.raises(ConfigError, match="`batch_size`"):
        TextGrad(metric, batch_size=0)
    with pytest.raises(ConfigError, match="trainset"):
        TextGrad(metric).compile(dspy.Predict("q -> a"), trainset=[])
    with pytest.raises(ConfigError, match="Unknown compile kind"):
        compile_program("adam", dspy.Predict("q -> a"), trainset=TRAIN, metric=metric)


def test_prorefine_initial_prompt_is_a_variable():
    from dspy_for.modules import ProRefine

    lm = make_lm(step_outputs=["unused"])
    dspy.configure(lm=lm)
    tg = TextGrad(metric, predictors=["task"])
    variables = tg._variables(ProRefine("question -> answer: float"))
    assert list(variables) == ["task"]
    assert set(dict(ProRefine("question -> answer: float").named_predictors())) >= {"task", "feedback", "optimizer"}


def test_loss_text_has_input_prediction_gold_outcome_and_metric_feedback():
    log = []
    dspy.configure(lm=make_lm(step_outputs=["GOOD"], log=log))

    def feedback_metric(example, pred, trace=None):
        return dspy.Prediction(score=float(pred.answer == example.answer), feedback="Count the apples twice.")

    compiled = TextGrad(feedback_metric, batch_size=1, epochs=1, steps_per_epoch=1).compile(
        dspy.ChainOfThought("question -> answer: float"), trainset=TRAIN[:1]
    )
    assert [row["val_score"] for row in compiled.textgrad_history] == [0.0, 1.0]  # scored through `score`
    gradient_prompt = next(text for kind, text in log if kind == "gradient")
    for piece in ("What is 1 + 1?", "Prediction:", "Expected: 2.0", "Outcome: incorrect", "Count the apples twice."):
        assert piece in gradient_prompt


def test_an_unparsable_rewrite_skips_the_update_and_the_run_goes_on():
    calls = {"task": 0}
    outputs = iter(["not in the output format"] * 2 + [{"new_instruction": "Answer GOOD."}])  # chat, then JSON retry

    def respond(messages, max_tokens):
        sys = system_text(messages)
        if "optimization system that improves" in sys:
            return {"feedback": "Ask for careful addition."}
        if "Improve the INSTRUCTION" in sys:
            return next(outputs)
        calls["task"] += 1
        n = int(user_text(messages).split("What is ")[1].split(" +")[0])
        return {"reasoning": "add", "answer": str(2 * n if "GOOD" in sys else 0)}

    dspy.configure(lm=ScriptedLM(respond))
    compiled = TextGrad(metric, batch_size=1, epochs=1, steps_per_epoch=2).compile(
        dspy.ChainOfThought("question -> answer: float"), trainset=TRAIN[:2], valset=TRAIN[:3]
    )
    h = compiled.textgrad_history
    assert "predict" in h[1]["errors"] and h[2]["errors"] == {}
    assert h[1]["instructions"] == h[0]["instructions"] and h[1]["val_score"] == 0.0  # not re-scored
    assert h[2]["instructions"] == {"predict": "Answer GOOD."} and h[2]["val_score"] == 1.0
    assert calls["task"] == 3 + 1 + 1 + 3  # val, batch, batch, val after the one real update
