"""Metrics usable as ``dspy.Evaluate`` metrics ``(example, prediction, trace=None) -> float | bool``.

* :func:`extract_number` — the FOR paper's numeric answer rule (``#### N`` marker, else the last number).
* :func:`numeric_match`, :func:`choice_match`, :func:`integer_match`, :func:`word_sort_match`.
* :func:`numeric_match_with_feedback` — the same rule, returning GEPA-style ``(score, feedback)``.
* :class:`JudgeMatch` — judge-verified accuracy (a judge LM, falling back to the numeric rule).
* :class:`QualityJudge` — reasoning / coherence / holistic scores in [0, 1].
* :class:`Judge` — both in one call per item (what ``[judge]`` in a comparison or sweep uses).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import dspy

from dspy_for.errors import ConfigError
from dspy_for.lm.usage import role

__all__ = [
    "RUBRICS",
    "TOLERANCE",
    "Judge",
    "JudgeMatch",
    "JudgeVerdict",
    "QualityJudge",
    "choice_match",
    "extract_choice",
    "extract_number",
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


def _pred_value(prediction: Any, field: str) -> Any:
    if isinstance(prediction, dspy.Prediction | dspy.Example) or hasattr(prediction, field):
        try:
            return prediction[field] if field in prediction else getattr(prediction, field, None)
        except (KeyError, TypeError):
            return getattr(prediction, field, None)
    return prediction


def numeric_match(example: Any, prediction: Any, trace: Any = None, *, field: str = "answer") -> bool:
    """True when |pred − gold| < 1e-2 (FOR paper rule). Works on typed numeric fields and free text."""
    gold = extract_number(_pred_value(example, field))
    pred = extract_number(_pred_value(prediction, field))
    return gold is not None and pred is not None and abs(pred - gold) < TOLERANCE


def numeric_match_with_feedback(
    gold: Any, pred: Any, trace: Any = None, pred_name: str | None = None, pred_trace: Any = None
) -> dspy.Prediction:
    """GEPA-style metric: score plus a feedback text the reflection LM can use."""
    expected = extract_number(_pred_value(gold, "answer"))
    got = extract_number(_pred_value(pred, "answer"))
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
    solution = _pred_value(gold, "gold_solution")
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
    gold = extract_choice(_pred_value(example, field))
    return gold is not None and gold == extract_choice(_pred_value(prediction, field))


def integer_match(example: Any, prediction: Any, trace: Any = None, *, field: str = "answer") -> bool:
    gold = extract_number(_pred_value(example, field))
    pred = extract_number(_pred_value(prediction, field))
    return gold is not None and pred is not None and float(pred).is_integer() and int(pred) == int(gold)


def _words(text: Any) -> list[str]:
    return re.findall(r"[a-z0-9'&-]+", str(text or "").lower())


def word_sort_match(example: Any, prediction: Any, trace: Any = None, *, field: str = "answer") -> bool:
    """Exact match of the sorted word sequence (case, commas and extra whitespace ignored)."""
    gold = _words(_pred_value(example, field))
    return bool(gold) and gold == _words(_pred_value(prediction, field))


_METRICS: dict[str, Callable[..., bool]] = {
    "gsm8k": numeric_match,
    "svamp": numeric_match,
    "aqua": choice_match,
    "bbh_object_counting": integer_match,
    "bbh_word_sorting": word_sort_match,
}


def metric_for(dataset: str) -> Callable[..., bool]:
    """The metric a dataset is scored with (see ``dspy_for.datasets.DATASETS``)."""
    from dspy_for.datasets import dataset_info

    name = dataset_info(dataset).name
    return _METRICS[name]


# ------------------------------------------------------------------------------------------- judges


class AnswerMatch(dspy.Signature):
    """You are a strict grader. Decide whether the candidate's final answer is the same value as the gold
    answer. Ignore formatting, units and wording; judge only the final value. Do not solve the problem."""

    question: str = dspy.InputField(desc="The problem that was asked.")
    gold_answer: str = dspy.InputField(desc="The correct final answer.")
    candidate: str = dspy.InputField(desc="The candidate's answer (may include reasoning).")
    match: bool = dspy.OutputField(desc="True if the candidate's final answer equals the gold answer.")


class JudgeMatch:
    """Judge-verified accuracy (FOR paper). Falls back to ``fallback`` when no judge LM or it fails.

    The judge's verdict (or the fallback's) is returned as a bool; ``last_method`` is not kept (metrics
    run in threads) — use :meth:`judge` to get ``(correct, method)`` where method is "judge" or "rule".
    """

    def __init__(self, judge_lm: Any = None, *, fallback: Callable[..., bool] = numeric_match) -> None:
        from dspy_for.lm import resolve_lm

        self.judge_lm = resolve_lm(judge_lm)
        self.fallback = fallback
        self.predictor = dspy.Predict(AnswerMatch)

    def judge(self, example: Any, prediction: Any) -> tuple[bool, str]:
        if self.judge_lm is None:
            return bool(self.fallback(example, prediction)), "rule"
        try:
            with role("judge"), dspy.context(lm=self.judge_lm, trace=[]):
                out = self.predictor(
                    question=str(_pred_value(example, "question")),
                    gold_answer=str(_pred_value(example, "answer")),
                    candidate=str(_pred_value(prediction, "answer")),
                )
            return bool(out.match), "judge"
        except Exception:  # the judge failing must not lose the item: fall back and say so
            return bool(self.fallback(example, prediction)), "rule"

    def __call__(self, example: Any, prediction: Any, trace: Any = None) -> bool:
        return self.judge(example, prediction)[0]


class ReasoningQuality(dspy.Signature):
    """Rate the REASONING of the response from 0.0 to 1.0: step-by-step soundness, correct intermediate
    derivations, stated assumptions and handled edge cases, and checking of its own errors.
    1.0 = every step valid and checked; 0.5 = mostly sound with a gap or slip; 0.0 = no or invalid reasoning."""

    question: str = dspy.InputField()
    response: str = dspy.InputField()
    score: float = dspy.OutputField(desc="A number in [0, 1].")


class CoherenceQuality(dspy.Signature):
    """Rate the COHERENCE of the response from 0.0 to 1.0: clear organisation, smooth transitions,
    consistent notation and terms, and no contradictions. 1.0 = perfectly organised and consistent;
    0.5 = understandable with some jumps or inconsistencies; 0.0 = disorganised or self-contradictory."""

    question: str = dspy.InputField()
    response: str = dspy.InputField()
    score: float = dspy.OutputField(desc="A number in [0, 1].")


class HolisticQuality(dspy.Signature):
    """Rate the response HOLISTICALLY from 0.0 to 1.0: usefulness to the asker, completeness, and apparent
    correctness. 1.0 = complete, useful and apparently correct; 0.5 = partly useful or incomplete;
    0.0 = useless or clearly wrong."""

    question: str = dspy.InputField()
    response: str = dspy.InputField()
    score: float = dspy.OutputField(desc="A number in [0, 1].")


_RUBRICS: dict[str, type[dspy.Signature]] = {
    "reasoning": ReasoningQuality,
    "coherence": CoherenceQuality,
    "holistic": HolisticQuality,
}


class QualityJudge:
    """LLM-as-judge quality score in [0, 1] with a fixed rubric (``reasoning``, ``coherence``, ``holistic``).

    Runs at temperature 0 under the role ``judge``. As a metric it returns the score (clipped to [0, 1]).
    """

    def __init__(self, rubric: str, judge_lm: Any) -> None:
        if rubric not in _RUBRICS:
            raise ConfigError(f"Unknown rubric `{rubric}`. Choose one of: {', '.join(_RUBRICS)}.")
        from dspy_for.lm import resolve_lm

        self.rubric = rubric
        self.judge_lm = resolve_lm(judge_lm)
        if self.judge_lm is None:
            raise ConfigError(
                "`judge_lm` is required for quality judges: pass an LM spec such as 'local/qwen2.5-coder-1.5b'."
            )
        self.predictor = dspy.Predict(_RUBRICS[rubric])

    def __call__(self, example: Any, prediction: Any, trace: Any = None) -> float:
        response = _pred_value(prediction, "reasoning") or ""
        response = f"{response}\n{_pred_value(prediction, 'answer')}".strip()
        with role("judge"), dspy.context(lm=self.judge_lm, trace=[]):
            out = self.predictor(question=str(_pred_value(example, "question")), response=response, temperature=0.0)
        return min(1.0, max(0.0, float(out.score)))


RUBRICS = tuple(_RUBRICS)


class JudgeItem(dspy.Signature):
    """You are a strict grader of a response to a problem. First decide whether the response's final answer is
    the same value as the gold answer: ignore formatting, units and wording, judge only the final value, and do
    not solve the problem yourself. Then rate the whole response (its reasoning or dialogue and its answer)
    from 0.0 to 1.0 on three rubrics.
    REASONING: step-by-step soundness, correct intermediate derivations, stated assumptions and handled edge
    cases, and checking of its own errors (1.0 = every step valid and checked; 0.5 = mostly sound with a gap or
    slip; 0.0 = no or invalid reasoning).
    COHERENCE: clear organisation, smooth transitions, consistent notation and terms, no contradictions
    (1.0 = perfectly organised and consistent; 0.5 = understandable with some jumps; 0.0 = disorganised or
    self-contradictory).
    HOLISTIC: usefulness to the asker, completeness and apparent correctness (1.0 = complete, useful and
    apparently correct; 0.5 = partly useful or incomplete; 0.0 = useless or clearly wrong)."""

    question: str = dspy.InputField(desc="The problem that was asked.")
    gold_answer: str = dspy.InputField(desc="The correct final answer.")
    response: str = dspy.InputField(desc="The response to grade: its reasoning or dialogue, then its answer.")
    final_answer: str = dspy.InputField(desc="The response's final answer.")
    match: bool = dspy.OutputField(desc="True if the final answer equals the gold answer.")
    reasoning_score: float = dspy.OutputField(desc="REASONING, a number in [0, 1].")
    coherence_score: float = dspy.OutputField(desc="COHERENCE, a number in [0, 1].")
    holistic_score: float = dspy.OutputField(desc="HOLISTIC, a number in [0, 1].")


@dataclass(frozen=True)
class JudgeVerdict:
    """One item's judgement: judge-verified correctness (``method`` "judge", or "rule" when the judge failed and
    the dataset's metric decided) and the quality scores in [0, 1] (None when the judge failed)."""

    correct: bool
    method: str
    scores: dict[str, float | None]
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"correct": self.correct, "method": self.method, **self.scores, "error": self.error}


