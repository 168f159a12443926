"""One cell of a plan — a method on a dataset, and its compile step on a line of its own — estimated from the best
evidence there is (:mod:`.evidence`), in this order: the cell's own stored records; the same method, options and LMs
on another dataset or split; for a compiled method, the same method uncompiled on this dataset; else its calls per
item from its options (its registry entry's ``calls``; a reply the adapter cannot parse is asked again, so the most
is twice that) times each LM's measured tokens and seconds per call in the run's other cells, or a default token
count (no LM time then, except on a local model the registry has a measured speed of: its calls' seconds at the
slots the run serves it with). A compile step: nothing when its compiled program is stored (the run reuses it); else a
stored compile of the same method and table on another dataset or split (one measurement: ÷1.5 to ×1.5); else its
compiler's settings (:func:`~.compile_estimates.compile_work`) × the program's cost per item and the optimizer LM's
per call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import dspy

from dspy_for.errors import DspyForError
from dspy_for.experiments.core.compile_estimates import compile_work, plus, scaled
from dspy_for.experiments.core.compile_step import compile_sets
from dspy_for.experiments.core.estimates import (
    DEFAULT_CALL,
    CellEstimates,
    Estimate,
    ItemCost,
    PerCall,
    RoleCost,
    counted_estimates,
    sample_estimates,
)
from dspy_for.experiments.core.evidence import (
    Evidence,
    Found,
    found_in,
    lm_name,
    optimizer_lm_of,
    price_of,
    role_lm_of,
    role_prices,
)
from dspy_for.experiments.core.records import unit_keys
from dspy_for.experiments.methods import get_method, predictor_names
from dspy_for.experiments.spec.checks import COMPILE_ROLE
from dspy_for.experiments.spec.model import DatasetConfig, MethodConfig, RunSpec
from dspy_for.lm.options import LOCAL_PREFIX, local_slots
from dspy_for.lm.registry import get_model
from dspy_for.optimizers import COMPILERS

__all__ = ["CellPlan", "compile_cell", "items_cell"]

#: the spread of an estimate from one stored compile (another dataset's): ÷ and × this
ONE_COMPILE_SPREAD = 1.5


@dataclass(frozen=True)
class CellPlan:
    """One line of a plan: ``label`` (``method``) on ``dataset``/``split``, its items (``step = "items"``: ``to_run``
    of them, ``stored`` reused) or its compile step (``"compile"``: 1 to run, or 1 stored and reused); the calls,
    tokens, dollars (None: an LM without a price) and LM seconds (None: nothing measured an LM's time) it takes, each
    an :class:`~.estimates.Estimate` with its range and source; ``note``: how it was counted; ``error``: why the
    run could not run it (then nothing is estimated)."""

    label: str
    method: str
    dataset: str
    split: str
    step: Literal["items", "compile"]
    to_run: int
    stored: int
    calls: Estimate
    tokens: Estimate
    usd: Estimate | None
    seconds: Estimate | None
    note: str = ""
    error: str | None = None

    @property
    def source(self) -> str:
        return self.calls.source

    @property
    def estimates(self) -> CellEstimates:
        return CellEstimates(self.calls, self.tokens, self.usd, self.seconds)


def _cell(
    d: DatasetConfig,
    m: MethodConfig,
    step: Literal["items", "compile"],
    to_run: int,
    stored: int,
    e: CellEstimates,
    **kw: Any,
) -> CellPlan:
    return CellPlan(m.label, m.name, d.name, d.split, step, to_run, stored, e.calls, e.tokens, e.usd, e.seconds, **kw)


def failed_cell(d: DatasetConfig, m: MethodConfig, step: Literal["items", "compile"], error: str) -> CellPlan:
    return _cell(d, m, step, 0, 0, CellEstimates.zero("not estimated"), error=error)


def items_cell(
    ev: Evidence, d: DatasetConfig, m: MethodConfig, examples: Sequence[dspy.Example], others: Sequence[MethodConfig]
) -> CellPlan:
    """``m``'s items on ``d``: those stored (reused) and those to run, and what running them takes."""
    units = unit_keys(examples, ev.spec.epochs)
    stored = ev.stored(d, m)
    to_run = sum(1 for u in units if u not in stored)
    found = _found(ev, d, m, stored, others)
    if not to_run:
        return _cell(d, m, "items", 0, len(units), CellEstimates.zero("every item is stored"))
    if found is None:
        return _cell(d, m, "items", to_run, len(units) - to_run, options_estimates(ev, d, m, others, to_run))
    prices = role_prices(ev.spec, m, {r for cost in found.costs for r in cost})
    e = sample_estimates(found.costs, to_run, prices, found.source)
    if e.seconds is None:  # the records were answered from the cache: their calls at the LMs' measured seconds
        e = replace(e, seconds=_timed_calls(ev, d, m, found, others, e.calls))
    return _cell(d, m, "items", to_run, len(units) - to_run, e)


def _timed_calls(
    ev: Evidence, d: DatasetConfig, m: MethodConfig, found: Found, others: Sequence[MethodConfig], calls: Estimate
) -> Estimate | None:
    """LM seconds of ``calls`` (its range as its calls') at each role's mean calls per item in ``found`` and its LM's
    measured seconds per call in the run's other cells; None when an LM's time was never measured."""
    per_item = 0.0
    sources = []
    for r in {r for cost in found.costs for r in cost}:
        mean_calls = sum(cost[r].calls for cost in found.costs if r in cost) / len(found.costs)
        per = ev.role_calls(d, others, m, r)
        if mean_calls and (per is None or per.seconds is None):
            return None
        if per is not None and per.seconds is not None:
            per_item += mean_calls * per.seconds
            sources.append(per.source)
    total_calls = sum(sum(c.calls for c in cost.values()) for cost in found.costs) / len(found.costs)
    if not total_calls or not calls.value:
        return None
    k = calls.value / total_calls  # items
    source = f"{found.source} × {'; '.join(sorted(set(sources)))} seconds per call"
    return Estimate(
        k * per_item, k * per_item * calls.low / calls.value, k * per_item * calls.high / calls.value, source
    )


def _found(
    ev: Evidence, d: DatasetConfig, m: MethodConfig, stored: dict[str, Any], others: Sequence[MethodConfig]
) -> Found | None:
    """The best stored records for ``m`` on ``d``: its own, the same method elsewhere (:func:`rescaled`), the method
    uncompiled (:func:`with_demos`)."""
    own = found_in(stored.values(), "this cell's records", "own")
    if own is not None:
        return own
    found = ev.elsewhere(d, m)
    if found is not None:
        return rescaled(ev, d, m, found, others)
    if m.compile:
        found = plain_found(ev, d, m, others)
        return with_demos(found, demo_count(m)) if found is not None else None
    return None


def plain_found(ev: Evidence, d: DatasetConfig, m: MethodConfig, others: Sequence[MethodConfig]) -> Found | None:
    """The records of ``m`` without its compile step: on ``d``, else elsewhere (:func:`rescaled`)."""
    plain = replace(m, compile=None)
    found = ev.uncompiled(d, m)
    if found is None:
        found = ev.elsewhere(d, plain)
        found = rescaled(ev, d, plain, found, others) if found is not None else None
    return found


def demo_count(m: MethodConfig) -> int:
    """The demos ``m``'s compile step puts in each predictor's prompt (its compiler's demo settings; 0: none)."""
    step = m.compile_step
    if step is None or step.kind not in ("bootstrap", "mipro_fewshot"):
        return 0
    build, _ = COMPILERS[step.kind].split(step.options)
    return int(build.get("max_bootstrapped_demos", 4)) + int(build.get("max_labeled_demos", 0))


def with_demos(found: Found, demos: int) -> Found:
    """The uncompiled program's records with ``demos`` demos in every call's prompt, each about a call's completion
    and a quarter of its prompt (its question: a rule fit on this project's CoT on GSM8K and BBH object counting)."""
    if not demos:
        return found

    def grown(c: RoleCost) -> RoleCost:
        demo = (c.completion + c.prompt / 4) / c.calls if c.calls else 0.0
        return replace(c, prompt=c.prompt + c.calls * demos * demo)

    costs: list[ItemCost] = [{r: grown(c) for r, c in cost.items()} for cost in found.costs]
    return replace(found, costs=costs, source=f"{found.source} with {demos} demos a prompt")


def rescaled(ev: Evidence, d: DatasetConfig, m: MethodConfig, found: Found, others: Sequence[MethodConfig]) -> Found:
    """Records from another dataset or split: their calls per item, at the tokens and seconds per call the run's other
    cells measured for each role's LM on ``d`` (when every role's LM was measured here; else as they are)."""
    per: dict[str, PerCall] = {}
    for r in {r for cost in found.costs for r in cost}:
        measured = ev.role_calls(d, others, m, r)
        if measured is None:
            return found
        per[r] = measured

    def here(r: str, c: RoleCost) -> RoleCost:
        p = per[r]
        seconds = None if p.seconds is None else c.calls * p.seconds
        return RoleCost(c.calls, c.calls * p.prompt, c.calls * p.completion, seconds)

    costs: list[ItemCost] = [{r: here(r, c) for r, c in cost.items()} for cost in found.costs]
    return replace(found, costs=list(costs), source=f"{found.source}: its calls per item × {measured_calls(d, per)}")


def options_estimates(
    ev: Evidence, d: DatasetConfig, m: MethodConfig, others: Sequence[MethodConfig], n: float
) -> CellEstimates:
    """``n`` items of ``m`` from its calls per item (its options) × each role's LM's tokens and seconds per call."""
    declared = get_method(m.name).calls_per_item(m.options)
    calls = {r: (float(lo), (lo + hi) / 2, 2.0 * hi) for r, (lo, hi) in declared.items()}
    per: dict[str, PerCall] = {}
    speeds: list[str] = []
    for r in calls:
        per[r], speed = at_local_speed(ev.spec, m, r, ev.role_calls(d, others, m, r) or DEFAULT_CALL)
        speeds += [speed] if speed else []
    source = f"{m.name}'s options × " + measured_calls(d, per)
    if speeds:
        source += "; LM time at " + ", ".join(sorted(set(speeds)))
    return counted_estimates(calls, per, role_prices(ev.spec, m, calls), n, source)


def at_local_speed(spec: RunSpec, m: MethodConfig, role: str, per: PerCall) -> tuple[PerCall, str | None]:
    """``per`` with seconds, when nothing measured them and ``role`` runs on a local model whose speed the registry
    has for the slots the run serves it with (:meth:`~dspy_for.lm.registry.ModelSpeed.call_seconds`), and what the
    plan says of it; else ``per`` as it is and None."""
    lm = role_lm_of(spec, m, role)
    slots = local_slots(lm, spec.lm_options_for(role))
    if per.seconds is not None or slots is None:
        return per, None
    name = lm[len(LOCAL_PREFIX) :] if isinstance(lm, str) else str(getattr(lm, "local_name", ""))
    seconds = get_model(name).speed.call_seconds(per.prompt, per.completion, slots)
    if seconds is None:
        return per, None
    return replace(per, seconds=seconds), f"{name}'s measured speed with {slots} slot(s) (models.toml)"


def measured_calls(d: DatasetConfig, per: Mapping[str, PerCall]) -> str:
    """Where the calls' tokens and seconds come from: the cells that measured them on ``d``, or the default."""
    cells = sorted({c for p in per.values() for c in p.cells})
    defaults = sorted(r for r, p in per.items() if not p.cells)
    measured = (
        "" if not cells else "calls measured in " + (", ".join(cells) if len(cells) <= 3 else f"{len(cells)} cells")
    )
    if measured and defaults:
        return f"{measured} on {d.name}/{d.split}; default tokens for {', '.join(defaults)}"
    return f"{measured} on {d.name}/{d.split}" if measured else "default tokens"


def compile_cell(
    ev: Evidence, d: DatasetConfig, m: MethodConfig, examples: Sequence[dspy.Example], others: Sequence[MethodConfig]
) -> CellPlan:
    """``m``'s compile step on ``d`` (``m.compile`` is set)."""
    kind = m.compile_step.kind if m.compile_step is not None else ""
    if ev.cached_compile(d, m) is not None:
        return _cell(
            d, m, "compile", 0, 1, CellEstimates.zero("the compiled program is stored"), note=f"{kind}: reused"
        )
    stored = ev.compile_elsewhere(d, m)
    if stored is not None:
        cost, seconds, source = stored
        prices = role_prices(ev.spec, m, cost)
        one = sample_estimates([cost], 1, prices, source)
        if seconds is not None:
            one = replace(one, seconds=Estimate.exact(float(seconds), source))
        return _cell(d, m, "compile", 1, 0, _spread(one, ONE_COMPILE_SPREAD), note=kind)
    try:
        train, val, _ = compile_sets(m, d, examples)
    except (DspyForError, OSError) as exc:
        return failed_cell(d, m, "compile", f"{type(exc).__name__}: {exc}")
    step = m.compile_step
    assert step is not None
    plain = replace(m, compile=None)
    found = plain_found(ev, d, m, others)
    work = compile_work(
        kind,
        step.options,
        predictors=len(predictor_names(m.name, m.options)),
        train=len(train),
        val=len(val),
        accuracy=found.accuracy if found else None,
    )
    if found is not None:
        prices = role_prices(ev.spec, plain, {r for cost in found.costs for r in cost})
        per_run = _mean(sample_estimates(found.costs, 1, prices, found.source))
        if per_run.seconds is None:
            per_run = replace(per_run, seconds=_timed_calls(ev, d, plain, found, others, per_run.calls))
    else:
        per_run = options_estimates(ev, d, plain, others, 1)
    source = f"{kind} settings × {per_run.calls.source}"
    e = scaled(per_run, work.runs, source)
    if work.optimizer[2]:
        lm = optimizer_lm_of(ev.spec, m)
        name = lm_name(lm)
        per = ev.lm_calls(d, others, name, optimizer=True) or ev.lm_calls(d, others, name, optimizer=False)
        per = per or DEFAULT_CALL
        where = measured_calls(d, {COMPILE_ROLE: per})
        price = {COMPILE_ROLE: price_of(ev.spec, lm, COMPILE_ROLE)}
        optimizer = counted_estimates({COMPILE_ROLE: work.optimizer}, {COMPILE_ROLE: per}, price, 1, where)
        e = plus(e, optimizer, f"{source}; optimizer calls × {per.source if per.cells else where}")
    return _cell(d, m, "compile", 1, 0, e, note=f"{kind}: {work.what}")


def _mean(e: CellEstimates) -> CellEstimates:
    """The value alone (a mean per run: over many runs the per-item spread averages out)."""

    def one(x: Estimate | None) -> Estimate | None:
        return None if x is None else Estimate.exact(x.value, x.source)

    calls, tokens = one(e.calls), one(e.tokens)
    assert calls is not None and tokens is not None
    return CellEstimates(calls, tokens, one(e.usd), one(e.seconds))


def _spread(e: CellEstimates, k: float) -> CellEstimates:
    def one(x: Estimate | None) -> Estimate | None:
        return None if x is None else Estimate(x.value, x.value / k, x.value * k, x.source)

    calls, tokens = one(e.calls), one(e.tokens)
    assert calls is not None and tokens is not None
    return CellEstimates(calls, tokens, one(e.usd), one(e.seconds))
