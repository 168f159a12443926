"""What FOR-Prompting and ProRefine record, typed once, and how their algorithms run sync or async.

A method's ``prediction.trajectory`` is a list of plain JSON dicts (committed results files store them):

* FOR-Prompting: one :class:`ForTurn` per turn, in order: the Defender's first answer (``"answer"``,
  round 0), then per round the Debater's questions (``"questions"``; a second turn with ``attempt`` 1
  when the guard re-asked) and the Defender's revision (``"revision"``), and last the Host's synthesis
  (``"synthesis"``, numbered with the rounds used). Each turn's ``fields`` depends on its ``type``: see
  :data:`AnswerFields`, :class:`QuestionsFields`, :class:`RevisionFields`, :data:`SynthesisFields`.
* ProRefine: one :class:`ProRefineStep` per refinement step.

How a trajectory reads outside its module — the turn behind each LM call, what ``dspy-for ask`` shows, a run's
diagnostics — is a :class:`TrajectoryView` (:mod:`.for_view`, :mod:`.prorefine_view`), declared once per module in
the method registry (``dspy_for.experiments.methods``).

Each algorithm is written once, as a coroutine over :class:`Calls`: ``forward`` runs it with
:data:`SYNC_CALLS` through :func:`run_sync` (plain ``predictor(**kwargs)`` calls), ``aforward`` awaits it
with :data:`ASYNC_CALLS` (``await predictor.acall(**kwargs)``). A call whose answer the algorithm may set aside
(the guard's re-asked Debater, ProRefine's refined initial answer) runs in a :func:`private_trace`, and enters DSPy's
trace (:func:`publish`) only when its answer is kept.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, TypeAlias, TypedDict, TypeVar

import dspy

from dspy_for.jsonwalk import jsonable
from dspy_for.lm.usage import CallRecord, Usage

__all__ = [
    "ANSWER",
    "ASYNC_CALLS",
    "DEBATER",
    "DEFENDER",
    "HOST",
    "QUESTIONS",
    "REVISION",
    "SYNC_CALLS",
    "SYNTHESIS",
    "AnswerFields",
    "CallName",
    "Calls",
    "ForRole",
    "ForTurn",
    "ForTurnType",
    "ProRefineStep",
    "QuestionsFields",
    "RevisionFields",
    "Shown",
    "SynthesisFields",
    "TrajectoryView",
    "TurnUsage",
    "attach_turn_usage",
    "field_lines",
    "for_turn",
    "private_trace",
    "publish",
    "run_sync",
]

# ------------------------------------------------------------------------------------ FOR-Prompting

ForRole = Literal["defender", "debater", "host"]
ForTurnType = Literal["answer", "questions", "revision", "synthesis"]

DEFENDER: Final = "defender"
DEBATER: Final = "debater"
HOST: Final = "host"

ANSWER: Final = "answer"
QUESTIONS: Final = "questions"
REVISION: Final = "revision"
SYNTHESIS: Final = "synthesis"

#: ``"answer"`` turn (the Defender's A0): ``reasoning``, then the task signature's output fields.
AnswerFields: TypeAlias = dict[str, Any]
#: ``"synthesis"`` turn (the Host's A*): ``reasoning`` and the output fields; when the Host's reply was
#: unreadable, the output fields of A_N and ``parse_error`` instead.
SynthesisFields: TypeAlias = dict[str, Any]


# (optional keys through ``total=False`` subclasses: with postponed annotations, ``NotRequired[...]`` is not
# seen at runtime, and ``__required_keys__`` should be right for code that checks records)


class _QuestionsRequired(TypedDict):
    questions: list[str]  # the new items asked (repeats of earlier questions removed)
    attempt: int  # 0, or 1 for the guard's re-ask


class QuestionsFields(_QuestionsRequired, total=False):
    """``"questions"`` turn: one Debater attempt. An unreadable reply has ``parse_error`` (and no
    ``violations`` or ``repeats``)."""

    violations: dict[str, list[str]]  # item -> the questions-only rules it broke
    repeats: list[str]  # items that repeated an earlier question
    parse_error: str


class _RevisionRequired(TypedDict):
    responses: list[str]  # one reply per question
    error_found: bool  # the Defender named a concrete error
    kept_previous: bool  # keep_unless_error: the answer changed without a named error, so A_r = A_{r-1}


class RevisionFields(_RevisionRequired, total=False):
    """``"revision"`` turn: the Defender's reply to round r's questions.

    In order: ``responses``, ``error_found``, ``error``, ``reasoning`` and the task signature's output fields
    (the raw revision, even when ``kept_previous`` set it aside), ``kept_previous``. When the reply was
    unreadable: ``responses`` (empty), ``error_found`` (false), ``parse_error``, ``kept_previous`` (false).
    """

    error: str
    parse_error: str


class TurnUsage(TypedDict):
    """The LM call behind a turn (the role's next call in order)."""

    prompt_tokens: int
    completion_tokens: int
    cache_hit: bool


class _ForTurnRequired(TypedDict):
    role: ForRole
    type: ForTurnType
    round: int
    fields: dict[str, Any]


class ForTurn(_ForTurnRequired, total=False):
    """One FOR-Prompting turn; ``fields`` has the shape its ``type`` names (see the module docstring)."""

    usage: TurnUsage  # the role's next LM call in order; absent when the role made no call for it


def for_turn(role: ForRole, kind: ForTurnType, rnd: int, fields: Mapping[str, Any]) -> ForTurn:
    """A FOR turn whose fields are JSON-serialisable (values JSON cannot hold become strings)."""
    return {"role": role, "type": kind, "round": rnd, "fields": jsonable(fields)}


def attach_turn_usage(trajectory: list[ForTurn], usage: Usage) -> None:
    """Per-turn usage from the ordered call records (one LM call per turn unless an adapter retried)."""
    by_role: dict[str, list[CallRecord]] = {}
    for c in usage.calls:
        by_role.setdefault(c.role, []).append(c)
    for turn in trajectory:
        queue = by_role.get(turn["role"], [])
        if queue:
            c = queue.pop(0)
            turn["usage"] = TurnUsage(
                prompt_tokens=c.prompt_tokens, completion_tokens=c.completion_tokens, cache_hit=c.cache_hit
            )


# ------------------------------------------------------------------------------------------ ProRefine


class ProRefineStep(TypedDict):
    """One ProRefine step i: the task LM's output at ≤ i·k tokens, its feedback, the optimizer's rewrite."""

    step: int
    prompt: str  # the task prompt p* the step ran with
    max_tokens: int  # i·k
    output: str  # the (partial) task output o_i
    finish_reason: str | None
    completion_tokens: int
    eos: bool  # o_i ended with end-of-sequence (the last step)
    feedback: str
    is_correct: bool  # the feedback role found nothing wrong so far
    new_prompt: str  # p* after the step (== prompt when the rewrite was rejected)
    rejected_prompt: str | None  # the optimizer's rewrite the guard rejected, if any
    rejected_reason: str | None  # why (see ``rejection_reason``)


# ----------------------------------------------------------------------- how a trajectory reads outside

#: a call's name and the attributes its turn adds (``dspy_for.turn``, ``dspy_for.round``, ``dspy_for.parsed``, ...)
CallName: TypeAlias = tuple[str, dict[str, Any]]
#: one part of what ``ask`` shows: (a panel's title, its text), or (None, a line); the text may hold rich markup
Shown: TypeAlias = tuple[str | None, str]


@dataclass(frozen=True)
class TrajectoryView:
    """How a module's ``prediction.trajectory`` reads outside the module.

    * ``call_names(trajectory, calls)``: the name (and turn attributes) of each of an item's LM calls, in order —
      or None when the calls do not line up one to one with the turns the trajectory records (nothing is guessed);
    * ``shown(prediction)``: what ``dspy-for ask`` prints of it, as panels and lines;
    * ``diagnostics(records, metric)``: what one run's records (``trajectory``, ``answers_by_round``, ``gold``) say
      of the algorithm, as plain data (None: nothing beyond the table).
    """

    call_names: Callable[[Sequence[Any], Sequence[CallRecord]], list[CallName] | None]
    shown: Callable[[Mapping[str, Any]], list[Shown]]
    diagnostics: Callable[[Sequence[Any], Callable[..., Any]], dict[str, Any]] | None = None


def field_lines(fields: Mapping[str, Any], skip: tuple[str, ...] = ()) -> str:
    """``name: value`` lines (the name in bold markup), ``skip`` left out."""
    return "\n".join(f"[bold]{k}:[/] {v}" for k, v in fields.items() if k not in skip)


# ------------------------------------------------------------------------ one algorithm, sync or async

R = TypeVar("R")  # what a call returns


class Calls(Protocol):
    """The calls an algorithm makes; the only place its sync and async runs differ."""

    async def predict(self, predictor: dspy.Predict, kwargs: dict[str, Any]) -> dspy.Prediction: ...

    async def blocking(self, fn: Callable[..., R], *args: Any) -> R: ...


class _SyncCalls:
    async def predict(self, predictor: dspy.Predict, kwargs: dict[str, Any]) -> dspy.Prediction:
        return predictor(**kwargs)

    async def blocking(self, fn: Callable[..., R], *args: Any) -> R:
        return fn(*args)


class _AsyncCalls:
    async def predict(self, predictor: dspy.Predict, kwargs: dict[str, Any]) -> dspy.Prediction:
        return await predictor.acall(**kwargs)

    async def blocking(self, fn: Callable[..., R], *args: Any) -> R:
        return await asyncio.to_thread(fn, *args)  # DSPy's context is copied into the thread


SYNC_CALLS: Final[Calls] = _SyncCalls()
ASYNC_CALLS: Final[Calls] = _AsyncCalls()


def run_sync(algorithm: Coroutine[Any, Any, R]) -> R:
    """Run an algorithm coroutine over :data:`SYNC_CALLS` to its end, in this thread, without an event loop.

    With synchronous calls nothing in it ever suspends, so one ``send`` runs it whole.
    """
    try:
        algorithm.send(None)
    except StopIteration as done:
        return done.value
    algorithm.close()
    raise RuntimeError("run_sync: the algorithm suspended; it must make its calls through SYNC_CALLS")


@contextmanager
def private_trace() -> Iterator[list[Any]]:
    """``dspy.settings.trace`` entries of the calls made inside go to the list it yields, not to the trace in force
    (DSPy's optimizers bootstrap demos from that trace); :func:`publish` adds them once their answer is kept."""
    entries: list[Any] = []
    with dspy.context(trace=entries):
        yield entries


def publish(entries: Sequence[Any]) -> None:
    """Add :func:`private_trace` entries to the trace in force (when DSPy is tracing)."""
    if entries and dspy.settings.trace is not None:
        dspy.settings.trace.extend(entries)
