"""ProRefine's roles as typed signatures; the docstrings are the role prompts.

They follow the official code's intent (deepakpandita57/ProRefine_public): the feedback role critiques
the partial output without writing new output and says when the output so far is correct; the
optimizer rewrites the task prompt without deviating substantially from it; the verifier (a judge, no
labels) decides whether the initial answer needs refinement at all.

Wording measured on qwen2.5-coder-1.5b (BBH object counting, recorded feedback replayed): with "do not
deviate substantially" alone the optimizer returned the prompt unchanged in 62 of 62 steps; asking it to
keep the task sentence and *add* general guidance changed it in most replayed steps (in the full
run, 12 of 75 BBH steps: most feedback called the output correct, and the guard rejected 13 rewrites).
The feedback prompt says the output is cut off on purpose (otherwise a small judge mostly complains that
the output is incomplete).
"""

from __future__ import annotations

import dspy

__all__ = ["Feedback", "Optimizer", "Verifier"]


class Feedback(dspy.Signature):
    """You review a model's PARTIAL output on a task. The model was given a general instruction and the
    task's inputs; its output was cut off on purpose, so do not complain that it is incomplete.
    Check what is written so far against the task inputs: a missed, miscounted or misread item, a wrong
    calculation, a skipped step, an unjustified claim. Say what is wrong and what the model should do
    differently. Do not solve the task and do not state the correct answer.
    If nothing written so far is wrong, set `is_correct` to true and write "the output is correct"."""

    task: str = dspy.InputField(desc="The task inputs.")
    prompt: str = dspy.InputField(desc="The general instruction the model was given.")
    partial_output: str = dspy.InputField(desc="The model's output so far; cut off, it may stop mid-sentence.")
    is_correct: bool = dspy.OutputField(desc="True if nothing written so far is wrong.")
    feedback: str = dspy.OutputField(desc="Concise critique of the output so far, without solving the task.")


class Optimizer(dspy.Signature):
    """You improve a prompt (a general instruction given to a model) using feedback on one output it produced.
    Write the improved prompt: keep the current prompt's sentence about the task's inputs and outputs, then
    add one or two imperative sentences of general guidance that would prevent the kind of mistake the
    feedback describes, on every problem of this kind. Examples of good guidance: "Work step by step and
    check each count before adding.", "List every item with its quantity, then add the quantities.",
    "Only count the items the question asks about." Do not copy the feedback, and never include numbers,
    names, objects or the answer of the specific problem. If the feedback says the output is correct,
    return the current prompt unchanged."""

    prompt: str = dspy.InputField(desc="The current prompt.")
    feedback: str = dspy.InputField(desc="Feedback on the output this prompt produced.")
    history: str = dspy.InputField(desc="Earlier prompts and their feedback, or 'none'.")
    improved_prompt: str = dspy.OutputField(desc="The current prompt plus general guidance addressing the feedback.")


class Verifier(dspy.Signature):
    """You check a model's answer to a task. Re-derive the solution yourself step by step, then decide
    whether the model's final answer is correct. Judge only correctness of the final answer."""

    task: str = dspy.InputField(desc="The task inputs.")
    answer: str = dspy.InputField(desc="The model's full answer, with its reasoning.")
    correct: bool = dspy.OutputField(desc="True if the final answer is correct.")
