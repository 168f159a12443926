"""What the compile tests share: a responder that answers any DSPy signature (every role of every registered method, and
the optimizers' own prompts), the role a request was (read from its fields, which optimizers never change), and the
students the tests compile, built with one LM per role."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import dspy

from dspy_for.experiments.methods import build_method, get_method
from dspy_for.modules.role_predict import lm_in_use
from dspy_for.testing import system_text, user_text

SIG = "question -> answer: float"
_FIELD = re.compile(r"^\s*\d+\.\s+`(?P<name>[^`]+)`\s+\((?P<type>[^)]*)\)", re.MULTILINE)
_ITEM = re.compile(r"(\d+) more apples")

#: small options so every student runs in a few calls
FAST: dict[str, dict[str, Any]] = {
    "for": {"rounds": 1},
    "for_paper": {},
    "prorefine": {"k": 10, "n": 2, "verifier": "none"},
    "cascade": {"first_samples": 2, "max_samples": 2},
    "defender_sc": {"k": 2},
}


def question(k: int) -> str:
    return f"Tom has 3 boxes of 12 apples and {k} more apples. How many apples does he have?"


def example(k: int) -> dspy.Example:
    return dspy.Example(question=question(k), answer=36.0 + k).with_inputs("question")


def metric(gold: dspy.Example, pred: Any, trace: Any = None) -> float:
    return float(pred is not None and float(pred.answer) == gold.answer)


def fields(messages: list[dict[str, Any]]) -> tuple[list[str], list[tuple[str, str]]]:
    """(input field names, [(output field name, type)]) of a ChatAdapter / JSONAdapter request."""
    sys = system_text(messages)
    start, out = sys.find("Your input fields are:"), sys.find("Your output fields are:")
    if start < 0 or out < 0:
        return [], []
    end = sys.find("All interactions will be structured", out)
    inputs = [m["name"] for m in _FIELD.finditer(sys[start:out])]
    outputs = [(m["name"], m["type"].strip()) for m in _FIELD.finditer(sys[out : end if end > 0 else None])]
    return inputs, outputs


def role_of(messages: list[dict[str, Any]]) -> str:
    """Which role a request was, from its fields: ``defender`` (A0 and revisions; the cascade's samples), ``debater``,
    ``host``, ProRefine's ``answer`` / ``feedback`` / ``optimizer`` / ``verifier``, or ``compiler`` for a compiler's
    own prompts (TextGrad's critique and rewrite, GEPA's reflection, MIPROv2's proposals)."""
    inputs, outputs = fields(messages)
    names = {n for n, _ in outputs}
    if not outputs:
        return "compiler"  # GEPA's reflection: a plain prompt
    if "dialogue" in inputs:
        return "host"
    if "questions" in names:
        return "debater"
    if "previous_answer" in inputs:
        return "defender"
    if "partial_output" in inputs:
        return "feedback"
    if "improved_prompt" in names:
        return "optimizer"
    if "correct" in names:
        return "verifier"
    if inputs == ["question"] and "answer" in names:
        return "answer"  # the task's answer: `defender` for FOR and its kin, `task` for CoT and ProRefine
    return "compiler"


#: what a compiler's LM proposes as an instruction; under :func:`responder` ``(tuned=True)`` only a call whose prompt
#: carries it answers right, so a compiler that keeps a proposal measurably changes the program
MARKER = "(tuned)"
UNTUNED = "Solve the problem step by step and check every multiplication."


def responder(*, tuned: bool = False, proposal: str = UNTUNED) -> Callable[..., dict[str, Any] | str]:
    """A responder for :class:`~dspy_for.testing.ScriptedLM` (see :func:`respond`): ``tuned``: the answer is right only
    under a prompt carrying :data:`MARKER`; ``proposal``: the text of every free-text output (instructions too)."""

    def answer(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any] | str:
        return respond(messages, max_tokens, right=not tuned or MARKER in system_text(messages), proposal=proposal)

    return answer


def respond(
    messages: list[dict[str, Any]], max_tokens: int | None, *, right: bool = True, proposal: str = UNTUNED
) -> dict[str, Any] | str:
    """Answer any signature: the right answer to the item asked (36 + k; 0 unless ``right``), one new question,
    ``True`` for bools, ``proposal`` else; JSON when the adapter asks for a JSON object."""
    sys = system_text(messages)
    _, outputs = fields(messages)
    if not outputs:
        return f"```\n{proposal}\n```"
    found = _ITEM.findall(user_text(messages))
    value = str(36 + int(found[-1])) if found and right else "0"
    out: dict[str, Any] = {}
    for name, type_ in outputs:
        t = type_.lower()
        if name == "reasoning":
            out[name] = f"3 * 12 = 36, plus the rest: {value}."
        elif t in ("float", "int"):
            out[name] = value
        elif t == "bool":
            out[name] = "True"
        elif t.startswith("list"):
            out[name] = '["How many apples are in each box?"]'
        else:
            out[name] = proposal
    return json.dumps(out) if "JSON object" in sys else out


def student(name: str, make_lm: Callable[[str], Any]) -> tuple[dspy.Module, dict[str, Any]]:
    """Method ``name`` (small settings) with one LM per role, ``make_lm(role)``; and those LMs."""
    lms = {r: make_lm(r) for r in get_method(name).roles}
    return build_method(name, SIG, role_lms=lms, **FAST.get(name, {})), lms


def prompts_of(program: dspy.Module) -> dict[str, tuple[str, int]]:
    """Each predictor's instruction and number of demos."""
    return {n: (p.signature.instructions, len(p.demos)) for n, p in program.named_predictors()}


def lms_of(program: dspy.Module) -> Mapping[str, Any]:
    return {n: lm_in_use(p) for n, p in program.named_predictors()}
