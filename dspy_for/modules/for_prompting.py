"""FOR-Prompting (arXiv 2510.01674) as a DSPy module.

Algorithm 1 of the paper::

    A0 = Defender(Q)
    for r = 1..N:
        O_r = Debater(A_{r-1})                 # questions only
        A_r = Defender(Q, O_1..O_r)            # re-answers the original question in full
    A* = Host(Q, {A0, O1, A1, ..., ON, AN})    # optional; without a Host, A* = A_N

Nothing in a round's prompts depends on N, so with DSPy's cache a run with N = 1, 2 after an N = 3 run
costs only the Host call.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from typing import Any, Literal

import dspy
from dspy.signatures.signature import ensure_signature
from dspy.utils.exceptions import AdapterParseError

from dspy_for.errors import ConfigError
from dspy_for.lm.usage import role, track_usage
from dspy_for.modules import for_signatures as S
from dspy_for.modules.guard import check_question, numbers_in

__all__ = ["FORPrompting"]

Stop = Literal["fixed", "no_questions", "stable"]
_ROLE_OF = {"defender": "defender", "revise": "defender", "debater": "debater", "host": "host"}


class FORPrompting(dspy.Module):
    """Defender / Debater / Host debate in which the Debater only asks questions.

    Args:
        signature: any DSPy signature (string or class), as for ``dspy.ChainOfThought``.
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

    def __init__(
        self,
        signature: str | type[dspy.Signature],
        rounds: int = 3,
        host: bool = True,
        *,
        stop: Stop = "fixed",
        patience: int = 1,
        token_budget: int | None = None,
        debater_mode: Literal["questions", "free"] = "questions",
        guard: bool = True,
        keep_unless_error: bool = True,
        defender_lm: Any = None,
        debater_lm: Any = None,
        host_lm: Any = None,
    ) -> None:
        super().__init__()
        from dspy_for.lm import resolve_lm

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
        self.keep_unless_error = keep_unless_error

        self.defender = dspy.Predict(S.defender_signature(self.signature))
        self.revise = dspy.Predict(S.revise_signature(self.signature))
        debater_sig = S.Debater if debater_mode == "questions" else S.Debater.with_instructions(
            S.DEBATER_FREE_INSTRUCTIONS
        )
        self.debater = dspy.Predict(debater_sig)
        self.host = dspy.Predict(S.host_signature(self.signature))
        defender_lm = resolve_lm(defender_lm)
        self.defender.lm = defender_lm
        self.revise.lm = defender_lm
        self.debater.lm = resolve_lm(debater_lm)
        self.host.lm = resolve_lm(host_lm)

    # ------------------------------------------------------------------------------------ the protocol

    def _protocol(self, inputs: dict[str, Any]) -> Generator[tuple[str, dict[str, Any]], Any, dspy.Prediction]:
        """The algorithm, as a generator of (predictor name, kwargs) calls; forward/aforward run them."""
        outputs = list(self.signature.output_fields)
        task = _render_task(self.signature, inputs)
        trajectory: list[dict[str, Any]] = []
        answers: list[dict[str, Any]] = []
        asked: list[str] = []
        exchanges: list[tuple[int, list[str], list[str]]] = []
        collapse = 0
        unreadable = 0  # later-role outputs the adapter could not parse (the debate goes on without them)
        stable_for = 0

        out = yield "defender", dict(inputs)
        answer = _fields(out, ["reasoning", *outputs])
        answers.append(_fields(out, outputs))
        trajectory.append(_turn("defender", "answer", 0, answer))

        rounds_used = 0
        for r in range(1, self.rounds + 1):
            if self.token_budget is not None and (yield "_tokens", {}) >= self.token_budget:
                break
            allowed = numbers_in(task) | numbers_in(_render_answer(answer))
            unused = sorted(numbers_in(task) - numbers_in(_render_answer(answer)), key=_num_key)
            rejected = "none"
            questions: list[str] = []
            for attempt in range(2 if self.guard else 1):
                try:
                    out = yield "debater", {"task": task, "current_answer": _render_answer(answer),
                                            "unused_numbers": unused, "asked_questions": list(asked),
                                            "rejected": rejected,
                                            "_discard_trace": attempt == 0 and self.guard}
                except AdapterParseError as exc:  # unreadable questions: nothing to ask this round
                    unreadable += 1
                    trajectory.append(_turn("debater", "questions", r, {"questions": [], "attempt": attempt,
                                            "parse_error": _short(exc)}))
                    break
                items = [str(q).strip() for q in (out.questions or []) if str(q).strip()]
                seen = {_norm(q) for q in asked}
                repeats = [q for q in items if _norm(q) in seen]
                items = [q for q in items if _norm(q) not in seen]  # a repeated question adds nothing
                verdicts = [(q, check_question(q, allowed_numbers=allowed)) for q in items]
                bad = [(q, why) for q, why in verdicts if why]
                collapse += len(bad)
                questions = [q for q, why in verdicts if not why] if self.guard else items
                trajectory.append(_turn("debater", "questions", r, {"questions": items, "attempt": attempt,
                                        "violations": {q: why for q, why in bad}, "repeats": repeats}))
                if not (self.guard and bad):
                    yield "_keep_trace", {}
                    break
                rejected = "; ".join(f"{q!r} broke the rules: {', '.join(why)}" for q, why in bad)
            if not questions:
                # nothing acceptable to ask: "no_questions" ends the debate; "fixed"/"stable" skip the
                # Defender this round (the Debater's next call has the same context: a cache hit)
                if self.stop == "no_questions":
                    break
                continue
            rounds_used += 1
            try:
                out = yield "revise", {**inputs, "previous_answer": _render_answer(answer),
                                       "earlier_dialogue": _render_exchanges(exchanges),
                                       "questions": questions}
            except AdapterParseError as exc:  # an unreadable revision changes nothing: A_r = A_{r-1}
                unreadable += 1
                trajectory.append(_turn("defender", "revision", r, {"responses": [], "error_found": False,
                                        "parse_error": _short(exc), "kept_previous": False}))
                exchanges.append((r, questions, []))
                asked.extend(questions)
                answers.append(_fields(answer, outputs))
                stable_for += 1
                if self.stop == "stable" and stable_for >= self.patience:
                    break
                continue
            revised = _fields(out, ["reasoning", *outputs])
            responses = [str(x) for x in (out.get("responses") or [])]
            error_found = bool(out.get("error_found"))
            keep = self.keep_unless_error and not error_found and _fields(out, outputs) != answers[-1]
            trajectory.append(_turn("defender", "revision", r, {
                "responses": responses, "error_found": error_found,
                "error": str(out.get("error") or ""), **revised, "kept_previous": keep}))
            exchanges.append((r, questions, responses))
            asked.extend(questions)
            if not keep:
                answer = revised
            unchanged = _fields(answer, outputs) == answers[-1]
            answers.append(_fields(answer, outputs))
            stable_for = stable_for + 1 if unchanged else 0
            if self.stop == "stable" and stable_for >= self.patience:
                break

        final = answers[-1]
        if self.use_host:
            try:
                out = yield "host", {**inputs, "dialogue": _render_dialogue(trajectory)}
                final = _fields(out, outputs)
                trajectory.append(_turn("host", "synthesis", rounds_used, _fields(out, ["reasoning", *outputs])))
            except AdapterParseError as exc:  # an unreadable synthesis: the final answer is A_N
                unreadable += 1
                trajectory.append(_turn("host", "synthesis", rounds_used, {**final, "parse_error": _short(exc)}))
        return dspy.Prediction(
            **final,
            trajectory=trajectory,
            answers_by_round=answers,
            rounds_used=rounds_used,
            role_collapse=collapse,
            unreadable_turns=unreadable,
            stats={"rounds_used": float(rounds_used), "role_collapse": float(collapse),
                   "unreadable_turns": float(unreadable)},
        )

    def forward(self, **kwargs: Any) -> dspy.Prediction:
        with track_usage() as usage:
            gen = self._protocol(kwargs)
            reply: Any = None
            error: AdapterParseError | None = None
            local_trace: list[Any] | None = None
            try:
                while True:
                    name, call = gen.send(reply) if error is None else gen.throw(error)
                    error = None
                    if name.startswith("_"):
                        reply, local_trace = self._control(name, usage, local_trace)
                        continue
                    try:
                        with self._role_call(name, call) as local_trace:
                            reply = getattr(self, name)(**call)
                    except AdapterParseError as exc:  # the protocol decides: carry on without it, or fail
                        reply, error = None, exc
            except StopIteration as stop:
                pred: dspy.Prediction = stop.value
        pred.usage = usage.to_dict()
        _attach_turn_usage(pred, usage)
        return pred

    async def aforward(self, **kwargs: Any) -> dspy.Prediction:
        with track_usage() as usage:
            gen = self._protocol(kwargs)
            reply: Any = None
            error: AdapterParseError | None = None
            local_trace: list[Any] | None = None
            try:
                while True:
                    name, call = gen.send(reply) if error is None else gen.throw(error)
                    error = None
                    if name.startswith("_"):
                        reply, local_trace = self._control(name, usage, local_trace)
                        continue
                    try:
                        with self._role_call(name, call) as local_trace:
                            reply = await getattr(self, name).acall(**call)
                    except AdapterParseError as exc:  # the protocol decides: carry on without it, or fail
                        reply, error = None, exc
            except StopIteration as stop:
                pred: dspy.Prediction = stop.value
        pred.usage = usage.to_dict()
        _attach_turn_usage(pred, usage)
        return pred

    @staticmethod
    def _control(name: str, usage: Any, local_trace: list[Any] | None) -> tuple[Any, list[Any] | None]:
        """The protocol's non-LM requests: the tokens spent so far, and keeping an accepted attempt."""
        if name == "_tokens":
            return usage.total.served_tokens, local_trace
        if name == "_keep_trace":
            # an accepted first attempt belongs in the trace; a rejected one never reaches it
            if local_trace and dspy.settings.trace is not None:
                dspy.settings.trace.extend(local_trace)
            return None, None
        raise ValueError(f"unknown protocol request {name!r}")

    @staticmethod
    @contextmanager
    def _role_call(name: str, call: dict[str, Any]) -> Iterator[list[Any] | None]:
        """Attribute the call to its role; a Debater attempt the guard may reject gets a private trace."""
        discard = call.pop("_discard_trace", False)
        with role(_ROLE_OF[name]):
            if not discard:
                yield None
                return
            local_trace: list[Any] = []
            with dspy.context(trace=local_trace):
                yield local_trace

    # ------------------------------------------------------------------- per-role LMs inside wrappers

    def get_lm(self) -> Any:
        """The Defender's LM (or the single LM all roles share); never raises for per-role LMs.

        ``dspy.Refine``/``dspy.BestOfN`` call this, copy the LM with a new rollout id and temperature, and
        hand the copy to :meth:`set_lm`, which applies the same change to every role's own LM.
        """
        return self.defender.lm or self.debater.lm or self.host.lm

    def set_lm(self, lm: Any) -> None:
        rep = self.get_lm()
        lms = {id(p.lm) for _, p in self.named_predictors() if p.lm is not None}
        if rep is None or len(lms) <= 1 or getattr(lm, "model", None) != getattr(rep, "model", None):
            super().set_lm(lm)
            return
        change = {k: v for k, v in lm.kwargs.items() if rep.kwargs.get(k) != v}
        for _, predictor in self.named_predictors():
            base = predictor.lm if predictor.lm is not None else dspy.settings.lm
            predictor.lm = lm if base is rep else (base.copy(**change) if base is not None else lm)


