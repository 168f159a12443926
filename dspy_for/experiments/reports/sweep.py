"""The sweep's report: one row per trial (state, params, values, tokens/item; * = best) and the final test's line —
pure functions of a :class:`~dspy_for.experiments.sweeps.sweep.SweepResult`-shaped study and final-test row."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

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


def final_test_line(ft: dict[str, Any]) -> str:
    """The final test's counts and, when anything was scored, its accuracy with CI and cost."""
    scored = (
        f"accuracy {ft['accuracy']:.1%} [{ft['ci_low']:.1%}, {ft['ci_high']:.1%}], "
        f"{ft['tokens_per_item']:.0f} tokens/item"
        if ft["n"]
        else "nothing scored"
    )
    return (
        f"final test ({ft['n']} scored, {ft['failed']} failed, {ft['unparsed']} unparsed) with "
        f"{escape(str(ft['params']))}: {scored}"
    )
