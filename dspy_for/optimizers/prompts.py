"""TextGrad's two LLM roles as typed signatures (templates live here, not in the optimizer's logic).

They follow TextGrad's intent (zou-group/textgrad): the *gradient* is feedback on how a variable (here a
predictor's instruction) should change to reduce the loss on a minibatch; the *step* (Textual Gradient
Descent) rewrites the variable given that feedback, optional constraints and earlier gradients.
"""

from __future__ import annotations

import dspy

__all__ = ["Gradient", "Step"]


class Gradient(dspy.Signature):
    """You are part of an optimization system that improves the INSTRUCTION given to a language model.
    Below are examples the model answered with this instruction, each with its prediction, the expected
    answer and whether it was correct. Give concise, actionable feedback on how the INSTRUCTION should
    change so that the model answers such inputs correctly (reasoning steps to require, checks to add,
    output format to state). Do not rewrite the instruction yourself; do not solve the examples."""

    role: str = dspy.InputField(desc="What this instruction is for (the predictor's name and task).")
    instruction: str = dspy.InputField(desc="The current instruction (the variable being optimized).")
    losses: list[str] = dspy.InputField(desc="Evaluated examples: input, prediction, expected answer, outcome.")
    feedback: str = dspy.OutputField(desc="How the instruction should change, and why.")


class Step(dspy.Signature):
    """You are part of an optimization system. Improve the INSTRUCTION given to a language model using the
    feedback. Keep what works, change what the feedback asks for, keep the instruction general (never
    mention the specific examples or their answers), and obey every constraint. Return only the new
    instruction."""

    instruction: str = dspy.InputField(desc="The current instruction.")
    feedback: str = dspy.InputField(desc="Feedback on the instruction from this minibatch.")
    past_feedback: list[str] = dspy.InputField(desc="Feedback from earlier steps (may be empty).")
    constraints: list[str] = dspy.InputField(desc="Constraints the new instruction must satisfy (may be empty).")
    new_instruction: str = dspy.OutputField(desc="The improved instruction.")
