"""What a matrix cell runs with (:class:`Ctx`: the server, the module, its layout's LMs), and what every cell asserts
of the server's log: every request was a role's call naming that role's model, or the entry point's own call
(:func:`check_routing`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import dspy
from dspy.utils.callback import BaseCallback
from matrix_cells import CONFIGURED, Layout, ModuleSpec, plain_lm, role_lms
from matrix_log import Call, Roles, disagreeing_key
from matrix_nested import CONTEXT_MODEL, OTHER, PREFIX, predictor_roles, wrap
from matrix_responder import MatrixResponder

from dspy_for.testing.server import OpenAICompatibleServer


@dataclass
class Ctx:
    """One cell: the server, the module and its layout's LMs (made once, as a user makes them)."""

    server: OpenAICompatibleServer
    responder: MatrixResponder
    spec: ModuleSpec
    layout: Layout
    tmp_path: Path
    #: models the entry point's own calls name (an optimizer's proposer, ``dspy.Refine``'s feedback)
    tools: set[str] = field(default_factory=set)
    #: requests before this index were made before the step that may be refused
    checkpoint: int = 0
    #: (first, end, model): the requests in [first, end) ran with ``model`` in force instead of the configured LM
    in_force: list[tuple[int, int, str]] = field(default_factory=list)
    lms: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.lms = role_lms(self.layout, self.server.base_url)

    @property
    def configured(self) -> str:
        """The model of the LM in force: the configured one, or the one ``dspy.context`` swaps in."""
        return CONTEXT_MODEL if self.layout.nest == "context" else CONFIGURED

    @property
    def prefix(self) -> str:
        """Where the module's predictors sit in the program (``solve.``; empty when it is the program)."""
        return PREFIX.get(self.layout.nest or "", "")

    def build(self, *, with_lms: bool = True) -> dspy.Module:
        """The program a user writes with the layout's LMs: the module, or the program around it."""
        lms = self.lms if with_lms else {}
        inner = self.spec.build({r: lm for r, lm in lms.items() if r in self.spec.roles})
        shared = next((lm for r, lm in lms.items() if r.startswith(OTHER)), None)
        self.responder.disagreeing = disagreeing_key(self.spec, inner)
        self.responder.sample_temperatures = self.spec.own_temperatures
        self.responder.request = self.server.current_request
        return wrap(self.layout.nest, inner, shared) if self.layout.nest else inner

    def lm(self, model: str, **kwargs: Any) -> dspy.LM:
        return plain_lm(self.server.base_url, model, **kwargs)

    @cached_property
    def roles(self) -> Roles:
        program = self.spec.build({})
        if self.layout.nest is None:
            return Roles(self.spec, program)
        program = wrap(self.layout.nest, program, None)
        return Roles(self.spec, program, predictor_roles(self.layout.nest, self.spec.predictors, program))

    def calls(self, start: int = 0) -> list[Call]:
        return self.roles.read(list(self.server.requests), start)

    def roles_ran(self, start: int = 0) -> set[str]:
        return {c.role for c in self.calls(start) if c.role}


def check_routing(ctx: Ctx) -> list[Call]:
    """Every request was a role's call naming that role's model (the configured one for a role without an LM), or
    one of the entry point's own calls naming its own LM."""
    calls = ctx.calls()
    for c in calls:
        if c.role is None:
            assert c.model in ctx.tools, (
                f"request {c.index} is no role's call of {ctx.spec.name} and names {c.model!r} (the entry point's own "
                f"calls may name {sorted(ctx.tools)}): {c.text[:300]!r}"
            )
        else:
            configured = next((m for first, end, m in ctx.in_force if first <= c.index < end), ctx.configured)
            want = ctx.layout.expected(c.role, configured)
            assert c.model == want, (
                f"{ctx.spec.name} [{ctx.layout.name}]: request {c.index}, a {c.role} call ({'/'.join(c.predictors)}), "
                f"named {c.model!r}; its LM is {want!r}"
            )
    return calls


def expected_roles(spec: ModuleSpec) -> set[str]:
    return {spec.predictors[p] for p in spec.always_called}


def assert_every_role_ran(ctx: Ctx, start: int = 0) -> None:
    assert expected_roles(ctx.spec) <= ctx.roles_ran(start), (ctx.spec.name, sorted(ctx.roles_ran(start)))


def answer(pred: Any) -> float:
    assert pred is not None, "no prediction"
    return float(pred.answer)


class LMCalls(BaseCallback):
    """Each LM call as the client made it: (role, model, rollout id), the role read from its messages."""

    def __init__(self, ctx: Ctx) -> None:
        self.roles = ctx.roles
        self.calls: list[tuple[str | None, str, Any]] = []

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        body = {"messages": inputs.get("messages") or [], "model": getattr(instance, "model", "")}
        (call,) = self.roles.read([body])
        rollout = (inputs.get("kwargs") or {}).get("rollout_id", getattr(instance, "kwargs", {}).get("rollout_id"))
        self.calls.append((call.role, call.model, rollout))

    def rollouts(self) -> dict[str, set[Any]]:
        """Each role's rollout ids."""
        out: dict[str, set[Any]] = {}
        for role, _, rollout in self.calls:
            if role:
                out.setdefault(role, set()).add(rollout)
        return out


@dataclass(frozen=True)
class EntryPoint:
    name: str
    title: str  # how the docs name it
    promise: str  # what the cell asserts besides routing
    run: Callable[[Ctx], None]
