"""Secrets masked in every span MLflow exports while dspy-for runs with ``--autolog``.

``mlflow.dspy.autolog()`` writes DSPy's own traces (LM prompts and completions, module inputs and outputs, errors)
through MLflow's exporter, which dspy-for does not call. :func:`install_span_masking` adds :func:`mask_span` to
MLflow's span processors (``mlflow.tracing.configure``), which run on every span as it ends, before it is
exported: its inputs, outputs, attributes, events (exception messages) and status message are masked by
:func:`~dspy_for.secrets.redact`. The trace's request/response previews are made from the root span after that,
so they are masked too.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from dspy_for.compat import mlflow as compat
from dspy_for.secrets import needs_redaction, redact, redact_obj

if TYPE_CHECKING:
    from mlflow.entities import LiveSpan

__all__ = ["install_span_masking", "mask_span"]


def mask_span(span: LiveSpan) -> None:
    """Mask secrets in a live span's attributes (inputs and outputs are attributes), events and status message."""
    attributes = span.attributes
    events = span.events
    status = span.status
    event_attributes = [dict(e.attributes or {}) for e in events]
    if not needs_redaction([attributes, event_attributes, status.description or ""]):
        return
    for key, value in attributes.items():
        masked = redact_obj(value)
        if masked != value:
            span.set_attribute(key, masked)
    if needs_redaction(event_attributes):
        masked_events = [replace(e, attributes=redact_obj(a)) for e, a in zip(events, event_attributes, strict=True)]
        compat.replace_span_events(span, masked_events)
    if status.description and redact(status.description) != status.description:
        span.set_status(replace(status, description=redact(status.description)))  # type: ignore[arg-type]


def install_span_masking() -> None:
    """Apply :func:`mask_span` to every span MLflow exports from now on (installed once per process).

    Raises :class:`~dspy_for.errors.MissingDependencyError` on an MLflow without span processors: autolog must not
    write unmasked traces.
    """
    compat.check_supported()
    compat.add_span_processor(mask_span)
