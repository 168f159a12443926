"""ProRefine as in the official code: ``ProRefine(prompts="paper")`` and the registry's ``prorefine_paper``.

The official prompts are the authors' public implementation's (deepakpandita57/ProRefine_public, prorefine.py,
FEEDBACK_SYSTEM_PROMPT and OPTIMIZATION_SYSTEM_PROMPT); the sentences checked below are quoted from it.
"""

from __future__ import annotations

import asyncio
import os

import dspy
import pytest
from dspy.utils.exceptions import AdapterParseError

from dspy_for import make_lm, track_usage
from dspy_for.errors import ConfigError
from dspy_for.experiments import build_method, get_method
from dspy_for.modules import ProRefine
from dspy_for.modules import prorefine_signatures as S
from dspy_for.testing import ScriptedLM, system_text, user_text

Q = "Tom has 3 boxes of 12 apples. How many apples?"
SIG = "question -> answer: float"

# sentences of the official prompts, as written in the official prorefine.py
OFFICIAL_FEEDBACK = [
    "You are a smart language model that evaluates the output of a language model for a given input.",
    "You do not propose new output, only evaluate the given output critically, think step-by-step, and give very "
    "concise feedback to improve the output.",
    "Ensure your feedback is correct and factual.",
    "This is very important, if the output is correct do not provide any feedback, respond with 'the output is "
    "correct'.",
    "Give your response by sending the feedback only. The text you send will be used directly.",
]
OFFICIAL_OPTIMIZER = [
    "You are part of an optimization system that improves the input prompt given to a large language model.",
    "You are given a feedback for the model output. Your goal is to use this feedback to improve the input prompt.",
    "The feedback may be noisy, identify what is important and what is correct. Pay attention to the constraints "
    "mentioned in the input prompt.",
    "This is very important. You MUST make sure that the improved prompt does not deviate substantially from the "
    "input prompt and is generalizable for the task.",
    "If the input prompt cannot be improved further, your response should be the input prompt as is.",
    "Think step-by-step and send the improved prompt between tags <IMPROVED_PROMPT> improved prompt "
    "</IMPROVED_PROMPT>.",
    "The text you send between the tags will be used directly to replace the system prompt for a large language model.",
]


def role_of(messages):
    sys = system_text(messages)
    if OFFICIAL_FEEDBACK[0] in sys:
        return "feedback"
    if OFFICIAL_OPTIMIZER[0] in sys:
        return "optimizer"
    if "You check a model's answer" in sys:
        return "verifier"
    assert "PARTIAL output" not in sys and "You improve a prompt" not in sys  # never the project's prompts
    return "task"


def responder(task_words=500, feedback="The last step is unclear.", rewrite=None, verifier_ok=False, log=None):
    """The task answer is ``task_words`` words long; the optimizer thinks, then sends ``rewrite(n)`` between tags."""
    count = {"opt": 0}

    def respond(messages, max_tokens):
        r = role_of(messages)
        if log is not None:
            log.append((r, max_tokens))
        if r == "task":
            return {"reasoning": "3 * 12 = 36 " + " ".join(["w"] * max(0, task_words - 10)), "answer": "36"}
        if r == "feedback":
            return {"feedback": feedback}
        if r == "optimizer":
            count["opt"] += 1
            text = rewrite(count["opt"]) if rewrite else f"Solve step by step. Rule {chr(64 + count['opt'])}."
            return {"reasoning": "The feedback asks for clarity.", "improved_prompt": text}
        return {"correct": str(verifier_ok)}

    return respond


def tagged(n: int) -> str:
    return f"Thinking about it.\n<IMPROVED_PROMPT> Solve step by step. Rule {chr(64 + n)}. </IMPROVED_PROMPT>"


