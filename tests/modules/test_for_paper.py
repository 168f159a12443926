"""FOR-Prompting as in the paper: ``FORPrompting(prompts="paper")`` and the registry's ``for_paper``.

The Table 3 role prompts are read from the paper's text (``../shared/papers/``) at test time, not copied here, so a
test fails if the module's prompts drift from the paper's wording.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import dspy
import pytest

from dspy_for import make_lm, track_usage
from dspy_for.datasets import load_dataset
from dspy_for.errors import ConfigError
from dspy_for.experiments import build_method, get_method
from dspy_for.modules import FORPrompting
from dspy_for.modules import for_signatures as S
from dspy_for.testing import ScriptedLM, system_text, user_text

Q = "Tom has 3 boxes of 12 apples. How many apples?"
SIG = "question -> answer: float"
PAPER = Path(__file__).resolve().parents[2] / ".." / "shared" / "papers" / "for-prompting-2510.01674.txt"


def table3() -> dict[str, str]:
    """The role prompts of Table 3 (Appendix A.1) as the paper's text gives them: role -> prompt."""
    if not PAPER.is_file():
        pytest.skip(f"the FOR-Prompting paper's text is not at {PAPER.resolve()} (../shared/papers/ beside the repo)")
    text = PAPER.read_text(encoding="utf-8")
    start = text.index("Role Example Prompt")
    table = text[start : text.index("Table 3:", start)]
    prompts = dict(re.findall(r"^(Defender|Debater|Host) “(.+)”$", table, flags=re.MULTILINE))
    assert set(prompts) == {"Defender", "Debater", "Host"}, table
    return prompts


def paper_role(messages: list[dict], prompts: dict[str, str]) -> str:
    """Which role a call is, by the Table 3 prompt in its system message (exactly one must be there)."""
    sys = system_text(messages)
    found = [r for r, p in prompts.items() if p in sys]
    assert len(found) == 1, sys
    if found[0] == "Defender":
        return "revise" if "[[ ## questions ## ]]" in user_text(messages) else "defender"
    return found[0].lower()


def paper_responder(prompts, answers=(36, 30), questions=("How did you get 36?",), log=None):
    """Defender answers answers[0], its revision answers[1] (naming no error), the Debater asks ``questions``,
    the Host answers the last revision's answer."""

    def respond(messages, max_tokens):
        r = paper_role(messages, prompts)
        if log is not None:
            log.append(r)
        if r == "defender":
            return {"reasoning": "3 * 12 = 36", "answer": str(answers[0])}
        if r == "debater":
            return {"questions": list(questions)}
        if r == "revise":
            return {"responses": ["I re-checked it."], "reasoning": "3 * 10 = 30", "answer": str(answers[1])}
        return {"reasoning": "The revision answered the question.", "answer": str(answers[1])}

    return respond


def test_for_paper_sends_the_table_3_prompts_and_none_of_the_projects():
    prompts = table3()
    log: list[str] = []
    lm = ScriptedLM(paper_responder(prompts, log=log))
    pred = build_method("for_paper", SIG, lm=lm)(question=Q)
    assert log == ["defender", "debater", "revise", "host"]  # N = 1 with the Host
    for call in lm.calls:  # paper_role asserted exactly one Table 3 prompt per call; nothing of the project's
        sys = system_text(call["messages"])
        for project in (S.DEFENDER_INSTRUCTIONS, S.REVISE_INSTRUCTIONS, S.DEBATER_INSTRUCTIONS, S.HOST_INSTRUCTIONS):
            assert project.splitlines()[0] not in sys
        everything = sys + user_text(call["messages"])
        assert "unused_numbers" not in everything and "error_found" not in everything
    assert pred.answer == 30.0


def test_the_module_constants_are_table_3_verbatim():
    prompts = table3()
    assert prompts == {
        "Defender": S.PAPER_DEFENDER_INSTRUCTIONS,
        "Debater": S.PAPER_DEBATER_INSTRUCTIONS,
        "Host": S.PAPER_HOST_INSTRUCTIONS,
    }


