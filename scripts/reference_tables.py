"""Write the tables of docs/reference.md that are made from declarations: the run settings
(dspy_for/experiments/spec/settings.py) and every data frame's columns (the summary's measures,
dspy_for/experiments/core/summary.py, and the other columns, dspy_for/experiments/core/frame_columns.py). Each
table follows a marker ``<!-- reference: NAME -->``; the text around them is left as it is.

    .venv/bin/python scripts/reference_tables.py          # rewrite them
    .venv/bin/python scripts/reference_tables.py --check  # exit 1 if one differs (tests/test_docs_reference.py)
"""

from __future__ import annotations

import sys
from pathlib import Path

from dspy_for.experiments.core.frame_columns import reference_tables
from dspy_for.experiments.spec.settings import reference_rows

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "reference.md"
SETTINGS_HEADER = ["| key | default | flag | commands | meaning |", "|---|---|---|---|---|"]


def generated() -> dict[str, list[str]]:
    """Each generated table by its marker, header included."""
    return {"settings": [*SETTINGS_HEADER, *reference_rows()], **reference_tables()}


def rewrite(text: str) -> str:
    """``text`` with every generated table replaced by what the declarations make now."""
    lines = text.splitlines()
    out: list[str] = []
    tables = generated()
    i = 0
    while i < len(lines):
        out.append(lines[i])
        name = lines[i].strip().removeprefix("<!-- reference: ").removesuffix(" -->")
        i += 1
        if name in tables and lines[i - 1].strip().startswith("<!-- reference:"):
            while i < len(lines) and lines[i].startswith("|"):
                i += 1
            out.extend(tables[name])
    return "\n".join(out) + "\n"


def main() -> int:
    text = REFERENCE.read_text(encoding="utf-8")
    new = rewrite(text)
    if "--check" in sys.argv[1:]:
        return 0 if new == text else 1
    REFERENCE.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
