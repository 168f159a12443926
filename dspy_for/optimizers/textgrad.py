"""TextGrad-style prompt optimization (zou-group/textgrad, ``evaluation/prompt_optimization.py``) as a
DSPy Teleprompter.

The variables are the instructions of the student's named predictors. For each step::

    batch     = next minibatch of the training set (batch_size items; a fresh seeded shuffle each epoch)
    losses    = per item: input, prediction, gold, metric outcome (and the metric's feedback text)
    gradient  = LLM critique of each instruction given the losses           (role "gradient")
    step      = LLM rewrite of each instruction given its gradient,         (role "optimizer")
                the constraints and the last ``gradient_memory`` gradients
    validate  = score the validation set; if strictly lower than the last accepted score, revert

Defaults mirror TextGrad: batches of 3, 3 epochs × 4 steps = 12 updates, validation revert on.
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Callable, Sequence
from typing import Any

import dspy
from dspy.teleprompt import Teleprompter

from dspy_for.errors import ConfigError
from dspy_for.lm import resolve_lm
from dspy_for.lm.usage import role, track_usage
from dspy_for.optimizers.prompts import Gradient, Step
from dspy_for.optimizers.routing import predictor_lms, route_as

__all__ = ["TextGrad"]

logger = logging.getLogger(__name__)
_METADATA = ("id", "split", "source", "dataset")
_FIELD_MARKER = re.compile(r"\[\[ ## \w+ ## \]\]")  # DSPy's field delimiters, sometimes echoed by small models


class TextGrad(Teleprompter):
    """Textual-gradient descent on predictor instructions; ``compile`` returns an optimized copy, each of whose
    predictors calls the LM object its namesake in the student calls.

    The compiled program carries ``textgrad_history`` (one row per step: step, epoch, instruction per
    variable, train batch score, validation score, reverted, errors) and ``compile_usage`` (per role).
    A critique or rewrite that fails to parse skips that variable's update (recorded under ``errors``);
    a step that changed nothing is not re-scored.
    """

    def __init__(
        self,
        metric: Callable[..., Any],
        *,
        optimizer_lm: Any = None,
        gradient_lm: Any = None,
        batch_size: int = 3,
        epochs: int = 3,
        steps_per_epoch: int = 4,
        validation_revert: bool = True,
        gradient_memory: int = 0,
        constraints: Sequence[str] | None = None,
        num_threads: int = 1,
        seed: int = 0,
        predictors: Sequence[str] | None = None,
    ) -> None:
        super().__init__()
        for name, value in (
            ("batch_size", batch_size),
            ("epochs", epochs),
            ("steps_per_epoch", steps_per_epoch),
            ("num_threads", num_threads),
        ):
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"`{name}` must be a positive integer, got {value!r}.")
        if not isinstance(gradient_memory, int) or gradient_memory < 0:
            raise ConfigError(f"`gradient_memory` must be an integer >= 0, got {gradient_memory!r}.")
        self.metric = metric
        self.optimizer_lm = resolve_lm(optimizer_lm)
        self.gradient_lm = resolve_lm(gradient_lm) or self.optimizer_lm
        self.batch_size, self.epochs, self.steps_per_epoch = batch_size, epochs, steps_per_epoch
        self.validation_revert, self.gradient_memory = validation_revert, gradient_memory
        self.constraints = list(constraints or [])
        self.num_threads, self.seed = num_threads, seed
        self.predictor_names = list(predictors) if predictors is not None else None
        self.gradient = dspy.Predict(Gradient)
        self.step = dspy.Predict(Step)

    # ------------------------------------------------------------------------------------------ parts

    def _variables(self, program: dspy.Module) -> dict[str, Any]:
        named = dict(program.named_predictors())
        names = self.predictor_names or list(named)
        unknown = [n for n in names if n not in named]
        if unknown:
            raise ConfigError(
                f"Unknown predictor `{unknown[0]}` in `predictors`. The student's predictors are: {', '.join(named)}."
            )
        return {n: named[n] for n in names}

    def _evaluate(self, program: dspy.Module, data: list[dspy.Example]) -> float:
        evaluator = dspy.Evaluate(
            devset=data,
            metric=self._score,
            num_threads=self.num_threads,
            display_progress=False,
            display_table=False,
            failure_score=0.0,
            max_errors=len(data) + 1,
        )
        with role("task"):
            return float(evaluator(program).score) / 100.0

    def _score(self, example: dspy.Example, pred: Any, trace: Any = None) -> float:
        """The metric as a float (GEPA-style metrics return ``Prediction(score=..., feedback=...)``)."""
        outcome = self.metric(example, pred, trace)
        return float(getattr(outcome, "score", outcome))

    def _losses(self, program: dspy.Module, batch: list[dspy.Example]) -> tuple[list[str], float]:
        texts, scores = [], []
        for ex in batch:
            with role("task"):
                try:
                    pred = program(**ex.inputs())
                    outcome = self.metric(ex, pred)
                except Exception as exc:  # a failed item is a loss too
                    texts.append(f"Input: {dict(ex.inputs())}\nThe program failed: {exc}")
                    scores.append(0.0)
                    continue
            feedback = getattr(outcome, "feedback", None)
            score = float(getattr(outcome, "score", outcome))
            scores.append(score)
            shown = {k: v for k, v in pred.items() if k not in ("trajectory", "usage", "stats")}
            gold = ex.get("answer") if "answer" in ex else {k: v for k, v in ex.labels().items() if k not in _METADATA}
            text = (
                f"Input: {dict(ex.inputs())}\nPrediction: {shown}\nExpected: {gold}\n"
                f"Outcome: {'correct' if score >= 1.0 else 'incorrect'} (score {score:g})"
            )
            if feedback:
                text += f"\nMetric feedback: {feedback}"
            texts.append(text)
        return texts, sum(scores) / max(1, len(scores))

    def _update(self, name: str, instruction: str, losses: list[str], memory: list[str]) -> tuple[str, str]:
        """One variable's backward (gradient) and step: returns (gradient text, new instruction)."""
        grad = self._call(
            self.gradient, self.gradient_lm, "gradient", role=name, instruction=instruction, losses=losses
        )
        past = memory[-self.gradient_memory :] if self.gradient_memory else []
        new = self._call(
            self.step,
            self.optimizer_lm,
            "optimizer",
            instruction=instruction,
            feedback=str(grad.feedback),
            past_feedback=past,
            constraints=self.constraints,
        )
        return str(grad.feedback), _FIELD_MARKER.sub("", str(new.new_instruction)).strip()

    def _call(self, predictor: dspy.Predict, lm: Any, role_name: str, **kwargs: Any) -> dspy.Prediction:
        with role(role_name), dspy.context(lm=lm or dspy.settings.lm):
            return predictor(**kwargs)

    # ---------------------------------------------------------------------------------------- compile

    def compile(
        self, student: dspy.Module, *, trainset: list[dspy.Example], valset: list[dspy.Example] | None = None, **_: Any
    ) -> dspy.Module:
        if not trainset:
            raise ConfigError("`trainset` is empty: TextGrad needs training examples for its minibatches.")
        program = route_as(student.deepcopy(), predictor_lms(student))  # every role on the student's own LM
        variables = self._variables(program)
        val = list(valset or trainset)
        rng = random.Random(self.seed)
        history: list[dict[str, Any]] = []
        memory: dict[str, list[str]] = {n: [] for n in variables}
        with track_usage() as usage:
            last_val = self._evaluate(program, val) if self.validation_revert else None
            history.append(
                {
                    "step": 0,
                    "epoch": 0,
                    "instructions": _instructions(variables),
                    "train_score": None,
                    "val_score": last_val,
                    "reverted": False,
                    "errors": {},
                }
            )
            step = 0
            for epoch in range(1, self.epochs + 1):
                order = list(trainset)
                rng.shuffle(order)
                for i in range(self.steps_per_epoch):
                    batch = [order[(i * self.batch_size + j) % len(order)] for j in range(self.batch_size)]
                    step += 1
                    losses, train_score = self._losses(program, batch)
                    before = _instructions(variables)
                    errors: dict[str, str] = {}
                    for name, predictor in variables.items():
                        try:
                            feedback, text = self._update(name, predictor.signature.instructions, losses, memory[name])
                        except Exception as exc:  # an unparsable critique/rewrite skips this variable's update
                            errors[name] = f"{type(exc).__name__}: {exc}"[:500]
                            logger.warning("TextGrad step %d: no update for `%s` (%s)", step, name, errors[name])
                            continue
                        memory[name].append(feedback)
                        if text:
                            predictor.signature = predictor.signature.with_instructions(text)
                    reverted = False
                    val_score = last_val
                    if self.validation_revert and _instructions(variables) != before:  # unchanged: nothing to score
                        val_score = self._evaluate(program, val)
                        if last_val is not None and val_score < last_val:  # strictly lower: revert (as TextGrad)
                            for name, predictor in variables.items():
                                predictor.signature = predictor.signature.with_instructions(before[name])
                            reverted = True
                        else:
                            last_val = val_score
                    history.append(
                        {
                            "step": step,
                            "epoch": epoch,
                            "instructions": _instructions(variables),
                            "train_score": train_score,
                            "val_score": val_score,
                            "reverted": reverted,
                            "errors": errors,
                        }
                    )
                    logger.info(
                        "TextGrad step %d (epoch %d): train batch %.3f, val %s%s",
                        step,
                        epoch,
                        train_score,
                        "-" if val_score is None else f"{val_score:.3f}",
                        " (reverted)" if reverted else "",
                    )
        program.textgrad_history = history
        program.compile_usage = usage.to_dict()
        return program


def _instructions(variables: dict[str, Any]) -> dict[str, str]:
    return {n: p.signature.instructions for n, p in variables.items()}
