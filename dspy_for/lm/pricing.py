"""What an LM call costs, in US dollars.

* DSPy prices every call it records (``cost`` in the LM's history entry) from litellm's cost map, which dspy-for
  reads offline (``LITELLM_LOCAL_MODEL_COST_MAP=True``: the map bundled with the installed version), with reasoning
  and cached prompt tokens where the map has their rates. A cache hit keeps the price of the call it replays.
* An LM the map does not price has **no** cost — absent from tables and metrics, never $0 — unless its price is
  given as the LM option ``price``: ``{input = 0.15, output = 0.60}`` in USD per million prompt and completion
  tokens (reasoning tokens are completion tokens). A given price wins over the map.
* The local llama.cpp models cost $0; their wall time is reported beside it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dspy_for.errors import ConfigError

__all__ = ["LOCAL_PRICE", "PRICE_ATTR", "Price", "call_cost", "is_priced", "model_price", "parse_price"]

#: the attribute of an LM object that holds its given :class:`Price` (read for every call it makes)
PRICE_ATTR = "dspy_for_price"


@dataclass(frozen=True)
class Price:
    """USD per million prompt (``input``) and completion (``output``) tokens."""

    input: float
    output: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input + completion_tokens * self.output) / 1e6


#: what a call to a local llama.cpp model costs
LOCAL_PRICE = Price(0.0, 0.0)

_FIX = "Set it as `price = {input = 0.15, output = 0.60}` (USD per million prompt and completion tokens)."


def parse_price(value: Any) -> Price:
    """The LM option ``price`` as a :class:`Price`; a :class:`ConfigError` naming the fix otherwise."""
    if isinstance(value, Price):
        return value
    if not isinstance(value, Mapping) or set(value) != {"input", "output"}:
        raise ConfigError(f"`price` must give `input` and `output`, got {value!r}. {_FIX}")
    rates = {}
    for key in ("input", "output"):
        rate = value[key]
        if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not math.isfinite(rate) or rate < 0:
            raise ConfigError(f"`price.{key}` must be a number >= 0 (USD per million tokens), got {rate!r}. {_FIX}")
        rates[key] = float(rate)
    return Price(**rates)


def call_cost(lm: Any, entry: Mapping[str, Any] | None, prompt_tokens: int, completion_tokens: int) -> float | None:
    """The USD cost of one call of ``lm``: from its given price, else as DSPy priced it (``entry["cost"]``), else
    None (unknown: never 0)."""
    price = getattr(lm, PRICE_ATTR, None)
    if isinstance(price, Price):
        return price.cost(prompt_tokens, completion_tokens)
    cost = (entry or {}).get("cost")
    if isinstance(cost, numbers.Real) and not isinstance(cost, bool) and math.isfinite(cost):
        return float(cost)
    return None


def is_priced(model: str, options: Mapping[str, Any]) -> bool:
    """Whether calls to ``model`` (an LM spec) with ``options`` will have a cost: a local model, a given ``price``,
    or a model litellm's cost map prices (looked up offline)."""
    return model_price(model, options) is not None


def model_price(model: str, options: Mapping[str, Any]) -> Price | None:
    """What calls to ``model`` (an LM spec) with ``options`` will cost, as a run prices them: the given ``price``,
    else $0 for a local model, else litellm's cost map (offline); None when nothing prices it."""
    if options.get("price") is not None:
        return parse_price(options["price"])
    if model.startswith("local/"):
        return LOCAL_PRICE
    import litellm

    try:
        info = litellm.get_model_info(model=model)
    except Exception:
        return None
    rates = info.get("input_cost_per_token"), info.get("output_cost_per_token")
    if rates[0] is None or rates[1] is None:
        return None
    return Price(float(rates[0]) * 1e6, float(rates[1]) * 1e6)
