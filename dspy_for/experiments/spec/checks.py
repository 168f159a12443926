"""Checks of a run specification that need more than its own fields: prices (``max_cost``) and whether repeated
items can differ (``epochs``). Both run before any LM call."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from dspy_for.errors import ConfigError
from dspy_for.experiments.methods import get_method
from dspy_for.lm.pricing import is_priced

if TYPE_CHECKING:
    from dspy_for.experiments.spec.model import ExperimentSpec, RunSpec

__all__ = ["check_epochs_sample", "check_priced"]


def check_priced(spec: RunSpec, roles: Iterable[str]) -> None:
    """``max_cost`` counts dollars: every LM of the run must have a price (litellm's map, ``price``, local)."""
    for r in sorted(roles):
        for lm in {spec.lm_for(r), *spec._method_lms(r)}:
            if isinstance(lm, str) and not is_priced(lm, spec.lm_options_for(r)):
                raise ConfigError(
                    f"`max_cost` needs a price for every LM, and litellm's cost map has none for `{lm}` (role "
                    f"`{r}`): give it one with `--lm-option price={{input=0.15, output=0.60}}` (USD per million "
                    "tokens; `role_lm_options` for one role), or drop `max_cost`."
                )


def check_epochs_sample(spec: ExperimentSpec) -> None:
    """Repeats must be able to differ: with ``epochs > 1`` every method must sample somewhere (an LM at a
    temperature above 0, or a temperature of its own, as self-consistency has)."""
    if spec.epochs == 1:
        return
    for m in spec.methods:
        registered = get_method(m.name)
        own, temperature = registered.split_options(m.options)
        if {**registered.defaults, **own}.get("temperature"):
            continue
        temps = []
        for r in registered.roles:
            lm = spec.lm_for(r, m.role_lms)
            if isinstance(lm, str):
                temps.append(spec.lm_build_options(lm, r, temperature)["temperature"])
            else:
                temps.append(temperature if temperature is not None else (lm.kwargs or {}).get("temperature"))
        if all(t == 0 for t in temps):
            raise ConfigError(
                f"`epochs = {spec.epochs}` repeats each item, but method `{m.label}` answers at temperature 0: its "
                "repeats replay the first from the DSPy cache, or differ only by chance. Set a sampling temperature "
                "(`--lm-option temperature=0.7`, or `temperature` in the method's options) or drop `epochs`."
            )
