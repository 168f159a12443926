from __future__ import annotations

import asyncio

import dspy
import pytest

from dspy_for.errors import ConfigError
from dspy_for.experiments import build_method
from dspy_for.modules import FORPrompting, ProRefine, for_prompting, prorefine
from dspy_for.modules.prorefine import clean_prompt, rejection_reason
from dspy_for.modules.task_text import render_task
from dspy_for.testing import ScriptedLM, system_text, user_text

Q = "Tom has 3 boxes of 12 apples. How many apples?"
LONG = " ".join(["step"] * 200)


def role_of(messages):
    sys = system_text(messages)
    if "PARTIAL output" in sys:
        return "feedback"
    if "You improve a prompt" in sys:
        return "optimizer"
    if "You check a model's answer" in sys:
        return "verifier"
    return "task"


def responder(task_words=200, verifier_ok=False, log=None):
    """The task answer is `task_words` words long (so a cap below that ends with 'length')."""
    counter = {"opt": 0}

    def respond(messages, max_tokens):
        r = role_of(messages)
        if log is not None:
            log.append((r, max_tokens))
        if r == "task":
            words = " ".join(["w"] * max(0, task_words - 10))
            return {"reasoning": f"3 * 12 = 36 {words}", "answer": "36"}
        if r == "feedback":
            return {"is_correct": "False", "feedback": "Check each multiplication."}
        if r == "optimizer":
            counter["opt"] += 1
            return {
                "improved_prompt": f"Solve the problem step by step. Rule {chr(64 + counter['opt'])}: double-check."
            }
        return {"correct": str(verifier_ok)}

    return respond


def test_step_i_requests_i_times_k_tokens_and_stops_at_n():
    log = []
    dspy.configure(lm=ScriptedLM(responder(task_words=500, log=log)))
    pred = ProRefine("question -> answer: float", k=10, n=4)(question=Q)
    task_caps = [mt for r, mt in log if r == "task"]
    assert task_caps[:4] == [10, 20, 30, 40]
    assert task_caps[4:] == [1000]  # the final answer at full length (the LM's own max_tokens) with p*
    assert pred.stats == {
        "steps_used": 4.0,
        "refined": 1.0,
        "prompt_changes": 4.0,
        "rejected_rewrites": 0.0,
        "label_using": 0.0,
    }
    assert [s["finish_reason"] for s in pred.trajectory] == ["length"] * 4
    assert pred.refined_prompt == "Solve the problem step by step. Rule D: double-check."
    assert pred.answer == 36.0


def test_stops_at_eos_and_reuses_the_eos_output_without_a_second_call():
    log = []
    dspy.configure(lm=ScriptedLM(responder(task_words=25, log=log)))
    pred = ProRefine("question -> answer: float", k=10, n=10)(question=Q)
    task_caps = [mt for r, mt in log if r == "task"]
    assert task_caps == [10, 20, 30]  # 30 > the answer's length: EOS, no final call
    steps = pred.trajectory
    assert [s["eos"] for s in steps] == [False, False, True] and steps[-1]["finish_reason"] == "stop"
    assert pred.answer == 36.0 and pred.stats["steps_used"] == 3


def test_the_prompt_changes_each_step_and_steps_use_the_final_message_format():
    lm = ScriptedLM(responder(task_words=500))
    dspy.configure(lm=lm)
    pred = ProRefine("question -> answer: float", k=10, n=2)(question=Q)
    task_calls = [c for c in lm.calls if role_of(c["messages"]) == "task"]
    assert "Rule A" in system_text(task_calls[1]["messages"]) and "Rule B" in system_text(task_calls[2]["messages"])
    # same adapter formatting for partial steps and the final answer: same message structure
    assert [m["role"] for m in task_calls[0]["messages"]] == [m["role"] for m in task_calls[-1]["messages"]]
    assert pred.trajectory[1]["prompt"] == pred.trajectory[0]["new_prompt"]


