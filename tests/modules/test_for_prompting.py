from __future__ import annotations

import asyncio
import re

import dspy
import pytest
from dspy.clients.cache import Cache

from dspy_for import track_usage
from dspy_for.errors import ConfigError
from dspy_for.experiments import build_method
from dspy_for.modules import FORPrompting
from dspy_for.testing import ScriptedLM, system_text, user_text

Q = "Tom has 3 boxes of 12 apples. How many apples?"


def role_of(messages):
    sys = system_text(messages)
    if "You are the Host" in sys:
        return "host"
    if "You are the Debater" in sys:
        return "debater"
    if "asked questions about your previous answer" in sys:
        return "revise"
    return "defender"


def make_responder(answers=(36, 36, 36, 36), questions=None, host_answer=36, log=None, named_errors=None):
    """Defender answers answers[r] in round r, naming an error whenever its answer changes (or always /
    never: ``named_errors=True/False``); Debater asks questions[r-1] (default: one good question)."""
    state = {"revise": 0, "debater": 0}

    def respond(messages, max_tokens):
        r = role_of(messages)
        if log is not None:
            log.append(r)
        if r == "defender":
            return {"reasoning": "3 * 12 = 36", "answer": str(answers[0])}
        if r == "debater":
            state["debater"] += 1
            qs = (
                questions[state["debater"] - 1]
                if questions
                else [f"How did you get {answers[0]} in step {state['debater']}?"]
            )
            return {"questions": qs}
        if r == "revise":
            state["revise"] += 1
            a = answers[min(state["revise"], len(answers) - 1)]
            changed = a != answers[min(state["revise"] - 1, len(answers) - 1)]
            error_found = changed if named_errors is None else named_errors
            return {
                "responses": ["I re-checked 3 * 12."],
                "error_found": str(error_found),
                "error": "step 1 was wrong" if error_found else "none",
                "reasoning": "3 * 12 = 36",
                "answer": str(a),
            }
        return {"reasoning": "weighing the rounds", "answer": str(host_answer)}

    return respond


def test_protocol_runs_n_rounds_and_returns_typed_outputs_and_trajectory():
    log = []
    lm = ScriptedLM(make_responder(log=log))
    dspy.configure(lm=lm)
    pred = FORPrompting("question -> answer: float", rounds=2)(question=Q)
    assert log == ["defender", "debater", "revise", "debater", "revise", "host"]
    assert pred.answer == 36.0 and isinstance(pred.answer, float)
    assert pred.rounds_used == 2 and pred.role_collapse == 0
    assert pred.answers_by_round == [{"answer": 36.0}] * 3
    kinds = [(t["role"], t["type"], t["round"]) for t in pred.trajectory]
    assert kinds == [
        ("defender", "answer", 0),
        ("debater", "questions", 1),
        ("defender", "revision", 1),
        ("debater", "questions", 2),
        ("defender", "revision", 2),
        ("host", "synthesis", 2),
    ]
    assert set(pred.usage) == {"defender", "debater", "host", "total"}
    assert pred.usage["defender"]["calls"] == 3 and pred.usage["total"]["calls"] == 6
    assert all("usage" in t for t in pred.trajectory)
    import json

    json.dumps(pred.trajectory)  # JSON-serialisable


def test_without_host_the_final_answer_is_a_n_and_defender_sees_questions():
    lm = ScriptedLM(make_responder(answers=(36, 30, 40), host_answer=99))
    dspy.configure(lm=lm)
    pred = FORPrompting("question -> answer: float", rounds=2, host=False)(question=Q)
    assert pred.answer == 40.0
    assert [a["answer"] for a in pred.answers_by_round] == [36.0, 30.0, 40.0]
    revise_prompts = [user_text(c["messages"]) for c in lm.calls if role_of(c["messages"]) == "revise"]
    assert "step 1" in revise_prompts[0] and "step 2" in revise_prompts[1]
    # round 2 carries the earlier question/response pair; the Defender never sees Host text
    assert "[round 1] Q:" in revise_prompts[1]
    assert not any("You are the Host" in user_text(c["messages"]) for c in lm.calls)


