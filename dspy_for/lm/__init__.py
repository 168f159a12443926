"""LM layer: building LMs from specs, the local model registry and server, usage accounting."""

from __future__ import annotations

from dspy_for.lm.epochs import current_epoch, epoch, fresh
from dspy_for.lm.factory import (
    LM,
    LocalLM,
    check_lm_options,
    check_lm_spec,
    configure_cache,
    describe_lm,
    is_reasoning_model,
    lm_defaults,
    make_lm,
    resolve_lm,
    with_transport,
)
from dspy_for.lm.labels import model_label
from dspy_for.lm.usage import CallRecord, Usage, current_role, role, track_usage

__all__ = [
    "LM",
    "CallRecord",
    "LocalLM",
    "Usage",
    "check_lm_options",
    "check_lm_spec",
    "configure_cache",
    "current_epoch",
    "current_role",
    "describe_lm",
    "epoch",
    "fresh",
    "is_reasoning_model",
    "lm_defaults",
    "make_lm",
    "model_label",
    "resolve_lm",
    "role",
    "track_usage",
    "with_transport",
]
