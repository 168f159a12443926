"""Readable output of one method result for ``dspy-for ask``: answer, the method's trace, usage table."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from dspy_for.lm.usage import Usage
from dspy_for.modules.trajectory import ANSWER, QUESTIONS, REVISION, ForTurn, ProRefineStep

__all__ = ["RENDERERS", "render_result", "usage_table"]


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


def _fields(d: dict[str, Any], skip: tuple[str, ...] = ()) -> str:
    return "\n".join(f"[bold]{k}:[/] {v}" for k, v in d.items() if k not in skip)


def _render_for(console: Console, pred: Any) -> None:
    turns: list[ForTurn] = pred.get("trajectory") or []
    for turn in turns:
        f: dict[str, Any] = dict(turn["fields"])
        who = turn["role"].capitalize()
        if turn["type"] == ANSWER:
            console.print(Panel(_fields(f), title=f"{who} · A0"))
        elif turn["type"] == QUESTIONS:
            bad = f.get("violations", {})
            lines = [
                f"{'✗' if q in bad else '?'} {q}" + (f"  [red]({', '.join(bad[q])})[/]" if q in bad else "")
                for q in f.get("questions", [])
            ]
            title = f"{who} · round {turn['round']}" + (" · re-asked" if f.get("attempt") else "")
            console.print(Panel("\n".join(lines) or "(no questions)", title=title))
        elif turn["type"] == REVISION:
            replies = "\n".join(f"- {r}" for r in f.get("responses", []))
            body = f"[bold]replies:[/]\n{replies}\n" + _fields(f, skip=("responses",))
            console.print(Panel(body, title=f"{who} · A{turn['round']} (revision)"))
        else:
            console.print(Panel(_fields(f), title=f"{who} · synthesis"))
    console.print(f"rounds used: {pred.get('rounds_used')}, role collapse: {pred.get('role_collapse')}")


def _render_prorefine(console: Console, pred: Any) -> None:
    previous = None
    steps: list[ProRefineStep] = pred.get("trajectory") or []
    for step in steps:
        prompt = step.get("prompt", "")
        diff = ""
        if previous is not None and step.get("new_prompt") is not None:
            diff = "\n".join(
                difflib.unified_diff(prompt.splitlines(), step["new_prompt"].splitlines(), lineterm="", n=0)
            )
        body = (
            f"[bold]tokens so far:[/] {step.get('completion_tokens')} ({step.get('finish_reason')})\n"
            f"[bold]partial output:[/] {step.get('output', '')}\n[bold]feedback:[/] {step.get('feedback', '')}"
        )
        if diff:
            body += f"\n[bold]prompt diff:[/]\n{diff}"
        console.print(Panel(body, title=f"step {step.get('step')}"))
        previous = prompt
    stats = pred.get("stats") or {}
    console.print(f"refined: {stats.get('refined')}, steps used: {stats.get('steps_used')}")
    if pred.get("refined_prompt"):
        console.print(Panel(str(pred.get("refined_prompt")), title="refined prompt p*"))


RENDERERS: dict[str, Callable[[Console, Any], None]] = {"for": _render_for, "prorefine": _render_prorefine}


def render_result(console: Console, method: str, pred: Any, usage: Usage, *, gold: Any = None) -> None:
    renderer = RENDERERS.get(method)
    if renderer is not None:
        renderer(console, pred)
    elif pred.get("reasoning"):
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
    console.print(Panel(_fields(outputs), title="answer" + (f" (gold: {gold:g})" if isinstance(gold, float) else "")))
    console.print(usage_table(usage))
