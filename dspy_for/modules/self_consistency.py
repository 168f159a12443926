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
        if not isinstance(k, int) or k < 1:
            raise ConfigError(f"`k` must be a positive integer, got {k!r}.")
        self.signature = ensure_signature(signature)
        self.k, self.temperature = k, temperature
        self.cot = dspy.ChainOfThought(self.signature)

    def forward(self, **kwargs: Any) -> dspy.Prediction:
        field = next(iter(self.signature.output_fields))
        samples = [self.cot(**kwargs, config={"rollout_id": i, "temperature": self.temperature}) for i in range(self.k)]
        votes = Counter(_vote_key(s[field]) for s in samples)
        winner, count = votes.most_common(1)[0]
        chosen = next(s for s in samples if _vote_key(s[field]) == winner)
        return dspy.Prediction(
            **{k: chosen[k] for k in chosen}, stats={"samples": float(self.k), "agreement": count / self.k}
        )
