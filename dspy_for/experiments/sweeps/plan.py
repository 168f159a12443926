"""A sweep's plan (``--dry-run``): one trial's cost over the corners of its search space, for ``n_trials`` trials
(:class:`~dspy_for.experiments.core.plan.RunPlan`, as ``compare`` and ``advise`` plan theirs)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace
from typing import Literal

from dspy_for.experiments.core.estimates import CellEstimates, Estimate
from dspy_for.experiments.core.evidence import Evidence
from dspy_for.experiments.core.plan import RunPlan, examples_or_error, side_by_side
from dspy_for.experiments.core.plan_cells import CellPlan, compile_cell, failed_cell, options_estimates
from dspy_for.experiments.spec.model import DatasetConfig, MethodConfig
from dspy_for.experiments.sweeps.spec import SweepSpec

__all__ = ["MAX_CORNERS", "plan_sweep"]

#: the most corners of a search space a sweep's plan prices
MAX_CORNERS = 256


def plan_sweep(spec: SweepSpec) -> RunPlan:
    """A sweep's plan (``spec``: a :class:`~dspy_for.experiments.sweeps.spec.SweepSpec`): one trial's cost over the
    corners of its search space, for ``n_trials`` trials. A sweep keeps no records, so its estimates count calls from
    options at default tokens (LM time only on a local model of measured speed)."""
    d = spec.dataset
    examples, error = examples_or_error(d)
    corners = list(_corners(spec))
    ev = Evidence(spec, None)
    first = corners[0]
    if examples is None:
        cells = [failed_cell(d, corners[0], "items", error or "no items")]
        return RunPlan("sweep", cells, spec.threads, spec.max_cost, trials=spec.n_trials)
    n = len(examples) * spec.epochs
    label = "trial" if len(corners) > 1 else first.label
    first = replace(first, name=", ".join(spec.methods))  # (a row's method: every method the sweep searches)
    items = [options_estimates(ev, d, m, [], n) for m in corners]
    cells = [_over(d, replace(first, label=label), "items", n, items, len(corners))]
    if spec.compile is not None:
        compiles = [compile_cell(ev, d, m, examples, []) for m in corners]
        bad = next((c for c in compiles if c.error), None)
        cells.insert(
            0, bad or _over(d, replace(first, label=label), "compile", 1, [c.estimates for c in compiles], len(corners))
        )
    notes = [
        f"one trial at any point of the search space ({len(corners)} corners of its ranges), {spec.n_trials} trials; "
        "a pruned trial stops early, and the DSPy cache answers a repeated call for free",
        *side_by_side(spec),
    ]
    return RunPlan("sweep", cells, spec.threads, spec.max_cost, trials=spec.n_trials, notes=notes)


def _over(
    d: DatasetConfig,
    m: MethodConfig,
    step: Literal["items", "compile"],
    to_run: int,
    es: list[CellEstimates],
    corners: int,
) -> CellPlan:
    """One cell whose value is the mean over the search space's corners and whose range spans every corner's."""

    def span(xs: list[Estimate | None]) -> Estimate | None:
        if any(x is None for x in xs):
            return None
        got = [x for x in xs if x is not None]
        source = got[0].source if len(got) == 1 else f"options × default tokens, over {corners} corners of the space"
        return Estimate(sum(x.value for x in got) / len(got), min(x.low for x in got), max(x.high for x in got), source)

    calls, tokens = span([e.calls for e in es]), span([e.tokens for e in es])
    assert calls is not None and tokens is not None
    return CellPlan(
        m.label,
        m.name,
        d.name,
        d.split,
        step,
        to_run,
        0,
        calls,
        tokens,
        span([e.usd for e in es]),
        span([e.seconds for e in es]),
    )


def _corners(spec: SweepSpec) -> Iterator[MethodConfig]:
    """The trials at the corners of the search space: each range's ends, each categorical's choices."""
    space = spec.space
    spaces = space.spaces if hasattr(space, "spaces") else {str(spec.method): space}  # several methods: one each
    count = 0
    for method, s in spaces.items():
        values = []
        for p in s.params:
            ends = list(p.choices) if p.type == "categorical" else [p.low, p.high]
            values.append([int(v) if p.type == "int" and v is not None else v for v in ends])
        for point in itertools.product(*values):
            if count >= MAX_CORNERS:
                return
            count += 1
            searched = dict(zip([p.name for p in s.params], point, strict=True))
            options = {**spec.fixed_for(method), **{k: v for k, v in searched.items() if not k.startswith("compile.")}}
            table = None
            if spec.compile is not None:
                table = {**spec.compile, **{k[8:]: v for k, v in searched.items() if k.startswith("compile.")}}
            yield MethodConfig(name=method, label=method, options=options, compile=table)
