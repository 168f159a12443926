"""The inference-time methods as DSPy modules, and the typed trajectories they record."""

from __future__ import annotations

from dspy_for.modules.cascade import Cascade
from dspy_for.modules.for_prompting import FORPrompting
from dspy_for.modules.prorefine import ProRefine, export_program
from dspy_for.modules.role_lms import PerRoleLMs, RoleLMSet
from dspy_for.modules.role_predict import RolePredict
from dspy_for.modules.self_consistency import SelfConsistency
from dspy_for.modules.trajectory import (
    AnswerFields,
    ForRole,
    ForTurn,
    ForTurnType,
    ProRefineStep,
    QuestionsFields,
    RevisionFields,
    SynthesisFields,
    TurnUsage,
)

__all__ = [
    "AnswerFields",
    "Cascade",
    "FORPrompting",
    "ForRole",
    "ForTurn",
    "ForTurnType",
    "PerRoleLMs",
    "ProRefine",
    "ProRefineStep",
    "QuestionsFields",
    "RevisionFields",
    "RoleLMSet",
    "RolePredict",
    "SelfConsistency",
    "SynthesisFields",
    "TurnUsage",
    "export_program",
]
