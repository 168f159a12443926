"""Self-consistency (Wang et al., 2023): k sampled chain-of-thought answers, majority vote."""

from __future__ import annotations

from collections import Counter
from typing import Any

import dspy
from dspy.signatures.signature import ensure_signature

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
    its own cache entry) and return the most common answer of the first output field."""

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
        return self._vote([self.cot(**kwargs, config=self._sample(i)) for i in range(self.k)])

    async def aforward(self, **kwargs: Any) -> dspy.Prediction:
        return self._vote([await self.cot.acall(**kwargs, config=self._sample(i)) for i in range(self.k)])

    def _sample(self, i: int) -> dict[str, Any]:
        """Sample i's LM config: its own rollout id (its own cache entry) at the sampling temperature."""
        return {"rollout_id": i, "temperature": self.temperature}

    def _vote(self, samples: list[dspy.Prediction]) -> dspy.Prediction:
        field = next(iter(self.signature.output_fields))
        votes = Counter(_vote_key(s[field]) for s in samples)
        winner, count = votes.most_common(1)[0]
        chosen = next(s for s in samples if _vote_key(s[field]) == winner)
        return dspy.Prediction(
            **{k: chosen[k] for k in chosen}, stats={"samples": float(self.k), "agreement": count / self.k}
        )
