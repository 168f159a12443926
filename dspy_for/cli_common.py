"""What the ``dspy-for`` command modules share: the console, the exits for bad input and failed runs, progress."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

__all__ = ["console", "fail", "failed_run", "interrupted_exit", "print_whole", "show_progress"]

console = Console()


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


def failed_run(lines: list[str], what: str) -> None:
    """A run that finished with errors: print each distinct one and exit 1 (after everything was logged)."""
    for line in lines:
        console.print(f"[red]{escape(line)}[/]")
    console.print(f"[bold red]{what}[/] Failed items are not scored; run the same command again to retry them.")
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
