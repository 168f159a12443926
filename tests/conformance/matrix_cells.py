"""The DSPy conformance matrix's modules and role-LM layouts, and the items every cell asks.

* :data:`MODULES`: every registered module with roles, built as a user builds it (its constructor, the registry's
  fixed options for the papers' versions, small settings).
* :func:`layouts`: the role-LM layouts of a module: ``none`` (every role on the configured LM), ``one``, ``several``,
  ``all`` (all distinct), ``same`` (every role given the same LM object), ``spec`` (every role given as a spec
  string), and the nested ones (:mod:`matrix_nested`: the module where users put it, its ``one`` role's LM given).
  Every LM is a plain ``dspy.LM`` naming its own model (``m-<role>``; the configured one ``m-configured``).

Which role a request was is read from the log by :mod:`matrix_log`; the server answers with :mod:`matrix_responder`;
the entry points are in :mod:`matrix_entries` and :mod:`matrix_compilers`, run with a :mod:`matrix_context`; the
cells and the docs table in :mod:`matrix_design`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import dspy
from matrix_nested import NEST_TITLES, OTHER, other_module

from dspy_for.experiments.methods import get_method
from dspy_for.modules import Cascade, FORPrompting, ProRefine, SelfConsistency

SIG = "question -> answer: float"
#: the API key of every plain LM; a spec string's LM reads :data:`SPEC_KEY` from the environment (make_lm takes none)
API_KEY = "sk-matrix-0123456789abcdef"
SPEC_KEY = "sk-matrix-spec-0123456789abcdef"
#: the model the configured LM names (``dspy.configure(lm=...)``)
CONFIGURED = "m-configured"
#: what an optimizer's proposed instruction carries; with ``MatrixResponder.tuned`` only a call whose instructions
#: carry it answers right, so an optimizer that keeps a proposal measurably improves the program
MARKER = "(tuned)"
TUNED_INSTRUCTION = f"Solve the problem step by step and check every multiplication {MARKER}."
UNTUNED_INSTRUCTION = "Solve the problem step by step and check every multiplication."


def question(k: int) -> str:
    """Item k's question; its answer is :func:`answer_of` (36 + k)."""
    return f"Tom has 3 boxes of 12 apples and {k} more apples. How many apples does he have?"


def answer_of(k: int) -> float:
    return 36.0 + k


def example(k: int) -> dspy.Example:
    return dspy.Example(question=question(k), answer=answer_of(k)).with_inputs("question")


def model_name(role: str) -> str:
    return f"m-{role}"


# --------------------------------------------------------------------------------------------- modules


@dataclass(frozen=True)
class ModuleSpec:
    """One module of the matrix, built as a user builds it."""

    name: str  # the registry's method name
    title: str  # how the docs name it
    cls: type[dspy.Module]
    #: role -> the constructor parameter that takes its LM (None: the module's own LM, set with ``set_lm``)
    roles: Mapping[str, str | None]
    #: predictor name -> role
    predictors: Mapping[str, str]
    #: the roles that answer the task (``dspy.Refine``'s hint must reach them)
    answering: tuple[str, ...]
    #: the predictor whose output is the final answer (what ``streamify`` streams)
    final: str
    #: predictors that run on every item with the matrix's responder (bootstrapped demos must reach them)
    always_called: tuple[str, ...]
    options: Mapping[str, Any] = field(default_factory=dict)
    #: the one role of the ``one`` layout and the two of ``several``
    one: str = ""
    several: tuple[str, ...] = ()
    #: this predictor's samples disagree (a cascade's debate runs only then)
    disagreeing: str | None = None
    #: its calls are recorded under their role's name by ``dspy_for.track_usage`` (else under the default role)
    records_roles: bool = True

    @property
    def own_temperatures(self) -> frozenset[float]:
        """The temperature the module sets on its own calls (a sampler's), kept under ``dspy.BestOfN`` and
        ``dspy.Refine``."""
        return frozenset({self.options["temperature"]}) if "temperature" in self.options else frozenset()

    def build(self, lms: Mapping[str, Any]) -> dspy.Module:
        """The module with ``lms`` (role -> LM object or spec string) given as a user gives them."""
        entry = get_method(self.name)
        kwargs = {self.roles[r]: lm for r, lm in lms.items() if self.roles[r]}
        program = self.cls(SIG, **{**entry.fixed, **self.options}, **kwargs)
        for r, lm in lms.items():
            if self.roles[r] is None:
                program.set_lm(lm)
        return program


_FOR_ROLES = {"defender": "defender_lm", "debater": "debater_lm", "host": "host_lm"}
_FOR_PREDICTORS = {"defender": "defender", "revise": "defender", "debater": "debater", "host": "host"}
_PR_ROLES = {"task": "task_lm", "feedback": "feedback_lm", "optimizer": "optimizer_lm", "verifier": "verifier_lm"}
_PR_PREDICTORS = {"task": "task", "feedback": "feedback", "optimizer": "optimizer", "verifier": "verifier"}