def test_the_official_prompts_are_sent_with_the_official_inputs():
    lm = ScriptedLM(responder(rewrite=tagged))
    ProRefine(SIG, k=10, n=2, prompts="paper", task_lm=lm, feedback_lm=lm, optimizer_lm=lm)(question=Q)
    feedback = [c["messages"] for c in lm.calls if role_of(c["messages"]) == "feedback"]
    optimizer = [c["messages"] for c in lm.calls if role_of(c["messages"]) == "optimizer"]
    assert len(feedback) == len(optimizer) == 2
    for sentence in OFFICIAL_FEEDBACK:
        assert sentence in system_text(feedback[0])
    for sentence in OFFICIAL_OPTIMIZER:
        assert sentence in system_text(optimizer[0])
    # the feedback role gets the input and the output (f_i = LLM_feedback(q, o_i)), not the prompt
    fb_user = user_text(feedback[0])
    assert f"[[ ## input ## ]]\nquestion: {Q}" in fb_user and "[[ ## output ## ]]\n[[ ## reasoning ## ]]" in fb_user
    assert "[[ ## prompt ## ]]" not in fb_user
    # the optimizer gets the task prompt and the feedback (p* = LLM_optimizer(p*, f_i)), no history
    opt_user = user_text(optimizer[1])
    assert "[[ ## task_prompt ## ]]\nSolve step by step. Rule A." in opt_user
    assert "[[ ## feedback ## ]]\nThe last step is unclear." in opt_user and "history" not in opt_user


def test_the_constants_are_the_official_strings_less_the_stray_leading_quote():
    sys_feedback = " ".join(S.PAPER_FEEDBACK_INSTRUCTIONS.split())
    assert sys_feedback == " ".join(OFFICIAL_FEEDBACK)
    assert " ".join(S.PAPER_OPTIMIZER_INSTRUCTIONS.split()) == " ".join(OFFICIAL_OPTIMIZER)
    assert S.PAPER_FEEDBACK_INSTRUCTIONS.startswith("You are") and S.PAPER_OPTIMIZER_INSTRUCTIONS.startswith("You are")


def test_prorefine_paper_follows_the_official_schedule_10_tokens_per_step_up_to_250():
    log = []
    lm = ScriptedLM(responder(task_words=400, log=log))  # longer than 250 words: no step ends by itself
    pred = build_method("prorefine_paper", SIG, lm=lm)(question=Q)
    caps = [mt for r, mt in log if r == "task"]
    assert caps[:-1] == list(range(10, 251, 10))  # step i capped at 10·i, 250 // 10 = 25 steps
    assert caps[-1] not in caps[:-1]  # then the answer at full length with p*
    assert pred.stats["steps_used"] == 25.0 and [s["max_tokens"] for s in pred.trajectory] == caps[:-1]


def test_it_stops_at_end_of_sequence():
    log = []
    lm = ScriptedLM(responder(task_words=35, log=log))
    pred = build_method("prorefine_paper", SIG, lm=lm)(question=Q)
    assert [mt for r, mt in log if r == "task"] == [10, 20, 30, 40]  # 40 > the answer: EOS, its output reused
    assert pred.trajectory[-1]["eos"] and pred.answer == 36.0


def test_the_improved_prompt_is_read_between_its_tags_or_whole_without_them():
    lm = ScriptedLM(responder(rewrite=tagged))
    with dspy.context(lm=lm):
        pred = ProRefine(SIG, k=10, n=2, prompts="paper")(question=Q)
    assert [s["new_prompt"] for s in pred.trajectory] == ["Solve step by step. Rule A.", "Solve step by step. Rule B."]
    with dspy.context(lm=ScriptedLM(responder(rewrite=lambda n: f"Count carefully, version {n}."))):
        whole = ProRefine(SIG, k=10, n=1, prompts="paper")(question=Q)
    assert whole.refined_prompt == "Count carefully, version 1."
    assert S.between_tags("a <T> b </T> c", "T") == "b" and S.between_tags("no tags", "T") == "no tags"


