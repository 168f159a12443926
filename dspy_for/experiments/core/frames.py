"""Results as pandas data frames: what ``to_pandas(level=...)`` of a comparison, an advice and a sweep returns.

Every frame reads the typed results the printed tables read — a comparison's cells are its
:class:`~dspy_for.experiments.core.summary.Cell` s (the same :class:`~dspy_for.experiments.core.summary.Summary`
the table prints), its items the stored records — and never works a number out again.

Levels:

* ``items``: one row per item × method × epoch (a record: its answer, score, error, tokens, dollars and seconds in
  total and per role, whether DSPy's cache served it, what served it);
* ``cells``: one row per method × dataset (n, accuracy and its interval, Δ against the baseline with its test,
  tokens, dollars and seconds per item, compile cost, break-even);
* ``pairs``: one row per paired test the run made (each method against the baseline, on accuracy and on each judge
  score; a sequential comparison's anytime-valid pairs; an advice's candidate pairs);
* ``trials``: a sweep's trials, each trial's options as columns (a sweep keeps no item records).

One flattening rule names every column that holds a value per key (per role, per LM, per stat): ``<name>.<key>``,
where ``<name>`` is the column of its total when there is one (``tokens_per_item.defender`` beside
``tokens_per_item``, ``cost.host`` beside ``cost``), else the field's own name (``stats.rounds_used``,
``compile.tokens``, ``options.rounds``); nested keys join with more dots. A number that was not measured (an
unpriced LM's dollars, a method with nothing scored) is missing (``None`` / NaN), never 0. pandas is imported on
first use.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dspy_for.errors import ConfigError
from dspy_for.lm.usage import Usage

if TYPE_CHECKING:
    import pandas as pd

    from dspy_for.experiments.core.outcome import ComparisonResult
    from dspy_for.experiments.core.records import ItemResult, MethodResult
    from dspy_for.experiments.core.summary import Cell

__all__ = [
    "CELL_COLUMNS",
    "ITEM_COLUMNS",
    "LEVELS",
    "PAIR_COLUMNS",
    "cell_rows",
    "check_level",
    "flatten",
    "frame",
    "item_rows",
    "pair_rows",
    "trial_rows",
]

#: the levels each result has (``to_pandas(level=...)``)
LEVELS: dict[str, tuple[str, ...]] = {
    "comparison": ("items", "cells", "pairs"),
    "advice": ("items", "cells", "pairs"),
    "sweep": ("trials",),
}

#: the item frame's fixed columns, in order (then ``tokens.<role>``, ``calls.<role>``, ``cost.<role>``,
#: ``seconds.<role>`` and ``judge.<key>``)
# fmt: off
ITEM_COLUMNS = [
    "dataset", "split", "method", "method_name", "item_id", "item_key", "epoch", "question", "gold", "answer",
    "score", "failed", "unparsed", "error_class", "error", "tokens", "calls", "cost", "seconds", "cache_served",
    "served_by", "started_at", "origin",
]
# fmt: on

#: the cell frame's fixed columns, in order (then the per-key ones: ``tokens_per_item.<role>``, ``stats.<name>``, ...)
# fmt: off
CELL_COLUMNS = [
    "dataset", "split", "method", "method_name", "error", "n", "failed", "unparsed", "answers", "epochs",
    "reducer", "accuracy", "ci_low", "ci_high", "delta", "delta_low", "delta_high", "p_value", "paired_n",
    "paired_test", "tokens_per_item", "calls_per_item", "reasoning_tokens_per_item", "cost_per_item",
    "seconds_per_item", "seconds_lower_bound", "spent_tokens", "cached_tokens", "calls", "spent_usd", "wall_time",
    "reused_time", "role_collapse_rate", "served_by", "serving_now", "mixed_serving", "mixed_pairs", "reran",
]
# fmt: on

#: the pair frame's columns
# fmt: off
PAIR_COLUMNS = [
    "dataset", "split", "method", "baseline", "score", "paired_test", "paired_n", "delta", "delta_low",
    "delta_high", "p_value", "resolved",
]
# fmt: on

# Summary fields the cell frame shows otherwise (per role, flattened) or not at all (text kept in the table's notes)
_CELL_SKIP = {"dataset", "split", "method", "tokens_per_item_by_role", "per_role", "errors", "served_by", "serving_now"}
# Summary fields that hold a mapping or None (none: no column at all, as for an empty mapping)
_MAPPINGS = {"compile", "spread", "judge", "stats"}


def check_level(kind: str, level: str) -> None:
    """A ``level`` that ``kind``'s result does not have fails, naming the ones it has."""
    levels = LEVELS[kind]
    if level not in levels:
        extra = " (a sweep keeps no item records)" if kind == "sweep" else ""
        raise ConfigError(
            f"`level` must be one of {', '.join(levels)} for a {kind}{extra}, got {level!r}: pass one of them "
            f"(to_pandas(level={levels[-1]!r}), `--level {levels[-1]}`)."
        )


