from __future__ import annotations

import os
from pathlib import Path
from typing import Any

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


LIBRARY_CALL = {"compare": "run_compare", "sweep": "run_sweep", "advise": "run_advise"}
HEAD = {"compare": ["compare", "x.toml"], "sweep": ["sweep", "x.toml"], "advise": ["advise", "--lm", "openai/x"]}


def _stop_at_the_library_call(monkeypatch, command: str) -> dict[str, Any]:
    """Put a stand-in for the library call behind ``command``: it records what the CLI passed (the run settings and
    the overrides of compare / sweep; advise's keyword arguments) in the dict returned, and stops (exit 2)."""
    import dspy_for.cli as cli
    from dspy_for.errors import ConfigError

    seen: dict[str, Any] = {}

    def stand_in(*args, overrides=None, **kwargs):
        o = overrides or (args[1] if len(args) > 1 else None)
        seen.update({**o.settings, "overrides": o} if o is not None else kwargs)
        raise ConfigError("stop here")

    monkeypatch.setattr(cli, LIBRARY_CALL[command], stand_in)
    return seen


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("compare", ["--num-threads", "16", "--max-cost", "2.5"]),
        ("sweep", ["--num-threads", "8", "--max-cost", "0.75"]),
    ],
)
def test_threads_and_max_cost_flags_reach_the_library_call_as_run_settings(monkeypatch, command, args):
    seen = _stop_at_the_library_call(monkeypatch, command)
    result = runner.invoke(app, [*HEAD[command], *args, "--first", "3"])
    assert result.exit_code == 2 and "stop here" in result.output
    settings = seen["overrides"].settings
    assert settings == {"num_threads": int(args[1]), "max_cost": float(args[3])}
    assert seen["overrides"].first == 3


def test_compare_data_flag_reaches_the_library_call(monkeypatch):
    seen = _stop_at_the_library_call(monkeypatch, "compare")
    runner.invoke(app, ["compare", "--data", "my.jsonl"])
    assert seen["overrides"].data == Path("my.jsonl")


@pytest.mark.parametrize("command", ["compare", "sweep", "advise"])
def test_the_old_threads_flag_still_works_and_says_it_is_deprecated(monkeypatch, command):
    seen = _stop_at_the_library_call(monkeypatch, command)
    result = runner.invoke(app, [*HEAD[command], "--threads", "6"], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and seen["num_threads"] == 6
    assert "`--threads` is deprecated: use `--num-threads`" in result.output
    help_text = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output
    assert "--num-threads" in help_text and "--threads " not in help_text  # the old spelling is not advertised


def test_advise_threads_max_cost_and_budget_usd_flags_reach_the_library_call(monkeypatch):
    seen = _stop_at_the_library_call(monkeypatch, "advise")
    args = [*HEAD["advise"], "--data", "my.jsonl", "--num-threads", "12", "--max-cost", "3"]
    result = runner.invoke(app, [*args, "--budget-usd", "0.002"])
    assert result.exit_code == 2 and "stop here" in result.output
    assert seen["num_threads"] == 12 and seen["max_cost"] == 3.0 and seen["budget_usd"] == 0.002


def test_unset_flags_leave_the_library_defaults(monkeypatch):
    from dspy_for.experiments.spec.settings import SETTINGS

    seen = _stop_at_the_library_call(monkeypatch, "advise")
    runner.invoke(app, [*HEAD["advise"], "--data", "my.jsonl"])
    assert seen["budget_usd"] is None and not set(seen) & set(SETTINGS)  # no run setting given: none passed on


@pytest.mark.parametrize("command", ["compare", "sweep", "advise"])
def test_epochs_and_reducer_flags_reach_the_library_call(monkeypatch, command):
    seen = _stop_at_the_library_call(monkeypatch, command)
    result = runner.invoke(app, [*HEAD[command], "--epochs", "4", "--reducer", "majority"])
    assert result.exit_code == 2 and "stop here" in result.output
    assert seen["epochs"] == 4 and seen["reducer"] == "majority"


def test_epochs_and_reducer_are_explained_in_the_help():
    for command in ("compare", "sweep", "advise"):
        text = " ".join(runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output.split())
        assert "repeats per item (each its own sample; needs a sampling temperature)" in text.lower(), command
        assert "mean (default), majority, pass_at_k" in text, command


def test_compare_dataset_without_methods_runs_cot_and_for_unless_the_config_names_methods(monkeypatch, tmp_path):
    import dspy_for.cli as cli
    from dspy_for.experiments.spec.config import load_spec

    seen = {}
    monkeypatch.setattr(cli, "run_compare", lambda config, overrides: seen.update(spec=load_spec(config, overrides)))
    runner.invoke(app, ["compare", "--dataset", "gsm8k", "--lm", "openai/x"])
    assert [m.name for m in seen["spec"].methods] == ["cot", "for"] and seen["spec"].datasets[0].split == "val"
    config = tmp_path / "c.toml"
    config.write_text('lm = "openai/x"\n[[datasets]]\nname = "svamp"\n[[methods]]\nname = "single"\n')
    runner.invoke(app, ["compare", str(config), "--dataset", "gsm8k"])
    assert [m.name for m in seen["spec"].methods] == ["single"] and seen["spec"].datasets[0].name == "gsm8k"
    runner.invoke(app, ["compare", str(config)])  # a config's dataset without a split: the same val as --dataset
    assert seen["spec"].datasets[0].split == "val"


@pytest.mark.parametrize("flag", ["--max-cost", "--dry-run", "--num-threads", "--traces", "--recheck"])
def test_export_takes_only_the_flags_it_reads(flag):
    """Export starts no run: a run's flags are not its own (refused as unknown, exit 2), and its help lists only what
    finds the records (the selection, the LMs, where records are kept, the repeats and how they reduce)."""
    value = [] if flag in ("--dry-run", "--traces") else ["1"]
    result = runner.invoke(app, ["export", "x.toml", "--to", "out.csv", flag, *value])
    assert result.exit_code == 2 and "No such option" in result.output
    help_text = runner.invoke(app, ["export", "--help"], env={"COLUMNS": "200"}).output
    for own in ("--results-dir", "--tracking-uri", "--epochs", "--reducer", "--methods", "--lm", "--level", "--to"):
        assert own in help_text, own
    assert flag not in help_text
