"""What the ``dspy-for`` command modules share: the options every run command takes (declared once; their meaning
lives in ``experiments/spec``), the console, the exits for bad input and failed runs, progress."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from dspy_for.errors import DspyForError
from dspy_for.experiments.spec.config import Overrides, parse_value

__all__ = [
    "LM_HELP",
    "DataDirOpt",
    "DataOpt",
    "EpochsOpt",
    "JudgeLmOpt",
    "LmOpt",
    "LmOptionOpt",
    "MaxCostOpt",
    "ReducerOpt",
    "RoleLmOpt",
    "RoleLmOptionOpt",
    "ThreadsOpt",
    "TrackingUriOpt",
    "console",
    "fail",
    "failed_run",
    "interrupted_exit",
    "method_options",
    "print_whole",
    "run_overrides",
    "show_progress",
]

console = Console()

LM_HELP = "LM spec for every role: a litellm model string (openai/gpt-4.1-mini) or local/<name>."
ROLE_LM_HELP = "Per-role LM, ROLE=SPEC (repeatable), e.g. --role-lm debater=local/qwen2.5-coder-0.5b."
LM_OPTION_HELP = "LM option for every role, KEY=VALUE (repeatable): api_base, timeout (s), num_retries, temperature."
JUDGE_LM_HELP = "LM that grades every item (judged accuracy; reasoning, coherence, holistic); sets `[judge] lm`."
ROLE_LM_OPTION_HELP = "LM option for one role, ROLE:KEY=VALUE (repeatable), e.g. host:api_base=http://h:8000/v1."

# the options every run command takes, declared once (their meaning lives in experiments/spec/config.py)
LmOpt = Annotated[str | None, typer.Option(help=LM_HELP)]
RoleLmOpt = Annotated[list[str] | None, typer.Option(help=ROLE_LM_HELP)]
LmOptionOpt = Annotated[list[str] | None, typer.Option(help=LM_OPTION_HELP)]
RoleLmOptionOpt = Annotated[list[str] | None, typer.Option(help=ROLE_LM_OPTION_HELP)]
JudgeLmOpt = Annotated[str | None, typer.Option(help=JUDGE_LM_HELP)]
DataDirOpt = Annotated[str | None, typer.Option(help="Directory with the upstream dataset files.")]
TrackingUriOpt = Annotated[str | None, typer.Option(help="MLflow tracking URI (default sqlite in mlruns/).")]
ThreadsOpt = Annotated[
    int | None, typer.Option(help="Parallel items: 8-32 for a remote endpoint, 1 for the local server (serial).")
]
MaxCostOpt = Annotated[
    float | None, typer.Option(help="USD the run may spend; then no item starts (what finished is kept; resumable).")
]
DataOpt = Annotated[
    Path | None, typer.Option(help="Your task: JSONL, one {question, answer} per line (instead of --dataset).")
]
EpochsOpt = Annotated[
    int | None, typer.Option(help="Repeats per item (each its own sample; needs a sampling temperature).")
]
ReducerOpt = Annotated[
    str | None, typer.Option(help="How an item's epochs make one value: mean (default), majority, pass_at_k.")
]


def run_overrides(
    lm: str | None,
    role_lm: list[str] | None,
    lm_option: list[str] | None,
    role_lm_option: list[str] | None,
    judge_lm: str | None,
    data_dir: str | None,
    tracking_uri: str | None,
) -> Overrides:
    """The flags every run command shares (declared once above as ``LmOpt``, ``RoleLmOpt``, ...) as overrides."""
    return Overrides(
        lm=lm,
        role_lms=role_lm,
        lm_options=lm_option,
        role_lm_options=role_lm_option,
        judge_lm=judge_lm,
        data_dir=data_dir,
        tracking_uri=tracking_uri,
    )


def method_options(pairs: list[str] | None) -> dict[str, Any]:
    """``--option KEY=VALUE`` pairs, each value read as TOML would (true, 3, 0.7, "text")."""
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise DspyForError(f"`--option` takes KEY=VALUE (e.g. --option rounds=3), got {pair!r}.")
        out[key.strip()] = parse_value(value.strip())
    return out


#: what a run stopped by ``max_cost`` tells the user
COST_HINT = "run the same command with a higher `--max-cost` to resume (finished items are kept, not run again)."


def print_whole(table: Table) -> None:
    """Print a table at its full width even on a narrower console (a log file is 80 columns): rich would
    otherwise cut its cells with an ellipsis, and a number cut short is a wrong number."""
    full = Measurement.get(console, console.options.update(width=10_000), table).maximum
    width = console.width
    console.width = max(width, full)
    try:
        console.print(table)
    finally:
        console.width = width


def fail(exc: Exception) -> None:
    """Bad input (a config, a flag, a spec): the message names the option and the fix; exit code 2."""
    console.print(f"[bold red]error:[/] {escape(str(exc))}")
    raise typer.Exit(code=2)


def failed_run(lines: list[str], what: str, *, stopped_by_cost: bool = False) -> None:
    """A run that finished with errors (``what``: they, '' if none) or stopped by ``max_cost``: print each distinct
    error and exit 1 (after everything was logged)."""
    for line in lines:
        console.print(f"[red]{escape(line)}[/]")
    if what:
        console.print(
            f"[bold red]{escape(what)}[/] Failed items are not scored; run the same command again to retry them."
        )
    if stopped_by_cost:
        console.print(f"[bold red]max_cost reached:[/] {escape(COST_HINT)}")
    raise typer.Exit(code=1)


def show_progress(*names: str) -> None:
    """Print the INFO progress lines of these library loggers (sweep chunks, optimizer steps) on the console."""

    for name in names:
        log = logging.getLogger(name)
        if not log.handlers:
            log.addHandler(RichHandler(console=console, show_path=False))
            log.setLevel(logging.INFO)


@contextmanager
def interrupted_exit() -> Iterator[None]:
    """Ctrl-C or SIGTERM during a run: say what was kept and exit 130 (SIGINT) or 143 (SIGTERM), as a shell would.
    The run itself has already closed every MLflow run it had open (KILLED) and kept every finished item."""
    from dspy_for.experiments.core import RunInterrupted

    try:
        yield
    except KeyboardInterrupt as exc:
        console.print(
            "[bold yellow]interrupted:[/] finished items are kept; run the same command again to resume "
            "(finished items are not run again)."
        )
        raise typer.Exit(code=143 if isinstance(exc, RunInterrupted) else 130) from None
