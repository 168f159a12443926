"""The task as one text block, for the roles that read the task without being its predictor.

FOR-Prompting's Debater and ProRefine's feedback, optimizer and verifier LMs all see the user's inputs
rendered the same way: one ``name: value`` line per input field of the user's signature, in its order.
The text is part of prompts whose fingerprints are pinned and whose cached LM answers are reused, so it
must not change byte for byte.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dspy

__all__ = ["render_task"]


def render_task(signature: type[dspy.Signature], inputs: Mapping[str, Any]) -> str:
    """One ``name: value`` line per input field of ``signature`` (a missing input renders as ``None``)."""
    return "\n".join(f"{name}: {inputs.get(name)}" for name in signature.input_fields)
