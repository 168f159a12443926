"""What DSPy reads of a role predictor, and what its errors say: the source of every role predictor's class is found
(``inspect.getsource``, so DSPy's ``get_dspy_source_code`` — MIPROv2's program-aware proposer — reads FOR-Prompting,
ProRefine and a user's program containing them whole), while its class keeps its span name and pickles; after a load
that could not give a role its LM, ``program.set_lm(lm)`` with the configured LM works as the error says, wrappers
too; and a role's errors name its attribute path in the user's program, so two modules' roles are told apart."""

from __future__ import annotations

import copy
import inspect
from pathlib import Path

import cloudpickle
import dspy
import pytest
from dspy.propose.utils import get_dspy_source_code
from role_lm_helpers import RoleServer

from dspy_for.errors import ConfigError
from dspy_for.modules import FORPrompting, ProRefine, RolePredict
from dspy_for.modules.role_predict import role_class

SIG = "question -> answer: float"
Q = "Tom has 3 boxes of 12 apples. How many apples?"


class Solver(dspy.Module):
    """A user's program with two debates: their roles have the same classes, told apart by their paths."""

    def __init__(self, first_debater=None, second_debater=None) -> None:
        super().__init__()
        self.first = FORPrompting(SIG, rounds=1, debater_lm=first_debater)
        self.second = FORPrompting(SIG, rounds=1, debater_lm=second_debater)

    def forward(self, question: str) -> dspy.Prediction:
        self.first(question=question)
        return self.second(question=question)


class Outer(dspy.Module):
    def __init__(self, **lms) -> None:
        super().__init__()
        self.solver = Solver(**lms)

    def forward(self, question: str) -> dspy.Prediction:
        return self.solver(question=question)


@pytest.mark.parametrize(
    ("build", "classes"),
    [
        (lambda: FORPrompting(SIG), ["class FORPrompting("]),
        (lambda: ProRefine(SIG), ["class ProRefine("]),
        (lambda: Outer(), ["class Outer(", "class Solver(", "class FORPrompting("]),
    ],
    ids=["for", "prorefine", "user-program"],
)
def test_dspy_reads_the_programs_source_through_its_role_predictors(build, classes) -> None:
    program = build()
    for _, predictor in program.named_predictors():
        assert "class " in inspect.getsource(type(predictor))
    code = get_dspy_source_code(program)  # raised OSError on the role predictors' classes
    for cls in classes:
        assert cls in code


def test_a_role_class_keeps_its_span_name_and_pickles_as_itself() -> None:
    program = FORPrompting(SIG, rounds=1)
    debater = program.debater
    assert type(debater).__name__ == "FORPrompting.debater" and isinstance(debater, RolePredict)
    assert role_class("FORPrompting.debater") is type(debater)
    again = cloudpickle.loads(cloudpickle.dumps(program))  # as `save_program=True` and MLflow's models pickle
    assert type(again.debater) is type(debater) and again.debater.signature.equals(debater.signature)
    assert type(copy.copy(debater)) is type(debater)


def test_a_pickle_that_names_a_role_class_by_its_old_name_still_loads() -> None:
    from dspy_for.modules import role_predict

    old = role_predict.RolePredict__FORPrompting__debater  # how pickles written before named the class
    assert old is role_class("FORPrompting.debater")


def _saved_without_lms(tmp_path: Path, server: RoleServer) -> dspy.Module:
    path = tmp_path / "p.json"
    FORPrompting(SIG, rounds=1, debater_lm=server.lm("deb"), host_lm=server.lm("hst")).save(str(path))
    bare = FORPrompting(SIG, rounds=1)
    bare.load(str(path))
    return bare


def test_set_lm_with_the_configured_lm_after_a_load_works_as_the_error_says(tmp_path: Path) -> None:
    with RoleServer() as server:
        configured = server.lm("cfg")
        dspy.configure(lm=configured)
        bare = _saved_without_lms(tmp_path, server)
        with pytest.raises(ConfigError, match=r"program\.set_lm\(lm\)"):
            bare(question=Q)
        assert server.requests == []
        bare.set_lm(configured)  # what the error says
        bare(question=Q)
        assert {m for ms in server.models_by_role().values() for m in ms} == {"cfg"}
        server.requests.clear()
        dspy.BestOfN(bare, N=2, reward_fn=lambda args, pred: 1.0, threshold=1.0)(question=Q)  # a wrapper too
        assert {m for ms in server.models_by_role().values() for m in ms} == {"cfg"}


def test_a_wrapper_alone_does_not_stand_in_for_an_lm_a_load_could_not_give_back(tmp_path: Path) -> None:
    with RoleServer() as server:
        dspy.configure(lm=server.lm("cfg"))
        bare = _saved_without_lms(tmp_path, server)
        attempt = bare.deepcopy()  # what dspy.BestOfN and dspy.Refine do for each attempt
        attempt.set_lm(dspy.settings.lm.copy(rollout_id=1, temperature=1.0))
        with pytest.raises(ConfigError, match="give it again"):
            attempt(question=Q)
        assert [c for c in server.calls() if c["role"] in ("debater", "host")] == []


def test_role_errors_name_the_attribute_path_in_the_users_program() -> None:
    with RoleServer() as server:
        dspy.configure(lm=server.lm("cfg"))
        program = Outer(first_debater=server.lm("ok"), second_debater=server.lm("broken", timeout=1))
        original = server.responder

        def failing(messages, max_tokens):
            request = server.current_request() or {}
            if request.get("model") == "broken":
                raise RuntimeError("the broken endpoint")
            return original(messages, max_tokens)

        server.responder = failing
        with pytest.raises(Exception) as raised:
            program(question=Q)
    text = str(raised.value)
    assert "solver.second.debater" in text and "FORPrompting.debater" in text
    assert "solver.first" not in text


def test_a_loaded_roles_refusal_names_its_attribute_path(tmp_path: Path) -> None:
    with RoleServer() as server:
        dspy.configure(lm=server.lm("cfg"))
        path = tmp_path / "p.json"
        Outer(second_debater=server.lm("deb")).save(str(path))
        bare = Outer()
        bare.load(str(path))
        with pytest.raises(ConfigError, match=r"`solver\.second\.debater`.*`program\.solver\.second\.debater\.role_lm"):
            bare(question=Q)  # the first debate ran on the configured LM; the second is refused before its calls
        assert {c["model"] for c in server.calls()} == {"cfg"} and len(server.requests) == 4
