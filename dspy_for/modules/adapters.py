"""The adapter FOR-Prompting's later turns parse with: DSPy's ``ChatAdapter``, plus one repair.

A small model often writes the last output field of a long multi-field reply as a plain ``answer: 135.0``
line at the end of the previous field, instead of under its ``[[ ## answer ## ]]`` header (the 1.5B did
so in a Defender revision and a Host synthesis of the quickstart). ``ChatAdapter`` then fails the turn and
falls back to ``JSONAdapter``, whose JSON-mode reply a small model can fill with repetitions up to
``max_tokens`` (a truncated call that costs as much as the rest of the debate). :class:`FieldRecoveringChatAdapter`
first reads such a ``name: value`` line as the missing field; everything else is ``ChatAdapter``'s, the
JSON fallback included. The prompts are unchanged (the same request, so the same cache entry).
"""

from __future__ import annotations

import re
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError

__all__ = ["FieldRecoveringChatAdapter", "restore_field_headers"]


class FieldRecoveringChatAdapter(dspy.ChatAdapter):
    """``ChatAdapter`` that also reads an output field written as a ``name: value`` line (see the module
    docstring); a reply it cannot repair fails exactly as with ``ChatAdapter``."""

    def parse(self, signature: type[dspy.Signature], completion: str) -> dict[str, Any]:
        try:
            return super().parse(signature, completion)
        except AdapterParseError as unreadable:
            repaired = restore_field_headers(completion, list(signature.output_fields))
            if repaired is None:
                raise
            try:
                return super().parse(signature, repaired)
            except AdapterParseError:
                raise unreadable from None  # the error names the LM's own reply, not the repair


def restore_field_headers(completion: str, fields: list[str]) -> str | None:
    """``completion`` with each output field that has no ``[[ ## name ## ]]`` header given one at its last
    ``name: value`` line (after the last present header); ``None`` if a missing field has no such line."""
    lines = completion.splitlines()
    headers = {name: f"[[ ## {name} ## ]]" for name in fields}
    missing = [name for name in fields if headers[name] not in completion]
    if not missing:
        return None
    present = {headers[name] for name in fields if name not in missing}
    start = max((i for i, line in enumerate(lines) if line.strip() in present), default=-1)
    for name in missing:
        label = re.compile(rf"^\s*[*_`]*{re.escape(name)}[*_`]*\s*:[*_`]*\s*(.*)$", re.IGNORECASE)
        found = [(i, m) for i in range(start + 1, len(lines)) if (m := label.match(lines[i]))]
        if not found:
            return None
        at, match = found[-1]
        value = match.group(1).strip()
        lines[at] = f"{headers[name]}\n{value}" if value else headers[name]
    return "\n".join(lines)