def test_guard_reasks_once_with_the_reason_then_drops_offenders_and_counts_collapse():
    questions = [["Shouldn't it be 48?", "Did you multiply 3 by 12?"], ["Use addition instead.", "Is 36 the total?"]]
    lm = ScriptedLM(make_responder(questions=questions))
    dspy.configure(lm=lm)
    with dspy.context(trace=[]):
        pred = FORPrompting("question -> answer: float", rounds=1, host=False)(question=Q)
        trace = list(dspy.settings.trace)
    debater_prompts = [user_text(c["messages"]) for c in lm.calls if role_of(c["messages"]) == "debater"]
    assert len(debater_prompts) == 2
    assert "proposes_answer" in debater_prompts[1]  # the re-ask names the reason
    assert pred.role_collapse == 2
    revision = next(t for t in pred.trajectory if t["type"] == "revision")
    assert revision["round"] == 1
    revise_prompt = next(user_text(c["messages"]) for c in lm.calls if role_of(c["messages"]) == "revise")
    assert "Is 36 the total?" in revise_prompt and "Use addition" not in revise_prompt
    # the rejected first attempt is not in the trace; the accepted retry is
    debater_traces = [t for t in trace if "questions" in t[2]]
    assert len(debater_traces) == 1 and debater_traces[0][2]["questions"] == questions[1]


def test_a_single_quoted_question_list_with_an_apostrophe_is_read_whole():
    raw = "['How many apples are in Tom's 3 boxes?', 'Did you multiply 3 by 12?']"  # not JSON: DSPy splits at "'"
    lm = ScriptedLM(make_responder(questions=[raw]))
    dspy.configure(lm=lm)
    pred = FORPrompting("question -> answer: float", rounds=1, host=False)(question=Q)
    assert sum(role_of(c["messages"]) == "debater" for c in lm.calls) == 1  # nothing broke the rules: no re-ask
    asked = next(t for t in pred.trajectory if t["type"] == "questions")["fields"]
    assert asked["questions"] == ["How many apples are in Tom's 3 boxes?", "Did you multiply 3 by 12?"]
    assert asked["violations"] == {} and pred.role_collapse == 0
    revise_prompt = next(user_text(c["messages"]) for c in lm.calls if role_of(c["messages"]) == "revise")
    assert "How many apples are in Tom's 3 boxes?" in revise_prompt


def test_guard_off_counts_but_keeps_violations():
    lm = ScriptedLM(make_responder(questions=[["Shouldn't it be 48?"]]))
    dspy.configure(lm=lm)
    pred = FORPrompting("question -> answer: float", rounds=1, host=False, guard=False)(question=Q)
    assert pred.role_collapse == 1
    revise_prompt = next(user_text(c["messages"]) for c in lm.calls if role_of(c["messages"]) == "revise")
    assert "Shouldn't it be 48?" in revise_prompt


@pytest.mark.parametrize(("stop", "expected_rounds"), [("no_questions", 0), ("fixed", 0)])
def test_no_questions(stop, expected_rounds):
    lm = ScriptedLM(make_responder(questions=[[], [], []]))
    dspy.configure(lm=lm)
    pred = FORPrompting("question -> answer: float", rounds=3, host=False, stop=stop)(question=Q)
    assert pred.rounds_used == expected_rounds
    n_debater = sum(role_of(c["messages"]) == "debater" for c in lm.calls)
    assert n_debater == (1 if stop == "no_questions" else 3)