def test_optimizer_rewrites_that_paste_the_problem_are_rejected():
    def respond(messages, max_tokens):
        r = role_of(messages)
        if r == "optimizer":
            return {"improved_prompt": "Tom has 3 boxes of 12 apples, so answer 36."}
        return responder(task_words=500)(messages, max_tokens)

    dspy.configure(lm=ScriptedLM(respond))
    pred = ProRefine("question -> answer: float", k=10, n=2)(question=Q)
    assert pred.refined_prompt == pred.trajectory[0]["prompt"]
    assert pred.trajectory[0]["rejected_prompt"].startswith("Tom has")
    assert pred.trajectory[0]["rejected_reason"] == "problem_numbers"
    assert pred.stats["prompt_changes"] == 0.0 and pred.stats["rejected_rewrites"] == 2.0


@pytest.mark.parametrize(
    ("proposed", "reason"),
    [
        ("", "empty"),
        ("Solve it. There are 14 objects in total.", "problem_numbers"),  # a number from the feedback
        ("Solve it. Count the 3 boxes.", "problem_numbers"),  # a number from the task
        ("Solve it. The model did not count the carrots correctly and it should have counted them.", "copies_feedback"),
        (
            "Solve it. Do not copy the feedback, and never include numbers, names, objects or the answer.",
            "copies_instructions",
        ),
        ("Solve it. List every item with its quantity, then add the quantities.", None),
        ("Solve it. Rule 1: check each step.", None),  # a number of its own is fine
    ],
)
def test_rejection_reason(proposed, reason):
    feedback = "The model did not count the carrots correctly and it should have counted them. 14 objects."
    assert rejection_reason(proposed, "Solve it.", task=Q, feedback=feedback) == reason


@pytest.mark.parametrize(("verifier_ok", "refined"), [(True, 0.0), (False, 1.0)])
def test_llm_verifier_gates_refinement(verifier_ok, refined):
    log = []
    dspy.configure(lm=ScriptedLM(responder(task_words=500, verifier_ok=verifier_ok, log=log)))
    pred = ProRefine("question -> answer: float", k=10, n=2, verifier="llm")(question=Q)
    assert pred.stats["refined"] == refined
    roles = [r for r, _ in log]
    assert roles[:2] == ["task", "verifier"]
    assert ("feedback" in roles) == bool(refined)


def test_oracle_needs_labels_and_is_marked_label_using():
    dspy.configure(lm=ScriptedLM(responder(task_words=500)))
    m = ProRefine("question -> answer: float", k=10, n=2, verifier="oracle")
    assert m.uses_labels
    with pytest.raises(ConfigError, match="gold"):
        m(question=Q)
    right = m(question=Q, gold=dspy.Example(question=Q, answer=36.0))
    wrong = m(question=Q, gold=dspy.Example(question=Q, answer=35.0))
    assert right.stats == {
        "steps_used": 0.0,
        "refined": 0.0,
        "prompt_changes": 0.0,
        "rejected_rewrites": 0.0,
        "label_using": 1.0,
    }
    assert wrong.stats["refined"] == 1.0 and wrong.stats["steps_used"] == 2.0


def test_usage_per_role_and_per_role_lms():
    task, fb, opt = (ScriptedLM(responder(task_words=500), model=n) for n in ("t", "f", "o"))
    pred = ProRefine("question -> answer: float", k=10, n=2, task_lm=task, feedback_lm=fb, optimizer_lm=opt)(question=Q)
    assert pred.usage["task"]["calls"] == 3 and pred.usage["feedback"]["calls"] == 2
    assert pred.usage["optimizer"]["calls"] == 2 and pred.usage["task"]["completion_tokens"] > 0
    assert {role_of(c["messages"]) for c in fb.calls} == {"feedback"}
    assert {role_of(c["messages"]) for c in opt.calls} == {"optimizer"}


