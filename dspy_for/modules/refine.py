"""``dspy.Refine`` over chain of thought with a label-free reward: the answer parses (the ``refine`` baseline)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import dspy

from dspy_for.errors import ConfigError

__all__ = ["answer_parses_reward", "refine_cot"]


def answer_parses_reward(signature: Any) -> Callable[[Mapping[str, Any], dspy.Prediction], float]:
    """Label-free reward for dspy.Refine: 1.0 when every output field of the task's ``signature`` is present
    and non-empty (the reasoning ChainOfThought adds does not count), else 0.0."""
    outputs = list(dspy.ensure_signature(signature).output_fields)

    def answer_parses(args: Mapping[str, Any], pred: dspy.Prediction) -> float:
        return float(all(str(pred.get(name, "")).strip() not in ("", "None") for name in outputs))

    return answer_parses


def refine_cot(signature: Any, *, N: int, threshold: float) -> dspy.Module:
    """``dspy.Refine(dspy.ChainOfThought(signature))``: up to ``N`` attempts until :func:`answer_parses_reward` reaches
    ``threshold``."""
    if isinstance(N, bool) or not isinstance(N, int) or N < 1:
        raise ConfigError(f"`N` must be a positive integer (attempts), got {N!r}.")
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise ConfigError(f"`threshold` must be a number, got {threshold!r}.")
    reward = answer_parses_reward(signature)
    return dspy.Refine(dspy.ChainOfThought(signature), N=N, reward_fn=reward, threshold=threshold)
