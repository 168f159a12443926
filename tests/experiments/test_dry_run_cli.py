"""``--dry-run`` from the command line: every shipped config prints its plan with nothing built, started or called;
against the OpenAI-compatible test server no request is sent; and a config the run would refuse gets the run's own
exit 2 and message, before any LM call."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from dspy_for.cli import app
from dspy_for.testing.server import FaultServer

runner = CliRunner()
CONFIGS = sorted((Path(__file__).resolve().parents[2] / "experiments").glob("*.toml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_prints_its_plan_and_builds_nothing(path, shared_datasets, no_lm_no_run, monkeypatch):
    monkeypatch.chdir(path.parents[1])  # results_dir is relative to the repository
    command = "sweep" if path.name.startswith("sweep_") else "compare"
    result = runner.invoke(app, [command, str(path), "--data-dir", str(shared_datasets), "--dry-run"])
    out = result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "plan:" in out and "total" in out and "dry run: no LM was built or called" in out, out
    if result.exit_code == 1:  # a cell the run could not run either: said in its row
        assert "cannot run:" in out, out
    else:
        assert result.exit_code == 0, out


def test_against_the_test_server_a_dry_run_sends_no_request(tmp_path):
    server = FaultServer(lambda messages, max_tokens: "The answer is 1.").start()
    try:
        config = tmp_path / "c.toml"
        config.write_text(
            f'lm = "openai/test-model"\nlm_options = {{ api_base = "{server.base_url}", price = {{ input = 1, output = 2 }} }}\n'
            f'results_dir = "{tmp_path / "items"}"\n'
            '[[datasets]]\nname = "gsm8k"\nsplit = "sample"\nfirst = 3\n'
            '[[methods]]\nname = "cot"\n[[methods]]\nname = "for"\n'
        )
        result = runner.invoke(app, ["compare", str(config), "--dry-run", "--max-cost", "1"])
        assert result.exit_code == 0, result.output
        assert "max_cost $1: would not stop" in result.output and "gsm8k/sample" in result.output
        assert server.requests == []  # the server's request log: nothing was sent
        swept = tmp_path / "s.toml"
        swept.write_text(
            f'method = "for"\nlm = "openai/test-model"\nlm_options = {{ api_base = "{server.base_url}" }}\n'
            '[dataset]\nname = "gsm8k"\nsplit = "sample"\nfirst = 2\n[search.rounds]\ntype = "int"\nlow = 0\nhigh = 2\n'
        )
        assert runner.invoke(app, ["sweep", str(swept), "--dry-run"]).exit_code == 0
        advised = runner.invoke(
            app,
            [
                "advise",
                "--lm",
                "openai/test-model",
                "--lm-option",
                f"api_base={server.base_url}",
                "--dataset",
                "gsm8k",
                "--split",
                "sample",
                "--methods",
                "cot,for",
                "--results-dir",
                str(tmp_path / "items"),
                "--dry-run",
            ],
        )
        assert advised.exit_code == 0 and "at most: advise stops" in advised.output, advised.output
        assert server.requests == []
    finally:
        server.stop()


BAD = """
lm = "{lm}"
[[datasets]]
name = "gsm8k"
split = "sample"
[[methods]]
name = "{method}"
options = {options}
"""


@pytest.mark.parametrize(
    ("lm", "method", "options", "flags", "message"),
    [
        ("openai/fake", "for", "{ round = 1 }", [], "Unknown option `round`"),
        ("openai/fake", "magic", "{}", [], "Unknown method `magic`"),
        ("openai/not-a-priced-model-xyz", "cot", "{}", ["--max-cost", "1"], "`max_cost` needs a price"),
        ("openai/fake", "cot", "{}", ["--max-cost", "-1"], "`max_cost` is the USD a run may spend"),
        ("openai/fake", "cot", "{}", ["--epochs", "3"], "answers at temperature 0"),
    ],
)
def test_a_config_the_run_refuses_gets_the_same_exit_2_and_message(
    tmp_path, no_lm_no_run, lm, method, options, flags, message
):
    config = tmp_path / "bad.toml"
    config.write_text(BAD.format(lm=lm, method=method, options=options))
    ran = runner.invoke(app, ["compare", str(config), *flags])
    planned = runner.invoke(app, ["compare", str(config), *flags, "--dry-run"])
    assert ran.exit_code == planned.exit_code == 2
    assert message in " ".join(planned.output.split()) and planned.output == ran.output
