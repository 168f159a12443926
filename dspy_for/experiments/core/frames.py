"""Results as pandas data frames: what ``to_pandas(level=...)`` of a comparison returns (an advice's and a sweep's
frames are built from the same rows and columns: :mod:`dspy_for.experiments.advisor.result`,
:mod:`dspy_for.experiments.sweeps.sweep`).

Every frame reads the typed results the printed tables read — a comparison's cells are its
:class:`~dspy_for.experiments.core.cell.Cell` s (the same :class:`~dspy_for.experiments.core.summary.Summary` the
table prints, each number under its declared column), its items the stored records — and never works a number out
again. Each column is declared once, with its type (:mod:`~dspy_for.experiments.core.frame_columns`).

Levels:

* ``items``: one row per item × method × epoch (a record: its answer, score, error, tokens, dollars and seconds in
  total and per role, whether DSPy's cache served it, what served it, its MLflow trace);
* ``cells``: one row per method × dataset (its status, n, accuracy and its interval, Δ against the baseline with its
  test, tokens, dollars and seconds per item, compile cost, break-even);
* ``pairs``: one row per paired test the run made (each method against the baseline, on accuracy and on each judge
  score; a sequential comparison's anytime-valid pairs; an advice's candidate pairs);
* ``trials``: a sweep's trials, each trial's options as columns (a sweep keeps no item records).

Every row says where it came from: the MLflow run, the experiment, the config file and each role's LM
(``run_id``, ``experiment``, ``config``, ``lm.<role>``). One flattening rule names every column that holds a value per
key (per role, per LM, per stat): ``<name>.<key>``, where ``<name>`` is the column of its total when there is one
(``tokens_per_item.defender`` beside ``tokens_per_item``, ``cost.host`` beside ``cost``), else the field's own name
(``stats.rounds_used``, ``compile.tokens``, ``options.rounds``); nested keys join with more dots. A number that was
not measured (an unpriced LM's dollars, a method with nothing scored) is missing, never 0. pandas is imported on
first use.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from dspy_for.errors import ConfigError
from dspy_for.experiments.core.cell import Cell
from dspy_for.experiments.core.costs import BreakEvenRow
from dspy_for.experiments.core.frame_columns import CELL_COLUMNS, ITEM_COLUMNS, PAIR_COLUMNS, typed_frame
from dspy_for.experiments.core.pairs import BaselinePair
from dspy_for.experiments.core.records import ItemResult, MethodResult
from dspy_for.experiments.core.summary import MEASURES
from dspy_for.experiments.methods import get_method
from dspy_for.experiments.spec.measures import plain
from dspy_for.experiments.spec.model import ExperimentSpec, RunSpec
from dspy_for.lm.usage import Usage
from dspy_for.stats import SequentialResult

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "LEVELS",
    "Comparison",
    "cell_rows",
    "check_level",
    "comparison_frame",
    "comparisons_frame",
    "flatten",
    "item_rows",
    "lm_names",
    "method_order",
    "pair_rows",
    "provenance",
    "record_rows",
    "sequential_row",
]

#: the levels each result has (``to_pandas(level=...)``)
LEVELS: dict[str, tuple[str, ...]] = {
    "comparison": ("items", "cells", "pairs"),
    "advice": ("items", "cells", "pairs"),
    "sweep": ("trials",),
}


class Comparison(Protocol):
    """What a comparison's frames read (a :class:`~dspy_for.experiments.core.outcome.ComparisonResult`)."""

    spec: ExperimentSpec
    results: dict[str, dict[str, MethodResult]]
    cells: list[Cell]
    breakeven: list[BreakEvenRow]
    sequential: list[BaselinePair]
    missing: dict[str, dict[str, int]]
    run_id: str | None
    config: str | None


def check_level(kind: str, level: str) -> None:
    """A ``level`` that ``kind``'s result does not have fails, naming the ones it has."""
    levels = LEVELS[kind]
    if level not in levels:
        extra = " (a sweep keeps no item records)" if kind == "sweep" else ""
        raise ConfigError(
            f"`level` must be one of {', '.join(levels)} for a {kind}{extra}, got {level!r}: pass one of them "
            f"(to_pandas(level={levels[-1]!r}), `--level {levels[-1]}`)."
        )


def flatten(name: str, value: object, out: dict[str, Any]) -> None:
    """The one flattening rule: a mapping becomes ``<name>.<key>`` columns (nested keys join with dots), a list or
    tuple one JSON text, anything else one column ``name``."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            flatten(f"{name}.{key}", inner, out)
    elif isinstance(value, list | tuple):
        out[name] = json.dumps(value, default=str, ensure_ascii=False)
    else:
        out[name] = value


# ------------------------------------------------------------------------------------------- provenance


def lm_names(spec: RunSpec, method: str, role_lms: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Each role's LM as the run's spec names it (a model string, or an LM object's ``model``), for ``method``'s
    roles (with its own ``role_lms``) and the judge's."""
    roles = {r: spec.lm_for(r, role_lms) for r in get_method(method).roles}
    judge = getattr(spec, "judge", None)
    if judge is not None:
        roles["judge"] = judge.lm
    return {
        r: lm if isinstance(lm, str) else str(getattr(lm, "model", None) or type(lm).__name__)
        for r, lm in roles.items()
    }


