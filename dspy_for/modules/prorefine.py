"""ProRefine (arXiv 2506.05305) as a DSPy module: inference-time prompt refinement.

Algorithm 1 of the paper (regenerating from scratch each step, as the official code does)::

    p* = p
    for i = 1..n:
        o_i = LLM_task(p*, q)  generating i·k tokens
        f_i = LLM_feedback(q, o_i)
        p*  = LLM_optimizer(p*, f_i)
        stop if o_i ended with end-of-sequence
    return p*

The final outputs come from the task LM with p* at full length (reusing o_i when it already ended with
end-of-sequence): one call of the task predictor, the only one DSPy's trace records for the task role (see
``prorefine_task``), so optimizers bootstrap task demos, which every capped step then shows. An optional verifier
gates refinement: ``"llm"`` asks a judge LM whether the initial
answer is correct (no labels); ``"oracle"`` uses the metric against the gold label (an upper bound,
marked ``label_using``).

``prompts="paper"`` sends the official feedback and optimizer prompts (the authors' public implementation,
quoted in ``prorefine_signatures``) with the inputs the official code gives them: the feedback role sees the input
and the output (not the prompt) and returns its feedback alone ("the output is correct" when it is); the optimizer
sees the task prompt and the feedback, thinks step by step and sends the improved prompt between
``<IMPROVED_PROMPT>`` tags. Everything else is the same module: typed roles, the verifier modes, the i·k schedule,
the end-of-sequence stop. The official schedule, 10 tokens per step up to 250, is ``k=10, n=25`` (step i is
capped at i·k; the official loop runs 250 // 10 steps of ``max_new_tokens = cur_tokens + 10``). The registry's
``prorefine_paper`` is this module with those prompts, that schedule and ``guard=False`` (every rewrite taken, as
the official code takes it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import dspy
from dspy.signatures.signature import ensure_signature
from dspy.utils.exceptions import AdapterParseError

from dspy_for.errors import ConfigError
from dspy_for.lm.usage import Usage, role, track_usage
from dspy_for.metrics import numeric_match
from dspy_for.modules import prorefine_signatures as S
from dspy_for.modules import prorefine_task as task_role
from dspy_for.modules import trajectory as T
from dspy_for.modules.guard import numbers_in
from dspy_for.modules.prorefine_signatures import Feedback, Optimizer, Verifier
from dspy_for.modules.prorefine_task import TaskOutput
from dspy_for.modules.role_lms import PerRoleLMs
from dspy_for.modules.role_predict import RolePredict
from dspy_for.modules.task_text import render_task

__all__ = ["ProRefine", "clean_prompt", "export_program", "rejection_reason"]


_ADAPTER_MARKER = re.compile(r"\[\[ ## \w+ ## \]\]")


def clean_prompt(text: str) -> str:
    """An optimizer's rewrite without DSPy adapter field markers (``[[ ## completed ## ]]``), which small
    LMs sometimes copy into the value, and without surrounding whitespace."""
    return _ADAPTER_MARKER.sub(" ", str(text or "")).strip()


_COPY_WORDS = 8  # a rewrite sharing this many consecutive words with the feedback copies it


def _word_runs(text: str, size: int) -> set[tuple[str, ...]]:
    words = re.findall(r"[a-z0-9']+", (text or "").lower())
    return {tuple(words[i : i + size]) for i in range(len(words) - size + 1)}


def rejection_reason(
    proposed: str, prompt: str, *, task: str, feedback: str, output: str = "", instructions: str | None = None
) -> str | None:
    """Why an optimizer rewrite cannot become the task prompt, or None if it can.

    A task prompt must stay general. Small optimizer LMs tend to paste the problem, its numbers or the
    feedback itself into the prompt, so a rewrite is rejected when it is empty (``"empty"``), when it brings
    in a number of this problem, its feedback or its partial output that the current prompt does not have
    (``"problem_numbers"``), or when it copies a run of eight or more words of the feedback
    (``"copies_feedback"``) or of the optimizer's own instructions outside its quoted examples of good
    guidance (``"copies_instructions"``; ``instructions``: the optimizer's, default the project's).
    """
    if not proposed.strip():
        return "empty"
    specific = numbers_in(task) | numbers_in(feedback) | numbers_in(output)
    if (numbers_in(proposed) & specific) - numbers_in(prompt):
        return "problem_numbers"
    runs = _word_runs(proposed, _COPY_WORDS) - _word_runs(prompt, _COPY_WORDS)
    if runs & _word_runs(feedback, _COPY_WORDS):
        return "copies_feedback"
    own = Optimizer.__doc__ if instructions is None else instructions
    if runs & _word_runs(re.sub(r'"[^"]*"', " ", own or ""), _COPY_WORDS):  # quoted examples may be used
        return "copies_instructions"
    return None


def export_program(
    signature: str | type[dspy.Signature], prompt: str, kind: Literal["cot", "predict"] = "cot"
) -> dspy.Module:
    """A reusable program whose instruction is a refined prompt."""
    sig = ensure_signature(signature).with_instructions(prompt)
    return dspy.ChainOfThought(sig) if kind == "cot" else dspy.Predict(sig)


class ProRefine(PerRoleLMs):
    """Inference-time prompt refinement with task, feedback, optimizer and verifier roles.

    Args:
        signature: any DSPy signature; its instruction is the initial prompt p (kept by the ``task`` predictor,
            so an instruction optimizer such as MIPROv2, GEPA or TextGrad tunes p).
        k: tokens added per step (step i generates at most i·k tokens).
        n: maximum number of steps.
        verifier: ``"none"`` (always refine), ``"llm"`` (refine only if the verifier LM judges the initial
            answer wrong) or ``"oracle"`` (refine only if the metric says it is wrong; needs ``gold=``).
        history: ``"stateless"`` (paper default) or ``"chat"`` (the optimizer sees all earlier prompts and
            feedback).
        task_module: ``"cot"`` (``dspy.ChainOfThought``'s signature: reasoning, then the outputs) or ``"predict"``.
        prompts: the feedback and optimizer prompts: ``"project"`` (reworded for small models, see
            ``prorefine_signatures``) or ``"paper"`` (the official implementation's, verbatim).
        guard: reject an optimizer rewrite that pastes the problem, its numbers or the feedback
            (:func:`rejection_reason`); ``False`` takes every non-empty rewrite, as the official code does.
        metric: the oracle's metric ``(example, prediction) -> bool`` (default: numeric answer match).
        task_lm, feedback_lm, optimizer_lm, verifier_lm: per-role LMs (``dspy.BaseLM`` or spec strings; default:
            the configured LM).
    """

    lm_parameters: ClassVar[Mapping[str, str]] = {
        "task": "task_lm",
        "feedback": "feedback_lm",
        "optimizer": "optimizer_lm",
        "verifier": "verifier_lm",
    }

    def __init__(
        self,
        signature: str | type[dspy.Signature],
        k: int = 10,
        n: int = 25,
        verifier: Literal["none", "llm", "oracle"] = "none",
        history: Literal["stateless", "chat"] = "stateless",
        *,
        task_module: Literal["cot", "predict"] = "cot",
        prompts: Literal["project", "paper"] = "project",
        guard: bool = True,
        metric: Any = None,
        task_lm: Any = None,
        feedback_lm: Any = None,
        optimizer_lm: Any = None,
        verifier_lm: Any = None,
    ) -> None:
        super().__init__()
        for name, value in (("k", k), ("n", n)):
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"`{name}` must be a positive integer, got {value!r}.")
        if verifier not in ("none", "llm", "oracle"):
            raise ConfigError(f"`verifier` must be 'none', 'llm' or 'oracle', got {verifier!r}.")
        if history not in ("stateless", "chat"):
            raise ConfigError(f"`history` must be 'stateless' or 'chat', got {history!r}.")
        if task_module not in ("cot", "predict"):
            raise ConfigError(f"`task_module` must be 'cot' or 'predict', got {task_module!r}.")
        if prompts not in ("project", "paper"):
            raise ConfigError(f"`prompts` must be 'project' or 'paper', got {prompts!r}.")
        self.signature = ensure_signature(signature)
        self.k, self.n, self.verifier_mode, self.history_mode = k, n, verifier, history
        self.task_module, self.prompts, self.guard = task_module, prompts, guard
        self.uses_labels = verifier == "oracle"
        self.metric = numeric_match if metric is None else metric
        # with "cot" the task predictor is exactly dspy.ChainOfThought's, so the unrefined answer is the CoT
        # baseline's answer (same messages, same cache entry) and any difference is refinement's doing
        task_sig = dspy.ChainOfThought(self.signature).predict.signature if task_module == "cot" else self.signature
        paper, name = prompts == "paper", type(self).__name__
        sigs = {
            "task": task_sig,
            "feedback": S.PaperFeedback if paper else Feedback,
            "optimizer": S.paper_optimizer_signature(history=history == "chat") if paper else Optimizer,
            "verifier": Verifier,
        }
        lms = {"task": task_lm, "feedback": feedback_lm, "optimizer": optimizer_lm, "verifier": verifier_lm}
        made = {r: RolePredict(sig, module=name, role=r, lm=lms[r], lm_parameter=f"{r}_lm") for r, sig in sigs.items()}
        self.task, self.feedback, self.optimizer, self.verifier = (made[r] for r in sigs)

    def forward(self, gold: dspy.Example | None = None, **inputs: Any) -> dspy.Prediction:
        return T.run_sync(self._refine(T.SYNC_CALLS, inputs, gold))

    async def aforward(self, gold: dspy.Example | None = None, **inputs: Any) -> dspy.Prediction:
        return await self._refine(T.ASYNC_CALLS, inputs, gold)

    # --------------------------------------------------------------------------------- Algorithm 1

    async def _refine(self, calls: T.Calls, inputs: dict[str, Any], gold: dspy.Example | None) -> dspy.Prediction:
        """Algorithm 1, written once: ``forward`` runs it with plain calls, ``aforward`` with ``acall`` (and the
        capped task steps in a worker thread)."""
        if self.verifier_mode == "oracle" and gold is None:
            raise ConfigError(
                "`verifier='oracle'` uses the gold label: pass `gold=<dspy.Example>` (comparisons do this for "
                "label-using methods), or use `verifier='llm'` / `'none'`."
            )
        prompt = self.task.signature.instructions  # p* = p: the task predictor's (an optimizer may have tuned it)
        steps: list[T.ProRefineStep] = []
        with track_usage() as usage:
            final = await self._verified_answer(calls, prompt, inputs, gold)  # optional: keep an answer judged right
            refined = final is None
            if final is None:
                for i in range(1, self.n + 1):  # n >= 1: o_n exists after the loop
                    output = await calls.blocking(self._generate, prompt, inputs, i * self.k)  # o_i: ≤ i·k tokens
                    feedback = await self._feedback(calls, prompt, inputs, output)  # f_i = LLM_feedback(q, o_i)
                    step = await self._optimize(calls, i, prompt, inputs, output, feedback, steps)
                    steps.append(step)
                    prompt = step["new_prompt"]  # p* = LLM_optimizer(p*, f_i), unless the guard rejects it
                    if output["eos"]:  # o_i ended with end-of-sequence
                        break
                final = await self._final_answer(calls, prompt, inputs, output)
        return self._prediction(final, prompt, steps, usage, refined)

    async def _verified_answer(
        self, calls: T.Calls, prompt: str, inputs: dict[str, Any], gold: dspy.Example | None
    ) -> dspy.Prediction | None:
        """The verifier's gate: the initial answer (p at full length) if the verifier judges it right, else None
        (refine). ``"oracle"`` asks the metric with the gold label; ``"none"`` always refines."""
        if self.verifier_mode == "none":
            return None
        with T.private_trace() as initial_trace:  # in DSPy's trace only if it is the answer the item ends on
            initial = await task_role.answer(calls, self.task, prompt, inputs)
        if self.verifier_mode == "oracle":
            right = bool(self.metric(gold, initial))
        else:
            fields = ("reasoning", *self.signature.output_fields)
            answer = "\n".join(f"{f}: {initial.get(f)}" for f in fields if f in initial)
            with role("verifier"):
                kwargs = {"task": render_task(self.signature, inputs), "answer": answer}
                verdict = await calls.predict(self.verifier, kwargs)
            right = bool(verdict.correct)
        if right:
            T.publish(initial_trace)
        return initial if right else None

    async def _feedback(self, calls: T.Calls, prompt: str, inputs: dict[str, Any], output: TaskOutput) -> Any:
        """f_i: the feedback role's critique of the partial output o_i (``feedback`` and ``is_correct``; with the
        official prompts, which return the feedback alone, ``is_correct`` is read from the phrase they prescribe)."""
        task = render_task(self.signature, inputs)
        with role("feedback"):
            if self.prompts == "paper":
                fb = await calls.predict(self.feedback, {"input": task, "output": output["text"]})
                return dspy.Prediction(feedback=fb.feedback, is_correct=S.paper_feedback_is_correct(fb.feedback))
            kwargs = {"task": task, "prompt": prompt, "partial_output": output["text"]}
            return await calls.predict(self.feedback, kwargs)

    async def _optimize(
        self,
        calls: T.Calls,
        i: int,
        prompt: str,
        inputs: dict[str, Any],
        output: TaskOutput,
        fb: Any,
        steps: list[T.ProRefineStep],
    ) -> T.ProRefineStep:
        """The optimizer's rewrite of p* from f_i (``history="chat"``: with the earlier steps), kept only if
        :func:`rejection_reason` finds nothing wrong with it; returns step i's record."""
        history = "none"
        if self.history_mode == "chat" and steps:
            history = "\n\n".join(f"prompt {s['step']}: {s['prompt']}\nfeedback: {s['feedback']}" for s in steps)
        with role("optimizer"):
            if self.prompts == "paper":
                kwargs = {"task_prompt": prompt, "feedback": str(fb.feedback)}
                if self.history_mode == "chat":
                    kwargs["history"] = history
                reply = (await calls.predict(self.optimizer, kwargs)).improved_prompt
                proposed = clean_prompt(S.between_tags(reply, S.PAPER_PROMPT_TAG))
            else:
                kwargs = {"prompt": prompt, "feedback": str(fb.feedback), "history": history}
                proposed = clean_prompt((await calls.predict(self.optimizer, kwargs)).improved_prompt)
        if self.guard:
            instructions = S.PAPER_OPTIMIZER_INSTRUCTIONS if self.prompts == "paper" else None
            task = render_task(self.signature, inputs)
            rejected = rejection_reason(
                proposed, prompt, task=task, feedback=str(fb.feedback), output=output["text"], instructions=instructions
            )
        else:  # every rewrite is taken, except an empty one: it cannot be a prompt
            rejected = None if proposed.strip() else "empty"
        return {
            "step": i,
            "prompt": prompt,
            "max_tokens": i * self.k,
            "output": output["text"],
            "finish_reason": output["finish_reason"],
            "completion_tokens": output["completion_tokens"],
            "eos": output["eos"],
            "feedback": str(fb.feedback),
            "is_correct": bool(fb.is_correct),
            "new_prompt": prompt if rejected else proposed,
            "rejected_prompt": proposed if rejected else None,
            "rejected_reason": rejected,
        }

    def _generate(self, prompt: str, inputs: dict[str, Any], max_tokens: int) -> TaskOutput:
        """o_i: the task LM's output with instruction ``prompt``, capped at ``max_tokens`` (an LM call, not a
        ``Predict`` call: DSPy's trace never holds a partial output)."""
        return task_role.capped_step(self.task, prompt, inputs, max_tokens)

    async def _final_answer(
        self, calls: T.Calls, prompt: str, inputs: dict[str, Any], last: TaskOutput
    ) -> dspy.Prediction:
        """The outputs with p*, as one call of the task predictor: the last step's own reply when it ended with
        end-of-sequence (and parses), served again; else the task predictor at full length."""
        if last["eos"] and task_role.parses(self.task, last):
            try:
                return await task_role.answer(calls, self.task, prompt, inputs, replay=last["text"])
            except AdapterParseError:
                pass
        return await task_role.answer(calls, self.task, prompt, inputs)

    def _prediction(
        self, final: dspy.Prediction, prompt: str, steps: list[T.ProRefineStep], usage: Usage, refined: bool
    ) -> dspy.Prediction:
        values = {f: final.get(f) for f in ("reasoning", *self.signature.output_fields) if f in final}
        stats = {
            "steps_used": float(len(steps)),
            "refined": float(refined),
            "prompt_changes": float(sum(s["new_prompt"] != s["prompt"] for s in steps)),
            "rejected_rewrites": float(sum(s["rejected_reason"] is not None for s in steps)),
            "label_using": float(self.verifier_mode == "oracle"),
        }
        return dspy.Prediction(**values, refined_prompt=prompt, trajectory=steps, usage=usage.to_dict(), stats=stats)

    def export(
        self, prediction_or_prompt: dspy.Prediction | str, kind: Literal["cot", "predict"] = "cot"
    ) -> dspy.Module:
        """A reusable ``ChainOfThought``/``Predict`` whose instruction is the refined prompt p*."""
        prompt = prediction_or_prompt if isinstance(prediction_or_prompt, str) else prediction_or_prompt.refined_prompt
        return export_program(self.signature, prompt, kind)
