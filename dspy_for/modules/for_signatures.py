"""FOR-Prompting's roles as typed signatures; their docstrings are the role prompts.

The paper's Table 3 prompts are illustrative ("prompts with similar intent can be employed"). Its
literal "be concise" wording made a 0.5B Defender drop its reasoning (0/30 on GSM8K here), and a naive
Defender abandoned correct answers under questioning. These prompts therefore (1) demand step-by-step
work every round, (2) make the Defender check each question against its own work and change its
answer only for a concrete error it can name, and (3) make the Host weigh all rounds.

The Defender and Host signatures are built from the user's signature (its inputs and outputs, like
``dspy.ChainOfThought``); the Debater's is fixed, since it never produces the task's outputs.

The paper's own prompts (``prompts="paper"``, :func:`role_signatures`) are Table 3 of the FOR-Prompting paper
(Zhang, Zhang, Dai, arXiv 2510.01674, Appendix A.1, "Illustrative prompts for each role in FOR-Prompting"),
quoted verbatim as each role's instruction, with only the fields the paper's loop needs (see
:func:`role_signatures`).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import dspy

from dspy_for.errors import ConfigError

__all__ = [
    "DEBATER_FREE_INSTRUCTIONS",
    "DEBATER_INSTRUCTIONS",
    "DEFENDER_INSTRUCTIONS",
    "HOST_INSTRUCTIONS",
    "PAPER_DEBATER_INSTRUCTIONS",
    "PAPER_DEFENDER_INSTRUCTIONS",
    "PAPER_HOST_INSTRUCTIONS",
    "REVISE_INSTRUCTIONS",
    "Debater",
    "PaperDebater",
    "RoleSignatures",
    "defender_signature",
    "host_signature",
    "paper_debater_signature",
    "paper_defender_signature",
    "paper_host_signature",
    "paper_revise_signature",
    "revise_signature",
    "role_signatures",
]

DEFENDER_INSTRUCTIONS = """You are the Defender. Solve the task yourself, step by step.
In `reasoning`, write out every step and every intermediate calculation, and check each one.
Then give the final answer in the output fields."""

REVISE_INSTRUCTIONS = """You are the Defender. A Debater has asked questions about your previous answer.
The Debater only asks questions: a question is NOT a sign that you are wrong.
1. For each new question, re-check the exact step of your previous work it points at, and reply to it in
   `responses` (one reply per question, in order).
2. Set `error_found` to true ONLY if that re-check reveals a concrete mistake you can name (a wrong
   number, a misread fact, a wrong operation, a given that your work never used). Describe it in
   `error`, or write "none". A question about a number from the task that your work never used
   usually means a step is missing: find where that number belongs; if it changes the result, that is
   a concrete error.
3. Solve the ORIGINAL task again in full, step by step, in `reasoning`. If you found no concrete error,
   redo the same work and keep your answer. If you found one, fix only that mistake.
