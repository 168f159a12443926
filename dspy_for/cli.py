"""The ``dspy-for`` command line: a thin layer that turns options into library calls."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from dspy_for.cli_common import (
    LM_FLAGS,
    LM_HELP,
    SELECTION_FLAGS,
    DataDirOpt,
    DataOpt,
    Flags,
    console,
    fail,
    finish,
    interrupted_exit,
    method_options,
    print_whole,
    run_command,
    show_progress,
)
from dspy_for.cli_export import export
from dspy_for.cli_models import models_app, serve
from dspy_for.datasets import load_dataset
from dspy_for.errors import DspyForError
from dspy_for.experiments.advisor import MARGIN as ADVISE_MARGIN
from dspy_for.experiments.advisor import advise as run_advise
from dspy_for.experiments.advisor.report import advice_lines
from dspy_for.experiments.comparison import compare as run_compare
from dspy_for.experiments.core.heap import freeze_imports, skip_final_collection
from dspy_for.experiments.core.plan import RunPlan
from dspy_for.experiments.core.prepare import prepare_program
from dspy_for.experiments.reports.plan import plan_lines, plan_table
from dspy_for.experiments.reports.recheck import recheck_lines
from dspy_for.experiments.reports.sweep import final_test_line, trials_table
from dspy_for.experiments.reports.table import error_lines, rich_tables
from dspy_for.experiments.spec.config import Overrides
from dspy_for.experiments.sweeps import SweepError
from dspy_for.experiments.sweeps import sweep as run_sweep
from dspy_for.experiments.tracking.ui import serve_ui
from dspy_for.lm import role, track_usage
from dspy_for.render import render_result

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="FOR-Prompting and ProRefine as DSPy modules, compared in tracked experiments.",
)
app.command()(serve)
app.add_typer(models_app, name="models")


# ------------------------------------------------------------------------------------------- ask


#: the LM options of ``ask``: its roles' LMs (one by default) and the completion tokens per call
ASK_FLAGS: Flags = {
    "lm": (Annotated[str, typer.Option(help=LM_HELP)], "local/qwen2.5-coder-1.5b"),
    **{k: v for k, v in LM_FLAGS.items() if k in ("role_lms", "lm_options", "role_lm_options")},
    "max_tokens": (Annotated[int, typer.Option(help="Max completion tokens per call.")], 1024),
}


@app.command()
@run_command("ask", ASK_FLAGS)
def ask(
    question: Annotated[str | None, typer.Argument(help="The question (or use --sample N).")] = None,
    method: Annotated[str, typer.Option(help="Method from the registry: single, cot, for, prorefine, ...")] = "cot",
    option: Annotated[list[str] | None, typer.Option(help="Method option KEY=VALUE (repeatable).")] = None,
    rounds: Annotated[int | None, typer.Option(help="FOR-Prompting rounds N (same as --option rounds=N).")] = None,
    sample: Annotated[int | None, typer.Option(help="Ask problem N of the bundled GSM8K-style sample.")] = None,
    signature: Annotated[str, typer.Option(help="DSPy signature.")] = "question -> answer: float",
    *,
    overrides: Overrides,
) -> None:
    """Answer one question with one method; print the answer, the method's trace and the usage table."""

    try:
        gold = None
        if sample is not None:
            examples = load_dataset("gsm8k", "sample")
            if not 0 <= sample < len(examples):
                raise DspyForError(f"`--sample` must be between 0 and {len(examples) - 1}, got {sample}.")
            question, gold = examples[sample].question, examples[sample].answer
        if not question:
            raise DspyForError("Give a QUESTION argument or `--sample N`.")
        opts = method_options(option)
        if rounds is not None:
            opts["rounds"] = rounds
        program = prepare_program(method, signature, opts, overrides)  # validated before any LM is built or called
        console.print(f"[bold]question:[/] {question}")
        with console.status(f"running {method} …"), track_usage() as usage, role("task"):
            pred = program(question=question)
        render_result(console, method, pred, usage, gold=gold)
    except DspyForError as exc:
        fail(exc)


# --------------------------------------------------------------------------------------- compare

COMPARE_FLAGS: Flags = {
    "sequential": (
        Annotated[
            bool | None,
            typer.Option(
                "--sequential/--no-sequential",
                help="Stop as soon as every method vs the baseline is resolved (anytime-valid paired tests).",
            ),
        ],
        None,
    ),
    "max_items": (
        Annotated[int | None, typer.Option(help="With --sequential: the most items each method runs.")],
        None,
    ),
}