def flatten(name: str, value: Any, out: dict[str, Any]) -> None:
    """The one flattening rule: a mapping becomes ``<name>.<key>`` columns (nested keys join with dots), a list or
    tuple one JSON text, anything else one column ``name``."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            flatten(f"{name}.{key}", inner, out)
    elif isinstance(value, list | tuple):
        out[name] = json.dumps(value, default=str, ensure_ascii=False)
    else:
        out[name] = value


def frame(rows: Sequence[Mapping[str, Any]], fixed: Sequence[str]) -> pd.DataFrame:
    """A data frame of ``rows``: the ``fixed`` columns first (present even with no rows), then every other column any
    row has, sorted."""
    import pandas as pd

    extra = sorted({k for r in rows for k in r} - set(fixed))
    return pd.DataFrame([dict(r) for r in rows], columns=[*fixed, *extra])


# ------------------------------------------------------------------------------------------------ items


def item_row(item: ItemResult, head: Mapping[str, Any]) -> dict[str, Any]:
    """One record as a row: ``head`` (dataset, split, method, method_name), then the record's own columns."""
    usage = Usage.from_dict(item.usage)
    total = usage.total
    row: dict[str, Any] = {
        **head,
        "item_id": item.id,
        "item_key": item.item_key,
        "epoch": item.epoch,
        "question": item.question,
        "gold": item.gold if isinstance(item.gold, str | int | float | bool) or item.gold is None else str(item.gold),
        "answer": None if item.failed else item.answer,
        "score": None if item.failed else item.score,  # an LM failure is an error, never a score
        "failed": item.failed,
        "unparsed": item.unparsed,
        "error_class": item.error_class,
        "error": item.error,
        "tokens": total.served_tokens,
        "calls": total.calls,
        "cost": total.served_cost_usd,
        "seconds": item.wall_time,
        "cache_served": total.cached_calls > 0,
        "served_by": "; ".join(item.served_by),
        "started_at": item.started_at,
        "origin": item.origin,
    }
    for role, r in usage.roles.items():
        row[f"tokens.{role}"] = r.served_tokens
        row[f"calls.{role}"] = r.calls
        row[f"cost.{role}"] = r.served_cost_usd
        row[f"seconds.{role}"] = r.wall_time
    if item.judge is not None:
        flatten("judge", {k: v for k, v in item.judge.items() if k != "lm"}, row)
    return row


