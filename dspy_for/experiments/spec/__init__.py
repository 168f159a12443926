"""The run specification: one typed spec (:mod:`.model`) that a TOML config, CLI flags or a Python object all
become (:mod:`.config`), validated before anything runs."""

from __future__ import annotations

from dspy_for.experiments.spec.config import load_spec
from dspy_for.experiments.spec.model import (
    DatasetConfig,
    ExperimentSpec,
    JudgeConfig,
    MethodConfig,
    RunSpec,
    load_examples,
    prompts_fingerprint,
)

__all__ = [
    "DatasetConfig",
    "ExperimentSpec",
    "JudgeConfig",
    "MethodConfig",
    "RunSpec",
    "load_examples",
    "load_spec",
    "prompts_fingerprint",
]