def test_stable_stop_and_token_budget():
    lm = ScriptedLM(make_responder(answers=(36, 36, 36, 36)))
    dspy.configure(lm=lm)
    assert FORPrompting("question -> answer: float", rounds=3, host=False, stop="stable")(question=Q).rounds_used == 1
    lm2 = ScriptedLM(make_responder(answers=(36, 30, 36, 30)))
    dspy.configure(lm=lm2)
    pred = FORPrompting("question -> answer: float", rounds=3, host=False, stop="stable", patience=1)(question=Q)
    assert pred.rounds_used == 3
    pred = FORPrompting("question -> answer: float", rounds=3, host=False, token_budget=1)(question=Q)
    assert pred.rounds_used == 0


def test_round_prompts_do_not_depend_on_n_so_prefix_runs_cost_only_the_host(monkeypatch):
    monkeypatch.setattr(
        dspy,
        "cache",
        Cache(enable_disk_cache=False, enable_memory_cache=True, disk_cache_dir="", memory_max_entries=10_000),
    )
    lm = ScriptedLM(make_responder(), cache=True)
    dspy.configure(lm=lm)
    FORPrompting("question -> answer: float", rounds=3)(question=Q)
    assert len(lm.calls) == 8
    for n in (1, 2):
        before = len(lm.calls)
        with track_usage() as usage:
            pred = FORPrompting("question -> answer: float", rounds=n)(question=Q)
        new = [role_of(c["messages"]) for c in lm.calls[before:]]
        assert new == ["host"], (n, new)
        assert usage.total.cached_calls == 2 * n + 1 and pred.rounds_used == n


def test_an_answer_changed_without_a_named_error_is_kept_out_of_a_r():
    lm = ScriptedLM(make_responder(answers=(36, 30, 30), named_errors=False))
    dspy.configure(lm=lm)
    pred = FORPrompting("question -> answer: float", rounds=2, host=False)(question=Q)
    assert pred.answer == 36.0 and pred.answers_by_round == [{"answer": 36.0}] * 3
    revisions = [t for t in pred.trajectory if t["type"] == "revision"]
    assert [t["fields"]["kept_previous"] for t in revisions] == [True, True]
    assert revisions[0]["fields"]["answer"] == 30.0  # the raw revision stays on record
    # the next round's Defender and Debater see the kept answer, not the unjustified one
    debater_prompts = [user_text(m) for m in (c["messages"] for c in lm.calls) if role_of(m) == "debater"]
    assert "answer: 36.0" in debater_prompts[-1]

    lm2 = ScriptedLM(make_responder(answers=(36, 30, 30), named_errors=False))
    dspy.configure(lm=lm2)
    loose = FORPrompting("question -> answer: float", rounds=2, host=False, keep_unless_error=False)(question=Q)
    assert loose.answer == 30.0 and [a["answer"] for a in loose.answers_by_round] == [36.0, 30.0, 30.0]


def test_debater_is_told_which_task_numbers_the_work_never_used():
    lm = ScriptedLM(make_responder())
    dspy.configure(lm=lm)
    FORPrompting("question -> answer: float", rounds=1, host=False)(
        question="20 birds fly 50 miles, then 60 miles. How far did all the birds fly in total?"
    )
    debater = next(user_text(m) for m in (c["messages"] for c in lm.calls) if role_of(m) == "debater")
    unused = debater.split("[[ ## unused_numbers ## ]]")[1].split("[[ ##")[0]
    # the scripted Defender's work is "3 * 12 = 36": every task number is unused, in numeric order
    assert '["20", "50", "60"]' in unused.replace("\n", "")


def test_per_role_lms_get_only_their_role():
    d, q, h = (ScriptedLM(make_responder()) for _ in range(3))
    m = FORPrompting("question -> answer: float", rounds=1, defender_lm=d, debater_lm=q, host_lm=h)
    m(question=Q)
    assert {role_of(c["messages"]) for c in d.calls} == {"defender", "revise"}
    assert {role_of(c["messages"]) for c in q.calls} == {"debater"}
    assert {role_of(c["messages"]) for c in h.calls} == {"host"}
    assert [n for n, _ in m.named_predictors()] == ["defender", "revise", "debater", "host"]


