"""What the ``dspy-for`` command modules share: the options every run command takes (its run settings from their
declarations in ``experiments/spec/settings.py``; the LM and data options, declared once here as flag sets), how a
command gets them (:func:`run_command`: folded into one :class:`~dspy_for.experiments.spec.config.Overrides`, or one
mapping of keyword arguments for the library call, never forwarded by hand), the console, the exits for bad input
and for a run's end, progress."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from dspy_for.errors import DspyForError
from dspy_for.experiments.core.outcome import RunOutcome
from dspy_for.experiments.spec.config import Overrides, parse_value
from dspy_for.experiments.spec.settings import settings_for

__all__ = [
    "LM_FLAGS",
    "LM_HELP",
    "SELECTION_FLAGS",
    "DataDirOpt",
    "DataOpt",
    "Flags",
    "JudgeLmOpt",
    "LmOpt",
    "LmOptionOpt",
    "RoleLmOpt",
    "RoleLmOptionOpt",
    "console",
    "fail",
    "finish",
    "interrupted_exit",
    "method_options",
    "print_whole",
    "run_command",
    "show_progress",
]

console = Console()

LM_HELP = "The LM of every role: a litellm model string (openai/gpt-4.1-mini) or local/<name>."
ROLE_LM_HELP = "Per-role LM, ROLE=MODEL (repeatable), e.g. --role-lm debater=local/qwen2.5-coder-0.5b."
LM_OPTION_HELP = "LM option for every role, KEY=VALUE (repeatable): api_base, timeout (s), num_retries, temperature."
JUDGE_LM_HELP = (
    "LM that grades every item (judged accuracy; reasoning, coherence, holistic); sets the judge table's lm."
)
ROLE_LM_OPTION_HELP = "LM option for one role, ROLE:KEY=VALUE (repeatable), e.g. host:api_base=http://h:8000/v1."

# the LM and data options the run commands share (their run settings come from the declarations: run_command)
LmOpt = Annotated[str | None, typer.Option(help=LM_HELP)]
RoleLmOpt = Annotated[list[str] | None, typer.Option("--role-lm", help=ROLE_LM_HELP)]
LmOptionOpt = Annotated[list[str] | None, typer.Option("--lm-option", help=LM_OPTION_HELP)]
RoleLmOptionOpt = Annotated[list[str] | None, typer.Option("--role-lm-option", help=ROLE_LM_OPTION_HELP)]
JudgeLmOpt = Annotated[str | None, typer.Option(help=JUDGE_LM_HELP)]
DataDirOpt = Annotated[str | None, typer.Option(help="Directory with the upstream dataset files.")]
# what a comparison runs on (`compare`, and `export`, which finds a comparison's records as it ran)
DatasetOpt = Annotated[str | None, typer.Option(help="Dataset name (replaces the config's list).")]
SplitOpt = Annotated[
    str | None, typer.Option(help="Split: train, val, test, sample (default: the config's; else the dataset's val).")
]
LimitOpt = Annotated[int | None, typer.Option(help="Seeded uniform subsample of N items.")]
FirstOpt = Annotated[int | None, typer.Option(help="Only the first N items of each split (after --limit).")]
MethodsOpt = Annotated[
    str | None, typer.Option(help="Comma-separated method labels or names (default: the config's; else cot,for).")
]
BaselineOpt = Annotated[
    str | None, typer.Option(help="The method label that Δ and the paired tests refer to (default: the config's).")
]
MatchBudgetOpt = Annotated[
    bool | None,
    typer.Option(
        "--match-budget/--no-match-budget",
        help="Size self-consistency's k (also defender_sc's) and Refine's N to FOR's tokens/item.",
    ),
]
DataOpt = Annotated[
    Path | None, typer.Option(help="Your task: JSONL, one {question, answer} per line (instead of --dataset).")
]


#: a set of options several commands take, declared once: each by the name the library takes it under (an
#: :class:`~dspy_for.experiments.spec.config.Overrides` field, a keyword argument), with its option and default
Flags = dict[str, tuple[Any, Any]]

#: the LMs of every role and their options (every run command, and ``export``, which finds records by them)
LM_FLAGS: Flags = {
    "lm": (LmOpt, None),
    "role_lms": (RoleLmOpt, None),
    "lm_options": (LmOptionOpt, None),
    "role_lm_options": (RoleLmOptionOpt, None),
    "judge_lm": (JudgeLmOpt, None),
}
#: what a comparison runs on (``compare``, and ``export``, which finds a comparison's records as it ran)
SELECTION_FLAGS: Flags = {
    "dataset": (DatasetOpt, None),
    "data": (DataOpt, None),
    "split": (SplitOpt, None),
    "limit": (LimitOpt, None),
    "first": (FirstOpt, None),
    "data_dir": (DataDirOpt, None),
    "methods": (MethodsOpt, None),
    "baseline": (BaselineOpt, None),
    "match_budget": (MatchBudgetOpt, None),
}

_OVERRIDES = {f.name for f in fields(Overrides)} - {"settings"}


def run_command(command: str, *flags: Flags) -> Callable[[Callable[..., None]], Any]:
    """A Typer command that takes ``command``'s declared run settings (:mod:`~dspy_for.experiments.spec.settings`:
    each its option, with help and hidden deprecated spellings) and the options of ``flags``, besides its own
    parameters. The function gets, by keyword: ``overrides`` (if it takes it) — every given option that is an
    :class:`~dspy_for.experiments.spec.config.Overrides` field, its own included, with the run settings; else
    ``options`` — every option of ``flags`` and every setting given, as the library's keyword arguments; and
    ``settings`` (name -> value, only those given) if it takes it. Its other parameters come as they are."""

    def wrap(fn: Callable[..., None]) -> Any:
        return _SettingsCommand(fn, command, {k: v for f in flags for k, v in f.items()})

    return wrap


_ANNOTATED: Any = Annotated  # subscripted as the program runs, with a declared setting's type


class _SettingsCommand:
    """A command function with its flag sets' and its declared settings' options added (:func:`run_command`). The
    signature Typer reads is made when Typer reads it, so a setting declared after import (by a plugin, or a test)
    gets its option too."""

    _GIVEN = ("settings", "overrides", "options")  # what the command gets folded, never an option of its own

    def __init__(self, fn: Callable[..., None], command: str, flags: Flags) -> None:
        self.fn, self.command, self.flags = fn, command, flags
        self.__name__, self.__doc__, self.__module__ = fn.__name__, fn.__doc__, fn.__module__
        self.__annotations__: dict[str, Any] = {}
        self._takes = set(inspect.signature(fn).parameters)

    @property
    def __signature__(self) -> inspect.Signature:
        own = [p for p in inspect.signature(self.fn, eval_str=True).parameters.values() if p.name not in self._GIVEN]
        kind = inspect.Parameter.KEYWORD_ONLY
        added = [inspect.Parameter(name, kind, default=d, annotation=a) for name, (a, d) in self.flags.items()]
        for s in settings_for(self.command):
            option = _ANNOTATED[s.type | None, typer.Option(s.flag, help=s.meaning, metavar=s.metavar or None)]
            added.append(inspect.Parameter(s.name, kind, default=None, annotation=option))
            for i, old in enumerate(s.old_flags):
                hidden = _ANNOTATED[s.type | None, typer.Option(old, hidden=True)]
                added.append(
                    inspect.Parameter(f"{s.name}__{i}", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=hidden)
                )
        return inspect.Signature([*own, *added])

    def __call__(self, **kwargs: Any) -> None:
        settings: dict[str, Any] = {}
        for s in settings_for(self.command):
            value = kwargs.pop(s.name, None)
            for i, old in enumerate(s.old_flags):
                given = kwargs.pop(f"{s.name}__{i}", None)
                if given is not None:
                    console.print(f"[yellow]note:[/] `{old}` is deprecated: use `{s.flag}` (config key `{s.name}`).")
                    value = given if value is None else value
            if value is not None:
                settings[s.name] = value
        self.fn(**self._fold(kwargs, settings))

    def _fold(self, kwargs: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
        """The function's keyword arguments: its own parameters, and the rest folded as it takes them."""
        own = {k: v for k, v in kwargs.items() if k in self._takes}
        rest = {k: v for k, v in kwargs.items() if k not in own}
        out: dict[str, Any] = {"settings": settings} if "settings" in self._takes else {}
        if "overrides" in self._takes:
            given = {k: v for k, v in rest.items() if k in _OVERRIDES and v is not None}
            rest = {k: v for k, v in rest.items() if k not in _OVERRIDES}
            out["overrides"] = Overrides.of({**given, **settings})
        if "options" in self._takes:
            out["options"] = {**rest, **({} if out else settings)}
        return {**own, **out}


def method_options(pairs: list[str] | None) -> dict[str, Any]:
    """``--option KEY=VALUE`` pairs, each value read as TOML would (true, 3, 0.7, "text")."""
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise DspyForError(f"`--option` takes KEY=VALUE (e.g. --option rounds=3), got {pair!r}.")
        out[key.strip()] = parse_value(value.strip())
    return out


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


def finish(outcome: RunOutcome, errors: list[str], what: str) -> None:
    """The end of a run command: what it spent against its ``max_cost``; then, unless ``outcome.ok``, each distinct
    error (``errors``), ``what`` failed ('' if nothing did) and what stopped it, and exit 1 (after everything was
    logged)."""
    spend = outcome.spend
    if spend is not None and spend.max_cost is not None:
        console.print(spend.line(), soft_wrap=True, markup=False, highlight=False)
    if outcome.ok:
        return
    for line in errors:
        console.print(f"[red]{escape(line)}[/]")
    if what:
        console.print(
            f"[bold red]{escape(what)}[/] Failed items are not scored; run the same command again to retry them."
        )
    if outcome.stopped_by_cost:
        console.print("[bold red]max_cost reached:[/] run the same command with a higher `--max-cost` to resume.")
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