def test_chat_history_reaches_the_optimizer():
    lm = ScriptedLM(responder(task_words=500))
    dspy.configure(lm=lm)
    ProRefine("question -> answer: float", k=10, n=3, history="chat")(question=Q)
    opt_inputs = [user_text(c["messages"]) for c in lm.calls if role_of(c["messages"]) == "optimizer"]
    assert "prompt 1:" not in opt_inputs[0] and "prompt 1:" in opt_inputs[1] and "prompt 2:" in opt_inputs[2]


def test_export_gives_a_reusable_program_and_named_predictors_are_stable():
    dspy.configure(lm=ScriptedLM(responder(task_words=25)))
    m = ProRefine("question -> answer: float", k=10, n=5)
    pred = m(question=Q)
    program = m.export(pred)
    assert isinstance(program, dspy.ChainOfThought)
    assert program.predict.signature.instructions == pred.refined_prompt
    assert program(question=Q).answer == 36.0
    assert [n for n, _ in m.named_predictors()] == ["task", "feedback", "optimizer", "verifier"]


def test_inside_evaluate_bestofn_and_async():
    dspy.configure(lm=ScriptedLM(responder(task_words=25)))
    m = ProRefine("question -> answer: float", k=10, n=5)
    dev = [dspy.Example(question=Q, answer=36.0).with_inputs("question")] * 2
    assert dspy.Evaluate(devset=dev, metric=lambda e, p, t=None: p.answer == e.answer)(m).score == 100.0
    assert dspy.BestOfN(m, N=2, reward_fn=lambda a, p: 1.0, threshold=1.0)(question=Q).answer == 36.0
    assert asyncio.run(m.acall(question=Q)).answer == 36.0


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"k": 0}, "`k`"), ({"n": -1}, "`n`"), ({"verifier": "human"}, "`verifier`"), ({"history": "full"}, "`history`")],
)
def test_bad_options(kwargs, name):
    with pytest.raises(ConfigError, match=name):
        ProRefine("question -> answer", **kwargs)


def test_registered_method():
    m = build_method("prorefine", "question -> answer: float", lm=ScriptedLM(responder()), k=5, n=2, verifier="oracle")
    assert isinstance(m, ProRefine) and m.k == 5 and m.uses_labels


def test_capped_steps_do_not_warn_about_truncation_but_other_calls_still_do(caplog):
    lm = ScriptedLM(responder(task_words=500))
    dspy.configure(lm=lm)
    with caplog.at_level("WARNING", logger="dspy.clients.lm"):
        pred = ProRefine("question -> answer: float", k=10, n=3)(question=Q)
    assert [s["finish_reason"] for s in pred.trajectory] == ["length"] * 3
    assert not [r for r in caplog.records if "truncated" in r.getMessage()]
    caplog.clear()
    with caplog.at_level("WARNING", logger="dspy.clients.lm"):
        lm(messages=[{"role": "user", "content": "hi"}], max_tokens=5)  # an ordinary capped call
    assert [r for r in caplog.records if "truncated" in r.getMessage()]


def test_the_unrefined_answer_is_the_chain_of_thought_baselines_answer():
    """With task_module="cot" and a verifier, the first full answer is the very call dspy.ChainOfThought makes."""
    lm = ScriptedLM(responder(task_words=50, verifier_ok=True))
    dspy.configure(lm=lm)
    dspy.ChainOfThought("question -> answer: float")(question=Q)
    cot_messages = lm.calls[-1]["messages"]
    ProRefine("question -> answer: float", k=10, n=2, verifier="llm")(question=Q)
    first_task = next(c for c in lm.calls[1:] if role_of(c["messages"]) == "task")
    assert first_task["messages"] == cot_messages


def test_clean_prompt_drops_adapter_markers():
    assert clean_prompt("Count every item. [[ ## completed ## ]]") == "Count every item."
    assert clean_prompt("  Solve it.\n") == "Solve it."


