"""The questions-only guard for FOR-Prompting's Debater.

A Debater item is accepted only if it is a genuine question that does not do the Defender's job.
Rules (each returns a short reason; an item may break several):

``not_a_question``
    The item does not end with ``?`` (after trimming quotes and spaces).
``imperative``
    It opens with a command ("Fix…", "Use…", "Recalculate…", "Make sure…", "Please…").
``proposes_answer``
    It states or suggests an answer: "the answer is", "should be", "shouldn't it be", "isn't it",
    "correct answer", "actually", "= 42", or it introduces a number that appears neither in the task
    nor in the Defender's answer (a value the Defender did not use is a proposed value); references to
    the work such as "step 2" or "line 3" are not values.
``proposes_fix``
    It prescribes a method or change: "you should", "you need to", "instead", "try", "I suggest",
    "let's", "rather than", "the right way", "you forgot to".
``empty``
    Nothing but punctuation.

Known limits (documented, tested): rephrasings that hint without these markers pass; numbers written
as words are not checked; a question may quote numbers that are in the task or the answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, NamedTuple, TypeAlias

__all__ = ["RULES", "Screened", "Violations", "check_question", "numbers_in", "screen_questions", "unused_numbers"]

RULES = ("not_a_question", "imperative", "proposes_answer", "proposes_fix", "empty")

# fmt: off
_IMPERATIVE_OPENERS = (
    "fix", "use", "try", "change", "replace", "recompute", "recalculate", "redo", "correct", "add",
    "subtract", "multiply", "divide", "consider", "note", "make sure", "ensure", "remember", "please",
    "double-check", "double check", "check", "verify", "compute", "calculate", "apply", "set", "write",
    "rewrite", "start", "include", "remove", "don't", "do not", "avoid",
)
# fmt: on
_ANSWER_PATTERNS = (
    r"\bthe (?:final |correct |right |real )?answer (?:is|should be|would be)\b",
    r"\bshould(?:n't| not)? (?:it |this |that |the \w+ )?(?:be|equal|have been)\b",
    r"\b(?:isn't|is not|wouldn't|would not) (?:it|that|this|the (?:answer|result|total)) (?:be |equal )?\d",
    r"\b(?:correct|right|real|true) (?:answer|result|value|total)\b",
    r"\bactually\b",
    r"=\s*-?\d",
    r"\bequals?\s+-?\d",
    r"\bwhich gives\b",
)
_FIX_PATTERNS = (
    r"\byou (?:should|need to|must|have to|ought to|forgot to)\b",
    r"\binstead\b",
    r"\brather than\b",
    r"\bi (?:suggest|recommend|think you should)\b",
    r"\blet'?s\b",
    r"\bthe (?:right|correct|proper) (?:way|method|approach|formula)\b",
    r"\btry (?:to|using|adding|multiplying|dividing)\b",
    r"\bwhy not\b",
)
_NUM_RE = re.compile(r"-?\d+(?:[.,]\d+)*")
# "step 2", "line 3", "round 1": numbers that point at the work rather than propose a value
_REFERENCE_RE = re.compile(r"\b(?:step|line|round|part|question|point|equation)\s*#?\d+\b", re.I)


def numbers_in(text: str) -> set[str]:
    """Numbers in ``text``, normalised (thousands separators dropped, trailing ``.0`` removed)."""
    out = set()
    for raw in _NUM_RE.findall(text or ""):
        token = raw.replace(",", "").lstrip("-")
        if "." in token:
            token = token.rstrip("0").rstrip(".") or "0"
        out.add(token)
    return out


def check_question(item: str, *, allowed_numbers: Iterable[str] = ()) -> list[str]:
    """Reasons why ``item`` is not an acceptable Debater question; empty list = acceptable.

    ``allowed_numbers`` are numbers a question may mention (those in the task and in the Defender's
    answer; see :func:`numbers_in`).
    """
    text = (item or "").strip().strip("\"'`*- ").strip()
    if not re.search(r"[A-Za-z0-9]", text):
        return ["empty"]
    low = text.lower()
    reasons = []
    if not text.endswith("?"):
        reasons.append("not_a_question")
    opener = re.sub(r"^\d+[.)]\s*", "", low)
    if any(opener == w or opener.startswith(w + " ") or opener.startswith(w + ",") for w in _IMPERATIVE_OPENERS):
        reasons.append("imperative")
    body = re.sub(r"^\d+[.)]\s*", "", text)  # a list enumerator "1." is not a value
    new_numbers = numbers_in(_REFERENCE_RE.sub(" ", body)) - set(allowed_numbers)
    if any(re.search(p, low) for p in _ANSWER_PATTERNS) or new_numbers:
        reasons.append("proposes_answer")
    if any(re.search(p, low) for p in _FIX_PATTERNS):
        reasons.append("proposes_fix")
    return reasons


#: items that break the rules, each with its reasons
Violations: TypeAlias = list[tuple[str, list[str]]]


class Screened(NamedTuple):
    """One Debater reply through the guard."""

    items: list[str]  # the new items: non-empty, and not repeating an earlier question
    repeats: list[str]  # items that repeat an earlier question (compared case- and punctuation-blind)
    violations: Violations  # new items that break the rules, each with its reasons
    accepted: list[str]  # new items that break no rule


def screen_questions(reply: Iterable[Any] | None, *, asked: Iterable[str], allowed_numbers: Iterable[str]) -> Screened:
    """Split a Debater reply into repeats, rule-breaking items (see :func:`check_question`) and questions."""
    items = [str(q).strip() for q in (reply or []) if str(q).strip()]
    seen = {_normalized(q) for q in asked}
    repeats = [q for q in items if _normalized(q) in seen]
    items = [q for q in items if _normalized(q) not in seen]  # a repeated question adds nothing
    allowed = set(allowed_numbers)
    verdicts = [(q, check_question(q, allowed_numbers=allowed)) for q in items]
    return Screened(items, repeats, [(q, why) for q, why in verdicts if why], [q for q, why in verdicts if not why])


def unused_numbers(task: str, work: str) -> list[str]:
    """Numbers given in ``task`` that ``work`` never mentions, in numeric order (see :func:`numbers_in`)."""
    return sorted(numbers_in(task) - numbers_in(work), key=_numeric_order)


def _normalized(question: str) -> str:
    return " ".join("".join(c for c in question.lower() if c.isalnum() or c.isspace()).split())


def _numeric_order(number: str) -> tuple[float, str]:
    try:
        return float(number), number
    except ValueError:
        return float("inf"), number