def test_for_paper_takes_every_revision():
    prompts = table3()
    lm = ScriptedLM(paper_responder(prompts, answers=(36, 30)))
    pred = build_method("for_paper", SIG, lm=lm)(question=Q)
    assert [a["answer"] for a in pred.answers_by_round] == [36.0, 30.0]  # A_1 replaced A_0 with no error named
    revision = next(t for t in pred.trajectory if t["type"] == "revision")
    assert revision["fields"]["kept_previous"] is False and revision["fields"]["answer"] == 30.0
    assert "error" not in revision["fields"]
    # the same answers under the project's keep-unless-error rule (typed error_found added, none named): kept
    kept = FORPrompting(SIG, prompts="paper", keep_unless_error=True, guard=False)
    assert list(kept.revise.signature.output_fields)[:3] == ["responses", "error_found", "error"]
    with dspy.context(lm=ScriptedLM(paper_responder(prompts, answers=(36, 30)))):
        strict = kept(question=Q)
    assert [a["answer"] for a in strict.answers_by_round] == [36.0, 36.0]


def test_for_paper_passes_a_non_question_debater_turn_through():
    prompts = table3()
    items = ("Use 12 instead of 9.", "Recalculate step 2.")
    log: list[str] = []
    lm = ScriptedLM(paper_responder(prompts, questions=items, log=log))
    pred = build_method("for_paper", SIG, lm=lm)(question=Q)
    assert log.count("debater") == 1  # no guard: no re-ask
    revise = next(user_text(c["messages"]) for c in lm.calls if paper_role(c["messages"], prompts) == "revise")
    assert all(item in revise for item in items)  # both reach the Defender as they were written
    asked = next(t for t in pred.trajectory if t["type"] == "questions")["fields"]
    assert asked["questions"] == list(items) and set(asked["violations"]) == set(items)  # counted, not acted on
    assert pred.role_collapse == 2
    host = next(user_text(c["messages"]) for c in lm.calls if paper_role(c["messages"], prompts) == "host")
    assert all(f"- {item}" in host for item in items)  # and the Host reads them


def test_paper_roles_carry_only_what_the_papers_loop_needs():
    m = FORPrompting(SIG, prompts="paper", keep_unless_error=False, guard=False)
    assert list(m.defender.signature.output_fields) == ["reasoning", "answer"]
    assert list(m.revise.signature.input_fields) == ["question", "previous_answer", "earlier_dialogue", "questions"]
    assert list(m.revise.signature.output_fields) == ["responses", "reasoning", "answer"]
    assert list(m.debater.signature.input_fields) == ["task", "current_answer", "asked_questions"]
    assert list(m.host.signature.input_fields) == ["question", "dialogue"]
    # the guard's re-ask needs the `rejected` input; the paper's loop has no guard
    guarded = FORPrompting(SIG, prompts="paper", keep_unless_error=False, guard=True)
    assert list(guarded.debater.signature.input_fields)[-1] == "rejected"


def test_the_paper_host_reads_the_dialogue_without_the_projects_error_fields():
    prompts = table3()
    lm = ScriptedLM(paper_responder(prompts))
    build_method("for_paper", SIG, lm=lm)(question=Q)
    host = next(user_text(c["messages"]) for c in lm.calls if paper_role(c["messages"], prompts) == "host")
    assert "[Defender, A0]" in host and "[Debater, round 1]" in host and "[Defender, A1]" in host
    assert "answer: 30.0" in host and "I re-checked it." in host
    assert "error_found" not in host and "the previous answer stands" not in host


def test_a_guarded_paper_debater_is_reasked_with_the_reasons():
    prompts = table3()
    replies = iter([["Shouldn't it be 48?"], ["Is 36 the total?"]])

    def respond(messages, max_tokens):
        if paper_role(messages, prompts) == "debater":
            return {"questions": next(replies)}
        return paper_responder(prompts)(messages, max_tokens)

    lm = ScriptedLM(respond)
    pred = FORPrompting(SIG, prompts="paper", guard=True, keep_unless_error=False, host=False, debater_lm=lm)
    with dspy.context(lm=lm):
        out = pred(question=Q)
    debater = [user_text(c["messages"]) for c in lm.calls if paper_role(c["messages"], prompts) == "debater"]
    assert len(debater) == 2 and "proposes_answer" in debater[1]
    assert out.role_collapse == 1


def test_forward_and_aforward_make_the_same_calls():
    prompts = table3()
    runs = []
    for run in (lambda m: m(question=Q), lambda m: asyncio.run(m.acall(question=Q))):
        lm = ScriptedLM(paper_responder(prompts))
        runs.append((run(build_method("for_paper", SIG, lm=lm)), lm.calls))
    (sync, sync_calls), (async_, async_calls) = runs
    assert async_calls == sync_calls
    assert async_.trajectory == sync.trajectory and async_.answer == sync.answer == 30.0


