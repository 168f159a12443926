"""Multiple-choice datasets (AQuA): every method answers with an option letter.

The signature's answer is ``Literal['A', ..., 'E']``, so the adapters tell the LM the letters it may answer with,
a letter is scored by ``choice_match``, and a reply that is no letter is unparsed (scored wrong, never an error
and never read as some other option)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from dspy.signatures.signature import ensure_signature

from dspy_for.datasets import signature_for
from dspy_for.experiments import DatasetConfig, ExperimentSpec, MethodConfig, compare
from dspy_for.testing import for_responder, system_text

ROWS = [
    {"question": "Two discounts of 10% and x% make 23.5%. x?", "options": ["A)14%", "B)4%", "C)15%"], "correct": "C"},
    {
        "question": "A train of 150 m at 9 m/s takes how long?",
        "options": ["A)10 s", "B)25 s", "C)16.7 s"],
        "correct": "C",
    },
    {"question": "240 children in columns of 40: how many columns?", "options": ["A)6", "B)4", "C)8"], "correct": "A"},
]


def aqua_dir(tmp_path: Path) -> Path:
    (tmp_path / "data" / "aqua").mkdir(parents=True)
    lines = [json.dumps({**row, "rationale": "..."}) for row in ROWS]
    (tmp_path / "data" / "aqua" / "dev.json").write_text("\n".join(lines) + "\n")
    return tmp_path / "data"


def spec(tmp_path: Path, methods: list[MethodConfig], lm: Any = "openai/fake-model") -> ExperimentSpec:
    return ExperimentSpec(
        lm=lm,
        datasets=[DatasetConfig("aqua", "val", data_dir=str(aqua_dir(tmp_path)))],
        methods=methods,
        tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db",
        results_dir=str(tmp_path / "results"),
        experiment="multiple-choice",
    )


def test_the_aqua_signature_answers_with_an_option_letter():
    answer = ensure_signature(signature_for("aqua")).output_fields["answer"].annotation
    assert get_origin(answer) is Literal and get_args(answer) == ("A", "B", "C", "D", "E")


def test_letters_are_asked_for_and_scored_and_anything_else_is_unparsed(install_scripted_lm, tmp_path):
    seen: list[str] = []

    def respond(messages, max_tokens):
        seen.append(system_text(messages))
        return {"reasoning": "10% then 15% gives 23.5%", "answer": "C"}

    install_scripted_lm(respond)
    result = compare(spec(tmp_path, [MethodConfig("cot"), MethodConfig("for", label="for_n1", options={"rounds": 1})]))
    assert result.ok
    for label in ("cot", "for_n1"):
        assert result.results["aqua"][label].accuracy == 2 / 3  # gold C, C, A
    answering = [text for text in seen if "`answer`" in text.split("Your output fields are:")[-1]]
    assert answering and all("one of: A; B; C; D; E" in text for text in answering)  # told the letters it may use

    install_scripted_lm(lambda messages, max_tokens: {"reasoning": "...", "answer": "15%"})
    result = compare(spec(tmp_path / "values", [MethodConfig("cot")]))
    cot = result.results["aqua"]["cot"]
    assert result.ok and cot.n_failed == 0 and cot.n_unparsed == 3 and cot.accuracy == 0.0


def test_the_for_roles_keep_the_letter_answer(install_scripted_lm, tmp_path):
    install_scripted_lm(for_responder(answer="A", reasoning="240 / 40 = 6"))
    result = compare(spec(tmp_path, [MethodConfig("for", label="for_n1", options={"rounds": 1, "host": True})]))
    items = result.results["aqua"]["for_n1"].items
    assert result.ok and [i.prediction["answer"] for i in items] == ["A", "A", "A"]
    assert [i.score for i in items] == [0.0, 0.0, 1.0]
