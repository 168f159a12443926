"""The LLM judge (the FOR paper's evaluation): :class:`Judge` gives, in one call per item, judge-verified accuracy
and quality scores in [0, 1] on the rubrics ``reasoning``, ``coherence``, ``holistic`` (what ``[judge]`` in a
comparison or sweep uses). It calls its own LM under the usage role ``judge``, at temperature 0, with an empty trace.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError

from dspy_for.errors import ConfigError
from dspy_for.lm.usage import role
from dspy_for.metrics import field_value, numeric_match

__all__ = ["RUBRICS", "Judge", "JudgeVerdict"]


RUBRICS = ("reasoning", "coherence", "holistic")


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
                    question=str(field_value(example, "question")),
                    gold_answer=str(field_value(example, "answer")),
                    response=response,
                    final_answer=str(field_value(prediction, "answer")),
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
