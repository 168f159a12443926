"""The sweep's report: one row per trial (state, params, values, tokens/item; * = best) and the final test's line —
pure functions of a :class:`~dspy_for.experiments.sweeps.sweep.SweepResult`'s study and final test."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from rich.markup import escape
from rich.table import Table

from dspy_for.experiments.core.summary import Summary

__all__ = ["final_test_line", "trials_table"]


def trials_table(study: Any, title: str) -> Table:
    """One row per trial of ``study``; the best trial(s) marked with ``*``."""
    t = Table(title=title)
    for col in ("trial", "state", "params", "values", "tokens/item"):
        t.add_column(col)
    trials = study.get_trials(deepcopy=False)
    best = {b.number for b in study.best_trials} if any(tr.state.name == "COMPLETE" for tr in trials) else set()
    for tr in trials:
        tok = tr.user_attrs.get("tokens_per_item")
        t.add_row(
            f"{tr.number}{' *' if tr.number in best else ''}",
            tr.state.name,
            escape(str(tr.params)),
            ", ".join(f"{v:.3g}" for v in (tr.values or [])),
            f"{tok:.0f}" if tok is not None else "",
        )
    return t


class FinalTestLike(Protocol):
    """What the final test's line reads (a :class:`~dspy_for.experiments.sweeps.final_test.FinalTest`)."""

    @property
    def summary(self) -> Summary: ...

    @property
    def params(self) -> Mapping[str, Any]: ...

    @property
    def not_started(self) -> int: ...


def final_test_line(ft: FinalTestLike) -> str:
    """The final test's counts and, when anything was scored, its accuracy with CI and cost."""
    s = ft.summary
    scored = "nothing scored"
    if s.n and s.accuracy is not None and s.ci_low is not None and s.ci_high is not None:
        scored = f"accuracy {s.accuracy:.1%} [{s.ci_low:.1%}, {s.ci_high:.1%}], {s.tokens_per_item:.0f} tokens/item"
    left = f", {ft.not_started} not started (max_cost)" if ft.not_started else ""
    counts = f"{s.n} scored, {s.failed} failed, {s.unparsed} unparsed{left}"
    return f"final test ({counts}) with {escape(str(ft.params))}: {scored}"
