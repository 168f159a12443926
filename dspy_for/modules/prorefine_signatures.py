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

The official prompts themselves (``ProRefine(prompts="paper")``) are :data:`PAPER_FEEDBACK_INSTRUCTIONS` and
:data:`PAPER_OPTIMIZER_INSTRUCTIONS`, quoted from the authors' public implementation, with the inputs the
official code sends each role.
"""

from __future__ import annotations

import dspy

__all__ = [
    "PAPER_FEEDBACK_INSTRUCTIONS",
    "PAPER_OPTIMIZER_INSTRUCTIONS",
    "Feedback",
    "Optimizer",
    "PaperFeedback",
    "PaperOptimizer",
    "Verifier",
    "between_tags",
    "paper_feedback_is_correct",
    "paper_optimizer_signature",
]


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


# ---------------------------------------------------------------------------------- the official prompts

# Quoted from the authors' public implementation of ProRefine (Pandita et al., arXiv 2506.05305):
# github.com/deepakpandita57/ProRefine_public, prorefine.py, FEEDBACK_SYSTEM_PROMPT and OPTIMIZATION_SYSTEM_PROMPT
# (the paper's text gives no prompt wording). Each is the string the official code sends as the role's system
# prompt — its "\n" escapes and line breaks, and the spaces before some line breaks, kept — except for a stray
# leading '"' (both are written as four-quote literals, `""""You are ...`), which is left out.
PAPER_FEEDBACK_INSTRUCTIONS = (
    "You are a smart language model that evaluates the output of a language model for a given input.\n\n"
    "You do not propose new output, only evaluate the given output critically, think step-by-step, and give very "
    "concise feedback to improve the output. \n"
    "Ensure your feedback is correct and factual.\n\n"
    "This is very important, if the output is correct do not provide any feedback, respond with 'the output is "
    "correct'.\n\n"
    "Give your response by sending the feedback only. The text you send will be used directly.\n\n"
)
PAPER_OPTIMIZER_INSTRUCTIONS = (
    "You are part of an optimization system that improves the input prompt given to a large language model.\n\n"
    "You are given a feedback for the model output. Your goal is to use this feedback to improve the input prompt. \n"
    "The feedback may be noisy, identify what is important and what is correct. Pay attention to the constraints "
    "mentioned in the input prompt.\n\n"
    "This is very important. You MUST make sure that the improved prompt does not deviate substantially from the "
    "input prompt and is generalizable for the task. \n"
    "If the input prompt cannot be improved further, your response should be the input prompt as is.\n\n"
    "Think step-by-step and send the improved prompt between tags <IMPROVED_PROMPT> improved prompt "
    "</IMPROVED_PROMPT>. \n"
    "The text you send between the tags will be used directly to replace the system prompt for a large language "
    "model.\n\n\n"
)
#: what the official feedback prompt tells the model to answer when the output is correct
PAPER_CORRECT = "the output is correct"
#: the tag the official optimizer prompt asks the improved prompt to be sent between
PAPER_PROMPT_TAG = "IMPROVED_PROMPT"


# f_i = LLM_feedback(q, o_i) as the official code asks it: the input, then the output (its `Input: ...` and
# `Output: ...` messages); the feedback alone comes back (whether it found the output correct is read from the
# phrase the prompt prescribes: paper_feedback_is_correct).
class PaperFeedback(dspy.Signature):
    __doc__ = PAPER_FEEDBACK_INSTRUCTIONS

    input: str = dspy.InputField(desc="The input given to the language model.")
    output: str = dspy.InputField(desc="The language model's output.")
    feedback: str = dspy.OutputField(desc="The feedback only.")


# p* = LLM_optimizer(p*, f_i) as the official code asks it (its `Task prompt: ...` and `Feedback: ...` messages):
# step-by-step thinking, then the improved prompt (read between its tags when the model writes them: between_tags).
class PaperOptimizer(dspy.Signature):
    __doc__ = PAPER_OPTIMIZER_INSTRUCTIONS

    task_prompt: str = dspy.InputField(desc="The input prompt given to the language model.")
    feedback: str = dspy.InputField(desc="The feedback for the model output.")
    reasoning: str = dspy.OutputField(desc="Your step-by-step thinking.")
    improved_prompt: str = dspy.OutputField(
        desc=f"The improved prompt, between tags <{PAPER_PROMPT_TAG}> improved prompt </{PAPER_PROMPT_TAG}>."
    )


def paper_optimizer_signature(*, history: bool = False) -> type[dspy.Signature]:
    """The official optimizer's signature; ``history`` adds the earlier prompts and feedback (``history="chat"``,
    not the official code's)."""
    if not history:
        return PaperOptimizer
    return PaperOptimizer.append("history", dspy.InputField(desc="Earlier prompts and their feedback, or 'none'."), str)


def paper_feedback_is_correct(feedback: str) -> bool:
    """Whether official-prompt feedback says the output is correct (the phrase that prompt prescribes)."""
    return PAPER_CORRECT in " ".join(str(feedback or "").lower().split())


def between_tags(text: str, tag: str) -> str:
    """The text between ``<tag>`` and ``</tag>``, stripped; all of ``text`` when it has no ``<tag>`` (as the official
    code's ``extract_text_between_tags`` does)."""
    parts = str(text or "").split(f"<{tag}>")
    return parts[1].split(f"</{tag}>")[0].strip() if len(parts) > 1 else str(text or "")
