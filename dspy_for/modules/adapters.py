"""The adapter FOR-Prompting's later turns parse with: DSPy's ``ChatAdapter``, plus two repairs.

A small model often writes the last output field of a long multi-field reply as a plain ``answer: 135.0``
line at the end of the previous field, instead of under its ``[[ ## answer ## ]]`` header (the 1.5B did
so in a Defender revision and a Host synthesis of the quickstart). ``ChatAdapter`` then fails the turn and
falls back to ``JSONAdapter``, whose JSON-mode reply a small model can fill with repetitions up to
``max_tokens`` (a truncated call that costs as much as the rest of the debate). :class:`FieldRecoveringChatAdapter`
first reads such a ``name: value`` line as the missing field; everything else is ``ChatAdapter``'s, the
JSON fallback included. The prompts are unchanged (the same request, so the same cache entry).

A ``list[str]`` field written as a Python list with single quotes and an apostrophe inside an item (the 1.5B
Debater's ``['How many apples did Kimberly's brother pick?', 'What is x?']``) is not JSON, and DSPy's repair of
it splits the item at the apostrophe (``'How many apples did Kimberly'``, ``"s brother pick?'"``): a question
read as two non-questions. :func:`python_quoted_items` reads such a list's items between its quote-comma-quote
separators instead.
"""

from __future__ import annotations

import re
from typing import Any, get_args, get_origin

import dspy
from dspy.utils.exceptions import AdapterParseError

__all__ = ["FieldRecoveringChatAdapter", "python_quoted_items", "restore_field_headers"]

_QUOTED_LIST = re.compile(r"^\s*\[\s*'(.*)'\s*,?\s*\]\s*$", re.DOTALL)
_QUOTED_SEPARATOR = re.compile(r"'\s*,\s*'")


class FieldRecoveringChatAdapter(dspy.ChatAdapter):
    """``ChatAdapter`` that also reads an output field written as a ``name: value`` line (see the module
    docstring); a reply it cannot repair fails exactly as with ``ChatAdapter``."""

    def parse(self, signature: type[dspy.Signature], completion: str) -> dict[str, Any]:
        try:
            values = _chat_parse(self, signature, completion)
        except AdapterParseError as unreadable:
            repaired = restore_field_headers(completion, list(signature.output_fields))
            if repaired is None:
                raise
            try:
                values = _chat_parse(self, signature, repaired)
            except AdapterParseError:
                raise unreadable from None  # the error names the LM's own reply, not the repair
            completion = repaired
        return _with_quoted_lists(signature, completion, values)


# DSPy wraps `format` / `parse` with its callbacks once more on every subclass (`Adapter.__init_subclass__`), so a
# subclass's inherited `format` would open an adapter span inside an adapter span: it keeps ChatAdapter's, wrapped once
FieldRecoveringChatAdapter.format = dspy.ChatAdapter.format  # type: ignore[method-assign]


def python_quoted_items(text: str) -> list[str] | None:
    """The items of a list written with single quotes, split only at its quote-comma-quote separators, so an
    apostrophe inside an item stays in it (``['What is Biff's total?', 'How?']`` → two items); None when ``text``
    is not such a list."""
    match = _QUOTED_LIST.match(text)
    if match is None:
        return None
    return [item.strip() for item in _QUOTED_SEPARATOR.split(match.group(1))]


def _chat_parse(adapter: dspy.ChatAdapter, signature: type[dspy.Signature], completion: str) -> dict[str, Any]:
    """ChatAdapter's parse without its callbacks: this adapter's own ``parse`` is the one span of the call."""
    parse = getattr(dspy.ChatAdapter.parse, "__wrapped__", dspy.ChatAdapter.parse)
    return parse(adapter, signature, completion)  # type: ignore[no-any-return]


def _with_quoted_lists(signature: type[dspy.Signature], completion: str, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with each ``list[str]`` field that was written as a single-quoted list read by
    :func:`python_quoted_items` (the rest as parsed)."""
    for name, field in signature.output_fields.items():
        if get_origin(field.annotation) is not list or get_args(field.annotation) != (str,):
            continue
        section = re.search(rf"\[\[ ## {re.escape(name)} ## \]\](.*?)(?=\[\[ ## \w+ ## \]\]|\Z)", completion, re.DOTALL)
        items = python_quoted_items(section.group(1)) if section and "'" in section.group(1) else None
        if items is not None:
            values = {**values, name: items}
    return values


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