def test_works_inside_refine_bestofn_parallel_and_evaluate_with_per_role_lms():
    d, q, h = (ScriptedLM(make_responder(), model=name) for name in ("d-model", "q-model", "h-model"))
    m = FORPrompting("question -> answer: float", rounds=1, defender_lm=d, debater_lm=q, host_lm=h)
    assert m.get_lm().lms == {"defender": d, "revise": d, "debater": q, "host": h}  # every role's LM, as one value
    refine = dspy.Refine(m, N=2, reward_fn=lambda args, pred: float(pred.answer == 36.0), threshold=1.0)
    best = dspy.BestOfN(m, N=2, reward_fn=lambda args, pred: 1.0, threshold=1.0)
    with track_usage() as usage:
        assert refine(question=Q).answer == 36.0
        assert best(question=Q).answer == 36.0
    # inside the wrappers every role still ran on (a rollout copy of) its own LM
    models = {(c.role, c.model) for c in usage.calls}
    assert models == {("defender", "d-model"), ("debater", "q-model"), ("host", "h-model")}
    outs = dspy.Parallel(num_threads=2)([(m, dspy.Example(question=Q).with_inputs("question"))] * 2)
    assert [o.answer for o in outs] == [36.0, 36.0]
    dev = [dspy.Example(question=Q, answer=36.0).with_inputs("question")] * 3
    result = dspy.Evaluate(devset=dev, metric=lambda e, p, t=None: p.answer == e.answer, num_threads=2)(m)
    assert result.score == 100.0


def test_bootstrap_fewshot_compiles_and_save_load_roundtrips(tmp_path):
    lm = ScriptedLM(make_responder())
    dspy.configure(lm=lm)
    train = [dspy.Example(question=Q, answer=36.0).with_inputs("question")] * 2
    student = FORPrompting("question -> answer: float", rounds=1)
    compiled = dspy.BootstrapFewShot(
        metric=lambda e, p, t=None: p.answer == e.answer, max_bootstrapped_demos=1, max_labeled_demos=0
    ).compile(student, trainset=train)
    assert all(len(p.demos) == 1 for _, p in compiled.named_predictors())
    assert all(len(p.demos) == 0 for _, p in student.named_predictors())
    path = tmp_path / "for.json"
    compiled.save(str(path))
    loaded = FORPrompting("question -> answer: float", rounds=1)
    loaded.load(str(path))
    assert [len(p.demos) for _, p in loaded.named_predictors()] == [1, 1, 1, 1]
    assert loaded(question=Q).answer == 36.0


