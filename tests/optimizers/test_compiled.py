from __future__ import annotations

import dspy

from dspy_for.optimizers import compile_program
from dspy_for.testing import ScriptedLM, system_text, user_text

TRAIN = [dspy.Example(question=f"What is {i} + {i}?", answer=float(2 * i)).with_inputs("question") for i in range(1, 7)]


def metric(example, pred, trace=None):
    return float(pred.answer == example.answer)


def respond(messages, max_tokens):
    sys = system_text(messages)
    if "Improve the INSTRUCTION" in sys:
        return {"new_instruction": "Add the two numbers carefully."}
    if "optimization system that improves" in sys:
        return {"feedback": "Be careful."}
    q = user_text(messages)
    n = int(q.split("What is ")[-1].split(" +")[0])
    return {"reasoning": "add", "answer": str(2 * n)}


def test_textgrad_and_bootstrap_compile_with_usage_and_save_load(tmp_path):
    dspy.configure(lm=ScriptedLM(respond))
    student = dspy.ChainOfThought("question -> answer: float")
    tg = compile_program("textgrad", student, trainset=TRAIN, valset=TRAIN[:2], metric=metric,
                         epochs=1, steps_per_epoch=2)
    assert tg.kind == "textgrad" and len(tg.history) == 3 and tg.usage["total"]["calls"] > 0
    assert {"task", "gradient", "optimizer"} <= set(tg.usage)
    bs = compile_program("bootstrap", student, trainset=TRAIN, metric=metric, max_bootstrapped_demos=2)
    assert len(bs.program.predict.demos) == 2 and len(student.predict.demos) == 0
    path = tmp_path / "p.json"
    tg.program.save(str(path))
    loaded = dspy.ChainOfThought("question -> answer: float")
    loaded.load(str(path))
    assert loaded.predict.signature.instructions == tg.program.predict.signature.instructions
