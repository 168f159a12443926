"""Case study (FOR-Prompting paper): a 5-day itinerary for Rio de Janeiro in April.

Single prompt vs FOR-Prompting; a judge LM marks which of the paper's 20 practical factors each plan
covers, and a coverage table is printed.

    python programs/itinerary.py [--lm local/qwen2.5-coder-1.5b] [--judge-lm ...] [--rounds 2]
"""

from __future__ import annotations

import argparse

import dspy
from rich.console import Console
from rich.table import Table

from dspy_for import FORPrompting, make_lm, role

TASK = "Create a 5-day itinerary for a trip to Rio de Janeiro in April."
FACTORS = [
    "weather", "packing", "reservations", "transportation", "accessibility", "safety", "rainy-day alternatives",
    "branching (backup plans)", "nightlife", "food", "markets", "language", "offline navigation", "luggage storage",
    "emergency info", "holidays/opening hours", "viewpoints", "signature experiences", "family-friendly",
    "health/water",
]


class Plan(dspy.Signature):
    """Write a practical travel plan for the request."""

    request: str = dspy.InputField()
    itinerary: str = dspy.OutputField(desc="Day-by-day plan with practical advice.")


class Coverage(dspy.Signature):
    """For each listed factor, decide whether the itinerary gives concrete, usable advice about it."""

    itinerary: str = dspy.InputField()
    factors: list[str] = dspy.InputField()
    covered: list[bool] = dspy.OutputField(desc="One true/false per factor, in the same order.")


def coverage(judge: dspy.Predict, text: str) -> list[bool]:
    with role("judge"):
        out = judge(itinerary=text, factors=FACTORS)
    flags = [bool(x) for x in (out.covered or [])]
    return (flags + [False] * len(FACTORS))[: len(FACTORS)]


def run(lm: dspy.BaseLM, judge_lm: dspy.BaseLM, rounds: int, console: Console) -> dict[str, list[bool]]:
    with dspy.context(lm=lm):
        single = dspy.Predict(Plan)(request=TASK).itinerary
        debated = FORPrompting(Plan, rounds=rounds)(request=TASK).itinerary
    judge = dspy.Predict(Coverage)
    with dspy.context(lm=judge_lm):
        marks = {"single prompt": coverage(judge, single), "FOR-Prompting": coverage(judge, debated)}
    table = Table(title="coverage of the 20 practical factors")
    table.add_column("factor")
    for name in marks:
        table.add_column(name, justify="center")
    for i, factor in enumerate(FACTORS):
        table.add_row(factor, *("✓" if m[i] else "·" for m in marks.values()))
    table.add_row("total", *(f"{sum(m)}/{len(FACTORS)}" for m in marks.values()))
    console.print(table)
    return marks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lm", default="local/qwen2.5-coder-1.5b")
    ap.add_argument("--judge-lm", default=None, help="default: the same as --lm")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    lm = make_lm(args.lm, max_tokens=1024)
    run(lm, make_lm(args.judge_lm, max_tokens=512) if args.judge_lm else lm, args.rounds, Console())


if __name__ == "__main__":
    main()