def provenance(run_id: str | None, spec: RunSpec, config: str | None, lms: Mapping[str, str]) -> dict[str, Any]:
    """Where a row comes from: the run, its experiment, its config, each role's LM (``lm.<role>``)."""
    return {"run_id": run_id, "experiment": spec.experiment, "config": config, **{f"lm.{r}": n for r, n in lms.items()}}


def _origin(result: Comparison, label: str) -> dict[str, Any]:
    m = next((m for m in result.spec.methods if m.label == label), None)
    lms = lm_names(result.spec, m.name, m.role_lms) if m is not None else {}
    return provenance(result.run_id, result.spec, result.config, lms)


def method_order(result: Comparison) -> list[str]:
    """The methods in the order the table shows them (its cells'; then the spec's)."""
    return list(dict.fromkeys([*(c.label for c in result.cells), *(m.label for m in result.spec.methods)]))


# ------------------------------------------------------------------------------------------------ items


def item_row(item: ItemResult, head: Mapping[str, Any], cost: Mapping[str | None, float | None]) -> dict[str, Any]:
    """One record as a row: ``head`` (dataset, split, method, method_name, provenance), then the record's own
    columns; ``cost``: its total (key None) and per role, priced as its cell is
    (:meth:`~dspy_for.experiments.core.records.MethodResult.record_costs`)."""
    usage = Usage.from_dict(item.usage)
    total = usage.total
    row: dict[str, Any] = {
        **head,
        "item_id": item.id,
        "item_key": item.item_key,
        "epoch": item.epoch,
        "question": item.question,
        "gold": None if item.gold is None else str(item.gold),
        "answer": None if item.failed else item.answer,
        "score": None if item.failed else item.score,  # an LM failure is an error, never a score
        "failed": item.failed,
        "unparsed": item.unparsed,
        "error_class": item.error_class,
        "error": item.error,
        "tokens": total.served_tokens,
        "calls": total.calls,
        "cost": cost.get(None),
        "seconds": item.wall_time,
        "cache_served": total.cached_calls > 0,
        "served_by": "; ".join(item.served_by) or None,
        "started_at": item.started_at,
        "origin": item.origin,
    }
    for role, r in usage.roles.items():
        row[f"tokens.{role}"] = r.served_tokens
        row[f"calls.{role}"] = r.calls
        row[f"cost.{role}"] = cost.get(role)
        row[f"seconds.{role}"] = r.wall_time
    if item.judge is not None:
        flatten("judge", {k: v for k, v in item.judge.items() if k != "lm"}, row)
    return row


def record_rows(result: Comparison) -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    """Every record of every method on every dataset, in the run's order, each with what identifies it: its results
    file and record key (two results that read one file share its records), else its place in this result."""
    splits = {d.name: d.split for d in result.spec.datasets}
    names = {m.label: m.name for m in result.spec.methods}
    out = []
    for dataset, by_label in result.results.items():
        for label, r in by_label.items():
            head = {"dataset": dataset, "split": splits.get(dataset, ""), "method": label}
            head["method_name"] = names.get(label, label)
            head.update(_origin(result, label))
            where = (str(r.store),) if r.store is not None else (str(id(result)), dataset, label)
            for item, cost in zip(r.items, r.record_costs(), strict=True):
                row = {**item_row(item, head, cost), "trace_id": r.trace_ids.get(item.key)}
                out.append(((*where, item.key), row))
    return out


def item_rows(result: Comparison) -> list[dict[str, Any]]:
    """Every record of ``result`` as a row (:func:`record_rows`)."""
    return [row for _, row in record_rows(result)]


# ------------------------------------------------------------------------------------------------ cells


def cell_row(
    cell: Cell, origin: Mapping[str, Any], breakeven: Iterable[BreakEvenRow] = (), missing: int | None = None
) -> dict[str, Any]:
    """One cell as a row: its status, each declared measure of its summary under its column (a mapping's per key:
    ``tokens_per_item.<role>``; its compile cost ``compile.*``; its judge's ``judge.*``), what served it, where it
    comes from, and its break-even volumes against each other method (``breakeven.<against>``; in tokens, one per LM:
    ``breakeven.<against>.<lm>``)."""
    row: dict[str, Any] = {
        "dataset": cell.dataset,
        "split": cell.split,
        "method": cell.label,
        "method_name": cell.method,
        "status": cell.status,
        "error": cell.error,
        "missing": missing,
        **origin,
    }
    s = cell.summary
    if s is None:
        return row
    for m in MEASURES:
        value = getattr(s, m.name)
        if not m.in_frame or (value is None and m.keyed):
            continue
        flatten(m.column, "; ".join(value) if m.kind == "list" and value is not None else plain(value), row)
    row["served_by"] = "; ".join(s.served_by) or None
    if cell.diagnostics:
        flatten("diagnostics", cell.diagnostics, row)
    mine = [b for b in breakeven if b.dataset == cell.dataset and b.method == cell.label]
    per_lm = {b.against for b in mine if sum(1 for x in mine if x.against == b.against) > 1}
    for b in mine:
        row[f"breakeven.{b.against}" + (f".{b.lm}" if b.against in per_lm else "")] = b.volume
    return row


