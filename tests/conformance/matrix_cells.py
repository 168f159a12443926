"""The DSPy conformance matrix: which modules, role-LM layouts and DSPy entry points it crosses, and how a request in
the test server's log is read back as one role's call.

* :data:`MODULES`: every registered module with roles, built as a user builds it (its constructor, the registry's
  fixed options for the papers' versions, small settings).
* :func:`layouts`: the role-LM layouts of a module: ``none`` (every role on the configured LM), ``one``, ``several``,
  ``all`` (all distinct), ``same`` (every role given the same LM object), ``spec`` (every role given as a spec
  string). Every LM is a plain ``dspy.LM`` naming its own model (``m-<role>``; the configured one ``m-configured``).
* :class:`Roles`: which role a request was, from the input and output fields its ChatAdapter / JSONAdapter system
  message lists (instructions change under optimizers, fields do not).
* :class:`MatrixResponder`: answers every role's signature (and the optimizers' own prompts) on the server.

The entry points are in :mod:`matrix_entries` and :mod:`matrix_compilers`; the cells and the docs table in
:mod:`matrix_design`.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import dspy

from dspy_for.experiments.methods import get_method
from dspy_for.modules import Cascade, FORPrompting, ProRefine, SelfConsistency

SIG = "question -> answer: float"
#: the model the configured LM names (``dspy.configure(lm=...)``)
CONFIGURED = "m-configured"
#: what an optimizer's proposed instruction carries; with ``MatrixResponder.tuned`` only a call whose instructions
#: carry it answers right, so an optimizer that keeps a proposal measurably improves the program
MARKER = "(tuned)"
TUNED_INSTRUCTION = f"Solve the problem step by step and check every multiplication {MARKER}."
UNTUNED_INSTRUCTION = "Solve the problem step by step and check every multiplication."
_ITEM = re.compile(r"and (\d+) more apples")


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
}


def layouts(module: ModuleSpec) -> dict[str, Layout]:
    """The layouts that differ for ``module`` (a module with one role has only ``none`` and ``one``)."""
    roles = list(module.roles)
    out = {"none": Layout("none", {}), "one": Layout("one", {module.one: model_name(module.one)})}
    if len(roles) == 1:
        return out
    out["several"] = Layout("several", {r: model_name(r) for r in module.several})
    out["all"] = Layout("all", {r: model_name(r) for r in roles})
    out["same"] = Layout("same", dict.fromkeys(roles, model_name("shared")), shared=True)
    out["spec"] = Layout("spec", {r: model_name(r) for r in roles}, spec=True)
    return out


def plain_lm(base_url: str, model: str, **kwargs: Any) -> dspy.LM:
    """A plain ``dspy.LM`` on the test server naming ``model`` (no cache: every call reaches the server)."""
    options: dict[str, Any] = {"cache": False, "num_retries": 0, "timeout": 10, **kwargs}
    return dspy.LM(f"openai/{model}", api_base=base_url, api_key="sk-matrix", **options)


def role_lms(layout: Layout, base_url: str) -> dict[str, Any]:
    """The LMs a user passes for ``layout``: objects (one shared object for ``same``) or spec strings."""
    if layout.spec:
        return {r: f"openai/{m}" for r, m in layout.models.items()}
    shared: dict[str, dspy.LM] = {}
    return {r: shared.setdefault(m if layout.shared else r, plain_lm(base_url, m)) for r, m in layout.models.items()}


# --------------------------------------------------------------------------------------------- reading the log

_FIELD = re.compile(r"^\s*\d+\.\s+`(?P<name>[^`]+)`", re.MULTILINE)
#: a field ``dspy.Refine`` adds to every predictor's signature on its later attempts
HINT_FIELD = "hint_"


def _system(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "system")


def fields_of(messages: list[dict[str, Any]]) -> tuple[frozenset[str], frozenset[str]] | None:
    """(input field names, output field names) the request's adapter system message lists; None: not a DSPy
    adapter request (e.g. GEPA's own reflection prompt)."""
    system = _system(messages)
    start, mid = system.find("Your input fields are:"), system.find("Your output fields are:")
    if start < 0 or mid < 0:
        return None
    end = system.find("All interactions will be structured", mid)
    inputs = {m["name"] for m in _FIELD.finditer(system[start:mid])} - {HINT_FIELD}
    outputs = {m["name"] for m in _FIELD.finditer(system[mid : end if end > 0 else None])}
    return frozenset(inputs), frozenset(outputs)


def signature_key(signature: type[dspy.Signature]) -> tuple[frozenset[str], frozenset[str]]:
    return frozenset(signature.input_fields) - {HINT_FIELD}, frozenset(signature.output_fields)


@dataclass(frozen=True)
class Call:
    """One request of the server's log, read back: which predictors it may have been (None: not a role's call)."""

    index: int
    model: str
    role: str | None
    predictors: tuple[str, ...]
    body: dict[str, Any]

    @property
    def text(self) -> str:
        return "\n".join(str(m.get("content") or "") for m in self.body.get("messages") or [])


class Roles:
    """Reads the test server's requests back as calls of ``module``'s roles."""

    def __init__(self, spec: ModuleSpec, program: dspy.Module) -> None:
        self.spec = spec
        self.by_key: dict[tuple[frozenset[str], frozenset[str]], list[str]] = {}
        for name, predictor in program.named_predictors():
            if name not in spec.predictors:
                raise AssertionError(f"{spec.name}: predictor {name!r} has no role in the matrix")
            self.by_key.setdefault(signature_key(predictor.signature), []).append(name)
        for key, names in self.by_key.items():
            if len({spec.predictors[n] for n in names}) > 1:
                raise AssertionError(f"{spec.name}: predictors {names} of different roles have the same fields {key}")

    def read(self, requests: list[dict[str, Any]], start: int = 0) -> list[Call]:
        calls = []
        for i, body in enumerate(requests[start:], start):
            key = fields_of(body.get("messages") or [])
            names = tuple(self.by_key.get(key, ())) if key else ()
            role = self.spec.predictors[names[0]] if names else None
            model = str(body.get("model") or "").removeprefix("openai/")
            calls.append(Call(i, model, role, names, body))
        return calls


# --------------------------------------------------------------------------------------------- the responder


class MatrixResponder:
    """Answers every role's signature the way a cooperative model would, by the output fields asked for:
    numbers get item k's answer (36 + k, read from the question), booleans ``False`` (feedback and verifier find
    fault, so refinement runs), question lists one new question without values, ``advice`` one hint per module
    named, instructions :data:`TUNED_INSTRUCTION`; a JSONAdapter's request gets JSON, and a request that is no DSPy
    adapter's a fenced instruction.

    ``tuned``: a numeric answer is right only when its own instructions carry :data:`MARKER`. ``disagreeing``: the
    fields of a sampler whose samples (its calls at one of ``sample_temperatures``, read from the request the server
    is answering) answer right and wrong in turn for each prompt, so two samples disagree (a cascade's debate then
    runs; runs that sample the same prompt at once would interleave, so the matrix runs none).
    """

    def __init__(self) -> None:
        self.tuned = False
        self.disagreeing: tuple[frozenset[str], frozenset[str]] | None = None
        self.sample_temperatures: frozenset[float] = frozenset()
        self.request: Callable[[], dict[str, Any] | None] = lambda: None
        self._asked = itertools.count(1)
        self._sampled: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any] | str:
        key = fields_of(messages)
        if key is None:
            return f"```\n{TUNED_INSTRUCTION}\n```"
        last_user = next((str(m.get("content") or "") for m in reversed(messages) if m.get("role") == "user"), "")
        found = _ITEM.search(last_user)
        right = answer_of(int(found.group(1))) if found else 36.0
        if self.tuned and MARKER not in _system(messages):
            right -= 1
        if key == self.disagreeing and (self.request() or {}).get("temperature") in self.sample_temperatures:
            right += self._sample_number(messages) % 2  # samples 0, 2, ... right; 1, 3, ... wrong
        out = {name: self._value(name, type_.lower(), right, messages) for name, type_ in _output_types(messages)}
        if "Outputs will be a JSON object" in _system(messages):  # a JSONAdapter's request (GEPA's reflection)
            return json.dumps(out)
        return {
            k: v if isinstance(v, str) else json.dumps(v) if isinstance(v, list | dict) else str(v)
            for k, v in out.items()
        }

    def _sample_number(self, messages: list[dict[str, Any]]) -> int:
        prompt = json.dumps(messages, sort_keys=True)
        with self._lock:
            n = self._sampled[prompt] = self._sampled.get(prompt, -1) + 1
            return n

    def _value(self, name: str, type_: str, right: float, messages: list[dict[str, Any]]) -> Any:
        if name == "reasoning":
            return f"3 * 12 = 36 apples in the boxes, then add the rest: {right:g} in all."
        if type_ in ("float", "int"):
            return right
        if type_ == "bool":
            return False
        if type_.startswith("list"):
            return [f"How did you get your total from the boxes (question {next(self._asked)})?"]
        if type_.startswith("dict"):
            return {n: f"hint for {n}: check each multiplication." for n in _module_names(messages)}
        if "instruction" in name:
            return TUNED_INSTRUCTION
        if "prompt" in name:  # ProRefine's optimizer keeps a tuned prompt tuned, and tunes no other
            last_user = next((str(m.get("content") or "") for m in reversed(messages) if m.get("role") == "user"), "")
            return TUNED_INSTRUCTION if MARKER in last_user else UNTUNED_INSTRUCTION
        if name == "answer":  # a Host or Defender whose answer is written out, the number in the text
            return f"He has {right:g} apples."
        return "Check the multiplication of the boxes once more."


_TYPED_FIELD = re.compile(r"^\s*\d+\.\s+`(?P<name>[^`]+)`\s+\((?P<type>[^)]*)\)", re.MULTILINE)


def _output_types(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    system = _system(messages)
    mid = system.find("Your output fields are:")
    end = system.find("All interactions will be structured", mid)
    return [(m["name"], m["type"].strip()) for m in _TYPED_FIELD.finditer(system[mid : end if end > 0 else None])]


def _module_names(messages: list[dict[str, Any]]) -> list[str]:
    """The ``module_names`` input of ``dspy.Refine``'s / SIMBA's feedback request (a JSON list)."""
    for m in messages:
        found = re.search(r"\[\[ ## module_names ## \]\]\s*(\[[^\]]*\])", str(m.get("content") or ""))
        if found:
            try:
                return [str(n) for n in json.loads(found.group(1))]
            except ValueError:
                return []
    return []


def disagreeing_key(spec: ModuleSpec, program: dspy.Module) -> tuple[frozenset[str], frozenset[str]] | None:
    if spec.disagreeing is None:
        return None
    return signature_key(dict(program.named_predictors())[spec.disagreeing].signature)


Check = Callable[[], None]
