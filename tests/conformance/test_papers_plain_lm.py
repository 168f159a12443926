"""The papers' own versions (``for_paper``, ``prorefine_paper``) through a *plain* ``dspy.LM`` on the local fake server.

What reaches the endpoint is checked on the server's side: the FOR paper's Table 3 prompts (read from the paper's
text in ``../shared/papers/``), every revision taken and a non-question Debater turn passed on; the official
ProRefine prompts and its schedule of 10 tokens per step up to 250, with the end-of-sequence stop.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from conftest import plain_lm
from server import FaultServer

from dspy_for.experiments.methods import build_method
from dspy_for.lm.usage import track_usage
from dspy_for.testing import system_text, user_text

SIG = "question -> answer: float"
Q = "Tom has 3 boxes of 12 apples. How many apples?"
PAPER = Path(__file__).resolve().parents[2] / ".." / "shared" / "papers" / "for-prompting-2510.01674.txt"
FEEDBACK_OPENING = "You are a smart language model that evaluates the output of a language model for a given input."
OPTIMIZER_OPENING = (
    "You are part of an optimization system that improves the input prompt given to a large language model."
)


def table3() -> dict[str, str]:
    """Table 3's role prompts (Appendix A.1) as the paper's text gives them: role -> prompt."""
    if not PAPER.is_file():
        pytest.skip(f"the FOR-Prompting paper's text is not at {PAPER.resolve()} (../shared/papers/ beside the repo)")
    text = PAPER.read_text(encoding="utf-8")
    start = text.index("Role Example Prompt")
    prompts = dict(re.findall(r"^(Defender|Debater|Host) “(.+)”$", text[start : text.index("Table 3:", start)], re.M))
    assert set(prompts) == {"Defender", "Debater", "Host"}
    return prompts


def test_for_paper_through_a_plain_lm(fault_server: FaultServer):
    prompts = table3()
    seen: list[str] = []

    def respond(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any]:
        sys = system_text(messages)
        role = next(r for r, p in prompts.items() if p in sys)  # every request carries a Table 3 prompt
        revision = role == "Defender" and "[[ ## questions ## ]]" in user_text(messages)
        seen.append("Revision" if revision else role)
        if role == "Debater":
            return {"questions": '["Use 12 apples per box, not 10.", "Is 30 the total?"]'}
        if revision:
            return {"responses": '["Done.", "Yes."]', "reasoning": "3 * 12 = 36", "answer": "36"}
        if role == "Host":
            return {"reasoning": "The revision fixed it.", "answer": "36"}
        return {"reasoning": "3 * 10 = 30", "answer": "30"}

    fault_server.responder = respond
    with track_usage() as usage:
        pred = build_method("for_paper", SIG, lm=plain_lm(fault_server))(question=Q)
    assert seen == ["Defender", "Debater", "Revision", "Host"]
    assert [a["answer"] for a in pred.answers_by_round] == [30.0, 36.0] and pred.answer == 36.0
    revise = fault_server.requests[2]["messages"]
    assert "Use 12 apples per box, not 10." in str(revise)  # the non-question turn reached the Defender
    assert pred.role_collapse == 1
    assert set(usage.roles) == {"defender", "debater", "host"} and usage.total.calls == len(fault_server.responses)
    assert not any(
        "unused_numbers" in str(r["messages"]) or "error_found" in str(r["messages"]) for r in fault_server.requests
    )


def _prorefine_responder(task_words: int, log: list[tuple[str, int | None]]):
    def respond(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any]:
        sys = system_text(messages)
        if FEEDBACK_OPENING in sys:
            log.append(("feedback", max_tokens))
            return {"feedback": "The output is correct."}
        if OPTIMIZER_OPENING in sys:
            log.append(("optimizer", max_tokens))
            return {"reasoning": "Nothing to fix.", "improved_prompt": "<IMPROVED_PROMPT>Solve it.</IMPROVED_PROMPT>"}
        assert "PARTIAL output" not in sys and "You improve a prompt" not in sys
        log.append(("task", max_tokens))
        return {"reasoning": " ".join(["3 * 12 = 36.", *["ok"] * task_words]), "answer": "36"}

    return respond


def test_prorefine_paper_through_a_plain_lm_sends_the_official_prompts_and_stops_at_eos(fault_server: FaultServer):
    log: list[tuple[str, int | None]] = []
    fault_server.responder = _prorefine_responder(20, log)
    with track_usage() as usage:
        pred = build_method("prorefine_paper", SIG, lm=plain_lm(fault_server))(question=Q)
    caps = [mt for r, mt in log if r == "task"]
    assert caps[:2] == [10, 20] and caps == list(range(10, 10 * len(caps) + 1, 10))
    assert pred.trajectory[-1]["eos"] and not any(s["eos"] for s in pred.trajectory[:-1])
    assert usage["task"].calls == len(caps) == pred.stats["steps_used"]  # the EOS output is reused
    assert [r for r, _ in log if r != "task"] == ["feedback", "optimizer"] * len(caps)
    assert all(s["is_correct"] for s in pred.trajectory) and pred.refined_prompt == "Solve it."
    assert pred.answer == 36.0


def test_prorefine_paper_through_a_plain_lm_runs_25_steps_up_to_250_tokens(fault_server: FaultServer):
    log: list[tuple[str, int | None]] = []
    fault_server.responder = _prorefine_responder(400, log)
    pred = build_method("prorefine_paper", SIG, lm=plain_lm(fault_server, max_tokens=1000))(question=Q)
    caps = [mt for r, mt in log if r == "task"]
    assert caps == [*range(10, 251, 10), 1000]  # 25 capped steps, then the answer at full length with p*
    assert [s["finish_reason"] for s in pred.trajectory] == ["length"] * 25
    assert all(s["completion_tokens"] == s["max_tokens"] for s in pred.trajectory)
