"""Role LMs kept wherever DSPy takes a module: dspy.BestOfN / dspy.Refine (each role on a varied copy of its own LM,
Refine's hint reaching every role), compilers (routing kept, ProRefine's task demos), and a role LM set as one value.

Every module with roles × every layout of role LMs, with plain ``dspy.LM``s against the local test server: which
model each role's requests named is read from the server's request log (roles told apart by their signature's
fields), the rollout id and temperature of the LM each call ran on from a DSPy callback."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dspy
import pytest
from dspy.teleprompt.simba_utils import prepare_models_for_resampling
from role_lm_helpers import HINTS, LMCalls, RoleServer

from dspy_for.errors import ConfigError
from dspy_for.modules import Cascade, FORPrompting, PerRoleLMs, ProRefine, RoleLMSet, SelfConsistency
from dspy_for.modules.role_predict import lm_in_use

SIG = "question -> answer: float"
Q = "Tom has 3 boxes of 12 apples. How many apples?"
TRAIN = [dspy.Example(question=Q, answer=36.0).with_inputs("question")]

FOR_ROLES = {"answer": "defender", "revise": "defender", "debater": "debater", "host": "host"}
PROREFINE_ROLES = {"answer": "task", "feedback": "feedback", "optimizer": "optimizer", "verifier": "verifier"}


def _for(**lms: Any) -> FORPrompting:
    return FORPrompting(SIG, rounds=1, **{f"{r}_lm": lm for r, lm in lms.items()})


def _for_paper(**lms: Any) -> FORPrompting:
    return FORPrompting(SIG, rounds=1, prompts="paper", keep_unless_error=False, guard=False, **_kw(lms))


def _prorefine(**lms: Any) -> ProRefine:
    return ProRefine(SIG, k=5, n=2, verifier="llm", **_kw(lms))


def _prorefine_paper(**lms: Any) -> ProRefine:
    return ProRefine(SIG, k=5, n=2, verifier="llm", prompts="paper", guard=False, **_kw(lms))


def _cascade(**lms: Any) -> Cascade:  # two samples that disagree (the server alternates answers): the debate runs
    return Cascade(SIG, first_samples=2, max_samples=2, rounds=1, **_kw(lms))


def _defender_sc(**lms: Any) -> SelfConsistency:
    m = SelfConsistency(SIG, k=2, prompt="defender")
    if "task" in lms:
        m.set_lm(lms["task"])
    return m


def _kw(lms: dict[str, Any]) -> dict[str, Any]:
    return {f"{r}_lm": lm for r, lm in lms.items()}


#: module → (builder, its roles, server role → module role, whether every call is varied as the wrapper varies it)
MODULES: dict[str, tuple[Callable[..., PerRoleLMs], tuple[str, ...], dict[str, str], bool]] = {
    "for": (_for, ("defender", "debater", "host"), FOR_ROLES, True),
    "for_paper": (_for_paper, ("defender", "debater", "host"), FOR_ROLES, True),
    "prorefine": (_prorefine, ("task", "feedback", "optimizer", "verifier"), PROREFINE_ROLES, True),
    "prorefine_paper": (_prorefine_paper, ("task", "feedback", "optimizer", "verifier"), PROREFINE_ROLES, True),
    "cascade": (_cascade, ("defender", "debater", "host"), FOR_ROLES, False),  # samples: their own rollouts
    "defender_sc": (_defender_sc, ("task",), {"answer": "task"}, False),
}
LAYOUTS = ("none", "one", "several", "all", "same")


def layout(server: RoleServer, roles: tuple[str, ...], name: str) -> dict[str, dspy.LM]:
    """Role LMs of a layout, each a plain dspy.LM whose requests name the role (``same``: one LM, ``shared``)."""
    picked = {"none": (), "one": roles[-1:], "several": (roles[0], roles[-1]), "all": roles, "same": roles}[name]
    if name == "same":
        shared = server.lm("shared")
        return {r: shared for r in picked}
    return {r: server.lm(f"lm-{r}") for r in picked}


def _cases() -> list[Any]:
    out = []
    for module, (_, roles, _, _) in MODULES.items():
        for name in LAYOUTS:
            if len(roles) == 1 and name in ("several", "all", "same"):
                continue  # one role: none or one
            out.append(pytest.param(module, name, id=f"{module}-{name}"))
    return out


def expected_models(lms: dict[str, dspy.LM], roles: tuple[str, ...]) -> dict[str, str]:
    return {r: lms[r].model.split("/", 1)[1] if r in lms else "cfg" for r in roles}


def assert_routed(server: RoleServer, server_roles: dict[str, str], want: dict[str, str]) -> None:
    """Every request named its role's model (dspy.Refine's own advice call: the configured LM), and every role ran;
    an optimizer's own calls (model ``optimizer-own``) aside."""
    seen = {role: models - {"optimizer-own"} for role, models in server.models_by_role().items()}
    seen = {role: models for role, models in seen.items() if models}
    assert seen.pop("advice", {"cfg"}) == {"cfg"}
    routed = {role: {want[server_roles[role]]} for role in seen}
    assert seen == routed, f"requests by role: {seen}"
    assert {server_roles[r] for r in seen} == set(want)


