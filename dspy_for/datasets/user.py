"""A user's own data: a JSONL file, one JSON object per line with ``question`` and ``answer`` (other keys are
ignored; blank lines are skipped).

The metric and the signature follow the answers' type:

* every answer a number — a JSON number, or a string that is exactly one number (``"42"``, ``"-3.5"``,
  ``"1,250"``) — → :func:`~dspy_for.metrics.numeric_match` (|prediction − gold| < 0.01, the number read from the
  answer as for GSM8K) and the signature ``question -> answer: float``;
* otherwise → :func:`~dspy_for.metrics.exact_match` (DSPy's normalisation: case, punctuation, the articles a / an /
  the and extra whitespace ignored) and ``question -> answer: str``.

:func:`read_user_rows` reads and checks the file (a missing file, a line that is not a JSON object or lacks
``question`` / ``answer``, an empty question or answer, or a file with no items all fail with the line named);
:func:`answer_type` decides the type. Registering the file as a dataset (so every run reads it like a benchmark)
is :func:`dspy_for.datasets.register_jsonl`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from dspy_for.datasets.formats import read_utf8
from dspy_for.errors import DatasetError

__all__ = ["USER_SPLIT", "answer_type", "is_number", "read_user_rows"]

#: the one split of a user's data file: all of its items
USER_SPLIT = "all"

_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+")


def is_number(value: Any) -> bool:
    """A JSON number (not a boolean), or a string that is exactly one number (thousands commas allowed)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return value == value  # NaN is not an answer
    return isinstance(value, str) and _NUMBER.fullmatch(value.strip()) is not None


def answer_type(rows: list[dict[str, Any]]) -> Literal["float", "str"]:
    """``"float"`` when every answer is a number (:func:`is_number`), else ``"str"``."""
    return "float" if rows and all(is_number(r["answer"]) for r in rows) else "str"


def read_user_rows(path: str | Path) -> list[dict[str, Any]]:
    """The items of a user's JSONL file as rows with ``question`` and ``answer`` (module docstring)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise DatasetError(
            f"Data file `{p}` does not exist. Pass a JSONL file with one JSON object per line, each with "
            '`question` and `answer` (e.g. {"question": "2 + 3?", "answer": 5}).'
        )
    rows = []
    for lineno, line in enumerate(read_utf8(p).splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(
                f"{p}, line {lineno}: not valid JSON ({exc.msg}). Write one JSON object per line."
            ) from None
        if not isinstance(row, dict):
            raise DatasetError(f"{p}, line {lineno}: expected a JSON object, got {type(row).__name__}.")
        for key in ("question", "answer"):
            if key not in row:
                raise DatasetError(
                    f"{p}, line {lineno}: no `{key}`. Every line needs `question` and `answer` "
                    f"(its keys are: {', '.join(sorted(row)) or 'none'})."
                )
        if not isinstance(row["question"], str) or not row["question"].strip():
            raise DatasetError(f"{p}, line {lineno}: `question` must be a non-empty string.")
        answer = row["answer"]
        if isinstance(answer, bool) or not isinstance(answer, str | int | float) or not str(answer).strip():
            raise DatasetError(
                f"{p}, line {lineno}: `answer` must be a non-empty string or a number, got {json.dumps(answer)}."
            )
        rows.append({"question": row["question"].strip(), "answer": answer, "line": lineno})
    if not rows:
        raise DatasetError(f"Data file `{p}` has no items: write one JSON object per line.")
    return rows
