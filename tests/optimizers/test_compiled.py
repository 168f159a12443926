from __future__ import annotations

import json
import re

import dspy
import pytest

from dspy_for.errors import ConfigError
from dspy_for.optimizers import COMPILERS, compile_program
from dspy_for.testing import ScriptedLM, system_text, user_text

TRAIN = [dspy.Example(question=f"What is {i} + {i}?", answer=float(2 * i)).with_inputs("question") for i in range(1, 7)]


def metric(example, pred, trace=None):
    return float(pred.answer == example.answer)


def output_fields(system: str) -> list[str]:
    part = system.split("Your output fields are:")[1].split("All interactions")[0]
    return re.findall(r"`(\w+)`", part)


def respond(messages, max_tokens, proposal="Add the two numbers, GOOD."):
    """Task role: right iff its instruction says GOOD or it is shown demos. Any optimizer role: every output
    field says GOOD."""
    sys, user = system_text(messages), user_text(messages)
    fields = output_fields(sys)
    if fields != ["reasoning", "answer"]:
        out = {f: proposal for f in fields}
        return json.dumps(out) if "JSON object" in sys else out
    n = int(user.split("What is ")[-1].split(" +")[0])
    return {"reasoning": "add", "answer": str(2 * n if "GOOD" in sys or len(messages) > 2 else 0)}


def student() -> dspy.Module:
    return dspy.ChainOfThought("question -> answer: float")


def test_textgrad_and_bootstrap_compile_with_usage_and_save_load(tmp_path):
    dspy.configure(lm=ScriptedLM(respond))
    s = student()
    tg = compile_program("textgrad", s, trainset=TRAIN, valset=TRAIN[:2], metric=metric, epochs=1, steps_per_epoch=2)
    assert tg.kind == "textgrad" and len(tg.history) == 3 and tg.usage["total"]["calls"] > 0
    assert {"task", "gradient", "optimizer"} <= set(tg.usage)
    assert tg.options == {"epochs": 1, "steps_per_epoch": 2}
    assert "GOOD" in tg.program.predict.signature.instructions
    assert "GOOD" not in s.predict.signature.instructions  # student not mutated
    bs = compile_program("bootstrap", s, trainset=TRAIN, metric=metric, max_bootstrapped_demos=2)
    assert len(bs.program.predict.demos) == 0  # the task never answers right without GOOD: no demos pass
    path = tmp_path / "p.json"
    tg.program.save(str(path))
    loaded = student()
    loaded.load(str(path))
    assert loaded.predict.signature.instructions == tg.program.predict.signature.instructions


def test_bootstrap_keeps_passing_demos_and_they_survive_save_load(tmp_path):
    dspy.configure(lm=ScriptedLM(respond))
    s = student()
    s.predict.signature = s.predict.signature.with_instructions("GOOD")
    bs = compile_program("bootstrap", s, trainset=TRAIN, metric=metric, max_bootstrapped_demos=2)
    assert len(bs.program.predict.demos) == 2 and len(s.predict.demos) == 0
    assert bs.usage["task"]["calls"] >= 2
    bs.program.save(str(tmp_path / "b.json"))
    loaded = student()
    loaded.load(str(tmp_path / "b.json"))
    assert len(loaded.predict.demos) == 2


def test_gepa_uses_the_reflection_lm_under_the_optimizer_role(tmp_path):
    task, reflection = ScriptedLM(respond), ScriptedLM(respond)
    dspy.configure(lm=task)
    s = student()
    res = compile_program(
        "gepa", s, trainset=TRAIN, valset=TRAIN[:3], metric=metric, optimizer_lm=reflection, max_metric_calls=20
    )
    assert "GOOD" in res.program.predict.signature.instructions
    assert "GOOD" not in s.predict.signature.instructions
    assert res.usage["optimizer"]["calls"] == len(reflection.calls) > 0
    assert res.usage["task"]["calls"] == len(task.calls) > 0
    res.program.save(str(tmp_path / "g.json"))
    loaded = student()
    loaded.load(str(tmp_path / "g.json"))
    assert loaded.predict.signature.instructions == res.program.predict.signature.instructions


def test_gepa_needs_a_reflection_lm_and_unknown_kinds_are_refused():
    dspy.configure(lm=ScriptedLM(respond))
    with pytest.raises(ConfigError, match="reflection LM"):
        compile_program("gepa", student(), trainset=TRAIN, metric=metric)
    with pytest.raises(ConfigError, match="Unknown compile kind `adam`"):
        compile_program("adam", student(), trainset=TRAIN, metric=metric)
    assert set(COMPILERS) == {"textgrad", "gepa", "mipro", "mipro_fewshot", "bootstrap"}


def test_mipro_instruction_only_and_fewshot(tmp_path):
    task, prompt = ScriptedLM(respond), ScriptedLM(respond)
    dspy.configure(lm=task)
    res = compile_program(
        "mipro",
        student(),
        trainset=TRAIN,
        valset=TRAIN[:3],
        metric=metric,
        optimizer_lm=prompt,
        num_candidates=2,
        num_trials=2,
    )
    assert "GOOD" in res.program.predict.signature.instructions and res.program.predict.demos == []
    assert res.usage["optimizer"]["calls"] == len(prompt.calls) > 0
    s = student()
    plain = ScriptedLM(lambda messages, max_tokens: respond(messages, max_tokens, proposal="Add the numbers."))
    few = compile_program(
        "mipro_fewshot",
        s,
        trainset=TRAIN,
        valset=TRAIN[:3],
        metric=metric,
        optimizer_lm=plain,
        num_candidates=3,
        num_trials=6,
    )
    assert 1 <= len(few.program.predict.demos) <= 4 and s.predict.demos == []  # demos are what scores here
    few.program.save(str(tmp_path / "m.json"))
    loaded = student()
    loaded.load(str(tmp_path / "m.json"))
    assert len(loaded.predict.demos) == len(few.program.predict.demos)
