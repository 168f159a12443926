"""Self-consistency (Wang et al., 2023): k sampled chain-of-thought answers, majority vote."""

from __future__ import annotations

from collections import Counter
from typing import Any

import dspy
from dspy.signatures.signature import ensure_signature
from dspy.utils.exceptions import AdapterParseError

from dspy_for.errors import ConfigError
from dspy_for.metrics import extract_number

__all__ = ["SelfConsistency"]


def _vote_key(value: Any) -> Any:
    number = extract_number(value) if not isinstance(value, bool) else None
    if number is not None:
        return round(number, 6)
    return str(value).strip().lower()


class SelfConsistency(dspy.Module):
    """Sample ``k`` chain-of-thought answers at ``temperature`` (distinct rollout ids, so each sample is
    its own cache entry) and return the most common answer of the first output field among the readable
    samples: an unreadable sample (its output does not parse) casts no vote, as in the paper's vote over the
    parsed answers; with none readable the item is unreadable (its last parse error is raised). A failed LM
    call is raised as it is. ``stats``: ``samples`` (k), ``readable``, and ``agreement`` (the share of the
    readable samples that gave the chosen answer)."""

    def __init__(self, signature: str | type[dspy.Signature], k: int = 5, temperature: float = 0.7) -> None:
        super().__init__()
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"`k` must be a positive integer, got {k!r}.")
        if isinstance(temperature, bool) or not isinstance(temperature, int | float) or temperature < 0:
            raise ConfigError(f"`temperature` must be a number >= 0, got {temperature!r}.")
        self.signature = ensure_signature(signature)
        self.k, self.temperature = k, temperature
        self.cot = dspy.ChainOfThought(self.signature)

    def forward(self, **kwargs: Any) -> dspy.Prediction:
        return self._vote([self._read(kwargs, i) for i in range(self.k)])

    async def aforward(self, **kwargs: Any) -> dspy.Prediction:
        return self._vote([await self._aread(kwargs, i) for i in range(self.k)])

    def _read(self, inputs: dict[str, Any], i: int) -> dspy.Prediction | AdapterParseError:
        try:
            return self.cot(**inputs, config=self._sample(i))
        except AdapterParseError as unreadable:
            return unreadable

    async def _aread(self, inputs: dict[str, Any], i: int) -> dspy.Prediction | AdapterParseError:
        try:
            return await self.cot.acall(**inputs, config=self._sample(i))
        except AdapterParseError as unreadable:
            return unreadable

    def _sample(self, i: int) -> dict[str, Any]:
        """Sample i's LM config: its own rollout id (its own cache entry) at the sampling temperature."""
        return {"rollout_id": i, "temperature": self.temperature}

    def _vote(self, samples: list[dspy.Prediction | AdapterParseError]) -> dspy.Prediction:
        readable = [s for s in samples if isinstance(s, dspy.Prediction)]
        if not readable:
            raise next(s for s in reversed(samples) if isinstance(s, AdapterParseError))
        field = next(iter(self.signature.output_fields))
        votes = Counter(_vote_key(s[field]) for s in readable)
        winner, count = votes.most_common(1)[0]
        chosen = next(s for s in readable if _vote_key(s[field]) == winner)
        stats = {"samples": float(self.k), "readable": float(len(readable)), "agreement": count / len(readable)}
        return dspy.Prediction(**{k: chosen[k] for k in chosen}, stats=stats)