def test_per_role_lms_evaluate_and_best_of_n():
    prompts = table3()
    d, q, h = (ScriptedLM(paper_responder(prompts), model=name) for name in ("d-model", "q-model", "h-model"))
    m = build_method("for_paper", SIG, role_lms={"defender": d, "debater": q, "host": h})
    with track_usage() as usage:
        assert m(question=Q).answer == 30.0
        best = dspy.BestOfN(m, N=2, reward_fn=lambda args, pred: 1.0, threshold=1.0)
        assert best(question=Q).answer == 30.0
    assert {(c.role, c.model) for c in usage.calls} == {
        ("defender", "d-model"),
        ("debater", "q-model"),
        ("host", "h-model"),
    }
    assert {paper_role(c["messages"], prompts) for c in q.calls} == {"debater"}
    dev = [dspy.Example(question=Q, answer=30.0).with_inputs("question")] * 3
    assert dspy.Evaluate(devset=dev, metric=lambda e, p, t=None: p.answer == e.answer, num_threads=2)(m).score == 100.0


def test_any_signature_class():
    class Count(dspy.Signature):
        """Count the letters asked about."""

        word: str = dspy.InputField()
        letter: str = dspy.InputField()
        count: int = dspy.OutputField()

    prompts = table3()

    def respond(messages, max_tokens):
        r = paper_role(messages, prompts)
        if r == "debater":
            return {"questions": ["Did you count every r?"]}
        out = {"reasoning": "s t r a r r t r a b b b e r y: 5", "count": "5"}
        return {"responses": ["Yes."], **out} if r == "revise" else out

    lm = ScriptedLM(respond)
    pred = build_method("for_paper", Count, lm=lm)(word="strarrtrabbbery", letter="r")
    assert pred.count == 5
    assert "Count the letters asked about." in system_text(lm.calls[0]["messages"])


def test_the_registry_entry_fixes_the_papers_settings():
    spec = get_method("for_paper")
    paper = {"prompts": "paper", "keep_unless_error": False, "debater_mode": "questions", "guard": False}
    assert dict(spec.fixed) == {**paper, "rounds": 1, "host": True}
    assert spec.roles == ("defender", "debater", "host")
    assert not set(spec.fixed) & set(spec.defaults)
    assert set(spec.defaults) == {"stop", "patience", "token_budget"}
    m = build_method("for_paper", SIG)
    assert (m.prompts, m.keep_unless_error, m.debater_mode, m.guard) == ("paper", False, "questions", False)
    assert (m.rounds, m.use_host) == (1, True)
    with pytest.raises(ConfigError, match="Unknown option `rounds`"):
        build_method("for_paper", SIG, rounds=3)
    # the project's method still defaults to the project's prompts
    assert build_method("for", SIG).prompts == "project"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"prompts": "authors"}, "`prompts`"), ({"prompts": "paper", "debater_mode": "free"}, "free-Debater")],
)
def test_bad_prompt_options_are_clear_errors(kwargs, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        FORPrompting(SIG, **kwargs)


@pytest.mark.llm
def test_for_paper_on_an_item_of_a_real_model():
    """Real local model (the 0.5B unless DSPY_FOR_TEST_MODEL says otherwise), a bundled GSM8K item."""
    prompts = table3()
    lm = make_lm(f"local/{os.environ.get('DSPY_FOR_TEST_MODEL', 'qwen2.5-coder-0.5b')}", max_tokens=400)
    program = build_method("for_paper", SIG, lm=lm)
    assert prompts["Defender"] in program.defender.signature.instructions
    assert prompts["Debater"] == program.debater.signature.instructions
    assert prompts["Host"] in program.host.signature.instructions
    for ex in load_dataset("gsm8k", "sample")[:1]:
        pred = program(question=ex.question)
        assert isinstance(pred.answer, float)
        turns = [(t["role"], t["type"]) for t in pred.trajectory]
        assert turns[0] == ("defender", "answer") and turns[1] == ("debater", "questions")
        assert turns[-1] == ("host", "synthesis") and pred.rounds_used in (0, 1)  # 0: the Debater asked nothing new
        revisions = [t for t in pred.trajectory if t["type"] == "revision"]
        assert all(not t["fields"]["kept_previous"] and "error" not in t["fields"] for t in revisions)
        if revisions and "parse_error" not in revisions[0]["fields"]:  # every readable revision is taken as A_1
            assert pred.answers_by_round[1]["answer"] == revisions[0]["fields"]["answer"]
        assert {"defender", "debater", "host"} <= set(pred.usage)
