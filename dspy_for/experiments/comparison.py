"""``dspy-for compare``: methods × datasets, one honest table, everything tracked in MLflow.

Flow: spec → one :class:`~dspy_for.experiments.tracked_run.TrackedRun` → each method × dataset opened in it (prepared,
compiled, its nested MLflow run and stored records) → every cell fed side by side, records streaming into the results
store (resume) and MLflow → the table with paired tests against the baseline and the plots, logged on the parent run
(a table or plot that fails is logged; the run and its exit code stand). A method whose every item
failed ends FAILED; any failed item makes :attr:`ComparisonResult.ok` false (the CLI then exits non-zero after
everything finished is logged). Ctrl-C or SIGTERM ends every open MLflow run KILLED, with what finished kept.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from dspy_for.experiments.core import MethodResult, load_examples, with_options
from dspy_for.experiments.core.folders import check_results_dir
from dspy_for.experiments.core.outcome import ComparisonResult
from dspy_for.experiments.core.plan import RunPlan, plan_compare
from dspy_for.experiments.core.serving import check_stored
from dspy_for.experiments.methods import BUDGET_UNIT, get_method
from dspy_for.experiments.reports import table as report
from dspy_for.experiments.reports.compiled import breakeven_of
from dspy_for.experiments.reports.recheck import log_recheck
from dspy_for.experiments.sequential import log_outcomes, run_sequential
from dspy_for.experiments.spec import DatasetConfig, ExperimentSpec, MethodConfig, load_spec
from dspy_for.experiments.spec.config import Overrides
from dspy_for.experiments.tracked_run import OpenCell, TrackedRun
from dspy_for.experiments.tracking import store

__all__ = ["ComparisonResult", "compare", "config_name", "matched_budget", "phases"]

logger = logging.getLogger("dspy_for.compare")


def compare(
    spec_or_path: ExperimentSpec | str | Path | None = None, overrides: Overrides | None = None, **kwargs: Any
) -> ComparisonResult | RunPlan:
    """Run a comparison (see the module docstring). ``overrides`` (or the same as keyword arguments, e.g.
    ``first=10``) apply and are validated whether a path or an :class:`ExperimentSpec` is given. ``dry_run=True``:
    the :class:`~dspy_for.experiments.core.plan.RunPlan` instead, with no LM built or called."""
    spec = load_spec(spec_or_path, overrides, **kwargs)
    if spec.dry_run:  # the plan before the spend: no MLflow run, no LM
        return plan_compare(spec, spec.items_dir(store.tracking_root(spec.tracking_uri)))
    root = store.setup_tracking(spec.tracking_uri, spec.experiment, traces=spec.traces)  # one not writable: refused
    run_dir = root / "compare" / spec.fingerprint()
    run_dir.mkdir(parents=True, exist_ok=True)
    examples = {d.name: load_examples(d) for d in spec.datasets}  # data that cannot be read: refused before any call
    items_dir = spec.items_dir(root)
    check_results_dir(items_dir, lambda: plan_compare(spec, items_dir))
    check_stored(spec, items_dir)  # --rerun-changed with nothing stored: refused before anything runs
    out = ComparisonResult(spec=spec, run_dir=run_dir, config=config_name(spec_or_path))
    if spec.autolog:
        store.autolog()
    tags = {"dspy_for.kind": "comparison", "dspy_for.fingerprint": spec.fingerprint()}
    tracked = TrackedRun(spec, items_dir=items_dir, name=f"compare-{spec.experiment}", tags=tags, run_dir=run_dir)
    with tracked:
        out.spend = tracked.limit
        for d in spec.datasets:
            out.results[d.name], out.errors[d.name] = {}, {}
        if spec.sequential:
            for d in spec.datasets:
                _run_sequential(tracked, out, d, examples[d.name])
        else:
            for phase in phases(spec):
                _run_together(tracked, out, phase, examples)
        _report(tracked, out)
        if spec.recheck:  # the noise floor: N stored items per cell re-run uncached, never stored
            out.recheck = tracked.recheck(out)
            if out.run_id is not None:
                tracked.report("the recheck's record", lambda: log_recheck(str(out.run_id), out.recheck))
    return out


def config_name(config: ExperimentSpec | str | Path | None) -> str | None:
    """The config a comparison ran from, as given (a path); None for a spec object or no config."""
    return str(config) if isinstance(config, str | Path) else None


def _report(tracked: TrackedRun, out: ComparisonResult) -> None:
    """The table (``summary.jsonl``, ``summary.txt``) and the plots, on the run's MLflow run and in its
    directory. A table or plot that fails is logged and leaves the run, its items and its MLflow runs as they are; a
    run whose MLflow run the tracking store could not start (its warning said why) keeps them in its directory only."""
    out.run_id = parent = tracked.run_id
    run_dir = out.run_dir
    assert run_dir is not None
    out.cells = report.summary_cells(out)
    if not tracked.report("the break-even rows", lambda: setattr(out, "breakeven", breakeven_of(out))):
        out.breakeven = []
    tracked.report("the plots", lambda: _plots(out, parent, run_dir))
    if parent is None:
        return
    tracked.report("summary.jsonl", lambda: store.log_table(parent, out.rows, "summary.jsonl"))
    if out.breakeven:
        rows = [b.row() for b in out.breakeven]
        tracked.report("breakeven.jsonl", lambda: store.log_table(parent, rows, "breakeven.jsonl"))
    tracked.report("summary.txt", lambda: store.log_text(parent, report.table_text(out), "summary.txt"))
    if not out.ok:
        store.set_tags(parent, {"dspy_for.failed_items": str(out.n_failed)})


def _plots(out: ComparisonResult, parent: str | None, run_dir: Path) -> None:
    for name, fig in report.figures(out).items():
        path = run_dir / name
        store.log_figure(parent, fig, path)  # drawn where the store is served
        out.plots.append(path)


def phases(spec: ExperimentSpec) -> list[list[MethodConfig]]:
    """The methods in the order they can run: all at once, or, when budgets are matched, the methods a budget sizes
    (their registry entry's ``sized``) after the others, whose measured cost sizes them."""
    if not spec.match_budget:
        return [list(spec.methods)]
    sized = [m for m in spec.methods if get_method(m.name).sized is not None]
    return [[m for m in spec.methods if m not in sized], sized]


def matched_budget(spec: ExperimentSpec, done: dict[str, MethodResult], m: MethodConfig) -> dict[str, Any]:
    """``m``'s options with its sized option (its registry entry's ``sized``: k samples, N attempts; a cap where the
    method stops early) set to spend about the budget reference's measured tokens per item (the run's first method
    whose entry is one) in calls of CoT's measured tokens per item, by the one budget sizer
    (:meth:`~dspy_for.experiments.methods.MethodEntry.sized_to`: the nearest whole number of calls)."""
    ref = next((done[x.label] for x in spec.methods if get_method(x.name).budget_reference and x.label in done), None)
    unit = next((done[x.label] for x in spec.methods if x.name == BUDGET_UNIT and x.label in done), None)
    if ref is None or unit is None or not ref.n_scored or not unit.n_scored:
        logger.warning(
            "match_budget needs a budget reference (a method whose registry entry sets the budget, e.g. FOR-Prompting) "
            "and a `%s` method with scored items; %s keeps its options",
            BUDGET_UNIT,
            m.label,
        )
        return m.options
    sized = get_method(m.name).sized_to(m.options, ref.tokens_per_item, max(unit.tokens_per_item, 1.0))
    if sized is None:
        logger.warning("match_budget: the budget buys %s fewer calls than it takes; it keeps its options", m.label)
        return m.options
    return sized


def _run_sequential(tracked: TrackedRun, out: ComparisonResult, d: DatasetConfig, examples: list[Any]) -> None:
    """Every method of the spec on dataset ``d`` at once, sequentially (:mod:`dspy_for.experiments.sequential`)."""
    spec = out.spec
    cells: dict[str, OpenCell] = {}
    for m in spec.methods:
        cell = tracked.open(d, m, examples)
        if cell is not None:
            cells[m.label], examples = cell, cell.run.examples
        elif (err := tracked.error(d, m)) is not None:
            out.errors[d.name][m.label] = err
    if spec.baseline not in cells:
        for cell in cells.values():
            tracked.close(cell, "FAILED")
        out.errors[d.name].setdefault(str(spec.baseline), "the baseline could not run: nothing to compare with")
        return
    results, outcomes = run_sequential(tracked, cells)
    for cell in cells.values():
        tracked.close(cell)
    out.results[d.name] = results
    out.sequential += outcomes
    if (parent := tracked.run_id) is not None:
        log_outcomes(parent, outcomes)


def _run_together(
    tracked: TrackedRun, out: ComparisonResult, methods: list[MethodConfig], examples: dict[str, Any]
) -> None:
    """``methods`` on every dataset, side by side on one pool of ``num_threads`` workers (each method × dataset a
    nested MLflow run streaming its items); ``examples`` keeps each dataset's items once loaded. With ``autolog``
    they run one after another, since mlflow.dspy.autolog traces into the one active run."""
    spec = out.spec
    cells: list[OpenCell] = []
    for d in spec.datasets:
        for m in methods:
            if spec.match_budget and get_method(m.name).sized is not None:
                m = with_options(m, matched_budget(spec, out.results[d.name], m))
            cell = tracked.open(d, m, examples.get(d.name))
            if cell is not None:
                cells.append(cell)
                examples[d.name] = cell.run.examples
            elif (err := tracked.error(d, m)) is not None:
                out.errors[d.name][m.label] = err
    for group in [[c] for c in cells] if spec.autolog else [cells]:
        if not group:
            continue
        with store.active_run(group[0].run_id or "", spec.autolog):  # autolog's DSPy traces go to the active run
            tracked.feed(group)
            tracked.settle(group, rerun=spec.rerun_changed)  # what served them; what another stack served, again
        for cell in group:
            tracked.close(cell)
            res, run = cell.result, cell.run
            out.results[run.dataset.name][run.method.label] = res
            for error, count in res.error_counts().most_common():
                logger.error("%s on %s: %d item(s) failed: %s", run.method.label, run.dataset.name, count, error)