def item_rows(
    by_dataset: Mapping[str, Mapping[str, MethodResult]], splits: Mapping[str, str], names: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Every record of every method on every dataset (dataset → label → result), in the run's order."""
    rows: list[dict[str, Any]] = []
    for dataset, by_label in by_dataset.items():
        for label, result in by_label.items():
            head = {"dataset": dataset, "split": splits.get(dataset, ""), "method": label}
            head["method_name"] = names.get(label, label)
            rows.extend(item_row(i, head) for i in result.items)
    return rows


# ------------------------------------------------------------------------------------------------ cells


def served_by(results: Iterable[ItemResult]) -> str:
    """What served a method's records: every distinct identity their records keep, sorted, joined by "; "."""
    return "; ".join(sorted({s for i in results for s in i.served_by}))


def cell_row(cell: Cell, served: str = "", breakeven: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """One cell as a row: its :class:`~dspy_for.experiments.core.summary.Summary` by the summary's names, per-role
    numbers flattened (``tokens_per_item.<role>``, ``calls_per_item.<role>``), its compile cost (``compile.*``) and
    its break-even volumes against each other method (``breakeven.<against>``; in tokens, one per LM:
    ``breakeven.<against>.<lm>``)."""
    row: dict[str, Any] = {
        "dataset": cell.dataset,
        "split": cell.split,
        "method": cell.label,
        "method_name": cell.method,
        "error": cell.error,
        "served_by": served,
    }
    s = cell.summary
    if s is None:
        return row
    for name, value in s.row().items():
        if name not in _CELL_SKIP and not (value is None and name in _MAPPINGS):
            flatten(name, value, row)
    row["serving_now"] = "; ".join(s.serving_now) if s.serving_now is not None else None
    for role, r in s.per_role.items():
        row[f"tokens_per_item.{role}"] = r["served"]
        row[f"calls_per_item.{role}"] = r["calls"]
    if cell.diagnostics:
        flatten("diagnostics", cell.diagnostics, row)
    mine = [b for b in breakeven if b.get("dataset") == cell.dataset and b.get("method") == cell.label]
    per_lm = {b["against"] for b in mine if sum(1 for x in mine if x["against"] == b["against"]) > 1}
    for b in mine:
        key = f"breakeven.{b['against']}" + (f".{b['lm']}" if b["against"] in per_lm else "")
        row[key] = b.get("volume")
    return row


def cell_rows(result: ComparisonResult) -> list[dict[str, Any]]:
    """One row per cell of ``result`` (:attr:`~dspy_for.experiments.core.outcome.ComparisonResult.cells`)."""
    rows = []
    for cell in result.cells:
        found = result.results.get(cell.dataset, {}).get(cell.label)
        row = cell_row(cell, served_by(found.items) if found is not None else "", result.breakeven)
        if result.missing:
            row["missing"] = result.missing.get(cell.dataset, {}).get(cell.label, 0)
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------------ pairs


def pair_rows(result: ComparisonResult) -> list[dict[str, Any]]:
    """Each paired test of ``result``: every method against the baseline on the items both scored (accuracy, then
    each judge score with a difference), then a sequential comparison's anytime-valid pairs."""
    rows = []
    baseline = result.spec.baseline
    for cell in result.cells:
        s = cell.summary
        if s is None:
            continue
        head = {"dataset": cell.dataset, "split": cell.split, "method": cell.label, "baseline": baseline}
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
        for score, entry in s.judge.items():
            if isinstance(entry, Mapping) and entry.get("paired_n"):
                test = "mcnemar_exact" if score == "judged_accuracy" else "paired_bootstrap"
                rows.append(
                    {
                        **head,
                        "score": score,
                        "paired_test": test,
                        "paired_n": entry["paired_n"],
                        "delta": entry.get("delta"),
                        "p_value": entry.get("p_value"),
                    }
                )
    splits = {d.name: d.split for d in result.spec.datasets}
    for seq in result.sequential:
        rows.append(sequential_row(seq, splits.get(seq.get("dataset", ""), "")))
    return rows


def sequential_row(seq: Mapping[str, Any], split: str) -> dict[str, Any]:
    """A sequential (anytime-valid) pair as a pair row: its difference and confidence sequence, the rest by name."""
    row = {
        "dataset": seq.get("dataset"),
        "split": split,
        "method": seq.get("method", seq.get("a")),
        "baseline": seq.get("baseline", seq.get("b")),
        "score": "accuracy",
        "paired_test": f"sequential_{seq.get('kind', '')}".rstrip("_"),
        "paired_n": seq.get("n"),
        "delta": seq.get("diff"),
        "delta_low": seq.get("low"),
        "delta_high": seq.get("high"),
        "resolved": seq.get("resolved"),
    }
    for key in ("e_value", "threshold", "direction", "stopped_at", "wins", "losses", "alpha"):
        if key in seq:
            row[key] = seq[key]
    return row


# ----------------------------------------------------------------------------------------------- trials


def trial_rows(study: Any, objectives: Sequence[str]) -> list[dict[str, Any]]:
    """A study's trials: number, state, the objective value(s) by name, each option as ``options.<name>``, the
    numbers each trial recorded (its user attributes, by the summary's names), start, end and seconds."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        row: dict[str, Any] = {"trial": t.number, "state": t.state.name}
        values = list(t.values) if t.values is not None else [None] * len(objectives)
        for name, value in zip(objectives, values, strict=False):
            row[name] = value
        for name, value in t.params.items():
            row[f"options.{name}"] = value
        for name, value in t.user_attrs.items():
            if isinstance(value, int | float | str | bool) or value is None:
                row[name] = value
        row["started"], row["completed"] = t.datetime_start, t.datetime_complete
        ended = t.datetime_complete
        row["seconds"] = (ended - t.datetime_start).total_seconds() if ended and t.datetime_start else None
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------------------- the results


def comparison_frame(result: ComparisonResult, level: str = "items") -> pd.DataFrame:
    """``ComparisonResult.to_pandas``: see the module docstring."""
    check_level("comparison", level)
    if level == "cells":
        return frame(cell_rows(result), CELL_COLUMNS)
    if level == "pairs":
        return frame(pair_rows(result), PAIR_COLUMNS)
    splits = {d.name: d.split for d in result.spec.datasets}
    names = {m.label: m.name for m in result.spec.methods}
    return frame(item_rows(result.results, splits, names), ITEM_COLUMNS)


def advice_frame(advice: Any, level: str = "cells") -> pd.DataFrame:
    """``Advice.to_pandas``: ``cells`` one row per candidate (its row in the advice's table: status, reason, n,
    accuracy, tokens and dollars per item, each option as ``options.<name>``), ``items`` the candidates' records,
    ``pairs`` each candidate pair's anytime-valid test as it stood when the rounds ended."""
    check_level("advice", level)
    head = {"dataset": advice.dataset, "split": advice.split}
    if level == "items":
        results = {advice.dataset: {c.label: c.result for c in advice.candidates if c.result is not None}}
        names = {c.label: c.method for c in advice.candidates}
        return frame(item_rows(results, {advice.dataset: advice.split}, names), ITEM_COLUMNS)
    if level == "pairs":
        rows = [sequential_row({**head, "a": p.a, "b": p.b, **p.result.to_dict()}, advice.split) for p in advice.pairs]
        return frame(rows, PAIR_COLUMNS)
    rows = []
    for c in advice.candidates:
        row: dict[str, Any] = {**head}
        for name, value in c.row().items():
            flatten({"label": "method", "method": "method_name"}.get(name, name), value, row)
        row["recommended"] = c.label == advice.recommended
        row["served_by"] = served_by(c.result.items) if c.result is not None else ""
        rows.append(row)
    fixed = ["dataset", "split", "method", "method_name", "status", "recommended", "reason", "n", "failed"]
    return frame(rows, [*fixed, "accuracy", "ci_low", "ci_high", "tokens_per_item", "cost_per_item"])


def sweep_frame(result: Any, level: str = "trials") -> pd.DataFrame:
    """``SweepResult.to_pandas``: one row per trial (:func:`trial_rows`)."""
    check_level("sweep", level)
    objectives = list(result.spec.objectives)
    return frame(trial_rows(result.study, objectives), ["trial", "state", *objectives])