@pytest.mark.parametrize("wrapper", ["best_of_n", "refine"])
@pytest.mark.parametrize(("module", "layout_name"), _cases())
def test_best_of_n_and_refine_vary_each_roles_own_lm(module: str, layout_name: str, wrapper: str) -> None:
    build, roles, server_roles, varied = MODULES[module]
    with RoleServer(answers=("36", "30")) as server:
        calls = LMCalls()
        dspy.configure(lm=server.lm("cfg"), callbacks=[calls])
        lms = layout(server, roles, layout_name)
        program = build(**lms)
        wrap = dspy.BestOfN if wrapper == "best_of_n" else dspy.Refine
        wrap(program, N=2, reward_fn=lambda args, pred: 0.0, threshold=1.0)(question=Q)  # both attempts run
        want = expected_models(lms, roles)
        assert_routed(server, server_roles, want)
        if varied:  # each role's own LM, copied with rollout ids 0, 1 at temperature 1.0, as DSPy varies one LM
            variations = calls.variations()
            for model in set(want.values()):
                assert variations[model] - {(None, None)} == {(0, 1.0), (1, 1.0)}
            assert {c["temperature"] for c in server.calls() if c["role"] != "advice"} == {1.0}


@pytest.mark.parametrize("module", ["for", "for_paper", "prorefine", "prorefine_paper", "cascade"])
def test_refines_hint_reaches_every_role_that_answers_the_task(module: str) -> None:
    build, roles, _, _ = MODULES[module]
    with RoleServer(answers=("36", "30")) as server:
        dspy.configure(lm=server.lm("cfg"))
        program = build(**layout(server, roles, "all"))
        dspy.Refine(program, N=2, reward_fn=lambda args, pred: 0.0, threshold=1.0)(question=Q)
        calls = server.calls()
        retry = calls[next(i for i, c in enumerate(calls) if c["role"] == "advice") + 1 :]
        by_role: dict[str, list[str]] = {}
        for c in retry:
            by_role.setdefault(c["role"], []).append(str(c["messages"]))
    hinted = {r: all("HINT-FOR-" in text for text in texts) for r, texts in by_role.items()}
    assert hinted == dict.fromkeys(by_role, True)
    if module.startswith("prorefine"):  # the capped steps and the final answer: the task predictor's own hint
        assert len(by_role["answer"]) >= 3 and all(HINTS["task"] in t for t in by_role["answer"])
    elif module.startswith("for"):
        assert all(HINTS["host"] in t for t in by_role["host"]) and all(HINTS["revise"] in t for t in by_role["revise"])


