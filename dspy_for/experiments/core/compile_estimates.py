"""What a compile step will take, from its compiler's own settings (:func:`compile_work`): how many times it runs the
program on one item (fewest, typical, most) and how many calls its optimizer LM makes, per kind —

* ``bootstrap`` (BootstrapFewShot): the teacher runs on training items until ``max_bootstrapped_demos`` pass (typically
  demos ÷ the program's accuracy), at most ``max_rounds`` × the training items; no optimizer call.
* ``gepa``: its metric calls (``max_metric_calls``; ``max_full_evals`` × (train + val); ``auto`` as GEPA budgets it),
  each one program run, and a reflection per iteration of two minibatches of ``reflection_minibatch_size``.
* ``mipro`` / ``mipro_fewshot`` (MIPROv2): the default program and ``num_trials`` trials on the validation set (a
  minibatch of 35 when it is larger), up to 5 bootstrap runs per candidate; the prompt model's dataset summary (a
  call per 10 training items, at most), program summary and ``num_candidates`` proposals per predictor; with demos,
  each candidate's demo set bootstrapped as BootstrapFewShot does.
* ``textgrad``: ``epochs`` × ``steps_per_epoch`` steps, each a minibatch of ``batch_size`` runs, a gradient and a step
  call per tuned predictor, and (``validation_revert``) the validation set scored before the first step and after
  each step that changed an instruction.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dspy_for.compat.dspy import gepa_auto_metric_calls
from dspy_for.experiments.core.estimates import CellEstimates, Estimate
from dspy_for.optimizers import COMPILERS

__all__ = ["CompileWork", "compile_work", "plus", "scaled"]

Counts = tuple[float, float, float]

#: the minibatch MIPROv2 scores a trial on when the validation set is larger than it
_MIPRO_MINIBATCH = 35


@dataclass(frozen=True)
class CompileWork:
    """A compile's program runs (each on one item) and optimizer-LM calls: (fewest, typical, most); ``what`` says
    how they were counted."""

    runs: Counts
    optimizer: Counts
    what: str


def compile_work(
    kind: str, options: Mapping[str, Any], *, predictors: int, train: int, val: int, accuracy: float | None
) -> CompileWork:
    """What compile ``kind`` with its own ``options`` does on ``train`` training and ``val`` validation items for a
    program of ``predictors`` predictors whose accuracy is ``accuracy`` (None: unknown, taken as a half)."""
    build, run = COMPILERS[kind].split(options)
    o = {**build, **run}
    acc = accuracy if accuracy else 0.5
    if kind == "bootstrap":
        return _bootstrap(int(o.get("max_bootstrapped_demos", 4)), int(o.get("max_rounds", 1)), train, acc)
    if kind == "gepa":
        return _gepa(o, predictors, train, val)
    if kind in ("mipro", "mipro_fewshot"):
        return _mipro(o, kind, predictors, train, val, acc)
    if kind == "textgrad":
        return _textgrad(o, predictors, val or train)
    raise ValueError(f"no compile-work model for kind {kind!r}")


def _bootstrap(demos: int, rounds: int, train: int, acc: float) -> CompileWork:
    most = float(rounds * train)
    typical = min(most, demos / acc)
    return CompileWork(
        (float(min(demos, train)), typical, most),
        (0.0, 0.0, 0.0),
        f"{demos} demos: about {typical:.0f} training runs at {acc:.0%} right, at most {most:.0f}",
    )


def _gepa(o: Mapping[str, Any], predictors: int, train: int, val: int) -> CompileWork:
    v = val or train
    if o.get("max_metric_calls") is not None:
        calls, how = int(o["max_metric_calls"]), "max_metric_calls"
    elif o.get("max_full_evals") is not None:
        calls, how = int(o["max_full_evals"]) * (train + val), f"max_full_evals {o['max_full_evals']}"
    elif o.get("auto") is not None:
        calls, how = gepa_auto_metric_calls(str(o["auto"]), predictors, v), f"auto {o['auto']}"
    else:
        calls, how = 100, "max_metric_calls"
    mb = int(o.get("reflection_minibatch_size") or 3)
    loop = max(calls - v, 0)
    reflections = (1.0, max(1.0, loop / (2 * mb)), max(1.0, loop / mb))
    runs = (float(calls), float(calls), float(calls + 2 * mb + v))
    return CompileWork(runs, reflections, f"{calls} metric calls ({how}), about {reflections[1]:.0f} reflections")


def _mipro(o: Mapping[str, Any], kind: str, predictors: int, train: int, val: int, acc: float) -> CompileWork:
    candidates, trials, v = int(o.get("num_candidates", 4)), int(o.get("num_trials", 8)), val or train
    per_trial = min(v, _MIPRO_MINIBATCH)
    fulls = (trials // 5 + 1) * v if v > _MIPRO_MINIBATCH else 0
    typical = v + trials * per_trial + fulls
    boot = 0.0
    if kind == "mipro_fewshot":
        boot = candidates * min(train, int(o.get("max_bootstrapped_demos", 2)) / acc)
    runs = (float(v) + boot, typical + boot, typical + boot + 5 * candidates)
    proposals = candidates * max(predictors, 1)
    summaries = math.ceil(train / 10)
    optimizer = (proposals + 3.0, proposals + 3.0 + summaries / 2, proposals + 3.0 + summaries)
    return CompileWork(runs, optimizer, f"{candidates} candidates, {trials} trials on {per_trial} items")


def _textgrad(o: Mapping[str, Any], predictors: int, v: int) -> CompileWork:
    steps = int(o.get("epochs", 3)) * int(o.get("steps_per_epoch", 4))
    batch, revert = int(o.get("batch_size", 3)), bool(o.get("validation_revert", True))
    tuned = len(o["predictors"]) if o.get("predictors") else max(predictors, 1)
    most = float(steps * batch + (v * (1 + steps) if revert else 0))  # every step changed an instruction
    runs = (float(steps * batch + (v if revert else 0)), most, most)
    calls = float(2 * tuned * steps)
    return CompileWork(runs, (calls, calls, calls), f"{steps} steps of {batch}, {tuned} predictor(s)")


def scaled(per: CellEstimates, counts: Counts, source: str) -> CellEstimates:
    """``counts`` (fewest, typical, most) of a unit whose cost is ``per`` (its low, value and high)."""

    def one(e: Estimate | None) -> Estimate | None:
        if e is None:
            return None
        return Estimate(counts[1] * e.value, counts[0] * e.low, counts[2] * e.high, source)

    calls, tokens = one(per.calls), one(per.tokens)
    assert calls is not None and tokens is not None
    return CellEstimates(calls, tokens, one(per.usd), one(per.seconds))


def plus(a: CellEstimates, b: CellEstimates, source: str) -> CellEstimates:
    """Two estimates' sum (dollars or seconds absent if either's is)."""
    usd = a.usd.plus(b.usd, source) if a.usd is not None and b.usd is not None else None
    seconds = a.seconds.plus(b.seconds, source) if a.seconds is not None and b.seconds is not None else None
    return CellEstimates(a.calls.plus(b.calls, source), a.tokens.plus(b.tokens, source), usd, seconds)
