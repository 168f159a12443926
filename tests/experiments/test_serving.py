"""What served every answer, with the scripted LM (which reports no serving identity: nothing is marked, nothing run
again) and at the command line (``--rerun-changed`` with nothing stored is bad input: exit 2 before any LM call)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from dspy_for.cli import app
from dspy_for.experiments.comparison import compare
from dspy_for.experiments.reports.table import table_text
from dspy_for.testing import for_responder
from dspy_for.testing.server import OpenAICompatibleServer

CONFIG = """
experiment = "serving"
lm = "openai/fake-model"
baseline = "cot"
[[datasets]]
name = "gsm8k"
split = "sample"
first = 4
[[methods]]
name = "cot"
[[methods]]
name = "for"
label = "for_n1"
options = { rounds = 1 }
"""


def test_a_scripted_lm_reports_no_identity_so_nothing_is_marked_or_run_again(install_scripted_lm, tmp_path):
    lm = install_scripted_lm(for_responder())
    config = tmp_path / "c.toml"
    config.write_text(CONFIG)
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    first = compare(config, tracking_uri=uri)
    calls = len(lm.calls)
    assert calls > 0 and all(i.served_by == [] for r in first.method_results() for i in r.items)
    assert not any(r["served_by"] or r["mixed_serving"] or r["mixed_pairs"] for r in first.rows)
    assert "†" not in table_text(first) and "served by" not in table_text(first)
    again = compare(config, tracking_uri=uri, rerun_changed=True)
    assert len(lm.calls) == calls  # every record reused, none run again
    assert all(r["reran"] == 0 and r["serving_now"] is None for r in again.rows)
    text = " ".join(table_text(again).split())
    assert "cot served by: no identity reported (such records are not run again); stack now: unknown" in text
    assert "†" not in text


def _cli(tmp_path: Path, server: OpenAICompatibleServer, *extra: str) -> list[str]:
    return [
        "compare",
        "--dataset",
        "gsm8k",
        "--split",
        "sample",
        "--first",
        "2",
        "--methods",
        "cot",
        "--lm",
        "openai/test-model",
        "--lm-option",
        f"api_base={server.base_url}",
        "--tracking-uri",
        f"sqlite:///{tmp_path}/mlruns/mlflow.db",
        "--results-dir",
        str(tmp_path / "results"),
        *extra,
    ]


def test_rerun_changed_with_nothing_stored_is_refused_before_any_lm_call(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("DSPY_FOR_CACHE_DIR", str(tmp_path / "dspy_cache"))
    with OpenAICompatibleServer(system_fingerprint="fp_a") as server:
        out = CliRunner().invoke(app, _cli(tmp_path, server, "--rerun-changed"), env={"COLUMNS": "200"})
        assert out.exit_code == 2, out.output
        flat = " ".join(out.output.split())
        assert "`rerun_changed`" in flat and "holds none of this run's methods" in flat and "--results-dir" in flat
        out = CliRunner().invoke(app, _cli(tmp_path, server, "--rerun-changed", "--sequential"))
        assert out.exit_code == 2 and "`rerun_changed` applies to a whole comparison" in " ".join(out.output.split())
        assert server.requests == []
        out = CliRunner().invoke(app, _cli(tmp_path, server, "--no-traces"), env={"COLUMNS": "200"})
        assert out.exit_code == 0, out.output
        assert len(server.requests) == 2
        out = CliRunner().invoke(app, _cli(tmp_path, server, "--rerun-changed"), env={"COLUMNS": "200"})
        assert out.exit_code == 0, out.output
        assert len(server.requests) == 2  # all stored: nothing new ran, the stack now is unknown, nothing runs again
        assert "stack now: unknown (nothing new ran)" in " ".join(out.output.split())
