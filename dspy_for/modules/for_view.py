"""How a FOR-Prompting trajectory reads outside the module (:data:`FOR_VIEW`): the turn behind each LM call, the
debate as ``dspy-for ask`` shows it, and what one run's debates did (:func:`debate_diagnostics`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dspy

from dspy_for.lm.usage import CallRecord
from dspy_for.modules.trajectory import (
    ANSWER,
    QUESTIONS,
    REVISION,
    SYNTHESIS,
    CallName,
    ForTurn,
    Shown,
    TrajectoryView,
    field_lines,
)

__all__ = ["FOR_VIEW", "debate_diagnostics", "for_call_names", "for_shown"]


def for_call_names(trajectory: Sequence[Any], calls: Sequence[CallRecord]) -> list[CallName] | None:
    """``defender A0``, ``debater r1`` (``debater r1 (re-ask)``), ``defender r1``, …, ``host``: when the roles of the
    calls, in order, are exactly those of the turns (one call per turn); else None."""
    if not trajectory or not all(isinstance(t, Mapping) and "role" in t and "fields" in t for t in trajectory):
        return None
    if [c.role for c in calls] != [str(t["role"]) for t in trajectory]:
        return None
    out: list[CallName] = []
    for t in trajectory:
        role, kind, rnd, fields = str(t["role"]), str(t.get("type", "")), int(t.get("round", 0)), t["fields"]
        if kind == ANSWER:
            name = f"{role} A{rnd}"
        elif kind == SYNTHESIS:
            name = role
        else:
            name = f"{role} r{rnd}"
            if kind == QUESTIONS and fields.get("attempt"):
                name += " (re-ask)"
        turn: dict[str, Any] = {"dspy_for.turn": kind, "dspy_for.round": rnd, "dspy_for.parsed": fields}
        if fields.get("parse_error"):
            turn["dspy_for.parse_error"] = fields["parse_error"]
        out.append((name, turn))
    return out


def for_shown(pred: Mapping[str, Any]) -> list[Shown]:
    """The debate turn by turn (each question marked ✗ with the rules it broke), then rounds used and role collapse."""
    out: list[Shown] = []
    turns: list[ForTurn] = pred.get("trajectory") or []
    for turn in turns:
        f: dict[str, Any] = dict(turn["fields"])
        who = turn["role"].capitalize()
        if turn["type"] == ANSWER:
            out.append((f"{who} · A0", field_lines(f)))
        elif turn["type"] == QUESTIONS:
            bad = f.get("violations", {})
            lines = [
                f"{'✗' if q in bad else '?'} {q}" + (f"  [red]({', '.join(bad[q])})[/]" if q in bad else "")
                for q in f.get("questions", [])
            ]
            title = f"{who} · round {turn['round']}" + (" · re-asked" if f.get("attempt") else "")
            out.append((title, "\n".join(lines) or "(no questions)"))
        elif turn["type"] == REVISION:
            replies = "\n".join(f"- {r}" for r in f.get("responses", []))
            body = f"[bold]replies:[/]\n{replies}\n" + field_lines(f, skip=("responses",))
            out.append((f"{who} · A{turn['round']} (revision)", body))
        else:
            out.append((f"{who} · synthesis", field_lines(f)))
    out.append((None, f"rounds used: {pred.get('rounds_used')}, role collapse: {pred.get('role_collapse')}"))
    return out


def _answer_index(item: Any, turn: dict[str, Any]) -> int:
    """The index in ``answers_by_round`` of the answer that stood after revision ``turn``."""
    revisions = [t for t in (item.trajectory or []) if t.get("type") == REVISION]
    return next(i for i, t in enumerate(revisions, start=1) if t is turn)


def debate_diagnostics(items: Sequence[Any], metric: Callable[..., Any]) -> dict[str, Any]:
    """What the debate did, from one FOR run's records (each with ``trajectory``, ``answers_by_round`` and ``gold``):
    answer flips per round, how often the Defender named an error, and the Debater's role collapse with and without
    the guard.

    - ``flips``: per round r >= 1, how many items went right → wrong and wrong → right from A_{r-1} to A_r,
      and how many changed their answer at all.
    - ``error_found_rate``: share of revisions in which the Defender said it found a concrete error.
    - ``kept_previous``: revisions whose changed answer ``keep_unless_error`` set aside (no named error),
      with how many of those set-aside answers were right (``kept_cost``: the rule lost a right answer)
      and how many were wrong while the kept one was right (``kept_saved``).
    - ``collapse_first_attempt``: share of the Debater's first-attempt items that broke the questions-only
      rules; without the guard, every one of them reaches the Defender (the unguarded collapse rate).
    - ``collapse_after_reask``: share of the items of each round's last attempt that still break the rules
      (with the guard: after its one re-ask, and it then drops them, so none reaches the Defender; without
      it this equals the first-attempt rate).
    """

    def score(answer: dict[str, Any], gold: Any) -> bool:
        return bool(metric(dspy.Example(answer=gold), dspy.Prediction(**answer)))

    rounds = max((len(i.answers_by_round or []) for i in items), default=0)
    flips = [{"round": r, "right_to_wrong": 0, "wrong_to_right": 0, "changed": 0} for r in range(1, rounds)]
    revisions = errors = kept = kept_cost = kept_saved = 0
    first, final = [0, 0], [0, 0]  # [items, violating items]
    for it in items:
        answers = it.answers_by_round or []
        for r in range(1, len(answers)):
            before, after = score(answers[r - 1], it.gold), score(answers[r], it.gold)
            f = flips[r - 1]
            f["right_to_wrong"] += before and not after
            f["wrong_to_right"] += after and not before
            f["changed"] += answers[r] != answers[r - 1]
        last_attempt: dict[int, dict[str, Any]] = {}
        for turn in it.trajectory or []:
            fields = turn.get("fields", {})
            if turn.get("type") == REVISION:
                revisions += 1
                errors += bool(fields.get("error_found"))
                if fields.get("kept_previous"):
                    kept += 1
                    discarded = score(
                        {k: v for k, v in fields.items() if k in (answers[0] if answers else {})}, it.gold
                    )
                    kept_right = score(answers[min(_answer_index(it, turn), len(answers) - 1)], it.gold)
                    kept_cost += discarded
                    kept_saved += kept_right and not discarded
            elif turn.get("type") == QUESTIONS:
                if fields.get("attempt", 0) == 0:
                    first[0] += len(fields.get("questions", []))
                    first[1] += len(fields.get("violations", {}))
                last_attempt[turn.get("round", 0)] = fields
        for fields in last_attempt.values():
            final[0] += len(fields.get("questions", []))
            final[1] += len(fields.get("violations", {}))
    return {
        "items": len(items),
        "flips": flips,
        "revisions": revisions,
        "error_found_rate": errors / revisions if revisions else 0.0,
        "kept_previous": kept,
        "kept_cost": kept_cost,
        "kept_saved": kept_saved,
        "debater_items": first[0],
        "collapse_first_attempt": first[1] / first[0] if first[0] else 0.0,
        "collapse_after_reask": final[1] / final[0] if final[0] else 0.0,
    }


FOR_VIEW = TrajectoryView(call_names=for_call_names, shown=for_shown, diagnostics=debate_diagnostics)
