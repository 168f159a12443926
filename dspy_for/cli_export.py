"""``dspy-for export``: a comparison's stored results as a CSV, Parquet or JSONL file, with no LM call."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from dspy_for.cli_common import (
    BaselineOpt,
    DataDirOpt,
    DataOpt,
    DatasetOpt,
    FirstOpt,
    JudgeLmOpt,
    LimitOpt,
    LmOpt,
    LmOptionOpt,
    MatchBudgetOpt,
    MethodsOpt,
    RoleLmOpt,
    RoleLmOptionOpt,
    SplitOpt,
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
    dataset: DatasetOpt = None,
    data: DataOpt = None,
    split: SplitOpt = None,
    limit: LimitOpt = None,
    first: FirstOpt = None,
    methods: MethodsOpt = None,
    baseline: BaselineOpt = None,
    lm: LmOpt = None,
    role_lm: RoleLmOpt = None,
    data_dir: DataDirOpt = None,
    lm_option: LmOptionOpt = None,
    role_lm_option: RoleLmOptionOpt = None,
    judge_lm: JudgeLmOpt = None,
    match_budget: MatchBudgetOpt = None,
    *,
    settings: dict[str, Any],
) -> None:
    """Write a comparison's stored results to a CSV, Parquet or JSONL file; no LM is called, nothing is run.

    Give the config and flags the comparison ran with (data, methods, LMs): its records are found as `compare` finds
    them.
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