def _for(name: str, title: str) -> ModuleSpec:
    return ModuleSpec(
        name,
        title,
        FORPrompting,
        _FOR_ROLES,
        _FOR_PREDICTORS,
        answering=("defender", "host"),
        final="host",
        always_called=("defender", "revise", "debater", "host"),
        options={"rounds": 1},
        one="debater",
        several=("defender", "host"),
    )


def _prorefine(name: str, title: str) -> ModuleSpec:
    # verifier="llm": every role runs (the verifier judges the first answer wrong, so refinement follows)
    return ModuleSpec(
        name,
        title,
        ProRefine,
        _PR_ROLES,
        _PR_PREDICTORS,
        answering=("task",),
        final="task",
        always_called=("task", "feedback", "optimizer", "verifier"),
        options={"k": 12, "n": 2, "verifier": "llm"},
        one="task",
        several=("feedback", "verifier"),
    )


MODULES: dict[str, ModuleSpec] = {
    m.name: m
    for m in (
        _for("for", "FORPrompting"),
        _for("for_paper", "FORPrompting, the paper's version (`for_paper`)"),
        ModuleSpec(
            "cascade",
            "Cascade",
            Cascade,
            _FOR_ROLES,
            {
                "samples.defender": "defender",
                **{f"debate.{p}": r for p, r in _FOR_PREDICTORS.items()},
            },
            answering=("defender", "host"),
            final="debate.host",
            always_called=("samples.defender", "debate.defender", "debate.revise", "debate.debater", "debate.host"),
            options={"first_samples": 2, "max_samples": 2, "rounds": 1, "temperature": 0.7},
            one="debater",
            several=("defender", "host"),
            disagreeing="samples.defender",
        ),
        _prorefine("prorefine", "ProRefine"),
        _prorefine("prorefine_paper", "ProRefine, the official version (`prorefine_paper`)"),
        ModuleSpec(
            "defender_sc",
            "SelfConsistency over FOR's Defender prompt (`defender_sc`)",
            SelfConsistency,
            {"task": None},
            {"defender": "task"},
            answering=("task",),
            final="defender",
            always_called=("defender",),
            options={"k": 2, "temperature": 0.7},
            one="task",
            records_roles=False,
        ),
    )
}


# --------------------------------------------------------------------------------------------- layouts


@dataclass(frozen=True)
class Layout:
    """Which roles get an LM of their own: role -> the model it names (a role not here runs on the configured LM);
    ``shared``: one LM object for all of them; ``spec``: given as spec strings (``openai/<model>``)."""

    name: str
    models: Mapping[str, str]
    shared: bool = False
    spec: bool = False
    #: where the module sits (:mod:`matrix_nested`); None: it is the outermost program
    nest: str | None = None

    def expected(self, role: str, configured: str = CONFIGURED) -> str:
        """The model ``role``'s calls name: its own LM's, else the one in force (``configured``)."""
        return self.models.get(role, configured)


#: the layouts' names, in the docs' column order, with what each means
LAYOUT_TITLES = {
    "none": "no role LM (every role on the configured LM)",
    "one": "one role's LM given",
    "several": "two roles' LMs given",
    "all": "every role its own LM",
    "same": "every role given the same LM object",
    "spec": "every role's LM given as a spec string",
    **{n: f"{t}; the `one` role's LM given" for n, t in NEST_TITLES.items()},
}


def layouts(module: ModuleSpec) -> dict[str, Layout]:
    """The layouts that differ for ``module`` (a module with one role has only ``none`` and ``one``)."""
    roles = list(module.roles)
    out = {"none": Layout("none", {}), "one": Layout("one", {module.one: model_name(module.one)})}
    if len(roles) > 1:
        out["several"] = Layout("several", {r: model_name(r) for r in module.several})
        out["all"] = Layout("all", {r: model_name(r) for r in roles})
        out["same"] = Layout("same", dict.fromkeys(roles, model_name("shared")), shared=True)
        out["spec"] = Layout("spec", {r: model_name(r) for r in roles}, spec=True)
    for nest in NEST_TITLES:  # where users put the module, its `one` role on its own LM
        if nest == "two_modules":
            other = OTHER + other_module(module.cls.__name__, None)[1]
            out[nest] = Layout(nest, dict.fromkeys((module.one, other), model_name("shared")), shared=True, nest=nest)
        else:
            out[nest] = Layout(nest, {module.one: model_name(module.one)}, nest=nest)
    return out


def plain_lm(base_url: str, model: str, **kwargs: Any) -> dspy.LM:
    """A plain ``dspy.LM`` on the test server naming ``model`` (no cache: every call reaches the server)."""
    options: dict[str, Any] = {"cache": False, "num_retries": 0, "timeout": 10, **kwargs}
    return dspy.LM(f"openai/{model}", api_base=base_url, api_key=API_KEY, **options)


def role_lms(layout: Layout, base_url: str) -> dict[str, Any]:
    """The LMs a user passes for ``layout``: objects (one shared object for ``same``) or spec strings."""
    if layout.spec:
        return {r: f"openai/{m}" for r, m in layout.models.items()}
    shared: dict[str, dspy.LM] = {}
    return {r: shared.setdefault(m if layout.shared else r, plain_lm(base_url, m)) for r, m in layout.models.items()}
