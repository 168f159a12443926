"""FOR-Prompting (arXiv 2510.01674) as a DSPy module.

Algorithm 1 of the paper::

    A0 = Defender(Q)
    for r = 1..N:
        O_r = Debater(A_{r-1})                 # questions only
        A_r = Defender(Q, O_1..O_r)            # re-answers the original question in full
    A* = Host(Q, {A0, O1, A1, ..., ON, AN})    # optional; without a Host, A* = A_N

Nothing in a round's prompts depends on N, so with DSPy's cache a run with N = 1, 2 after an N = 3 run
costs only the Host call.

Two sets of role prompts (``prompts=``): the project's (``for_signatures``: step-by-step work every round, a
Defender that changes its answer only for an error it can name) and the paper's own, Table 3 of arXiv
2510.01674 (Appendix A.1), quoted verbatim. With the paper's, each role gets only what the paper's loop needs:

* Defender, A_0: the task; it writes its answer out (``reasoning``), then the typed outputs ("a single final
  answer at the end, clearly marked").
* Debater, O_r: the task, A_{r-1} and the questions already asked (it asks only new ones); a list of questions.
  Not the project's ``unused_numbers`` hint.
* Defender, A_r: the same Table 3 prompt, with the original task, A_{r-1}, the earlier question/reply pairs and
  the new questions (the paper's Defender "conditions its next response on all previous question-answer pairs
  and the newly issued questions"); one reply per question, then the answer again in full. No ``error_found``:
  the paper's loop takes every revision. (With ``keep_unless_error=True``, which is not the paper's loop, the
  typed ``error_found`` / ``error`` are added, since that rule reads them.)
* Host, A*: the task and the role-tagged dialogue, without the project's error fields.

The registry's ``for_paper`` is this module with ``prompts="paper"``, ``keep_unless_error=False`` (every
revision taken) and ``guard=False`` (questions-only by prompt alone; violations are still counted).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import dspy
from dspy.signatures.signature import ensure_signature
from dspy.utils.exceptions import AdapterParseError

from dspy_for.errors import ConfigError
from dspy_for.lm import resolve_lm
from dspy_for.lm.usage import Usage, role, track_usage
from dspy_for.modules import for_signatures as S
from dspy_for.modules import trajectory as T
from dspy_for.modules.adapters import FieldRecoveringChatAdapter
from dspy_for.modules.guard import Violations, numbers_in, screen_questions, unused_numbers
from dspy_for.modules.role_lms import PerRoleLMs
from dspy_for.modules.role_predict import RolePredict
from dspy_for.modules.task_text import render_task

__all__ = ["FORPrompting"]


class FORPrompting(PerRoleLMs):
    """Defender / Debater / Host debate in which the Debater only asks questions.

    Args:
        signature: any DSPy signature (string or class), as for ``dspy.ChainOfThought``.
        prompts: the role prompts: ``"project"`` (:mod:`~dspy_for.modules.for_signatures`) or ``"paper"`` (Table 3
            of the paper, verbatim, with only the fields its loop needs: see the module docstring).
        rounds: N, the number of Debater → Defender rounds (0 = the Defender's first answer only).
        host: synthesize the final answer with the Host from the whole dialogue; else A* = A_N.
        stop: ``"fixed"`` (paper: always N rounds), ``"no_questions"`` (stop when the Debater has nothing
            left to ask) or ``"stable"`` (stop when the answer is unchanged for ``patience`` rounds).
        patience: rounds of an unchanged answer before ``stop="stable"`` ends the debate.
        token_budget: optional total token budget (prompt + completion, cache hits included); no new
            round starts once it is reached.
        debater_mode: ``"questions"`` (the paper) or ``"free"`` (objections may include fixes: the stress
            test of the asymmetry claim; the guard is then off).
        guard: enforce questions-only: re-ask a violating Debater once with the reasons, then drop
            offending items. With ``guard=False`` violations are still counted, not acted on.
        keep_unless_error: the Defender's answer changes only in a round where it names a concrete error
            (its typed ``error_found``); a changed answer without one is recorded in the trajectory
            (``kept_previous``) but A_r keeps A_{r-1}. The guard against the peer-pressure drift a naive
            loop shows on small models; ``False`` takes every revision as is (the paper's loop).
        defender_lm, debater_lm, host_lm: per-role LMs (``dspy.BaseLM`` or spec strings); default: the
            configured LM.

    A later turn the adapter cannot parse does not lose the debate: unreadable questions ask nothing, an
    unreadable revision leaves A_r = A_{r-1}, an unreadable synthesis makes A* = A_N; each is recorded
    (``parse_error`` in its turn) and counted in ``unreadable_turns``. Only an unreadable first answer
    A0 fails the call, as in ``dspy.Predict``.
    """

    lm_parameters: ClassVar[Mapping[str, str]] = {
        "defender": "defender_lm",
        "revise": "defender_lm",
        "debater": "debater_lm",
        "host": "host_lm",
    }

    def __init__(
        self,
        signature: str | type[dspy.Signature],
        rounds: int = 1,
        host: bool = True,
        *,
        stop: Literal["fixed", "no_questions", "stable"] = "fixed",
        patience: int = 1,
        token_budget: int | None = None,
        debater_mode: Literal["questions", "free"] = "questions",
        guard: bool = True,
        keep_unless_error: bool = True,
        prompts: Literal["project", "paper"] = "project",
        defender_lm: Any = None,
        debater_lm: Any = None,
        host_lm: Any = None,
    ) -> None:
        super().__init__()
        if not isinstance(rounds, int) or rounds < 0:
            raise ConfigError(f"`rounds` must be an integer >= 0, got {rounds!r}.")
        if stop not in ("fixed", "no_questions", "stable"):
            raise ConfigError(f"`stop` must be one of 'fixed', 'no_questions', 'stable', got {stop!r}.")
        if not isinstance(patience, int) or patience < 1:
            raise ConfigError(f"`patience` must be an integer >= 1, got {patience!r}.")
        if token_budget is not None and token_budget <= 0:
            raise ConfigError(f"`token_budget` must be positive or None, got {token_budget!r}.")
        if debater_mode not in ("questions", "free"):
            raise ConfigError(f"`debater_mode` must be 'questions' or 'free', got {debater_mode!r}.")
        self.signature = ensure_signature(signature)
        self.rounds, self.use_host, self.stop = rounds, host, stop
        self.patience, self.token_budget = patience, token_budget
        self.debater_mode, self.guard = debater_mode, guard and debater_mode == "questions"
        self.keep_unless_error, self.prompts = keep_unless_error, prompts

        sigs = S.role_signatures(
            self.signature, prompts, debater_mode=debater_mode, guard=self.guard, keep_unless_error=keep_unless_error
        )
        # whether revisions name errors (typed error_found / error), and the Host is shown them
        self._named_errors = "error_found" in sigs.revise.output_fields
        name, defender = type(self).__name__, resolve_lm(defender_lm)
        self.defender = RolePredict(
            sigs.defender, module=name, role="defender", lm=defender, lm_parameter="defender_lm"
        )
        self.revise = RolePredict(
            sigs.revise, module=name, role="defender", step="revise", lm=defender, lm_parameter="defender_lm"
        )
        self.debater = RolePredict(sigs.debater, module=name, role="debater", lm=debater_lm, lm_parameter="debater_lm")
        self.host = RolePredict(sigs.host, module=name, role="host", lm=host_lm, lm_parameter="host_lm")

    def forward(self, **inputs: Any) -> dspy.Prediction:
        return T.run_sync(self._debate(T.SYNC_CALLS, inputs))

    async def aforward(self, **inputs: Any) -> dspy.Prediction:
        return await self._debate(T.ASYNC_CALLS, inputs)

    # --------------------------------------------------------------------------------- Algorithm 1

    async def _debate(self, calls: T.Calls, inputs: dict[str, Any]) -> dspy.Prediction:
        """Algorithm 1, written once: ``forward`` runs it with plain predictor calls, ``aforward`` with ``acall``."""
        with track_usage() as usage:
            d = _Debate(inputs, render_task(self.signature, inputs), list(self.signature.output_fields))
            d.answer = await self._answer(calls, d)  # A0 = Defender(Q)
            for r in range(1, self.rounds + 1):
                if self._should_stop(d, usage):  # token budget / no_questions / stable
                    break
                questions = await self._ask(calls, d, r)  # O_r = Debater(A_{r-1}): questions only, guarded
                if questions:  # (nothing acceptable to ask: no Defender call this round)
                    d.answer = await self._revise(calls, d, r, questions)  # A_r = Defender(Q, O_1..O_r)
            pred = await self._synthesize(calls, d)  # A* = Host(Q, dialogue), or A_N
        pred.usage = usage.to_dict()
        T.attach_turn_usage(pred.trajectory, usage)
        return pred

    async def _answer(self, calls: T.Calls, d: _Debate) -> dict[str, Any]:
        """A0: the Defender's first answer (unreadable, it fails the call, as in ``dspy.Predict``)."""
        with role(T.DEFENDER):
            out = await calls.predict(self.defender, dict(d.inputs))
        answer = _fields(out, ["reasoning", *d.outputs])
        d.answers.append(_fields(out, d.outputs))
        d.record(T.DEFENDER, T.ANSWER, 0, answer)
        return answer

    async def _ask(self, calls: T.Calls, d: _Debate, r: int) -> list[str]:
        """O_r: the Debater's new questions on A_{r-1}; with the guard, a violating first attempt is re-asked
        once with the reasons, then offending items are dropped. An unreadable reply asks nothing more."""
        current = _render_answer(d.answer)
        allowed, unused = numbers_in(d.task) | numbers_in(current), unused_numbers(d.task, current)
        rejected = "none"
        questions: list[str] = []
        for attempt in range(2 if self.guard else 1):
            hidden = attempt == 0 and self.guard  # in DSPy's trace only if the guard accepts it
            offered = {
                "task": d.task,
                "current_answer": current,
                "unused_numbers": unused,
                "asked_questions": list(d.asked),
                "rejected": rejected,
            }
            kwargs = {k: v for k, v in offered.items() if k in self.debater.signature.input_fields}
            try:
                with role(T.DEBATER), _later_turn_parsing(), T.private_trace() if hidden else nullcontext() as private:
                    out = await calls.predict(self.debater, kwargs)
            except AdapterParseError as exc:  # unreadable questions: nothing (more) to ask this round
                unread: T.QuestionsFields = {"questions": [], "attempt": attempt, "parse_error": _short(exc)}
                d.record(T.DEBATER, T.QUESTIONS, r, unread, unreadable=True)
                break
            questions, violations = self._guard(out.questions, d, r, attempt, allowed)
            if not violations:
                T.publish(private or [])  # an accepted first attempt joins DSPy's trace
                break
            rejected = "; ".join(f"{q!r} broke the rules: {', '.join(why)}" for q, why in violations)
        d.asked_nothing = not questions
        return questions

    async def _revise(self, calls: T.Calls, d: _Debate, r: int, questions: list[str]) -> dict[str, Any]:
        """A_r: the Defender re-answers the original task given O_1..O_r; keep-unless-error decides whether
        its answer replaces A_{r-1}. An unreadable reply changes nothing: A_r = A_{r-1}."""
        d.rounds_used += 1
        kwargs = {
            **d.inputs,
            "previous_answer": _render_answer(d.answer),
            "earlier_dialogue": _render_exchanges(d.exchanges),
            "questions": questions,
        }
        try:
            with role(T.DEFENDER), _later_turn_parsing():
                out = await calls.predict(self.revise, kwargs)
        except AdapterParseError as exc:  # an unreadable revision changes nothing: A_r = A_{r-1}
            fields = {"responses": [], "error_found": False, "parse_error": _short(exc), "kept_previous": False}
            d.record(T.DEFENDER, T.REVISION, r, fields, unreadable=True)
            responses, answer = [], d.answer
        else:
            revised = _fields(out, ["reasoning", *d.outputs])
            responses = [str(x) for x in (out.get("responses") or [])]
            found = bool(out.get("error_found"))
            keep = self._keeps_previous(_fields(out, d.outputs), found, d.answers[-1])
            named = {"error": str(out.get("error") or "")} if self._named_errors else {}
            fields = {"responses": responses, "error_found": found, **named, **revised, "kept_previous": keep}
            d.record(T.DEFENDER, T.REVISION, r, fields)
            answer = d.answer if keep else revised
        d.exchanges.append((r, questions, responses))
        d.asked.extend(questions)
        standing = _fields(answer, d.outputs)
        d.stable_for = d.stable_for + 1 if standing == d.answers[-1] else 0
        d.answers.append(standing)
        return answer

    async def _synthesize(self, calls: T.Calls, d: _Debate) -> dspy.Prediction:
        """A*: the Host's synthesis of the whole dialogue; without a Host (or with an unreadable one), A_N."""
        final = d.answers[-1]
        if self.use_host:
            try:
                with role(T.HOST), _later_turn_parsing():
                    # the paper's Host reads every Debater item the Defender got; the project's, only those that
                    # kept the questions-only rules (as its stored runs did)
                    shown = {
                        "named_errors": self._named_errors,
                        "hide_violations": self.prompts == "project" or self.guard,
                    }
                    dialogue = _render_dialogue(d.trajectory, **shown)
                    out = await calls.predict(self.host, {**d.inputs, "dialogue": dialogue})
                final = _fields(out, d.outputs)
                d.record(T.HOST, T.SYNTHESIS, d.rounds_used, _fields(out, ["reasoning", *d.outputs]))
            except AdapterParseError as exc:  # an unreadable synthesis: the final answer is A_N
                d.record(T.HOST, T.SYNTHESIS, d.rounds_used, {**final, "parse_error": _short(exc)}, unreadable=True)
        counts = {"rounds_used": d.rounds_used, "role_collapse": d.collapse, "unreadable_turns": d.unreadable}
        stats = {k: float(v) for k, v in counts.items()}
        return dspy.Prediction(**final, trajectory=d.trajectory, answers_by_round=d.answers, **counts, stats=stats)

    # ------------------------------------------------------------ the guard, the stop policy, the keep rule

    def _guard(self, reply: Any, d: _Debate, r: int, attempt: int, allowed: set[str]) -> tuple[list[str], Violations]:
        """The questions-only guard on one Debater reply, recorded with its repeats and violations: the
        questions the Defender gets, and the violations to re-ask about (without the guard: every new
        item, and nothing to re-ask about)."""
        s = screen_questions(reply, asked=d.asked, allowed_numbers=allowed)
        d.collapse += len(s.violations)
        fields: T.QuestionsFields = {
            "questions": s.items,
            "attempt": attempt,
            "violations": dict(s.violations),
            "repeats": s.repeats,
        }
        d.record(T.DEBATER, T.QUESTIONS, r, fields)
        return (s.accepted, s.violations) if self.guard else (s.items, [])

    def _should_stop(self, d: _Debate, usage: Usage) -> bool:
        """Before round r: the token budget is spent, or the stop policy says the debate is over
        (``"no_questions"``: round r-1 had nothing to ask; ``"stable"``: ``patience`` unchanged answers)."""
        if self.token_budget is not None and usage.total.served_tokens >= self.token_budget:
            return True
        return (self.stop == "no_questions" and d.asked_nothing) or (
            self.stop == "stable" and d.stable_for >= self.patience
        )

    def _keeps_previous(self, revised: dict[str, Any], error_found: bool, previous: dict[str, Any]) -> bool:
        """Keep-unless-error: a changed answer without a named error does not replace A_{r-1}."""
        return self.keep_unless_error and not error_found and revised != previous


# ------------------------------------------------------------------------------------------ helpers


@dataclass
class _Debate:
    """One call's debate so far; local to the call (the module keeps no per-call state)."""

    inputs: dict[str, Any]
    task: str  # the inputs, rendered for the Debater
    outputs: list[str]  # the signature's output fields
    answer: dict[str, Any] = field(default_factory=dict)  # the standing answer (reasoning and outputs)
    answers: list[dict[str, Any]] = field(default_factory=list)  # answers_by_round: the outputs of A_0..A_r
    trajectory: list[T.ForTurn] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)
    exchanges: list[tuple[int, list[str], list[str]]] = field(default_factory=list)
    rounds_used: int = 0
    collapse: int = 0  # Debater items that broke the questions-only rules
    unreadable: int = 0  # later turns the adapter could not parse (the debate goes on without them)
    stable_for: int = 0  # rounds the answer has not changed
    asked_nothing: bool = False  # the last round's Debater had nothing acceptable to ask

    def record(
        self, role: T.ForRole, kind: T.ForTurnType, rnd: int, fields: Mapping[str, Any], unreadable: bool = False
    ) -> None:
        """Append a turn; an ``unreadable`` one (a reply the adapter could not parse) is also counted."""
        self.unreadable += unreadable
        self.trajectory.append(T.for_turn(role, kind, rnd, fields))


_RECOVERING_ADAPTER = FieldRecoveringChatAdapter()


def _later_turn_parsing() -> AbstractContextManager[Any]:
    """The Debater, revisions and the Host parse with :class:`FieldRecoveringChatAdapter`, unless the caller
    configured an adapter of its own; A0 parses exactly as ``dspy.ChainOfThought``'s."""
    return dspy.context(adapter=_RECOVERING_ADAPTER) if dspy.settings.adapter is None else nullcontext()


def _short(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300]


def _fields(pred: Any, names: list[str]) -> dict[str, Any]:
    return {n: pred.get(n) if hasattr(pred, "get") else getattr(pred, n, None) for n in names}


def _render_answer(answer: dict[str, Any]) -> str:
    return "\n".join(f"{k}: {v}" for k, v in answer.items())


def _render_exchanges(exchanges: list[tuple[int, list[str], list[str]]]) -> str:
    if not exchanges:
        return "none"
    lines = []
    for r, questions, responses in exchanges:
        for i, q in enumerate(questions):
            reply = responses[i] if i < len(responses) else "(no reply)"
            lines.append(f"[round {r}] Q: {q}\n[round {r}] A: {reply}")
    return "\n".join(lines)


def _render_dialogue(trajectory: list[T.ForTurn], *, named_errors: bool = True, hide_violations: bool = True) -> str:
    """The role-tagged dialogue the Host reads. Without ``named_errors``, a revision's ``error_found`` (which the
    Defender was not asked for) is left out; without ``hide_violations``, every Debater item is shown, including
    those that broke the questions-only rules."""
    hidden = ("responses", "kept_previous") if named_errors else ("responses", "kept_previous", "error_found")
    lines = []
    for t in trajectory:
        f = t["fields"]
        if t["type"] == T.ANSWER:
            lines.append(f"[Defender, A0]\n{_render_answer(f)}")
        elif t["type"] == T.QUESTIONS:
            violations = f.get("violations", {}) if hide_violations else {}
            accepted = [q for q in f["questions"] if q not in violations]
            if accepted:
                lines.append(f"[Debater, round {t['round']}]\n" + "\n".join(f"- {q}" for q in accepted))
        elif t["type"] == T.REVISION and "parse_error" in f:
            lines.append(f"[Defender, A{t['round']}]\n(no readable reply: the previous answer stands)")
        elif t["type"] == T.REVISION:
            body = {k: v for k, v in f.items() if k not in hidden}
            replies = "\n".join(f"- {x}" for x in f.get("responses", []))
            kept = "\n(this answer changed without a named error, so the previous answer stands)"
            note = kept if f.get("kept_previous") else ""
            lines.append(f"[Defender, A{t['round']}]\nreplies:\n{replies}\n{_render_answer(body)}{note}")
    return "\n\n".join(lines)
