"""A module with role LMs inside a user's own plain ``dspy.Module``: its roles keep their LMs whatever DSPy does to the
outer program (MIPROv2 with bootstrapped demos here; every compiler, wrapper and reload in the conformance matrix's
nested layouts), ``set_lm`` keeps DSPy's meaning, an LM error names the role, and MLflow's DSPy autolog names each
role's span after its module and role, with one adapter span per call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dspy
import pytest
from role_lm_helpers import LMCalls, RoleServer

from dspy_for.modules import FORPrompting, ProRefine, RolePredict
from dspy_for.modules.role_predict import lm_in_use, role_class

SIG = "question -> answer: float"
Q = "Tom has 3 boxes of 12 apples. How many apples?"
TRAIN = [dspy.Example(question=f"{Q} ({k})", answer=36.0).with_inputs("question") for k in range(3)]


class Pipeline(dspy.Module):
    """The issue's composite program: a plain ``dspy.Module`` of the user's, a ChainOfThought step, then FOR."""

    def __init__(self, debater: Any) -> None:
        super().__init__()
        self.plan = dspy.ChainOfThought("question -> plan")
        self.solve = FORPrompting("question, plan -> answer: float", rounds=1, debater_lm=debater)

    def forward(self, question: str) -> dspy.Prediction:
        return self.solve(question=question, plan=self.plan(question=question).plan)


def _metric(gold: dspy.Example, pred: Any, trace: Any = None) -> bool:
    return True


def test_mipro_with_bootstrapped_demos_keeps_the_debater_on_its_lm_while_compiling_and_after() -> None:
    with RoleServer() as server:
        dspy.configure(lm=server.lm("cfg"))
        optimizer = dspy.MIPROv2(
            _metric, auto=None, num_candidates=2, max_bootstrapped_demos=1, max_labeled_demos=0, num_threads=1
        )
        student = Pipeline(server.lm("deb"))
        compiled = optimizer.compile(
            student,
            trainset=TRAIN[:2],
            valset=TRAIN[2:],
            num_trials=2,
            minibatch=False,
            program_aware_proposer=False,
            data_aware_proposer=False,
            tip_aware_proposer=False,
        )
        assert server.models_by_role()["debater"] == {"deb"}  # the demos' and the trials' Debater calls
        server.requests.clear()
        compiled(question=Q)
        assert server.models_by_role()["debater"] == {"deb"} and {"cfg"} == server.models_by_role()["host"]
        assert compiled.solve.debater.role_lm.model == "openai/deb" and compiled.solve.debater.lm is None


def test_set_lm_keeps_dspys_meaning_through_a_reset_and_set_lm_none_gives_each_role_its_own_lm_back() -> None:
    with RoleServer() as server:
        dspy.configure(lm=server.lm("cfg"))
        program, other = Pipeline(server.lm("deb")), server.lm("other")
        program.set_lm(other)  # every predictor on it, the Debater too: what DSPy's set_lm says
        program(question=Q)
        assert {m for ms in server.models_by_role().values() for m in ms} == {"other"}
        assert lm_in_use(program.solve.debater) is other and program.solve.debater.role_lm.model == "openai/deb"
        server.requests.clear()
        program.reset_copy()(question=Q)  # a reset empties what set_lm put on DSPy's own predictors ...
        assert server.models_by_role()["debater"] == {"other"}  # ... and on a role predictor keeps it (routing)
        server.requests.clear()
        program.set_lm(None)  # every role back on its own LM, the rest on the LM in force
        program(question=Q)
        assert server.models_by_role()["debater"] == {"deb"} and server.models_by_role()["host"] == {"cfg"}
        server.requests.clear()
        with dspy.context(lm=other):  # the other behaviour: an LM for every predictor without one of its own
            Pipeline(server.lm("deb"))(question=Q)
        assert server.models_by_role()["debater"] == {"deb"} and server.models_by_role()["host"] == {"other"}


def test_best_of_n_over_the_users_program_varies_each_roles_own_lm() -> None:
    with RoleServer() as server:
        calls = LMCalls()
        dspy.configure(lm=server.lm("cfg"), callbacks=[calls])
        dspy.BestOfN(Pipeline(server.lm("deb")), N=2, reward_fn=lambda args, pred: 0.0, threshold=1.0)(question=Q)
        assert server.models_by_role()["debater"] == {"deb"}
        assert calls.variations() == {"cfg": {(0, 1.0), (1, 1.0)}, "deb": {(0, 1.0), (1, 1.0)}}


@pytest.mark.parametrize("form", ["json", "pkl", "program"])
def test_the_users_program_saved_and_loaded_keeps_a_spec_role(tmp_path: Path, form: str) -> None:
    with RoleServer() as server:
        lm = server.lm("cfg")
        dspy.configure(lm=lm)
        spec = f"openai/deb-{form}"
        program = Pipeline(spec)
        path = tmp_path / {"json": "p.json", "pkl": "p.pkl", "program": "p"}[form]
        program.save(str(path), save_program=form == "program")
        if form == "program":
            loaded = dspy.load(str(path), allow_pickle=True)
        else:
            loaded = Pipeline(None)
            loaded.load(str(path), allow_pickle=form == "pkl")
        assert loaded.solve.debater.role_lm.model == spec and loaded.solve.defender.role_lm is None


def test_an_lm_error_inside_a_role_names_the_module_the_role_and_the_model() -> None:
    from dspy.utils.exceptions import LMServerError

    with RoleServer() as server:
        dspy.configure(lm=server.lm("shared"))
        program = ProRefine(SIG, k=5, n=1, feedback_lm=server.lm("shared"))
        server.set_fault("500", times=None)
        with pytest.raises(LMServerError) as raised:  # the same error, its class kept
            program(question=Q)
        assert "ProRefine.task" in str(raised.value) and "openai/shared" in str(raised.value)
        debate = FORPrompting(SIG, rounds=1, debater_lm=server.lm("deb"))
        server.set_fault(None)
        server.set_fault("500", times=None)
        with pytest.raises(LMServerError, match=r"FORPrompting\.defender: \[openai/shared\]"):
            debate(question=Q)


def test_role_classes_are_named_after_module_and_role_and_pickle_by_reference() -> None:
    import cloudpickle

    program = FORPrompting(SIG)
    assert [type(p).__name__ for p in program.predictors()] == [
        "FORPrompting.defender",
        "FORPrompting.defender.revise",
        "FORPrompting.debater",
        "FORPrompting.host",
    ]
    assert all(isinstance(p, RolePredict) for p in program.predictors())
    assert role_class("FORPrompting.debater") is type(program.debater)
    again = cloudpickle.loads(cloudpickle.dumps(program.debater))
    assert type(again) is type(program.debater)


def test_mlflow_autolog_names_each_roles_span_and_keeps_one_adapter_span_per_call(tmp_path: Path) -> None:
    import mlflow
    import mlflow.dspy

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow.set_experiment("nested-roles")  # this store's own (another test's active experiment is not in it)
    mlflow.dspy.autolog(log_traces=True)
    try:
        with RoleServer() as server:
            dspy.configure(lm=server.lm("cfg"))
            FORPrompting(SIG, rounds=1, debater_lm=server.lm("deb"))(question=Q)
        trace = mlflow.get_trace(mlflow.get_last_active_trace_id(), flush=True)
    finally:
        mlflow.dspy.autolog(disable=True)
        dspy.settings.configure(callbacks=[])
    spans = trace.data.spans
    names = [s.name for s in spans]
    for role in ("FORPrompting.defender", "FORPrompting.debater", "FORPrompting.defender.revise", "FORPrompting.host"):
        assert f"{role}.forward" in names, names
    by_id = {s.span_id: s for s in spans}
    formats = [s for s in spans if s.name.endswith(".format")]
    assert len(formats) == 4  # one per LM call: none nested in another
    assert not any(by_id[s.parent_id].name.endswith(".format") for s in formats if s.parent_id in by_id)
    parses = [s for s in spans if s.name.endswith(".parse")]
    assert not any(by_id[s.parent_id].name.endswith(".parse") for s in parses if s.parent_id in by_id)