@app.command()
@run_command("compare", SELECTION_FLAGS, LM_FLAGS, COMPARE_FLAGS)
def compare(
    config: Annotated[Path | None, typer.Argument(help="TOML config (see experiments/*.toml).")] = None,
    *,
    overrides: Overrides,
) -> None:
    """Compare methods on datasets; print one table per dataset and log everything to MLflow."""
    show_progress("dspy_for.optimizers", "dspy_for.experiments")  # compile steps, judging, waiting on a lock
    try:
        with interrupted_exit():
            result = run_compare(config, overrides)
    except DspyForError as exc:
        fail(exc)
        return
    if isinstance(result, RunPlan):
        _print_plan(result)
        return
    for table in rich_tables(result):
        print_whole(table)
    for line in recheck_lines(result.recheck):
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    console.print(f"plots: {', '.join(str(p) for p in result.plots)}")
    _browse(result.run_id, result.spec.tracking_uri)
    rerun_failed = sum(r.failed for r in result.recheck)
    what = f"{result.n_failed} item(s) failed" + (
        f", {result.judge_errors} not graded by the judge" if result.judge_errors else ""
    )
    what += f", {rerun_failed} re-run(s) of the recheck failed" if rerun_failed else ""
    errors = result.n_failed or result.judge_errors or any(result.errors.values()) or rerun_failed
    finish(result, error_lines(result), what + "." if errors else "")


# ----------------------------------------------------------------------------------------- sweep

SWEEP_FLAGS: Flags = {
    "n_trials": (Annotated[int | None, typer.Option(help="Total trials (across workers and resumes).")], None),
    "timeout": (
        Annotated[float | None, typer.Option(help="Stop waiting for workers after this many seconds.")],
        None,
    ),
    "storage": (
        Annotated[str | None, typer.Option(help="Optuna storage URL (default: journal file in mlruns/).")],
        None,
    ),
    "study": (Annotated[str | None, typer.Option(help="Study name (resumes it if it exists).")], None),
    "workers": (Annotated[int, typer.Option(help="Local worker processes on the same study.")], 1),
    "limit": (Annotated[int | None, typer.Option(help="Seeded uniform subsample of N validation items.")], None),
    "first": (Annotated[int | None, typer.Option(help="Only the first N validation items (after --limit).")], None),
    "data_dir": (DataDirOpt, None),
    "final_test": (
        Annotated[bool, typer.Option(help="Evaluate the best configuration once on the test split.")],
        False,
    ),
}


@app.command()
@run_command("sweep", SWEEP_FLAGS, LM_FLAGS)
def sweep(
    config: Annotated[Path, typer.Argument(help="Sweep TOML config (see experiments/sweep_*.toml).")],
    *,
    overrides: Overrides,
    options: dict[str, Any],
) -> None:
    """Search a method's options with Optuna on validation data; resumable, multi-process, tracked in MLflow."""
    show_progress("dspy_for.sweep", "dspy_for.optimizers", "dspy_for.experiments")  # chunks, trials, compile steps
    try:
        with interrupted_exit():
            result = run_sweep(config, overrides=overrides, **options)
    except SweepError as exc:
        console.print(f"[red]{escape(str(exc))}[/]")
        console.print("[bold red]The sweep stopped.[/]")
        raise typer.Exit(code=1) from None
    except DspyForError as exc:
        fail(exc)
        return
    if isinstance(result, RunPlan):
        _print_plan(result)
        return
    console.print(trials_table(result.study, f"study {result.spec.study}: {result.counts}"))
    if result.final_test:
        console.print(final_test_line(result.final_test))
    console.print(f"MLflow parent run {result.parent_run_id} (* = best trial)")
    failed = result.counts.get("FAIL", 0)
    final = result.final_test.summary if result.final_test is not None else None
    lines = [f"final test: {n} item(s) failed: {e}" for e, n in (final.errors if final else {}).items()]
    what = f"{failed} trial(s) failed (re-run on resume)." if failed else "The final test had errors."
    finish(result, lines, what if failed or (final and final.failed) else "")


# ---------------------------------------------------------------------------------------- advise

