"""ProRefine's roles as typed signatures; the docstrings are the role prompts.

They follow the official code's intent (deepakpandita57/ProRefine_public): the feedback role critiques
the partial output without writing new output and says when the output so far is correct; the
optimizer rewrites the task prompt without deviating substantially from it; the verifier (a judge, no
labels) decides whether the initial answer needs refinement at all.
"""

from __future__ import annotations

import dspy

__all__ = ["Feedback", "Optimizer", "Verifier"]


class Feedback(dspy.Signature):
    """You review a model's PARTIAL output for a task, produced from the given prompt.
    Critique only what is written so far: point out any mistake in reasoning or calculation, any misread
    quantity, and anything the prompt should have made the model do differently (for example: work step by
    step, check each calculation, state the final answer as a number).
    Do NOT solve the task and do NOT write the continuation or the answer.
    If the output so far is correct, set `is_correct` to true and write "the output is correct"."""

    task: str = dspy.InputField(desc="The task inputs.")
    prompt: str = dspy.InputField(desc="The prompt (instruction) the model was given.")
    partial_output: str = dspy.InputField(desc="The model's output so far; it may stop mid-sentence.")
    is_correct: bool = dspy.OutputField(desc="True if the output so far has no mistake.")
    feedback: str = dspy.OutputField(desc="Concise critique of the output so far, without solving the task.")


class Optimizer(dspy.Signature):
    """You improve a prompt (an instruction given to a model) using feedback on the model's output.
    Keep the prompt's task, inputs and output format; do not deviate substantially from it. Add or adjust
    general guidance that addresses the feedback (e.g. "double-check each multiplication"). Never include
    the answer or the numbers of the specific problem. Return only the improved prompt."""

    prompt: str = dspy.InputField(desc="The current prompt.")
    feedback: str = dspy.InputField(desc="Feedback on the output this prompt produced.")
    history: str = dspy.InputField(desc="Earlier prompts and their feedback, or 'none'.")
    improved_prompt: str = dspy.OutputField(desc="The improved prompt, close to the current one.")


class Verifier(dspy.Signature):
    """You check a model's answer to a task. Re-derive the solution yourself step by step, then decide
    whether the model's final answer is correct. Judge only correctness of the final answer."""

    task: str = dspy.InputField(desc="The task inputs.")
    answer: str = dspy.InputField(desc="The model's full answer, with its reasoning.")
    correct: bool = dspy.OutputField(desc="True if the final answer is correct.")
