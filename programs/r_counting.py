"""Case study (FOR-Prompting paper): "How many rs in strarrtrabbbery?" (answer: 5).

Single prompt vs FOR-Prompting, printing FOR's dialogue.

    python programs/r_counting.py [--lm local/qwen2.5-coder-1.5b] [--rounds 3]
"""

from __future__ import annotations

import argparse

import dspy
from rich.console import Console

from dspy_for import FORPrompting, make_lm, track_usage
from dspy_for.render import render_trajectory, usage_table

QUESTION = "How many rs are in the word strarrtrabbbery?"
ANSWER = 5


class CountLetters(dspy.Signature):
    """Answer the question about the letters of the word."""

    question: str = dspy.InputField()
    answer: int = dspy.OutputField(desc="The count, as a number.")


def run(lm: dspy.BaseLM, rounds: int, console: Console) -> dict[str, object]:
    with dspy.context(lm=lm):
        with track_usage() as single_usage:
            single = dspy.Predict(CountLetters)(question=QUESTION)
        with track_usage() as for_usage:
            debate = FORPrompting(CountLetters, rounds=rounds)(question=QUESTION)
    console.rule("FOR-Prompting dialogue")
    render_trajectory(console, "for", debate)
    console.rule("result")
    console.print(f"single prompt: {single.answer}  |  FOR-Prompting: {debate.answer}  |  correct: {ANSWER}")
    console.print(usage_table(for_usage))
    return {"single": single.answer, "for": debate.answer, "single_tokens": single_usage.total.served_tokens,
            "for_tokens": for_usage.total.served_tokens}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lm", default="local/qwen2.5-coder-1.5b")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    run(make_lm(args.lm, max_tokens=768), args.rounds, Console())


if __name__ == "__main__":
    main()