@pytest.mark.parametrize(
    ("respond", "options"),
    [
        (lambda: responder(task_words=500), {"k": 10, "n": 3, "history": "chat"}),
        (lambda: responder(task_words=25), {"k": 10, "n": 10}),  # stops at EOS and reuses its output
        (lambda: responder(task_words=500, verifier_ok=False), {"k": 10, "n": 2, "verifier": "llm"}),
        (lambda: responder(task_words=500, verifier_ok=True), {"k": 10, "n": 2, "verifier": "llm"}),
    ],
    ids=["chat", "eos", "llm_refines", "llm_accepts"],
)
def test_forward_and_aforward_make_the_same_calls_and_trajectories(respond, options):
    runs = []
    for run in (lambda m: m(question=Q), lambda m: asyncio.run(m.acall(question=Q))):
        lm = ScriptedLM(respond())
        dspy.configure(lm=lm)
        runs.append((run(ProRefine("question -> answer: float", **options)), lm.calls))
    (sync, sync_calls), (async_, async_calls) = runs
    assert async_calls == sync_calls  # same calls, same order, same caps and messages: the same cache entries
    assert async_.trajectory == sync.trajectory and async_.refined_prompt == sync.refined_prompt
    assert async_.stats == sync.stats and async_.answer == sync.answer and async_.reasoning == sync.reasoning
    assert {r: u["calls"] for r, u in async_.usage.items()} == {r: u["calls"] for r, u in sync.usage.items()}


def test_aforward_keeps_the_oracle_gold_check():
    dspy.configure(lm=ScriptedLM(responder(task_words=25)))
    m = ProRefine("question -> answer: float", k=10, n=2, verifier="oracle")
    with pytest.raises(ConfigError, match="gold"):
        asyncio.run(m.acall(question=Q))
    right = asyncio.run(m.acall(question=Q, gold=dspy.Example(question=Q, answer=36.0)))
    assert right.stats["refined"] == 0.0 and right.answer == 36.0


def test_steps_have_the_typed_shape():
    from typing import get_type_hints

    from dspy_for.modules import ProRefineStep

    dspy.configure(lm=ScriptedLM(responder(task_words=25)))
    pred = ProRefine("question -> answer: float", k=10, n=5)(question=Q)
    assert pred.trajectory and all(list(s) == list(get_type_hints(ProRefineStep)) for s in pred.trajectory)


def test_prorefine_and_for_read_the_task_rendered_by_one_function_byte_for_byte():
    """ProRefine's verifier and feedback and FOR's Debater get the user's inputs as one text, from one
    function (it is part of pinned prompts): one ``name: value`` line per input field, in signature order."""
    assert prorefine.render_task is render_task and for_prompting.render_task is render_task
    sig = "context, question -> answer: float"
    inputs = {"question": Q, "context": "Boxes hold 12."}
    task = f"context: Boxes hold 12.\nquestion: {Q}"
    assert render_task(dspy.Signature(sig), inputs) == task
    assert render_task(dspy.Signature(sig), {"question": Q}) == f"context: None\nquestion: {Q}"

    lm = ScriptedLM(responder(task_words=500, verifier_ok=False))
    dspy.configure(lm=lm)
    ProRefine(sig, k=10, n=1, verifier="llm")(**inputs)
    by_role = {role_of(c["messages"]): user_text(c["messages"]) for c in lm.calls}
    for r in ("verifier", "feedback"):
        assert f"[[ ## task ## ]]\n{task}\n\n" in by_role[r]

    def for_respond(messages, max_tokens):
        if "You are the Debater" in system_text(messages):
            return {"questions": []}
        return {"reasoning": "3 * 12 = 36", "answer": "36"}

    lm = ScriptedLM(for_respond)
    dspy.configure(lm=lm)
    FORPrompting(sig, rounds=1, host=False)(**inputs)
    debater = next(c for c in lm.calls if "You are the Debater" in system_text(c["messages"]))
    assert f"[[ ## task ## ]]\n{task}\n\n" in user_text(debater["messages"])