def test_a_role_lm_set_copies_every_role_and_is_no_lm() -> None:
    with RoleServer() as server:
        shared, debater = server.lm("shared"), server.lm("deb")
        m = FORPrompting(SIG, defender_lm=shared, host_lm=shared, debater_lm=debater)
        lm_set = m.get_lm()
        assert isinstance(lm_set, RoleLMSet) and lm_set.lms["defender"] is shared and lm_set.lms["debater"] is debater
        copied = lm_set.copy(rollout_id=3, temperature=1.0)
        assert copied.lms["defender"] is copied.lms["host"] is copied.lms["revise"]  # one LM stays one LM
        assert copied.lms["debater"].kwargs["rollout_id"] == 3 and copied.lms["defender"].model == "openai/shared"
        with pytest.raises(ConfigError, match=r"cannot answer a call.*set_lm"):
            lm_set(messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(ConfigError, match="same shape"):
            ProRefine(SIG).set_lm(lm_set)
        assert server.requests == []
        m.set_lm(debater)  # a plain LM: every role on it, as dspy.Module.set_lm
        assert {p.lm for p in m.predictors()} == {debater} and m.get_lm() is debater
    assert FORPrompting(SIG).get_lm() is None  # no role LM: DSPy's answer (the wrappers use the configured LM)


def test_simbas_resampling_models_route_every_role() -> None:
    """SIMBA varies a program's LM with `prepare_models_for_resampling` (its first model: the program's own, with
    `kwargs["rollout_id"]` set in place) and puts each on a candidate with `set_lm`."""
    with RoleServer() as server:
        dspy.configure(lm=server.lm("cfg"))
        m = ProRefine(SIG, k=5, n=1, task_lm=server.lm("t"), optimizer_lm=server.lm("o"))
        for rollout, model in enumerate(prepare_models_for_resampling(m, 3)):
            candidate = m.deepcopy()
            candidate.set_lm(model)
            routed = {name: lm_in_use(p) for name, p in candidate.named_predictors()}
            lms = {name: (lm.model, lm.kwargs.get("rollout_id")) for name, lm in routed.items()}
            assert lms["task"] == ("openai/t", rollout) and lms["optimizer"] == ("openai/o", rollout)
            assert lms["feedback"] == lms["verifier"] == ("openai/cfg", rollout)
        assert m.task.role_lm.kwargs.get("rollout_id") is None  # the student's own LMs are not changed


def compilers(server: RoleServer) -> dict[str, Callable[[PerRoleLMs], PerRoleLMs]]:
    def metric(example: Any, pred: Any, *rest: Any) -> float:  # GEPA passes trace, pred_name, pred_trace
        return float(pred.answer == example.answer)

    train = TRAIN * 2
    four = [dspy.Example(question=f"{Q} ({i})", answer=36.0).with_inputs("question") for i in range(4)]
    return {
        "bootstrap": lambda s: dspy.BootstrapFewShot(
            metric=metric, max_bootstrapped_demos=1, max_labeled_demos=0
        ).compile(s, trainset=train),
        "bootstrap_labeled": lambda s: dspy.BootstrapFewShot(metric=metric, max_bootstrapped_demos=1).compile(
            s, trainset=train
        ),
        "labeled": lambda s: dspy.LabeledFewShot(k=1).compile(s, trainset=train),
        "random_search": lambda s: dspy.BootstrapFewShotWithRandomSearch(
            metric=metric, max_bootstrapped_demos=1, max_labeled_demos=1, num_candidate_programs=1, num_threads=1
        ).compile(s, trainset=train, valset=train),
        "knn": lambda s: dspy.KNNFewShot(
            k=1,
            trainset=train,
            vectorizer=dspy.Embedder(lambda texts: [[float(len(t)), 1.0] for t in texts]),
            metric=metric,
            max_bootstrapped_demos=1,
        ).compile(s),
        "mipro": lambda s: dspy.MIPROv2(
            metric=metric,
            auto=None,
            num_candidates=2,
            num_threads=1,
            max_bootstrapped_demos=1,
            max_labeled_demos=1,
            prompt_model=server.lm("optimizer-own"),
        ).compile(s, trainset=four, num_trials=2, minibatch=False),
        "gepa": lambda s: dspy.GEPA(
            metric=metric, max_metric_calls=8, reflection_lm=server.lm("optimizer-own")
        ).compile(s, trainset=four[:2], valset=four[2:]),
        "simba": lambda s: dspy.SIMBA(metric=metric, bsize=2, num_candidates=2, max_steps=1, num_threads=1).compile(
            s, trainset=four
        ),
    }


@pytest.mark.parametrize(
    "kind", ["bootstrap", "bootstrap_labeled", "labeled", "random_search", "knn", "mipro", "gepa", "simba"]
)
@pytest.mark.parametrize(("module", "layout_name"), [("for", "one"), ("prorefine", "several"), ("cascade", "same")])
def test_compiled_programs_route_every_role_as_the_student_did(module: str, layout_name: str, kind: str) -> None:
    build, roles, server_roles, _ = MODULES[module]
    with RoleServer(answers=("36", "30") if module == "cascade" else ("36",)) as server:
        dspy.configure(lm=server.lm("cfg"))
        lms = layout(server, roles, layout_name)
        student = build(**lms)
        compiled = compilers(server)[kind](student)
        want = expected_models(lms, roles)
        if kind in ("labeled", "knn"):
            assert server.requests == []  # labels' demos; KNNFewShot bootstraps at each call
        else:  # the teacher bootstrapped demos on every role's own LM
            assert_routed(server, server_roles, want)
        server.requests.clear()
        compiled(question=Q)
        assert_routed(server, server_roles, want)
    assert [p.role_lm for p in student.predictors()] == [lms.get(r) for r in _predictor_roles(student, module)]


def _predictor_roles(program: PerRoleLMs, module: str) -> list[str]:
    params = {param: role for role, param in ((r, f"{r}_lm") for r in MODULES[module][1])}
    return [params[program.lm_parameters[name]] for name, _ in program.named_predictors()]


def test_bootstrap_few_shot_gives_prorefines_task_its_demos_and_the_capped_steps_show_them() -> None:
    with RoleServer(task_words=30) as server:  # every step is cut: the final answer is the full-length call
        dspy.configure(lm=server.lm("cfg"))
        student = ProRefine(SIG, k=5, n=2, task_lm=server.lm("t"))
        compiled = dspy.BootstrapFewShot(
            metric=lambda e, p, t=None: p.answer == e.answer, max_bootstrapped_demos=1, max_labeled_demos=0
        ).compile(student, trainset=TRAIN * 2)
        demos = {name: len(p.demos) for name, p in compiled.named_predictors()}
        assert demos == {"task": 1, "feedback": 1, "optimizer": 1, "verifier": 0}  # the verifier never ran
        demo = compiled.task.demos[0]
        assert demo.question == Q and demo.answer == 36.0 and demo.reasoning.endswith("ok")  # the whole answer
        server.requests.clear()
        compiled(question="Ann has 4 bags of 5 pears. How many pears?")
        task_calls = [c for c in server.calls() if c["role"] == "answer"]
        assert [c["max_tokens"] for c in task_calls[:2]] == [5, 10]  # the capped steps, then the final answer
        assert all(Q in str(c["messages"][1:-1]) for c in task_calls)  # the demo: a user/assistant pair before it


class _Pipeline(PerRoleLMs):
    """A user's program: FOR as one stage, then a plain predictor of its own."""

    def __init__(self, debater_lm: Any) -> None:
        super().__init__()
        self.solve = FORPrompting(SIG, rounds=1, debater_lm=debater_lm)
        self.check = dspy.Predict("question, answer -> verdict: bool")

    def forward(self, question: str) -> dspy.Prediction:
        answer = self.solve(question=question).answer
        return self.check(question=question, answer=str(answer))


class _PlainPipeline(dspy.Module):
    def __init__(self, debater: Any) -> None:
        super().__init__()
        self.solve = FORPrompting(SIG, rounds=1, debater_lm=debater)
        self.check = dspy.Predict("question, answer -> verdict: bool")

    def forward(self, question: str) -> dspy.Prediction:
        answer = self.solve(question=question).answer
        return self.check(question=question, answer=str(answer))


def test_a_users_program_derived_from_per_role_lms_keeps_the_roles_of_the_modules_it_contains() -> None:
    with RoleServer() as server:
        calls = LMCalls()
        dspy.configure(lm=server.lm("cfg"), callbacks=[calls])
        program = _Pipeline(server.lm("deb"))
        dspy.BestOfN(program, N=2, reward_fn=lambda args, pred: 0.0, threshold=1.0)(question=Q)
        assert server.models_by_role() == {
            "answer": {"cfg"},  # FOR's Defender, and the program's own `check` (its output: `verdict`)
            "debater": {"deb"},
            "revise": {"cfg"},
            "host": {"cfg"},
        }
        assert calls.variations() == {"cfg": {(0, 1.0), (1, 1.0)}, "deb": {(0, 1.0), (1, 1.0)}}
        plain = _PlainPipeline(server.lm("deb"))  # the same program on a plain dspy.Module: the same routing
        assert plain.get_lm() is None  # DSPy's get_lm sees no role LM: the wrappers vary the configured LM ...
        server.requests.clear()
        calls.seen.clear()
        dspy.BestOfN(plain, N=2, reward_fn=lambda args, pred: 0.0, threshold=1.0)(question=Q)
        assert server.models_by_role() == {"answer": {"cfg"}, "debater": {"deb"}, "revise": {"cfg"}, "host": {"cfg"}}
        # ... and each role applies the variation to its own LM
        assert calls.variations() == {"cfg": {(0, 1.0), (1, 1.0)}, "deb": {(0, 1.0), (1, 1.0)}}


def test_prorefines_initial_prompt_is_the_task_predictors_instruction_so_instruction_optimizers_tune_it() -> None:
    with RoleServer(task_words=30) as server:
        dspy.configure(lm=server.lm("cfg"))
        program = ProRefine(SIG, k=5, n=1)
        program.task.signature = program.task.signature.with_instructions("Tuned: count every box (tuned).")
        pred = program(question=Q)
        first_step = next(c for c in server.calls() if c["role"] == "answer")
    assert "Tuned: count every box (tuned)." in str(first_step["messages"][0]) and first_step["max_tokens"] == 5
    assert pred.trajectory[0]["prompt"] == "Tuned: count every box (tuned)."