class Judge:
    """The FOR paper's judge in one call per item: whether the final answer matches gold (the paper's rule for
    judged accuracy; the dataset metric decides when the judge fails, and the verdict says so) and the
    ``rubrics`` scores (reasoning, coherence, holistic). Calls run under the role ``judge`` with the judge's
    own LM, at temperature 0 and through the DSPy cache (as every LM from ``make_lm``)."""

    def __init__(
        self, judge_lm: Any, *, fallback: Callable[..., Any] = numeric_match, rubrics: Sequence[str] = RUBRICS
    ) -> None:
        unknown = sorted(set(rubrics) - set(RUBRICS))
        if unknown:
            raise ConfigError(f"Unknown rubric `{unknown[0]}`. Choose from: {', '.join(RUBRICS)}.")
        if judge_lm is None:
            raise ConfigError('A judge needs an LM: set `[judge] lm = "..."` or pass `--judge-lm SPEC`.')
        self.judge_lm, self.fallback, self.rubrics = judge_lm, fallback, tuple(rubrics) or RUBRICS
        self.predictor = dspy.Predict(JudgeItem)

    def __call__(self, example: Any, prediction: Any, response: str) -> JudgeVerdict:
        try:
            with role("judge"), dspy.context(lm=self.judge_lm, trace=[]):
                out = self.predictor(
                    question=str(_pred_value(example, "question")),
                    gold_answer=str(_pred_value(example, "answer")),
                    response=response,
                    final_answer=str(_pred_value(prediction, "answer")),
                )
            scores: dict[str, float | None] = {r: _unit(out.get(f"{r}_score")) for r in self.rubrics}
            return JudgeVerdict(bool(out.match), "judge", scores)
        except Exception as exc:  # the judge failing must not lose the item: the rule decides, and says so
            return JudgeVerdict(
                bool(self.fallback(example, prediction)),
                "rule",
                dict.fromkeys(self.rubrics),
                f"{type(exc).__name__}: {exc}",
            )


def _unit(value: Any) -> float:
    return min(1.0, max(0.0, float(value)))