4. Give the final answer in the output fields."""

DEBATER_INSTRUCTIONS = """You are the Debater. You ask questions ONLY; you never solve the task.
Read the task and the Defender's current answer. Ask 1 to 3 short, specific questions that make the
Defender re-check its work. The most useful questions, in this order:
1. For each number in `unused_numbers` (given in the task, never mentioned in the Defender's work): how
   does the work account for it?
2. Does the final answer give exactly what the task asks for (the total, what is left, per person or
   per item, the right unit)?
3. Is one specific calculation or operation in the work right?
Rules: never answer the task; never state a number that is in neither the task nor the answer; never
propose a fix, a method or a corrected answer; never say the answer is wrong. Each item is ONE question
ending with "?". Do not repeat questions already asked. If nothing is left worth asking, return an
empty list."""

DEBATER_FREE_INSTRUCTIONS = """You are the Debater. Challenge the Defender's current answer.
Read the task and the answer. Give 1 to 3 objections: point out possible mistakes, and you may propose
fixes, methods or corrected values. Do not repeat earlier objections. If you have none, return an
empty list."""

HOST_INSTRUCTIONS = """You are the Host. Below is a debate about the task: the Defender's answer in
every round (A0 is its first answer), the Debater's questions, and the Defender's replies, including
any concrete error the Defender said it found.
Decide the final answer. Do not simply take the last answer: prefer the answer best supported by
correct step-by-step work. A change of answer is justified only by a concrete error that really is an
error; check it yourself. Solve the task step by step in `reasoning`, then give the final answer in the
output fields."""


class Debater(dspy.Signature):
    __doc__ = DEBATER_INSTRUCTIONS

    task: str = dspy.InputField(desc="The original task, with all its inputs.")
    current_answer: str = dspy.InputField(desc="The Defender's latest answer, with its reasoning.")
    unused_numbers: list[str] = dspy.InputField(
        desc="Numbers given in the task that the Defender's work never mentions (computed; may be empty)."
    )
    asked_questions: list[str] = dspy.InputField(desc="Questions already asked in earlier rounds.")
    rejected: str = dspy.InputField(desc="Your earlier items that broke the rules and why, or 'none'.")
    questions: list[str] = dspy.OutputField(desc="New questions, each a single question ending with '?'.")


def _reasoning_field() -> tuple[type, dspy.OutputField]:
    return (str, dspy.OutputField(desc="Step-by-step work: every step and intermediate calculation."))


def defender_signature(signature: type[dspy.Signature]) -> type[dspy.Signature]:
    """Round 0 (A0 = Defender(Q)): the user's signature with step-by-step reasoning first."""
    return signature.with_instructions(f"{DEFENDER_INSTRUCTIONS}\n\nThe task: {signature.instructions}").prepend(
        "reasoning", dspy.OutputField(desc="Step-by-step work: every step and intermediate calculation."), str
    )


def revise_signature(signature: type[dspy.Signature]) -> type[dspy.Signature]:
    """Round r ≥ 1: re-answer the original task given the previous answer and all questions so far."""
    sig = signature.with_instructions(f"{REVISE_INSTRUCTIONS}\n\nThe task: {signature.instructions}")
    sig = sig.append("previous_answer", dspy.InputField(desc="Your answer in the previous round."), str)
    sig = sig.append(
        "earlier_dialogue", dspy.InputField(desc="Earlier questions and your replies to them, or 'none'."), str
    )
    sig = sig.append("questions", dspy.InputField(desc="The Debater's new questions."), list[str])
    # outputs, in order: replies, the error check, full re-solution, then the task's own outputs
    sig = sig.prepend("reasoning", _reasoning_field()[1], str)
    sig = sig.prepend(
        "error", dspy.OutputField(desc="The concrete mistake found in your previous work, or 'none'."), str
    )
    sig = sig.prepend(
        "error_found", dspy.OutputField(desc="True only if you found a concrete mistake you can name."), bool
    )
    sig = sig.prepend("responses", dspy.OutputField(desc="One reply per new question, in order."), list[str])
    return sig


def host_signature(signature: type[dspy.Signature]) -> type[dspy.Signature]:
    """The Host: the user's inputs plus the whole role-tagged dialogue → reasoning and the outputs."""
    sig = signature.with_instructions(f"{HOST_INSTRUCTIONS}\n\nThe task: {signature.instructions}")
    sig = sig.append("dialogue", dspy.InputField(desc="The whole debate, role-tagged and by round."), str)
    return sig.prepend("reasoning", _reasoning_field()[1], str)


# ------------------------------------------------------------------------ the paper's prompts (Table 3)

# FOR-Prompting (Zhang, Zhang, Dai, arXiv 2510.01674), Appendix A.1, Table 3: "Illustrative prompts for each
# role in FOR-Prompting", verbatim (the paper's typographic apostrophes included). The paper adds that "prompts
# with similar intent or wording can be employed"; these are its own. Its Defender prompt serves the first answer
# and every revision alike (Algorithm 1: A_0 = Defender(Q), A_r = Defender(Q, O_1..O_r)).
PAPER_DEFENDER_INSTRUCTIONS = (
    "You are the Defender. Answer the user’s task as best as possible. Be concise but correct. "
    "Provide a single final answer at the end, clearly marked."
)
PAPER_DEBATER_INSTRUCTIONS = (
    "You are the Debater. You will ask clarifying questions to improve the answer, without proposing any "
    "solutions. Your output should be ONLY a concise list of questions."
)
PAPER_HOST_INSTRUCTIONS = (
    "You are the Host. You must synthesize the Defender’s answer and the Debater’s objections, and "
    "produce a refined final answer. Quote specific objections when relevant."
)


class PaperDebater(dspy.Signature):
    __doc__ = PAPER_DEBATER_INSTRUCTIONS

    task: str = dspy.InputField(desc="The original task, with all its inputs.")
    current_answer: str = dspy.InputField(desc="The Defender's latest answer.")
    asked_questions: list[str] = dspy.InputField(desc="Questions already asked in earlier rounds.")
    questions: list[str] = dspy.OutputField(desc="Your questions.")


def _paper_answer_field() -> dspy.OutputField:
    return dspy.OutputField(desc="Your answer, written out; the final answer goes in the fields that follow.")


def paper_defender_signature(signature: type[dspy.Signature]) -> type[dspy.Signature]:
    """A_0 = Defender(Q) with Table 3's Defender prompt: the user's signature, its answer written out first."""
    sig = signature.with_instructions(f"{PAPER_DEFENDER_INSTRUCTIONS}\n\nThe task: {signature.instructions}")
    return sig.prepend("reasoning", _paper_answer_field(), str)


def paper_revise_signature(signature: type[dspy.Signature], *, named_errors: bool = False) -> type[dspy.Signature]:
    """A_r = Defender(Q, O_1..O_r) with Table 3's Defender prompt: the original task, the previous answer, the
    earlier question/reply pairs and the new questions; one reply per question, then the answer again in full.
    ``named_errors`` adds the typed ``error_found`` / ``error`` that ``keep_unless_error`` needs (not the paper's)."""
    sig = signature.with_instructions(f"{PAPER_DEFENDER_INSTRUCTIONS}\n\nThe task: {signature.instructions}")
    sig = sig.append("previous_answer", dspy.InputField(desc="Your answer in the previous round."), str)
    sig = sig.append(
        "earlier_dialogue", dspy.InputField(desc="Earlier questions and your replies to them, or 'none'."), str
    )
    sig = sig.append("questions", dspy.InputField(desc="The Debater's new questions."), list[str])
    sig = sig.prepend("reasoning", _paper_answer_field(), str)
    if named_errors:
        sig = sig.prepend(
            "error", dspy.OutputField(desc="The concrete mistake found in your previous work, or 'none'."), str
        )
        sig = sig.prepend(
            "error_found", dspy.OutputField(desc="True only if you found a concrete mistake you can name."), bool
        )
    return sig.prepend("responses", dspy.OutputField(desc="One reply per new question, in order."), list[str])


def paper_debater_signature(*, guard: bool = False) -> type[dspy.Signature]:
    """O_r = Debater(A_{r-1}) with Table 3's Debater prompt; ``guard`` adds the ``rejected`` input the guard's
    re-ask fills in (the paper has no guard: its Debater asks questions only by prompt)."""
    if not guard:
        return PaperDebater
    return PaperDebater.append(
        "rejected", dspy.InputField(desc="Your earlier items that broke the rules and why, or 'none'."), str
    )


def paper_host_signature(signature: type[dspy.Signature]) -> type[dspy.Signature]:
    """A* = Host(Q, {A_0, O_1, A_1, ..., O_N, A_N}) with Table 3's Host prompt."""
    sig = signature.with_instructions(f"{PAPER_HOST_INSTRUCTIONS}\n\nThe task: {signature.instructions}")
    sig = sig.append("dialogue", dspy.InputField(desc="The whole debate, role-tagged and by round."), str)
    answer = dspy.OutputField(desc="Your synthesis, written out; the final answer goes in the fields that follow.")
    return sig.prepend("reasoning", answer, str)


class RoleSignatures(NamedTuple):
    """The four predictors' signatures: the first answer, a revision, the Debater and the Host."""

    defender: type[dspy.Signature]
    revise: type[dspy.Signature]
    debater: type[dspy.Signature]
    host: type[dspy.Signature]


def role_signatures(
    signature: type[dspy.Signature],
    prompts: Literal["project", "paper"] = "project",
    *,
    debater_mode: Literal["questions", "free"] = "questions",
    guard: bool = True,
    keep_unless_error: bool = True,
) -> RoleSignatures:
    """Each role's signature. ``"project"``: the prompts above. ``"paper"``: Table 3's prompts, with the fields
    the paper's loop needs — the answer written out and the typed outputs (every role), one reply per question
    (revisions: "Defender reply and revision"), earlier questions (the Debater asks only new ones) — and the
    project's extra fields only where an option that is not the paper's reads them (``error_found`` / ``error``
    for ``keep_unless_error``, ``rejected`` for the guard's re-ask). The paper has no free-Debater prompt."""
    if prompts == "project":
        free = Debater.with_instructions(DEBATER_FREE_INSTRUCTIONS)
        return RoleSignatures(
            defender_signature(signature),
            revise_signature(signature),
            Debater if debater_mode == "questions" else free,
            host_signature(signature),
        )
    if prompts != "paper":
        raise ConfigError(f"`prompts` must be 'project' or 'paper', got {prompts!r}.")
    if debater_mode != "questions":
        raise ConfigError("`prompts='paper'` has no free-Debater prompt (Table 3 gives none): use `prompts='project'`.")
    return RoleSignatures(
        paper_defender_signature(signature),
        paper_revise_signature(signature, named_errors=keep_unless_error),
        paper_debater_signature(guard=guard),
        paper_host_signature(signature),
    )