def test_prorefine_paper_takes_every_rewrite_the_project_guard_would_reject():
    pasted = lambda n: f"<IMPROVED_PROMPT>Tom has 3 boxes of 12 apples, so the answer is 36 ({n}).</IMPROVED_PROMPT>"  # noqa: E731
    with dspy.context(lm=ScriptedLM(responder(rewrite=pasted))):
        paper = build_method("prorefine_paper", SIG)(question=Q)
        guarded = ProRefine(SIG, k=10, n=2, prompts="paper", guard=True)(question=Q)
    assert paper.stats["prompt_changes"] == paper.stats["steps_used"] and paper.stats["rejected_rewrites"] == 0.0
    assert paper.refined_prompt.startswith("Tom has 3 boxes")
    assert guarded.stats["prompt_changes"] == 0.0
    assert [s["rejected_reason"] for s in guarded.trajectory] == ["problem_numbers"] * 2
    # an empty rewrite is never a prompt, guard or not
    with dspy.context(lm=ScriptedLM(responder(rewrite=lambda n: "<IMPROVED_PROMPT> </IMPROVED_PROMPT>"))):
        empty = ProRefine(SIG, k=10, n=1, prompts="paper", guard=False)(question=Q)
    assert empty.trajectory[0]["rejected_reason"] == "empty" and empty.refined_prompt == empty.trajectory[0]["prompt"]


@pytest.mark.parametrize(
    ("feedback", "correct"),
    [("The output is correct.", True), ("the output is\ncorrect", True), ("Step 2 multiplies wrongly.", False)],
)
def test_is_correct_is_read_from_the_phrase_the_official_prompt_prescribes(feedback, correct):
    with dspy.context(lm=ScriptedLM(responder(feedback=feedback))):
        pred = ProRefine(SIG, k=10, n=1, prompts="paper")(question=Q)
    assert pred.trajectory[0]["is_correct"] is correct and pred.trajectory[0]["feedback"] == feedback


def test_chat_history_reaches_the_official_optimizer():
    lm = ScriptedLM(responder())
    with dspy.context(lm=lm):
        ProRefine(SIG, k=10, n=2, prompts="paper", history="chat")(question=Q)
    opt = [user_text(c["messages"]) for c in lm.calls if role_of(c["messages"]) == "optimizer"]
    assert "[[ ## history ## ]]\nnone" in opt[0] and "prompt 1:" in opt[1]


@pytest.mark.parametrize(("verifier_ok", "refined"), [(True, 0.0), (False, 1.0)])
def test_the_verifier_modes_still_gate_refinement(verifier_ok, refined):
    log = []
    with dspy.context(lm=ScriptedLM(responder(verifier_ok=verifier_ok, log=log))):
        pred = build_method("prorefine_paper", SIG, verifier="llm")(question=Q)
    assert pred.stats["refined"] == refined and [r for r, _ in log][:2] == ["task", "verifier"]
    oracle = build_method("prorefine_paper", SIG, lm=ScriptedLM(responder()), verifier="oracle")
    assert oracle.uses_labels and get_method("prorefine_paper").uses_labels({"verifier": "oracle"})


def test_forward_and_aforward_make_the_same_calls():
    runs = []
    for run in (lambda m: m(question=Q), lambda m: asyncio.run(m.acall(question=Q))):
        lm = ScriptedLM(responder(task_words=35, rewrite=tagged))
        runs.append((run(build_method("prorefine_paper", SIG, lm=lm)), lm.calls))
    (sync, sync_calls), (async_, async_calls) = runs
    assert async_calls == sync_calls
    assert async_.trajectory == sync.trajectory and async_.refined_prompt == sync.refined_prompt


def test_per_role_lms_evaluate_and_best_of_n():
    task, fb, opt = (ScriptedLM(responder(task_words=35), model=n) for n in ("t", "f", "o"))
    m = build_method("prorefine_paper", SIG, role_lms={"task": task, "feedback": fb, "optimizer": opt})
    pred = m(question=Q)
    assert pred.usage["feedback"]["calls"] == pred.usage["optimizer"]["calls"] == pred.stats["steps_used"]
    assert {role_of(c["messages"]) for c in fb.calls} == {"feedback"}
    assert {role_of(c["messages"]) for c in opt.calls} == {"optimizer"}
    dev = [dspy.Example(question=Q, answer=36.0).with_inputs("question")] * 2
    assert dspy.Evaluate(devset=dev, metric=lambda e, p, t=None: p.answer == e.answer)(m).score == 100.0
    shared = build_method("prorefine_paper", SIG, lm=ScriptedLM(responder(task_words=35)))
    assert dspy.BestOfN(shared, N=2, reward_fn=lambda a, p: 1.0, threshold=1.0)(question=Q).answer == 36.0


