"""Readable output of one method result for ``dspy-for ask``: answer, the method's trace, usage table."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from dspy_for.experiments.methods import get_method
from dspy_for.lm.usage import Usage
from dspy_for.modules.trajectory import field_lines

__all__ = ["render_result", "render_trajectory", "usage_table"]


def usage_table(usage: Usage) -> Table:
    t = Table(title="usage per role")
    for col in ("role", "calls", "cached", "prompt tok", "completion tok", "cached tok", "wall s"):
        t.add_column(col, justify="left" if col == "role" else "right")
    rows = [*sorted(usage.roles.items()), ("total", usage.total)]
    for name, r in rows:
        t.add_row(
            name,
            str(r.calls),
            str(r.cached_calls),
            str(r.prompt_tokens),
            str(r.completion_tokens),
            str(r.cached_tokens),
            f"{r.wall_time:.1f}",
        )
    return t


def render_trajectory(console: Console, method: str, pred: Any) -> bool:
    """Print what ``method``'s registry entry shows of ``pred``'s trajectory (its
    :class:`~dspy_for.modules.trajectory.TrajectoryView`), as panels and lines; False when it declares none."""
    view = get_method(method).view
    if view is None:
        return False
    for title, text in view.shown(pred):
        console.print(text if title is None else Panel(text, title=title))
    return True


def render_result(console: Console, method: str, pred: Any, usage: Usage, *, gold: Any = None) -> None:
    if not render_trajectory(console, method, pred) and pred.get("reasoning"):
        console.print(Panel(str(pred.get("reasoning")), title="reasoning"))
    outputs = {
        k: v
        for k, v in pred.items()
        if k
        not in (
            "reasoning",
            "trajectory",
            "usage",
            "stats",
            "answers_by_round",
            "rounds_used",
            "role_collapse",
            "refined_prompt",
        )
    }
    gold_text = f" (gold: {gold:g})" if isinstance(gold, float) else ""
    console.print(Panel(field_lines(outputs), title=f"answer{gold_text}"))
    console.print(usage_table(usage))
