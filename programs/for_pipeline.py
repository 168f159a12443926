"""FOR-Prompting as one stage of a larger DSPy program, compiled with a DSPy optimizer.

Stage 1 (``dspy.Predict``) extracts the quantities of a word problem; stage 2 (FOR-Prompting) solves it
from the problem plus those facts. ``BootstrapFewShot`` then compiles the whole pipeline — demos for
the extractor and for FOR's role predictors — on a few training problems.

    python programs/for_pipeline.py [--lm local/qwen2.5-coder-1.5b] [--train 4] [--test 4]
"""

from __future__ import annotations

import argparse

import dspy

from dspy_for import FORPrompting, make_lm
from dspy_for.datasets import load_dataset
from dspy_for.metrics import numeric_match


class ExtractFacts(dspy.Signature):
    """List every quantity in the problem with what it measures."""

    question: str = dspy.InputField()
    facts: list[str] = dspy.OutputField(desc="One quantity per item, e.g. '3 boxes'.")


class SolveWithFacts(dspy.Signature):
    """Solve the math word problem using the extracted facts."""

    question: str = dspy.InputField()
    facts: list[str] = dspy.InputField()
    answer: float = dspy.OutputField()


class FactsThenDebate(dspy.Module):
    def __init__(self, rounds: int = 1) -> None:
        super().__init__()
        self.extract = dspy.Predict(ExtractFacts)
        self.solve = FORPrompting(SolveWithFacts, rounds=rounds)

    def forward(self, question: str) -> dspy.Prediction:
        facts = self.extract(question=question).facts
        return self.solve(question=question, facts=facts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lm", default="local/qwen2.5-coder-1.5b")
    ap.add_argument("--train", type=int, default=4)
    ap.add_argument("--test", type=int, default=4)
    args = ap.parse_args()
    dspy.configure(lm=make_lm(args.lm, max_tokens=768))
    data = load_dataset("gsm8k", "sample")
    train, test = data[: args.train], data[args.train: args.train + args.test]
    program = FactsThenDebate()
    compiled = dspy.BootstrapFewShot(metric=numeric_match, max_bootstrapped_demos=1, max_labeled_demos=0).compile(
        program, trainset=train)
    for name, module in (("uncompiled", program), ("compiled", compiled)):
        score = dspy.Evaluate(devset=test, metric=numeric_match, display_progress=True)(module).score
        print(f"{name}: {score:.1f}% on {len(test)} sample problems")


if __name__ == "__main__":
    main()
