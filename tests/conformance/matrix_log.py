"""The test server's log read back as a module's role calls: a request's role is read from the input and output
fields its ChatAdapter / JSONAdapter system message lists (instructions change under optimizers, fields do not)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dspy
from matrix_cells import ModuleSpec

#: a field ``dspy.Refine`` adds to every predictor's signature on its later attempts
HINT_FIELD = "hint_"
Key = tuple[frozenset[str], frozenset[str]]
_FIELD = re.compile(r"^\s*\d+\.\s+`(?P<name>[^`]+)`(?:\s+\((?P<type>[^)]*)\))?", re.MULTILINE)


def system_text(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "system")


def typed_fields(messages: list[dict[str, Any]]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]] | None:
    """((name, type) of each input field, of each output field) the request's adapter system message lists, in
    order; None: not a DSPy adapter's request (e.g. a plain prompt)."""
    system = system_text(messages)
    start, mid = system.find("Your input fields are:"), system.find("Your output fields are:")
    if start < 0 or mid < 0:
        return None
    end = system.find("All interactions will be structured", mid)

    def section(text: str) -> list[tuple[str, str]]:
        return [(m["name"], (m["type"] or "").strip()) for m in _FIELD.finditer(text)]

    return section(system[start:mid]), section(system[mid : end if end > 0 else None])


def fields_of(messages: list[dict[str, Any]]) -> Key | None:
    """(input field names but ``dspy.Refine``'s hint, output field names) of a request; None: no adapter's."""
    typed = typed_fields(messages)
    if typed is None:
        return None
    inputs, outputs = typed
    return frozenset(n for n, _ in inputs) - {HINT_FIELD}, frozenset(n for n, _ in outputs)


def signature_key(signature: type[dspy.Signature]) -> Key:
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

    def __init__(self, spec: ModuleSpec, program: dspy.Module, roles: Mapping[str, str] | None = None) -> None:
        """``roles``: each predictor of ``program`` → its role (default: ``spec.predictors``, the module alone)."""
        self.spec = spec
        self.roles = dict(spec.predictors if roles is None else roles)
        self.by_key: dict[Key, list[str]] = {}
        for name, predictor in program.named_predictors():
            if name not in self.roles:
                raise AssertionError(f"{spec.name}: predictor {name!r} has no role in the matrix")
            self.by_key.setdefault(signature_key(predictor.signature), []).append(name)
        for key, names in self.by_key.items():
            if len({self.roles[n] for n in names}) > 1:
                raise AssertionError(f"{spec.name}: predictors {names} of different roles have the same fields {key}")

    def read(self, requests: list[dict[str, Any]], start: int = 0) -> list[Call]:
        calls = []
        for i, body in enumerate(requests[start:], start):
            key = fields_of(body.get("messages") or [])
            names = tuple(self.by_key.get(key, ())) if key else ()
            role = self.roles[names[0]] if names else None
            model = str(body.get("model") or "").removeprefix("openai/")
            calls.append(Call(i, model, role, names, body))
        return calls


def disagreeing_key(spec: ModuleSpec, program: dspy.Module) -> Key | None:
    if spec.disagreeing is None:
        return None
    return signature_key(dict(program.named_predictors())[spec.disagreeing].signature)
