"""The optional compile step of a run: a method's ``compile`` table (TextGrad, GEPA, MIPROv2, BootstrapFewShot)
applied to its program before it is evaluated, with one meaning of every option for compare and sweeps."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy

from dspy_for.errors import ConfigError
from dspy_for.experiments.spec.model import DatasetConfig, MethodConfig, load_examples
from dspy_for.optimizers import COMPILERS, compile_program

__all__ = ["compile_for_run", "compile_settings"]


def compile_settings(method: MethodConfig) -> dict[str, Any]:
    """The compile table of ``method``, checked: ``kind`` is required and known."""
    cfg = dict(method.compile or {})
    kind = cfg.get("kind")
    if kind not in COMPILERS:
        raise ConfigError(
            f"`compile` of method `{method.label}` needs `kind` = one of {', '.join(COMPILERS)}, got {kind!r}."
        )
    return cfg


def compile_for_run(
    program: dspy.Module,
    method: MethodConfig,
    dataset: DatasetConfig,
    *,
    metric: Callable[..., Any],
    seed: int,
    optimizer_lm: dspy.BaseLM,
    cached: Path | None = None,
) -> tuple[dspy.Module, dict[str, Any]]:
    """Compile ``program`` on ``trainset`` (default the train split; ``train_limit``: a seeded sample of N) with
    decisions on the last ``val_limit`` items of ``valset`` (default val) — away from the first items runs score —
    with ``optimizer_lm`` (built by the run from the table's ``optimizer_lm``, default the run's LM). ``cached``:
    where the compiled program is kept, so a resumed run does not compile again."""
    cfg = compile_settings(method)
    kind = cfg.pop("kind")
    if cached is not None and cached.is_file():
        program.load(str(cached))
        return program, json.loads(cached.with_suffix(".usage.json").read_text())
    trainset = load_examples(dataset, cfg.pop("trainset", "train"), limit=cfg.pop("train_limit", None))
    valset = load_examples(dataset, cfg.pop("valset", "val"))
    val_limit = cfg.pop("val_limit", None)
    if val_limit:
        valset = valset[-int(val_limit) :]
    cfg.pop("optimizer_lm", None)
    result = compile_program(
        kind, program, trainset=trainset, valset=valset, metric=metric, seed=seed, optimizer_lm=optimizer_lm, **cfg
    )
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        result.program.save(str(cached))
        cached.with_suffix(".usage.json").write_text(json.dumps(result.usage))
    return result.program, result.usage