def test_the_registry_entry_fixes_the_official_settings():
    spec = get_method("prorefine_paper")
    assert dict(spec.fixed) == {"prompts": "paper", "k": 10, "n": 25, "guard": False}
    assert spec.roles == ("task", "feedback", "optimizer", "verifier")
    assert {"verifier", "history", "task_module"} <= set(spec.defaults)
    m = build_method("prorefine_paper", SIG)
    assert (m.prompts, m.k, m.n, m.guard) == ("paper", 10, 25, False)
    assert [n for n, _ in m.named_predictors()] == ["task", "feedback", "optimizer", "verifier"]
    with pytest.raises(ConfigError, match="Unknown option `k`"):
        build_method("prorefine_paper", SIG, k=32)
    assert (build_method("prorefine", SIG).prompts, build_method("prorefine", SIG).guard) == ("project", True)


def test_bad_prompts_option():
    with pytest.raises(ConfigError, match="`prompts`"):
        ProRefine(SIG, prompts="official")


@pytest.mark.llm
def test_prorefine_paper_on_a_real_model():
    """Real local model (the 0.5B unless DSPY_FOR_TEST_MODEL says otherwise), every role on it, no verifier (the
    item refined): the official schedule and the end-of-sequence stop on a real server, read from the calls
    themselves. A short question, so the answer ends within a few steps (the schedule allows 25). The 0.5B's last
    output can be unreadable (it may loop to the cap): a run counts that as an unparsed answer, a score; the schedule
    is checked either way."""
    lm = make_lm(f"local/{os.environ.get('DSPY_FOR_TEST_MODEL', 'qwen2.5-coder-0.5b')}", max_tokens=400)
    program = build_method("prorefine_paper", SIG, lm=lm)
    with track_usage() as usage:
        try:
            pred = program(question=Q)
        except AdapterParseError:
            pred = None
    assert usage.calls and all(c.ok for c in usage.calls)
    steps, final = _steps_and_final_answer(usage.calls)
    assert 1 <= len(steps) <= 25
    task = [c for c, _, _ in steps]
    # step i generates 10·i tokens; every step but the last is cut by its cap, the last stops at end-of-sequence
    assert [c.completion_tokens for c in task[:-1]] == [10 * i for i in range(1, len(task))]
    assert all(c.finish_reason == "length" for c in task[:-1])
    assert task[-1].finish_reason == "stop" or len(task) == 25  # end-of-sequence, or the 250-token cap
    assert all(fb >= 1 and opt >= 1 for _, fb, opt in steps)  # each step critiqued and rewritten
    # the outputs with p*: the last step's reply served again (no call), or one call at full length (and the
    # adapter's JSON retry when that reply cannot be read)
    assert len(final) <= 2
    if pred is not None:
        trajectory = pred.trajectory
        assert [s["max_tokens"] for s in trajectory] == [10 * i for i in range(1, len(trajectory) + 1)]
        assert len(trajectory) == len(steps)
        assert trajectory[-1]["eos"] or len(trajectory) == 25
        assert isinstance(pred.answer, float) and pred.refined_prompt


def _steps_and_final_answer(calls):
    """The calls in order, read as Algorithm 1 makes them: each step is a task call followed by its feedback and
    optimizer calls (a role's call may be retried by the adapter); the task calls after the last step are the
    final answer's."""
    steps, final = [], []
    for call in calls:
        if call.role == "task":
            final.append(call)
        elif call.role in ("feedback", "optimizer"):
            if final:  # the task call(s) before this feedback were a step (one capped call each)
                assert len(final) == 1, [c.role for c in calls]
                steps.append([final.pop(), 0, 0])
            steps[-1][1 if call.role == "feedback" else 2] += 1
        else:
            raise AssertionError(f"unexpected role {call.role!r}")
    return [tuple(s) for s in steps], final
