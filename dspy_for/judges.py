"""LLM judges (the FOR paper's evaluation): judge-verified accuracy and quality scores in [0, 1].

* :class:`JudgeMatch` — judge-verified accuracy (a judge LM, falling back to the numeric rule).
* :class:`QualityJudge` — one rubric's score (``reasoning``, ``coherence``, ``holistic``).
* :class:`Judge` — both in one call per item (what ``[judge]`` in a comparison or sweep uses).

Judges call their own LM under the usage role ``judge``, at temperature 0, with an empty trace.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError

from dspy_for.errors import ConfigError
from dspy_for.lm import resolve_lm
from dspy_for.lm.usage import role
from dspy_for.metrics import _pred_value, numeric_match

__all__ = ["RUBRICS", "Judge", "JudgeMatch", "JudgeVerdict", "QualityJudge"]


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
        """The verdict on one item. An unreadable verdict falls back to the rule and says so; an LM failure of
        the judge is raised (an error, never a verdict)."""
        try:
            with role("judge"), dspy.context(lm=self.judge_lm, trace=[]):
                out = self.predictor(
                    question=str(_pred_value(example, "question")),
                    gold_answer=str(_pred_value(example, "answer")),
                    response=response,
                    final_answer=str(_pred_value(prediction, "answer")),
                )
        except AdapterParseError as exc:  # the judge answered unreadably: the paper's rule decides, recorded
            return JudgeVerdict(
                bool(self.fallback(example, prediction)),
                "rule",
                dict.fromkeys(self.rubrics),
                f"{type(exc).__name__}: {exc}",
            )
        scores: dict[str, float | None] = {r: _unit(out.get(f"{r}_score")) for r in self.rubrics}
        return JudgeVerdict(bool(out.match), "judge", scores)


def _unit(value: Any) -> float:
    return min(1.0, max(0.0, float(value)))
