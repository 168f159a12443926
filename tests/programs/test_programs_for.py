from __future__ import annotations

import importlib.util
from pathlib import Path

import dspy
from rich.console import Console

from dspy_for.testing import ScriptedLM, system_text

ROOT = Path(__file__).resolve().parents[2]


def load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "programs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def debate_responder(answer_field, final):
    def respond(messages, max_tokens):
        s = system_text(messages)
        if "You are the Debater" in s:
            return {"questions": ["Which letters did you count?"]}
        if "asked questions about" in s:
            return {
                "responses": ["I counted each r."],
                "error_found": "False",
                "error": "none",
                "reasoning": "s-t-r-a-r-r-t-r-a-b-b-b-e-r-y",
                answer_field: final,
            }
        if "whether the itinerary gives" in s:
            return {"covered": [True, False] * 10}
        if "List every quantity" in s:
            return {"facts": ["3 packs", "12 pencils"]}
        return {"reasoning": "careful", answer_field: final}

    return respond


def test_r_counting_prints_the_dialogue():
    module = load("r_counting")
    console = Console(record=True, width=120)
    out = module.run(ScriptedLM(debate_responder("answer", "5")), 1, console)
    text = console.export_text()
    assert out["for"] == 5 and "Defender · A0" in text and "Debater · round 1" in text


def test_itinerary_coverage_table():
    module = load("itinerary")
    lm = ScriptedLM(debate_responder("itinerary", "Day 1: Copacabana"))
    console = Console(record=True, width=120)
    marks = module.run(lm, lm, 1, console)
    assert len(marks["FOR-Prompting"]) == 20 and "10/20" in console.export_text()


def test_pipeline_compiles_with_bootstrap():
    module = load("for_pipeline")
    dspy.configure(lm=ScriptedLM(debate_responder("answer", "27")))
    program = module.FactsThenDebate()
    train = [
        dspy.Example(question="Mia has 3 packs of 12 pencils and gives 9 away.", answer=27.0).with_inputs("question")
    ]
    compiled = dspy.BootstrapFewShot(
        metric=lambda e, p, t=None: p.answer == e.answer, max_bootstrapped_demos=1, max_labeled_demos=0
    ).compile(program, trainset=train)
    names = [n for n, _ in compiled.named_predictors()]
    assert names[0] == "extract" and "solve.defender" in names and "solve.host" in names
    assert all(len(p.demos) == 1 for _, p in compiled.named_predictors())
