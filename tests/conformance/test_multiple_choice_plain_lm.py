"""A multiple-choice dataset (AQuA) through a plain ``dspy.LM`` against the local OpenAI-compatible test server:
the request names the option letters, a letter is scored, a reply that is no letter is unparsed (not an error)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import plain_lm

from dspy_for.experiments import DatasetConfig, ExperimentSpec, MethodConfig, compare
from dspy_for.testing import system_text

ROWS = [
    {"question": "Two discounts of 10% and x% make 23.5%. x?", "options": ["A)14%", "B)4%", "C)15%"], "correct": "C"},
    {"question": "240 children in columns of 40: how many columns?", "options": ["A)6", "B)4", "C)8"], "correct": "A"},
]


def _spec(tmp_path: Path, lm) -> ExperimentSpec:
    (tmp_path / "data" / "aqua").mkdir(parents=True, exist_ok=True)
    rows = [json.dumps({**row, "rationale": "..."}) for row in ROWS]
    (tmp_path / "data" / "aqua" / "dev.json").write_text("\n".join(rows) + "\n")
    return ExperimentSpec(
        lm=lm,
        datasets=[DatasetConfig("aqua", "val", data_dir=str(tmp_path / "data"))],
        methods=[MethodConfig("cot")],
        tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db",
        results_dir=str(tmp_path / "results"),
        experiment="multiple-choice-conformance",
    )


def test_a_plain_lm_answers_aqua_with_a_letter(fault_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    asked: list[str] = []

    def respond(messages, max_tokens):
        asked.append(system_text(messages))
        return {"reasoning": "worked it out", "answer": "C"}

    fault_server.responder = respond
    cot = compare(_spec(tmp_path, plain_lm(fault_server))).results["aqua"]["cot"]
    assert cot.n_failed == 0 and cot.n_unparsed == 0 and cot.accuracy == 0.5  # gold C, A
    assert asked and all("A; B; C; D; E" in text for text in asked)


def test_a_reply_that_is_no_letter_is_unparsed_not_an_error(fault_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fault_server.responder = lambda messages, max_tokens: {"reasoning": "worked it out", "answer": "15%"}
    result = compare(_spec(tmp_path, plain_lm(fault_server)))
    cot = result.results["aqua"]["cot"]
    assert result.ok and cot.n_failed == 0 and cot.n_unparsed == 2 and cot.accuracy == 0.0
