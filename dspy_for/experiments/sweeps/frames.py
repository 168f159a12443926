"""A sweep's trials as a data frame and as HTML: one row per trial with its state, objective value(s), each option
as ``options.<name>``, the numbers it recorded, its start and end (UTC) and where it comes from (the sweep's MLflow
run, experiment, config and each role's LM). Its columns:
:data:`~dspy_for.experiments.core.frame_columns.TRIAL_COLUMNS`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dspy_for.experiments.core.frame_columns import TRIAL_COLUMNS, column, typed_frame
from dspy_for.experiments.core.frames import check_level
from dspy_for.experiments.core.frames_html import html_table
from dspy_for.experiments.spec.measures import Measure

if TYPE_CHECKING:
    import optuna
    import pandas as pd

__all__ = ["trial_rows", "trials_frame", "trials_html"]


def trial_rows(study: optuna.Study, objectives: Sequence[str], origin: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A study's trials: number, state, the objective value(s) by name, each option as ``options.<name>``, the
    numbers each trial recorded (its user attributes, by the summary's names), start, end and seconds, and
    ``origin`` (the sweep's provenance)."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        row: dict[str, Any] = {"trial": t.number, "state": t.state.name, **origin}
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


def trials_frame(
    study: optuna.Study, objectives: Sequence[str], origin: Mapping[str, Any], level: str = "trials"
) -> pd.DataFrame:
    """``SweepResult.to_pandas``: one row per trial (:func:`trial_rows`), the objectives right after its state."""
    check_level("sweep", level)
    rows = trial_rows(study, objectives, origin)
    columns = [c for c in TRIAL_COLUMNS if not c.name.startswith("<")]
    return typed_frame(rows, [*columns[:2], *_objective_columns(objectives), *columns[2:]])


def _objective_columns(objectives: Sequence[str]) -> list[Measure]:
    return [column(name, "float", "an objective's value") for name in objectives]


def trials_html(study: optuna.Study, objectives: Sequence[str], title: str) -> str:
    """A sweep's trials as HTML: number, state, objective value(s) and options."""
    rows = trial_rows(study, objectives, {})
    keys = list(dict.fromkeys(k for r in rows for k in r if k.startswith("options.")))
    columns = [("trial", "trial"), ("state", "state"), *((o, o) for o in objectives)]
    return html_table(rows, [*columns, *((k.removeprefix("options."), k) for k in keys)], title)
