"""What a FOR debate did, from its per-item records: accuracy of every answer prefix A_0..A_N (one N-round run
gives every no-Host prefix), answer flips per round, how often the Defender named an error, what
keep-unless-error set aside, and the Debater's role collapse with and without the guard."""

from __future__ import annotations

from typing import Any

import dspy

from dspy_for.modules.trajectory import QUESTIONS, REVISION
from dspy_for.stats import mean_with_ci

__all__ = ["debate_diagnostics", "round_accuracy", "round_scores"]


def round_scores(items: list[Any], metric: Any, rounds: int | None = None) -> list[list[float]]:
    """Per-item scores of every prefix A_0..A_{rounds-1} from one FOR run's ``answers_by_round``.

    A debate that ended early (nothing new to ask) keeps its last answer for the later prefixes.
    ``rounds`` defaults to the longest ``answers_by_round``.
    """
    if rounds is None:
        rounds = max((len(i.answers_by_round or []) for i in items), default=0)
    out = []
    for k in range(rounds):
        scores = []
        for it in items:
            answers = it.answers_by_round or [{}]
            pred = dspy.Prediction(**answers[min(k, len(answers) - 1)])
            scores.append(float(metric(dspy.Example(answer=it.gold), pred)))
        out.append(scores)
    return out


def round_accuracy(items: list[Any], metric: Any) -> list[tuple[float, float, float]]:
    """Accuracy (with CI) of every prefix A_0..A_N from one FOR run's ``answers_by_round``."""
    return [mean_with_ci(scores) for scores in round_scores(items, metric)]


def _answer_index(item: Any, turn: dict[str, Any]) -> int:
    """The index in ``answers_by_round`` of the answer that stood after revision ``turn``."""
    revisions = [t for t in (item.trajectory or []) if t.get("type") == REVISION]
    return next(i for i, t in enumerate(revisions, start=1) if t is turn)


def debate_diagnostics(items: list[Any], metric: Any) -> dict[str, Any]:
    """What the debate did, from one FOR run's trajectories: answer flips per round, how often the Defender
    named an error, and the Debater's role collapse with and without the guard.

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