def cell_rows(result: Comparison) -> list[dict[str, Any]]:
    """One row per cell of ``result`` (its :attr:`cells`, in the table's order)."""
    return [
        cell_row(
            cell,
            _origin(result, cell.label),
            result.breakeven,
            result.missing.get(cell.dataset, {}).get(cell.label, 0) if result.missing else None,
        )
        for cell in result.cells
    ]


# ------------------------------------------------------------------------------------------------ pairs


def pair_rows(result: Comparison) -> list[dict[str, Any]]:
    """Each paired test of ``result``: every method against the baseline on the items both scored (accuracy, then
    each judge score with a difference), then a sequential comparison's anytime-valid pairs."""
    rows = []
    baseline = result.spec.baseline
    for cell in result.cells:
        s = cell.summary
        if s is None:
            continue
        head = {"dataset": cell.dataset, "split": cell.split, "method": cell.label, "baseline": baseline}
        head.update(_origin(result, cell.label))
        if s.paired_n:
            rows.append(
                {
                    **head,
                    "score": "accuracy",
                    "paired_test": s.paired_test,
                    "paired_n": s.paired_n,
                    "delta": s.delta,
                    "delta_low": s.delta_low,
                    "delta_high": s.delta_high,
                    "p_value": s.p_value,
                }
            )
        for score, e in (s.judge.scores if s.judge is not None else {}).items():
            if e.paired_n:
                test = "mcnemar_exact" if score == "judged_accuracy" else "paired_bootstrap"
                paired: dict[str, Any] = {"score": score, "paired_test": test, "paired_n": e.paired_n}
                rows.append({**head, **paired, "delta": e.delta, "p_value": e.p_value})
    splits = {d.name: d.split for d in result.spec.datasets}
    for pair in result.sequential:
        head = {"split": splits.get(pair.dataset, ""), **_origin(result, pair.method)}
        rows.append(sequential_row(pair.dataset, pair.method, pair.baseline, pair.result, head))
    return rows


def sequential_row(
    dataset: str, method: str, baseline: str, r: SequentialResult, head: Mapping[str, Any]
) -> dict[str, Any]:
    """An anytime-valid pair as a pair row: its difference and confidence sequence, and the test's own numbers."""
    return {
        "dataset": dataset,
        **head,
        "method": method,
        "baseline": baseline,
        "score": "accuracy",
        "paired_test": f"sequential_{r.kind}".rstrip("_"),
        "paired_n": r.n,
        "delta": r.diff,
        "delta_low": r.low,
        "delta_high": r.high,
        "resolved": r.resolved,
        "e_value": r.e_value,
        "threshold": r.threshold,
        "direction": r.direction,
        "stopped_at": r.stopped_at,
        "wins": r.wins,
        "losses": r.losses,
        "alpha": r.alpha,
    }


# ----------------------------------------------------------------------------------------- the results


def comparison_frame(result: Comparison, level: str = "items") -> pd.DataFrame:
    """``ComparisonResult.to_pandas``: see the module docstring."""
    check_level("comparison", level)
    order = method_order(result)
    if level == "cells":
        return typed_frame(cell_rows(result), CELL_COLUMNS, order)
    if level == "pairs":
        return typed_frame(pair_rows(result), PAIR_COLUMNS, order)
    return typed_frame(item_rows(result), ITEM_COLUMNS, order)


def comparisons_frame(parts: Sequence[Comparison], level: str = "items") -> pd.DataFrame:
    """The frame of several comparisons loaded together: their rows one after another, lined up (the same columns,
    each of one type; ``method`` ordered as their tables are, in turn); at ``items``, a record two of them share (one
    results file, one record key) is one row, whose ``config``, ``run_id`` and ``experiment`` name each that used it
    (``; ``-joined)."""
    check_level("comparison", level)
    order = list(dict.fromkeys(label for p in parts for label in method_order(p)))
    if level == "cells":
        return typed_frame([r for p in parts for r in cell_rows(p)], CELL_COLUMNS, order)
    if level == "pairs":
        return typed_frame([r for p in parts for r in pair_rows(p)], PAIR_COLUMNS, order)
    rows: dict[tuple[str, ...], dict[str, Any]] = {}
    for p in parts:
        for identity, row in record_rows(p):
            first = rows.setdefault(identity, row)
            if first is not row:
                for name in _SHARED:
                    first[name] = _joined(first.get(name), row.get(name))
    return typed_frame(rows.values(), ITEM_COLUMNS, order)


_SHARED = ("config", "run_id", "experiment")  # a record shared by comparisons names each of theirs


def _joined(first: object, more: object) -> str | None:
    parts = [p for x in (first, more) if x is not None for p in str(x).split("; ")]
    return "; ".join(dict.fromkeys(parts)) or None
