"""``dspy-for export``: a comparison's stored results as a CSV, Parquet or JSONL file, with no LM call."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dspy_for.cli_common import LM_FLAGS, SELECTION_FLAGS, console, fail, run_command, show_progress
from dspy_for.errors import DspyForError
from dspy_for.experiments.export import check_export, export_results
from dspy_for.experiments.spec.config import Overrides

__all__ = ["export"]


@run_command("export", SELECTION_FLAGS, LM_FLAGS)
def export(
    config: Annotated[Path | None, typer.Argument(help="The comparison's TOML config.")] = None,
    to: Annotated[
        Path | None, typer.Option("--to", help="File to write: FILE.csv, FILE.parquet or FILE.jsonl.")
    ] = None,
    level: Annotated[
        str, typer.Option(help="items (item × method × epoch), cells (method × dataset) or pairs (paired tests).")
    ] = "items",
    *,
    overrides: Overrides,
) -> None:
    """Write a comparison's stored results to a CSV, Parquet or JSONL file; no LM is called, nothing is run.

    Give the config and flags the comparison ran with (data, methods, LMs): its records are found as `compare` finds
    them.
    """
    show_progress("dspy_for.experiments")  # a cell whose records are incomplete says so
    try:
        if to is None:
            raise DspyForError("Give the file to write: `--to FILE.csv` (or .parquet, .jsonl).")
        check_export(to, level)  # before anything is read
        frame = export_results(config, to, level=level, overrides=overrides)
    except DspyForError as exc:
        fail(exc)
        return
    console.print(f"wrote {len(frame)} row(s) × {len(frame.columns)} column(s) ({level}) to {to}", markup=False)
