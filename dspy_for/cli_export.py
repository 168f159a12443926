"""``dspy-for export``: a comparison's stored results as a CSV, Parquet or JSONL file, with no LM call."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from dspy_for.cli_common import (
    DataDirOpt,
    DataOpt,
    JudgeLmOpt,
    LmOpt,
    LmOptionOpt,
    RoleLmOpt,
    RoleLmOptionOpt,
    console,
    fail,
    run_command,
    run_overrides,
    show_progress,
)
from dspy_for.errors import DspyForError
from dspy_for.experiments.results import check_export, export_results

__all__ = ["export"]


@run_command("compare")
def export(
    config: Annotated[Path | None, typer.Argument(help="The comparison's TOML config.")] = None,
    to: Annotated[
        Path | None, typer.Option("--to", help="File to write: FILE.csv, FILE.parquet or FILE.jsonl.")
    ] = None,
    level: Annotated[
        str, typer.Option(help="items (item × method × epoch), cells (method × dataset) or pairs (paired tests).")
    ] = "items",
    dataset: Annotated[str | None, typer.Option(help="Dataset name, as the comparison ran it.")] = None,
    data: DataOpt = None,
    split: Annotated[str | None, typer.Option(help="Split, as the comparison ran it.")] = None,
    limit: Annotated[int | None, typer.Option(help="Seeded uniform subsample of N items, as it ran.")] = None,
    first: Annotated[int | None, typer.Option(help="Only the first N items of each split, as it ran.")] = None,
    methods: Annotated[str | None, typer.Option(help="Comma-separated method labels or names, as it ran.")] = None,
    baseline: Annotated[str | None, typer.Option(help="The method label Δ and the paired tests refer to.")] = None,
    lm: LmOpt = None,
    role_lm: RoleLmOpt = None,
    data_dir: DataDirOpt = None,
    lm_option: LmOptionOpt = None,
    role_lm_option: RoleLmOptionOpt = None,
    judge_lm: JudgeLmOpt = None,
    match_budget: Annotated[
        bool | None, typer.Option("--match-budget/--no-match-budget", help="As the comparison ran it.")
    ] = None,
    *,
    settings: dict[str, Any],
) -> None:
    """Write a comparison's stored results to a CSV, Parquet or JSONL file; no LM is called, nothing is run.

    Give the config and flags the comparison ran with: its records are found as `compare` finds them.
    """
    overrides = replace(
        run_overrides(lm, role_lm, lm_option, role_lm_option, judge_lm, data_dir, settings),
        dataset=dataset,
        data=data,
        split=split,
        limit=limit,
        first=first,
        methods=methods,
        baseline=baseline,
        match_budget=match_budget,
    )
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