#: advise's own options, by the names ``advise()`` takes them under (with the LM flags and its run settings)
ADVISE_FLAGS: Flags = {
    "lm": (
        Annotated[str, typer.Option(help="Your LM (every role): a litellm model string or local/<name>.")],
        ...,
    ),
    "budget": (
        Annotated[
            float | None,
            typer.Option(help="Tokens per item (prompt + completion) you can spend; methods over it drop."),
        ],
        None,
    ),
    "dataset": (
        Annotated[str | None, typer.Option(help="A benchmark (gsm8k, svamp, aqua, bbh_*), or use --data.")],
        None,
    ),
    "split": (Annotated[str | None, typer.Option(help="The benchmark's split (default val).")], None),
    "data": (DataOpt, None),
    "budget_usd": (
        Annotated[float | None, typer.Option(help="USD per item you can spend; methods over it drop.")],
        None,
    ),
    "methods": (
        Annotated[
            str | None,
            typer.Option(help="Comma-separated candidates (default: every method that reads no gold label)."),
        ],
        None,
    ),
    "max_items": (Annotated[int | None, typer.Option(help="The most items any method runs.")], None),
    "timeout": (
        Annotated[float | None, typer.Option(help="Seconds; then the leader is recommended, marked unresolved.")],
        None,
    ),
    "first": (
        Annotated[int | None, typer.Option(help="Only the first N items of the data (before the seeded order).")],
        None,
    ),
    "margin": (
        Annotated[
            float,
            typer.Option(help="Accuracy difference (0.05 = 5 points) under which methods tie; the cheapest wins."),
        ],
        ADVISE_MARGIN,
    ),
    "data_dir": (DataDirOpt, None),
    "volume": (
        Annotated[
            int | None,
            typer.Option(help="Items you will run: among tied methods the lowest cost per correct answer over N wins."),
        ],
        None,
    ),
    "compile": (
        Annotated[
            str | None,
            typer.Option(help="Also try each method compiled by these compilers (e.g. bootstrap,gepa); needs --train."),
        ],
        None,
    ),
    "train": (
        Annotated[
            Path | None,
            typer.Option(help="JSONL the --compile compilers train and validate on (never --data's items)."),
        ],
        None,
    ),
    **{k: v for k, v in LM_FLAGS.items() if k in ("role_lms", "lm_options", "role_lm_options")},
}


@app.command()
@run_command("advise", ADVISE_FLAGS)
def advise(*, options: dict[str, Any]) -> None:
    """Which method should you run with your LM on your task, at your token budget? Stops as soon as it is resolved."""
    show_progress("dspy_for.advise", "dspy_for.experiments")
    try:
        with interrupted_exit():
            result = run_advise(**options)
    except DspyForError as exc:
        fail(exc)
        return
    if isinstance(result, RunPlan):
        _print_plan(result)
        return
    for line in advice_lines(result, spend=False):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    console.print(f"plots: {', '.join(str(p) for p in result.plots)}", soft_wrap=True, markup=False)
    _browse(result.run_id, result.spec.tracking_uri)
    errors = result.n_failed or result.could_not_run
    what = f"{result.n_failed} item(s) failed, {len(result.could_not_run)} method(s) could not run."
    finish(result, [], what if errors else "")


def _print_plan(plan: RunPlan) -> None:
    """``--dry-run``: the plan (nothing ran); exit 1 if a cell could not run, as the run would end."""
    print_whole(plan_table(plan))
    for line in plan_lines(plan):
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    if not plan.ok:
        raise typer.Exit(code=1)


def _browse(run_id: str | None, uri: str | None) -> None:
    """Where the run can be browsed: the tracking URI it was written to (a flag's, or its config's)."""
    if run_id is None:
        console.print("MLflow: the tracking store did not record this run (its warnings above say why)")
        return
    browse = "dspy-for ui" + (f" --tracking-uri {uri}" if uri else "")
    console.print(f"MLflow run {run_id}; browse with: {browse}", soft_wrap=True, markup=False)


# -------------------------------------------------------------------------------------------- ui


@app.command()
def ui(
    tracking_uri: Annotated[
        str | None,
        typer.Option(
            help="MLflow tracking URI to browse (default: $MLFLOW_TRACKING_URI, else sqlite:///mlruns/mlflow.db)."
        ),
    ] = None,
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 5000,
    host: Annotated[
        str,
        typer.Option(help="Interface to bind; 0.0.0.0 exposes it to the network (MLflow then checks Host headers)."),
    ] = "127.0.0.1",
) -> None:
    """Browse the MLflow runs in your browser; works offline, where a bare `mlflow ui` hangs. Ctrl-C stops it.

    Runs `mlflow server` on the store with litellm's bundled cost map (a bare `mlflow ui` deadlocks at
    start-up offline, fetching it), without telemetry or the GenAI job runner, waits until it answers and
    prints the URL. A store that does not exist yet is an error: create it with `dspy-for compare`.
    """

    try:
        code = serve_ui(
            tracking_uri,
            port=port,
            host=host,
            echo=lambda line: console.print(line, soft_wrap=True, markup=False, highlight=False),
        )
    except DspyForError as exc:
        fail(exc)
        return
    raise typer.Exit(code)


app.command()(export)  # dspy_for/cli_export.py: a comparison's stored results to a file


def main() -> None:
    freeze_imports()  # what the imports made is out of the collector's passes while the command sets up
    try:
        app()  # litellm's offline defaults are set already: `import dspy_for` applies dspy_for._offline
    finally:
        skip_final_collection()  # the process ends here: its heap is not walked once more on the way out


if __name__ == "__main__":
    main()