def test_class_signature_and_aforward():
    class Math(dspy.Signature):
        """Solve the math word problem."""

        question: str = dspy.InputField()
        answer: float = dspy.OutputField()

    lm = ScriptedLM(make_responder())
    dspy.configure(lm=lm)
    pred = asyncio.run(FORPrompting(Math, rounds=1).acall(question=Q))
    assert pred.answer == 36.0 and pred.rounds_used == 1
    assert "Solve the math word problem." in system_text(lm.calls[0]["messages"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rounds": -1}, "`rounds`"),
        ({"stop": "never"}, "`stop`"),
        ({"patience": 0}, "`patience`"),
        ({"token_budget": 0}, "`token_budget`"),
        ({"debater_mode": "angry"}, "`debater_mode`"),
    ],
)
def test_bad_options_are_clear_errors(kwargs, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        FORPrompting("question -> answer", **kwargs)


def test_registered_method_builds_with_role_lms():
    d = ScriptedLM(make_responder())
    m = build_method(
        "for", "question -> answer: float", lm=d, role_lms={"host": ScriptedLM(make_responder())}, rounds=2, host=False
    )
    assert isinstance(m, FORPrompting) and m.rounds == 2 and m.defender.role_lm is d and m.host.role_lm is not d
    with pytest.raises(ConfigError, match="Unknown option `round`"):
        build_method("for", "question -> answer", round=2)
    with pytest.raises(ConfigError, match="no role `judge`"):
        build_method("for", "question -> answer", role_lms={"judge": d})


def test_repeated_questions_are_dropped_and_the_round_is_skipped():
    same = ["How did you get 36?"]
    lm = ScriptedLM(make_responder(questions=[same, same, same]))
    dspy.configure(lm=lm)
    pred = FORPrompting("question -> answer: float", rounds=3, host=False)(question=Q)
    assert pred.rounds_used == 1 and pred.role_collapse == 0
    later = [t for t in pred.trajectory if t["type"] == "questions" and t["round"] > 1]
    assert all(t["fields"]["repeats"] == same and t["fields"]["questions"] == [] for t in later)


def test_gepa_optimizes_the_role_predictors_under_their_stable_names(tmp_path):
    """GEPA sees `defender`, `revise`, `debater`, `host` and rewrites the one whose instruction matters."""
    import json

    def task_respond(messages, max_tokens):
        # the Defender answers right only once its instruction says GOOD; every other role is fine as is
        r = role_of(messages)
        if r == "defender":
            right = "GOOD" in system_text(messages)
            return {"reasoning": "3 * 12" if right else "3 + 12", "answer": "36" if right else "15"}
        if r == "revise":  # keeps its previous answer
            prev = re.search(r"previous_answer ## \]\][\s\S]*?answer: ([\d.]+)", user_text(messages)).group(1)
            return {
                "responses": ["checked"],
                "error_found": "False",
                "error": "none",
                "reasoning": "same",
                "answer": prev,
            }
        return make_responder()(messages, max_tokens)

    def reflect(messages, max_tokens):
        sys = system_text(messages)
        fields = re.findall(r"`(\w+)`", sys.split("Your output fields are:")[1].split("All interactions")[0])
        out = {f: "GOOD: solve it step by step." for f in fields}
        return json.dumps(out) if "JSON object" in sys else out

    task, reflection = ScriptedLM(task_respond), ScriptedLM(reflect)
    dspy.configure(lm=task)
    train = [dspy.Example(question=Q, answer=36.0).with_inputs("question")] * 3
    student = FORPrompting("question -> answer: float", rounds=1, host=False)
    before = {n: p.signature.instructions for n, p in student.named_predictors()}
    from dspy_for.optimizers import compile_program

    res = compile_program(
        "gepa",
        student,
        trainset=train,
        valset=train,
        optimizer_lm=reflection,
        metric=lambda e, p, t=None: float(p.answer == e.answer),
        max_metric_calls=30,
    )
    after = {n: p.signature.instructions for n, p in res.program.named_predictors()}
    assert set(after) == {"defender", "revise", "debater", "host"}
    assert "GOOD" in after["defender"]
    assert {n: p.signature.instructions for n, p in student.named_predictors()} == before  # not mutated
    assert res.program(question=Q).answer == 36.0 and student(question=Q).answer != 36.0
    assert res.usage["optimizer"]["calls"] == len(reflection.calls) > 0
    res.program.save(str(tmp_path / "gepa_for.json"))
    loaded = FORPrompting("question -> answer: float", rounds=1, host=False)
    loaded.load(str(tmp_path / "gepa_for.json"))
    assert loaded.defender.signature.instructions == after["defender"]


def _unreadable_in(roles, answers=(36, 36, 36)):
    """The role-scripted responder, except that the roles in ``roles`` answer with an expression where the
    signature wants a float (what the 1.5B Defender did on GSM8K val item 12)."""
    base = make_responder(answers=answers)

    def respond(messages, max_tokens):
        out = base(messages, max_tokens)
        if role_of(messages) in roles:
            out = {**out, "answer": "(3 + 2.5) / 2 * 60"}
        return out

    return respond


def test_unreadable_host_falls_back_to_a_n():
    dspy.configure(lm=ScriptedLM(_unreadable_in({"host"})))
    pred = FORPrompting("question -> answer: float", rounds=1)(question=Q)
    assert pred.answer == 36.0 and pred.unreadable_turns == 1 and pred.stats["unreadable_turns"] == 1.0
    host = pred.trajectory[-1]
    assert host["role"] == "host" and "parse_error" in host["fields"] and host["fields"]["answer"] == 36.0


def test_unreadable_revision_keeps_the_previous_answer_and_the_debate_goes_on():
    log = []
    base = _unreadable_in({"revise"})
    state = {"revise": 0}

    def respond(messages, max_tokens):  # only the first revision is unreadable
        log.append(role_of(messages))
        if role_of(messages) == "revise":
            state["revise"] += 1
            if state["revise"] > 2:  # the adapter's JSON retry of the first revision is call 2
                return make_responder(answers=(36, 40))(messages, max_tokens) | {"error_found": "True"}
        return base(messages, max_tokens)

    dspy.configure(lm=ScriptedLM(respond))
    pred = FORPrompting("question -> answer: float", rounds=2, host=False)(question=Q)
    assert pred.answers_by_round == [{"answer": 36.0}, {"answer": 36.0}, {"answer": 40.0}]
    assert pred.rounds_used == 2 and pred.unreadable_turns == 1 and pred.answer == 40.0
    first = next(t for t in pred.trajectory if t["type"] == "revision")
    assert "parse_error" in first["fields"] and first["fields"]["kept_previous"] is False
    assert log.count("debater") == 2  # the round-1 questions count as asked; round 2 asks anew


REVISION_WITH_INLINE_ANSWER = (  # the 1.5B's quickstart revision: `answer: 135.0` inside the reasoning
    '[[ ## responses ## ]]\n["I re-checked 3 * 12."]\n\n[[ ## error_found ## ]]\nFalse\n\n'
    "[[ ## error ## ]]\nnone\n\n[[ ## reasoning ## ]]\n1. **Boxes:** 3 * 12 = 36\nanswer: 36.0\n\n[[ ## completed ## ]]"
)


def test_a_revision_with_its_answer_as_a_plain_line_is_read_without_the_json_fallback():
    log = []
    base = make_responder(answers=(36, 36))

    def respond(messages, max_tokens):
        log.append(role_of(messages))
        return REVISION_WITH_INLINE_ANSWER if role_of(messages) == "revise" else base(messages, max_tokens)

    dspy.configure(lm=ScriptedLM(respond))
    pred = FORPrompting("question -> answer: float", rounds=1)(question=Q)
    revision = next(t for t in pred.trajectory if t["type"] == "revision")
    assert pred.unreadable_turns == 0 and "parse_error" not in revision["fields"]
    assert revision["fields"]["answer"] == 36.0 and revision["fields"]["reasoning"] == "1. **Boxes:** 3 * 12 = 36"
    assert log.count("revise") == 1  # no JSONAdapter retry (the retry that ran to max_tokens)


def test_a_configured_adapter_is_respected_for_later_turns():
    def respond(messages, max_tokens):
        return REVISION_WITH_INLINE_ANSWER if role_of(messages) == "revise" else make_responder()(messages, max_tokens)

    dspy.configure(lm=ScriptedLM(respond), adapter=dspy.ChatAdapter(use_json_adapter_fallback=False))
    try:
        pred = FORPrompting("question -> answer: float", rounds=1)(question=Q)
    finally:
        dspy.configure(adapter=None)
    assert pred.unreadable_turns == 1  # the user's adapter parses; no repair behind its back


def test_unreadable_first_answer_fails_the_item():
    from dspy.utils.exceptions import AdapterParseError

    dspy.configure(lm=ScriptedLM(_unreadable_in({"defender"})))
    with pytest.raises(AdapterParseError):
        FORPrompting("question -> answer: float", rounds=1)(question=Q)
    with pytest.raises(AdapterParseError):
        asyncio.run(FORPrompting("question -> answer: float", rounds=1).acall(question=Q))


def test_unreadable_turns_are_tolerated_by_aforward_too():
    dspy.configure(lm=ScriptedLM(_unreadable_in({"host"})))
    pred = asyncio.run(FORPrompting("question -> answer: float", rounds=1).acall(question=Q))
    assert pred.answer == 36.0 and pred.unreadable_turns == 1


def _run_both_ways(make_lm, **options):
    """The same FOR call run through forward and through aforward, each on a fresh scripted LM, with a trace."""
    runs = []
    for run in (lambda m: m(question=Q), lambda m: asyncio.run(m.acall(question=Q))):
        lm = make_lm()
        dspy.configure(lm=lm)
        with dspy.context(trace=[]):
            pred = run(FORPrompting("question -> answer: float", **options))
            trace = [(type(p).__name__, dict(inputs), dict(out)) for p, inputs, out in dspy.settings.trace]
        runs.append((pred, trace, [(c["messages"], c["max_tokens"]) for c in lm.calls]))
    return runs


@pytest.mark.parametrize(
    ("make_lm", "options"),
    [
        (lambda: ScriptedLM(make_responder(answers=(36, 30, 40))), {"rounds": 2}),
        (lambda: ScriptedLM(make_responder(answers=(36, 30, 30), named_errors=False)), {"rounds": 2, "host": False}),
        (
            lambda: ScriptedLM(
                make_responder(questions=[["Shouldn't it be 48?", "Did you multiply 3 by 12?"], ["Is 36 the total?"]])
            ),
            {"rounds": 1},
        ),
        (lambda: ScriptedLM(make_responder(questions=[[], [], []])), {"rounds": 3, "stop": "no_questions"}),
        (lambda: ScriptedLM(make_responder(answers=(36, 30, 30, 30))), {"rounds": 3, "stop": "stable"}),
        (lambda: ScriptedLM(_unreadable_in({"revise", "host"})), {"rounds": 2}),
    ],
    ids=["host", "kept_previous", "guard_reask", "no_questions", "stable", "unreadable"],
)
def test_forward_and_aforward_make_the_same_calls_and_trajectories(make_lm, options):
    (sync, sync_trace, sync_calls), (async_, async_trace, async_calls) = _run_both_ways(make_lm, **options)
    assert async_calls == sync_calls  # same calls, same order, same messages: the same cache entries
    assert async_.trajectory == sync.trajectory and async_.answers_by_round == sync.answers_by_round
    assert async_.stats == sync.stats and async_.answer == sync.answer
    assert async_trace == sync_trace  # a rejected Debater attempt stays out of both traces
    strip = lambda u: {r: {k: v for k, v in c.items() if k != "wall_time"} for r, c in u.items()}  # noqa: E731
    assert strip(async_.usage) == strip(sync.usage)


def test_trajectory_turns_have_the_typed_shape():
    from typing import get_type_hints

    from dspy_for.modules import ForTurn, QuestionsFields, RevisionFields, TurnUsage

    dspy.configure(lm=ScriptedLM(make_responder(questions=[["Shouldn't it be 48?"], ["Is 36 the total?"]] * 2)))
    pred = FORPrompting("question -> answer: float", rounds=2)(question=Q)
    for turn in pred.trajectory:
        assert set(turn) <= set(get_type_hints(ForTurn)) and set(turn["usage"]) == set(get_type_hints(TurnUsage))
        if turn["type"] == "questions":
            assert set(QuestionsFields.__required_keys__) <= set(turn["fields"]) <= set(get_type_hints(QuestionsFields))
        if turn["type"] == "revision":
            assert set(RevisionFields.__required_keys__) <= set(turn["fields"])
            assert list(turn["fields"]) == ["responses", "error_found", "error", "reasoning", "answer", "kept_previous"]
    assert [t["fields"]["attempt"] for t in pred.trajectory if t["type"] == "questions"][:2] == [0, 1]
