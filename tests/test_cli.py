from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dspy_for.cli import app

runner = CliRunner()
MODEL = os.environ.get("DSPY_FOR_TEST_MODEL", "qwen2.5-coder-0.5b")


def test_help_lists_only_working_commands():
    out = runner.invoke(app, ["--help"]).output
    for cmd in ("models", "serve", "ask", "compare"):
        assert cmd in out


def test_models_list():
    result = runner.invoke(app, ["models", "list"])
    assert result.exit_code == 0 and "qwen2.5-coder-1.5b" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ask", "q", "--method", "magic"], "Unknown method `magic`"),
        (["ask", "q", "--option", "rounds"], "KEY=VALUE"),
        (["ask", "--sample", "999"], "--sample"),
        (["ask", "q", "--method", "for", "--option", "round=2", "--lm", "openai/x"], "Unknown option `round`"),
        (["compare", "nope.toml"], "does not exist"),
        (["models", "pull", "gpt-5"], "Unknown local model"),
    ],
)
def test_bad_input_is_a_clear_error_with_exit_code_2(args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and message in result.output


@pytest.mark.llm
def test_ask_for_on_a_real_local_model():
    result = runner.invoke(
        app,
        ["ask", "--sample", "0", "--method", "for", "--rounds", "1", "--lm", f"local/{MODEL}", "--max-tokens", "300"],
    )
    assert result.exit_code == 0, result.output
    assert "Defender · A0" in result.output and "Debater · round 1" in result.output
    assert "usage per role" in result.output and "defender" in result.output


@pytest.mark.parametrize("command", ["compare", "sweep"])
def test_first_flag_reaches_the_library_call(monkeypatch, command):
    import dspy_for.cli as cli
    from dspy_for.errors import ConfigError

    seen = {}

    def fake(config, overrides=None, **kwargs):
        seen.update(first=(overrides or kwargs.get("overrides")).first)
        raise ConfigError("stop here")

    monkeypatch.setattr(cli, "run_compare" if command == "compare" else "run_sweep", fake)
    result = runner.invoke(app, [command, "x.toml", "--first", "7"])
    assert result.exit_code == 2 and "stop here" in result.output and seen["first"] == 7


def test_baseline_flag_picks_the_reference_method_and_an_unknown_one_fails_first(monkeypatch, tmp_path):
    import dspy_for.cli as cli
    from dspy_for.experiments.spec.config import load_spec

    config = tmp_path / "c.toml"
    config.write_text(
        'lm = "openai/x"\n[[datasets]]\nname = "gsm8k"\nsplit = "sample"\n'
        '[[methods]]\nname = "cot"\n[[methods]]\nname = "single"\n'
    )
    seen = {}
    monkeypatch.setattr(cli, "run_compare", lambda config, overrides: seen.update(spec=load_spec(config, overrides)))
    runner.invoke(app, ["compare", str(config), "--baseline", "single"])
    assert seen["spec"].baseline == "single"
    monkeypatch.undo()
    result = runner.invoke(app, ["compare", str(config), "--baseline", "nope"])
    assert result.exit_code == 2 and "`baseline` `nope` is not a method label" in result.output


def test_tables_print_whole_on_an_80_column_console(monkeypatch):
    """A log file is 80 columns wide: rich would cut a judged table's cells ('62.0 [48.2–74.…')."""
    import io

    from rich.console import Console
    from rich.table import Table

    import dspy_for.cli_common as common

    out = io.StringIO()
    monkeypatch.setattr(common, "console", Console(file=out, width=80))
    t = Table()
    for h in ("method", "judged acc %", "reasoning", "coherence", "holistic"):
        t.add_column(h, no_wrap=True)
    t.add_row("for_n3_host_noguard", *["62.0 [48.2–74.4]"] * 4)
    common.print_whole(t)
    assert out.getvalue().count("62.0 [48.2–74.4]") == 4 and "…" not in out.getvalue()
    assert common.console.width == 80


@pytest.mark.parametrize(
    ("command", "args", "expected"),
    [
        (
            "compare",
            ["--threads", "16", "--max-cost", "2.5", "--data", "my.jsonl"],
            {"num_threads": 16, "max_cost": 2.5, "data": Path("my.jsonl")},
        ),
        ("sweep", ["--threads", "8", "--max-cost", "0.75"], {"num_threads": 8, "max_cost": 0.75}),
    ],
)
def test_threads_max_cost_and_data_flags_reach_the_library_call(monkeypatch, command, args, expected):
    import dspy_for.cli as cli
    from dspy_for.errors import ConfigError

    seen: dict[str, object] = {}

    def fake(config, overrides=None, **kwargs):
        o = overrides or kwargs.get("overrides")
        seen.update({k: getattr(o, k) for k in expected})
        raise ConfigError("stop here")

    monkeypatch.setattr(cli, "run_compare" if command == "compare" else "run_sweep", fake)
    result = runner.invoke(app, [command, "x.toml", *args])
    assert result.exit_code == 2 and "stop here" in result.output and seen == expected


def test_advise_threads_max_cost_and_budget_usd_flags_reach_the_library_call(monkeypatch):
    import dspy_for.cli as cli
    from dspy_for.errors import ConfigError

    seen: dict[str, object] = {}

    def fake(**kwargs):
        seen.update(kwargs)
        raise ConfigError("stop here")

    monkeypatch.setattr(cli, "run_advise", fake)
    args = ["advise", "--lm", "openai/x", "--data", "my.jsonl", "--threads", "12", "--max-cost", "3"]
    result = runner.invoke(app, [*args, "--budget-usd", "0.002"])
    assert result.exit_code == 2 and "stop here" in result.output
    assert seen["num_threads"] == 12 and seen["max_cost"] == 3.0 and seen["budget_usd"] == 0.002


def test_unset_flags_leave_the_library_defaults(monkeypatch):
    import dspy_for.cli as cli
    from dspy_for.errors import ConfigError

    seen: dict[str, object] = {}

    def fake(**kwargs):
        seen.update(kwargs)
        raise ConfigError("stop here")

    monkeypatch.setattr(cli, "run_advise", fake)
    runner.invoke(app, ["advise", "--lm", "openai/x", "--data", "my.jsonl"])
    assert seen["num_threads"] is None and seen["max_cost"] is None and seen["budget_usd"] is None
    assert seen["epochs"] is None and seen["reducer"] is None


@pytest.mark.parametrize("command", ["compare", "sweep", "advise"])
def test_epochs_and_reducer_flags_reach_the_library_call(monkeypatch, command):
    import dspy_for.cli as cli
    from dspy_for.errors import ConfigError

    seen: dict[str, object] = {}

    def fake(*args, overrides=None, **kwargs):
        o = overrides or (args[1] if len(args) > 1 else None)
        seen.update({"epochs": o.epochs, "reducer": o.reducer} if o is not None else kwargs)
        raise ConfigError("stop here")

    target = {"compare": "run_compare", "sweep": "run_sweep", "advise": "run_advise"}[command]
    monkeypatch.setattr(cli, target, fake)
    head = ["advise", "--lm", "openai/x", "--data", "my.jsonl"] if command == "advise" else [command, "x.toml"]
    result = runner.invoke(app, [*head, "--epochs", "4", "--reducer", "majority"])
    assert result.exit_code == 2 and "stop here" in result.output
    assert seen["epochs"] == 4 and seen["reducer"] == "majority"


def test_epochs_and_reducer_are_explained_in_the_help():
    for command in ("compare", "sweep", "advise"):
        text = " ".join(runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output.split())
        assert "repeats per item (each its own sample; needs a sampling temperature)" in text.lower(), command
        assert "mean (default), majority, pass_at_k" in text, command
