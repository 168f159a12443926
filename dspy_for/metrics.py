"""Metrics usable as ``dspy.Evaluate`` metrics ``(example, prediction, trace=None) -> float | bool``.

* :func:`extract_number` — the FOR paper's numeric answer rule (``#### N`` marker, else the last number).
* :func:`numeric_match`, :func:`choice_match`, :func:`integer_match`, :func:`word_sort_match`.
* :func:`numeric_match_with_feedback` — the same rule, returning GEPA-style ``(score, feedback)``.
* :func:`exact_match` — normalized exact match of text answers (a user's JSONL data with text answers).
* :func:`field_value` — a field of an example or prediction, whichever shape it has.

The LLM judge (:class:`~dspy_for.judges.Judge`) lives in :mod:`dspy_for.judges`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import dspy
from dspy.evaluate import normalize_text

from dspy_for.datasets import dataset_info

__all__ = [
    "TOLERANCE",
    "choice_match",
    "exact_match",
    "extract_choice",
    "extract_number",
    "field_value",
    "integer_match",
    "metric_for",
    "numeric_match",
    "numeric_match_with_feedback",
    "word_sort_match",
]

TOLERANCE = 1e-2

_MINUS = "\u2212\u2012\u2013\u2014\ufe63\uff0d"
# a signed number: 1,234.5 | 1234 | .5 | 3/4 | 1 1/2 (mixed) ; thousands groups need exactly 3 digits
_NUM = r"(?<![\w.])[-+]?(?:\d+\s+\d+/\d+|\d+/\d+|\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
_NUM_RE = re.compile(_NUM)
_MARKER_RE = re.compile(r"####\s*(.*)")


def _normalise(text: str) -> str:
    for ch in _MINUS:
        text = text.replace(ch, "-")
    # "$-5", "-$5", "€1,000", "50%", "1 000" (thin/narrow spaces as thousands separators)
    text = re.sub(r"[$€£¥₹]", "", text)
    text = text.replace("%", " ")
    text = re.sub(r"(?<=\d)[\u2009\u202f](?=\d{3})", "", text)
    text = re.sub(r"(?<=\d)\*\*(?=\d)", "^", text)  # keep exponents from splitting into two numbers
    return text


def _to_float(token: str) -> float | None:
    token = token.strip().replace(",", "")
    try:
        if " " in token:  # mixed fraction "1 1/2"
            whole, frac = token.split(None, 1)
            sign = -1 if whole.startswith("-") else 1
            return sign * (abs(float(whole)) + float(Fraction(frac)))
        if "/" in token:
            num, den = token.split("/")
            if float(den) == 0:
                return None
            return float(Fraction(int(num), int(den)))
        return float(token)
    except (ValueError, ZeroDivisionError):
        return None


def extract_number(text: Any) -> float | None:
    """The answer number in ``text``: after the ``#### N`` marker if present, else the last number.

    Normalises unicode minus signs, thousands separators, currency and percent signs, and simple and mixed
    fractions (``3/4`` → 0.75, ``1 1/2`` → 1.5). Numbers, bools and None pass through as floats / None.
    """
    if text is None or isinstance(text, bool):
        return None
    if isinstance(text, int | float):
        return float(text)
    s = _normalise(str(text))
    marker = _MARKER_RE.findall(s)
    if marker:
        for segment in reversed(marker):
            found = _NUM_RE.findall(segment)
            if found:
                return _to_float(found[0])
    found = _NUM_RE.findall(s)
    for token in reversed(found):
        value = _to_float(token)
        if value is not None:
            return value
    return None


def field_value(prediction: Any, field: str) -> Any:
    if isinstance(prediction, dspy.Prediction | dspy.Example) or hasattr(prediction, field):
        try:
            return prediction[field] if field in prediction else getattr(prediction, field, None)
        except (KeyError, TypeError):
            return getattr(prediction, field, None)
    return prediction


def numeric_match(example: Any, prediction: Any, trace: Any = None, *, field: str = "answer") -> bool:
    """True when |pred − gold| < 1e-2 (FOR paper rule). Works on typed numeric fields and free text."""
    gold = extract_number(field_value(example, field))
    pred = extract_number(field_value(prediction, field))
    return gold is not None and pred is not None and abs(pred - gold) < TOLERANCE


def numeric_match_with_feedback(
    gold: Any, pred: Any, trace: Any = None, pred_name: str | None = None, pred_trace: Any = None
) -> dspy.Prediction:
    """GEPA-style metric: score plus a feedback text the reflection LM can use."""
    expected = extract_number(field_value(gold, "answer"))
    got = extract_number(field_value(pred, "answer"))
    score = float(expected is not None and got is not None and abs(got - expected) < TOLERANCE)
    if score:
        feedback = f"Correct: the final answer {got:g} matches the expected {expected:g}."
    elif got is None:
        feedback = (
            f"No final number could be read from the answer; the expected answer is {expected:g}. "
            "State the final answer as a single number."
        )
    else:
        feedback = f"Wrong: the final answer {got:g} differs from the expected {expected:g}."
    solution = field_value(gold, "gold_solution")
    if not score and isinstance(solution, str) and solution:
        feedback += f" A correct solution: {solution}"
    return dspy.Prediction(score=score, feedback=feedback)


_CHOICE_RE = re.compile(r"\b([A-E])\b(?:\)|:|\.|\s|$)")


def extract_choice(text: Any) -> str | None:
    """The multiple-choice letter A–E in ``text`` (the last standalone one, e.g. 'The answer is (C)')."""
    if text is None:
        return None
    s = str(text).strip().upper()
    if s in {"A", "B", "C", "D", "E"}:
        return s
    found = re.findall(r"(?:^|[\s(\[])([A-E])(?=$|[\s).:\],])", s)
    return found[-1] if found else None


def choice_match(example: Any, prediction: Any, trace: Any = None, *, field: str = "answer") -> bool:
    gold = extract_choice(field_value(example, field))
    return gold is not None and gold == extract_choice(field_value(prediction, field))


def integer_match(example: Any, prediction: Any, trace: Any = None, *, field: str = "answer") -> bool:
    gold = extract_number(field_value(example, field))
    pred = extract_number(field_value(prediction, field))
    return gold is not None and pred is not None and float(pred).is_integer() and int(pred) == int(gold)


def _words(text: Any) -> list[str]:
    return re.findall(r"[a-z0-9'&-]+", str(text or "").lower())


def word_sort_match(example: Any, prediction: Any, trace: Any = None, *, field: str = "answer") -> bool:
    """Exact match of the sorted word sequence (case, commas and extra whitespace ignored)."""
    gold = _words(field_value(example, field))
    return bool(gold) and gold == _words(field_value(prediction, field))


def exact_match(example: Any, prediction: Any, trace: Any = None, *, field: str = "answer") -> bool:
    """Exact match after DSPy's normalisation (:func:`dspy.evaluate.normalize_text`: unicode NFD, lower case,
    punctuation and the articles a / an / the removed, whitespace collapsed): "The Eiffel Tower." == "eiffel tower"."""
    gold, pred = field_value(example, field), field_value(prediction, field)
    if gold is None or pred is None:
        return False
    normalized = normalize_text(str(gold))
    return bool(normalized) and normalized == normalize_text(str(pred))


#: metric by the name a dataset's catalogue entry gives (``DatasetInfo.metric``)
_METRICS: dict[str, Callable[..., bool]] = {
    "numeric_match": numeric_match,
    "choice_match": choice_match,
    "integer_match": integer_match,
    "word_sort_match": word_sort_match,
    "exact_match": exact_match,
}


def metric_for(dataset: str) -> Callable[..., bool]:
    """The metric a dataset is scored with: the one its catalogue entry names (``dspy_for.datasets.DATASETS``, or a
    user's data file registered with :func:`dspy_for.datasets.register_jsonl`)."""
    return _METRICS[dataset_info(dataset).metric]
