"""What identifies a run's results: a stable hash of plain data (:func:`stable_hash`) and of what a program's
predictors tell the LM (:func:`prompts_fingerprint`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["prompts_fingerprint", "stable_hash"]


def prompts_fingerprint(program: Any) -> str:
    """Hash of what a program's predictors tell the LM: per named predictor its instruction, its fields
    (name, type, description) and its demos. Two programs with the same fingerprint send the same prompts."""
    parts = []
    for name, predictor in program.named_predictors():
        sig = predictor.signature
        fields_ = [
            (k, str(f.annotation), str((f.json_schema_extra or {}).get("desc", ""))) for k, f in sig.fields.items()
        ]
        parts.append(
            {
                "name": name,
                "instructions": sig.instructions,
                "fields": fields_,
                "demos": [dict(d) for d in getattr(predictor, "demos", [])],
            }
        )
    return stable_hash({"predictors": parts})


def stable_hash(data: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:12]
