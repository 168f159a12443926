"""The LMs of a run with nothing to run: every item it may score is stored already, so none is built and no server
is started or model pulled; the table, the MLflow run and the plots come from the stored records::

    default, role_lms = stored_lms(spec, method)      # each role's LM as the config names it, never called

A :class:`StoredLM` knows what a built LM would tell the run about itself without building it — the ``model`` name
the run reports (a local model's served alias, from the registry), the price its calls are counted at (a given
``price``, $0 for a local model; otherwise none, as for a built LM priced by litellm per call), its sampling options
— and refuses to be called. What serves it now is not known (an embedded server says so once it runs, an endpoint in
its answers): the table marks no stored record as served by another stack, as after any run in which nothing ran.
:func:`configured_lm` is the one place that reads a role's LM name and price from the config alone
(``dspy_for.experiments.load_results`` reads it too).
"""

from __future__ import annotations

from typing import Any

import dspy

from dspy_for.experiments.methods import get_method
from dspy_for.experiments.spec.model import LMLike, MethodConfig, RunSpec
from dspy_for.lm.options import LOCAL_PREFIX
from dspy_for.lm.pricing import LOCAL_PRICE, PRICE_ATTR, Price, parse_price

__all__ = ["StoredLM", "configured_lm", "describe", "stored_lm", "stored_lms"]


class StoredLM(dspy.BaseLM):
    """A role's LM in a run whose every item is stored (see the module docstring): its name, price and sampling options
    from the config; calling it is an error (nothing in such a run calls an LM)."""

    def __init__(self, spec: str, model: str, options: dict[str, Any], price: Price | None) -> None:
        sampling = {k: options[k] for k in ("temperature", "max_tokens") if options.get(k) is not None}
        super().__init__(model=model, cache=False, num_retries=0, **sampling)
        self.spec, self.prompt_cache = spec, options.get("prompt_cache", True)
        if price is not None:
            setattr(self, PRICE_ATTR, price)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self.spec} was not built: every item of this run is stored, so it calls no LM (a bug)")

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        self.__call__()

    def describe(self) -> dict[str, Any]:
        """The LM as the run's MLflow params show a built one, from the config (no endpoint or server address)."""
        from dspy_for.lm.registry import get_model

        out: dict[str, Any] = {"model": self.model, **{k: v for k, v in self.kwargs.items() if v is not None}}
        if self.spec.startswith(LOCAL_PREFIX):
            out["spec"] = self.spec
            out["model_sha256"] = get_model(self.spec[len(LOCAL_PREFIX) :]).sha256
            if not self.prompt_cache:
                out["prompt_cache"] = False
        return out


def configured_lm(lm: LMLike, options: dict[str, Any]) -> tuple[str, Price | None]:
    """The ``model`` name an LM built from ``lm`` (a spec string or an LM object) with ``options`` reports, and the
    price its calls are counted at (None: none given; litellm prices a hosted model's calls one by one)."""
    if isinstance(lm, dspy.BaseLM):
        price = getattr(lm, PRICE_ATTR, None)
        return str(getattr(lm, "model", None) or type(lm).__name__), price if isinstance(price, Price) else None
    given = parse_price(options["price"]) if options.get("price") is not None else None
    if lm.startswith(LOCAL_PREFIX):
        from dspy_for.lm.server import alias_for  # a local model's served name: its alias, no server started

        return f"hosted_vllm/{alias_for(lm[len(LOCAL_PREFIX) :])}", given or LOCAL_PRICE
    return lm, given


def stored_lm(spec: RunSpec, lm: LMLike, role_name: str | None, temperature: float | None = None) -> dspy.BaseLM:
    """``lm`` of ``role_name`` as :func:`~dspy_for.experiments.core.prepare.role_lm` would build it, never built: a
    :class:`StoredLM` for a spec string, a user's LM object as it is."""
    if isinstance(lm, dspy.BaseLM):
        return lm
    options = spec.lm_build_options(lm, role_name, temperature)
    model, price = configured_lm(lm, options)
    return StoredLM(lm, model, options, price)


def stored_lms(
    spec: RunSpec, method: MethodConfig, temperature: float | None = None
) -> tuple[dspy.BaseLM, dict[str, dspy.BaseLM]]:
    """The run's default LM and each role's, as :func:`~dspy_for.experiments.core.prepare.build_lms` would build them
    (:func:`stored_lm`)."""
    roles = get_method(method.name).roles
    default = stored_lm(spec, spec.lm, None, temperature)
    return default, {r: stored_lm(spec, spec.lm_for(r, method.role_lms), r, temperature) for r in roles}


def describe(lm: dspy.BaseLM) -> dict[str, Any]:
    """What the run's MLflow params say of ``lm`` (:func:`~dspy_for.lm.describe_lm`; a :class:`StoredLM` from its
    config)."""
    from dspy_for.lm import describe_lm

    return lm.describe() if isinstance(lm, StoredLM) else describe_lm(lm)
