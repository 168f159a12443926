"""Run settings are declared once (``dspy_for/experiments/spec/settings.py``): a declaration is all it takes for a
setting to have a flag on the commands that take it, a checked config key, a Python keyword and a reference row; its
value travels as the spec's field of the same name. Money is written without an exponent anywhere."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dspy_for.cli import app
from dspy_for.errors import ConfigError
from dspy_for.experiments import advise
from dspy_for.experiments.core.outcome import ComparisonResult
from dspy_for.experiments.core.records import ItemResult, MethodResult
from dspy_for.experiments.core.spend import SpendLimit, money
from dspy_for.experiments.reports.table import summary_cells, table_text
from dspy_for.experiments.spec.config import load_spec
from dspy_for.experiments.spec.data import positive_int
from dspy_for.experiments.spec.model import DatasetConfig, ExperimentSpec, MethodConfig
from dspy_for.experiments.spec.settings import SETTINGS, Setting, reference_rows, value_kind
from dspy_for.experiments.sweeps.spec import SweepSpec, load_sweep_spec

runner = CliRunner()
REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"
SPEC_OF = {"compare": ExperimentSpec, "advise": ExperimentSpec, "export": ExperimentSpec, "sweep": SweepSpec}
CONFIG = 'lm = "openai/x"\n[[datasets]]\nname = "gsm8k"\nsplit = "sample"\n[[methods]]\nname = "cot"\n'
SWEEP = 'method = "cot"\n[dataset]\nname = "gsm8k"\n[search.temperature]\ntype = "float"\nlow = 0\nhigh = 1\n'


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_one_declaration_gives_a_setting_its_flag_its_config_check_and_its_reference_row(monkeypatch, tmp_path):
    knock = Setting(
        "knock_limit",
        int,
        2,
        "A test-only setting: how often to knock.",
        commands=frozenset({"compare", "sweep"}),
        metavar="N",
        check=positive_int,
    )
    monkeypatch.setitem(SETTINGS, knock.name, knock)
    for command in ("compare", "sweep", "advise"):
        shown = _flat(runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output)
        taken = command in knock.commands
        assert ("--knock-limit" in shown and "how often to knock" in shown) is taken, command
    config = tmp_path / "c.toml"
    config.write_text("knock_limit = 0\n" + CONFIG)  # a config key, checked by its declaration before any LM call
    out = runner.invoke(app, ["compare", str(config)])
    assert out.exit_code == 2 and "`knock_limit` must be a positive integer, got 0" in _flat(out.output)
    config.write_text(CONFIG)
    out = runner.invoke(app, ["compare", str(config), "--knock-limit", "0"])  # the flag, checked alike
    assert out.exit_code == 2 and "`knock_limit` must be a positive integer, got 0" in _flat(out.output)
    config.write_text("knock_limt = 1\n" + CONFIG)
    with pytest.raises(ConfigError, match="Unknown key `knock_limt`.*knock_limit"):
        load_spec(config)
    with pytest.raises(ConfigError, match="`knock_limit` applies to compare, sweep only"):
        advise(lm="openai/x", dataset="gsm8k", knock_limit=3)
    row = "| `knock_limit` | `2` | `--knock-limit N` | compare, sweep | A test-only setting: how often to knock. |"
    assert row in reference_rows() and row not in REFERENCE.read_text(encoding="utf-8")  # the doc test would fail


def test_every_declared_setting_is_a_typed_field_of_the_spec_each_of_its_commands_builds():
    for s in SETTINGS.values():
        for command in s.commands:
            spec_class = SPEC_OF[command]
            assert ("compare" if command in ("advise", "export") else command) == spec_class.COMMAND
            found = {f.name: f for f in dataclasses.fields(spec_class)}
            assert s.name in found and found[s.name].default == s.default, (s.name, command)
    sweep_fields = {f.name for f in dataclasses.fields(SweepSpec)}
    assert {"results_dir", "autolog"}.isdisjoint(sweep_fields)  # a sweep does not take them: no field, no key


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("num_threads", 0, "`num_threads` must be a positive integer, got 0"),
        ("max_cost", -1, "`max_cost` is the USD a run may spend"),
        ("epochs", True, "`epochs` must be a positive integer, got True"),
        ("reducer", "median", "`reducer` must be one of"),
        ("traces", "yes", "`traces` must be true or false, got 'yes'"),
        ("tracking_uri", 3, "`tracking_uri` must be a string, got 3"),
    ],
)
def test_a_settings_value_is_checked_alike_from_a_config_a_flag_and_python(tmp_path, name, value, message):
    config = tmp_path / "c.toml"
    config.write_text(f"{name} = {value!r}\n".replace("True", "true").replace("'", '"') + CONFIG)
    with pytest.raises(ConfigError, match=message):
        load_spec(config)
    config.write_text(CONFIG)
    with pytest.raises(ConfigError, match=message):
        load_spec(config, **{name: value})
    spec = ExperimentSpec(
        lm="openai/x", datasets=[DatasetConfig("gsm8k", "sample")], methods=[MethodConfig("cot")], **{name: value}
    )
    with pytest.raises(ConfigError, match=message):
        spec.validate()


def test_a_setting_a_command_does_not_take_is_refused_in_its_config_and_its_python_call(tmp_path):
    sweep = tmp_path / "s.toml"
    sweep.write_text('results_dir = "here"\n' + SWEEP)
    with pytest.raises(ConfigError, match="`results_dir` applies to compare, advise, export only"):
        load_sweep_spec(sweep)
    sweep.write_text(SWEEP)
    with pytest.raises(ConfigError, match="`autolog` applies to compare only"):
        load_sweep_spec(sweep, autolog=True)
    assert load_sweep_spec(sweep, num_threads=3, traces=False).num_threads == 3  # one it takes


def test_the_reducer_rule_is_one_function():
    assert value_kind(1, "mean") == "binary" and value_kind(3, "majority") == "binary"
    assert value_kind(3, "mean") == "bounded" and value_kind(2, "pass_at_k") == "binary"


# ------------------------------------------------------------------------------------------------- money


@pytest.mark.parametrize("usd", [m * 10.0**k for k in range(-12, 6) for m in (1.0, 2.5, 9.4)])
def test_money_never_has_an_exponent_and_keeps_two_significant_digits(usd):
    text = money(usd)
    assert "e" not in text.lower() and text.startswith("$")
    assert math.isclose(float(text[1:].replace(",", "")), usd, rel_tol=0.05)


def test_money_cells_lines_and_reasons_have_no_exponent():
    assert money(9.4e-05) == "$0.000094" and money(0.094) == "$0.094" and money(1234.5) == "$1,234.50"
    assert money(None) == "-" and money(float("nan")) == "-" and money(0.0) == "$0"
    usage = {"task": {"calls": 1, "priced_calls": 1, "prompt_tokens": 90, "completion_tokens": 4, "cost_usd": 9.4e-05}}
    items = [ItemResult(str(i), f"q{i}", 1, {"answer": "1"}, 1.0, usage=usage, wall_time=0.5) for i in range(3)]
    spec = ExperimentSpec(lm="openai/x", datasets=[DatasetConfig("gsm8k", "sample")], methods=[MethodConfig("cot")])
    result = ComparisonResult(spec=spec, results={"gsm8k": {"cot": MethodResult("cot", items)}})
    result.spend = SpendLimit(1e-9)
    result.spend.spent, result.spend.not_started = 2.82e-4, 4
    result.cells = summary_cells(result)
    text = table_text(result)
    assert "$0.000094" in text and "spent $0.00028 of max_cost $0.000000001: reached, 4 item(s)" in text
    assert "e-0" not in text and "e-1" not in text