# ------------------------------------------------------------------------------------------ helpers


def _num_key(number: str) -> tuple[float, str]:
    try:
        return float(number), number
    except ValueError:
        return float("inf"), number


def _short(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300]


def _norm(question: str) -> str:
    return " ".join("".join(c for c in question.lower() if c.isalnum() or c.isspace()).split())


def _fields(pred: Any, names: list[str]) -> dict[str, Any]:
    return {n: pred.get(n) if hasattr(pred, "get") else getattr(pred, n, None) for n in names}


def _turn(role_name: str, kind: str, rnd: int, fields: dict[str, Any]) -> dict[str, Any]:
    return {"role": role_name, "type": kind, "round": rnd, "fields": _jsonable(fields)}


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        if isinstance(value, dict):
            return {k: _jsonable(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [_jsonable(v) for v in value]
        return str(value)


def _render_task(signature: type[dspy.Signature], inputs: dict[str, Any]) -> str:
    parts = [f"{name}: {inputs.get(name)}" for name in signature.input_fields]
    return "\n".join(parts)


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


def _render_dialogue(trajectory: list[dict[str, Any]]) -> str:
    lines = []
    for t in trajectory:
        f = t["fields"]
        if t["type"] == "answer":
            lines.append(f"[Defender, A0]\n{_render_answer(f)}")
        elif t["type"] == "questions":
            accepted = [q for q in f["questions"] if q not in f.get("violations", {})]
            if accepted:
                lines.append(f"[Debater, round {t['round']}]\n" + "\n".join(f"- {q}" for q in accepted))
        elif t["type"] == "revision" and "parse_error" in f:
            lines.append(f"[Defender, A{t['round']}]\n(no readable reply: the previous answer stands)")
        elif t["type"] == "revision":
            body = {k: v for k, v in f.items() if k not in ("responses", "kept_previous")}
            replies = "\n".join(f"- {x}" for x in f.get("responses", []))
            note = ("\n(this answer changed without a named error, so the previous answer stands)"
                    if f.get("kept_previous") else "")
            lines.append(f"[Defender, A{t['round']}]\nreplies:\n{replies}\n{_render_answer(body)}{note}")
    return "\n\n".join(lines)


def _attach_turn_usage(pred: dspy.Prediction, usage: Any) -> None:
    """Per-turn usage from the ordered call records (one LM call per turn unless an adapter retried)."""
    calls = list(usage.calls)
    by_role: dict[str, list[Any]] = {}
    for c in calls:
        by_role.setdefault(c.role, []).append(c)
    for turn in pred.trajectory:
        queue = by_role.get(turn["role"], [])
        if queue:
            c = queue.pop(0)
            turn["usage"] = {"prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
                             "cache_hit": c.cache_hit}
