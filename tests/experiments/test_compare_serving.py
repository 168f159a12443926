"""What served every answer, with the scripted LM (which reports no serving identity: nothing is marked, nothing run
again) and at the command line (``--rerun-changed`` with nothing stored is bad input: exit 2 before any LM call)."""

from __future__ import annotations

from pathlib import Path

from cot_and_for import config
from typer.testing import CliRunner

from dspy_for.cli import app
from dspy_for.experiments.comparison import compare
from dspy_for.experiments.reports.table import table_text
from dspy_for.lm.serving import SERVING_ATTR
from dspy_for.testing import for_responder
from dspy_for.testing.server import OpenAICompatibleServer

CONFIG = config("serving")


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


def test_a_stack_known_before_any_call_marks_and_reruns_stored_records_with_nothing_new(install_scripted_lm, tmp_path):
    """As the embedded server: its identity is known before any call, so stored records another build served are
    marked and run again though every record is stored (the scripted LM stands in, its identity set by hand)."""
    lm = install_scripted_lm(for_responder())
    setattr(lm, SERVING_ATTR, "fake sha256:000000000001 llama-cpp-python 0.1")
    config = tmp_path / "c.toml"
    config.write_text(CONFIG)
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    first = compare(config, tracking_uri=uri)
    calls = len(lm.calls)
    assert all(
        i.served_by == ["fake sha256:000000000001 llama-cpp-python 0.1"] for i in first.method_results()[0].items
    )
    setattr(lm, SERVING_ATTR, "fake sha256:000000000001 llama-cpp-python 0.2")  # a new build
    marked = compare(config, tracking_uri=uri)
    assert len(lm.calls) == calls and all(r["mixed_serving"] for r in marked.rows)
    rows = [line for line in table_text(marked).splitlines() if line.startswith(("cot  ", "for_n1  "))]
    assert len(rows) == 2 and all("]† " in line for line in rows)
    rerun = compare(config, tracking_uri=uri, rerun_changed=True)
    assert len(lm.calls) == 2 * calls  # every call made again, past DSPy's cache (the scripted LM's is on)
    assert all(r["reran"] == 4 and not r["mixed_serving"] for r in rerun.rows)
    now = ["fake sha256:000000000001 llama-cpp-python 0.2"]
    assert all(i.served_by == now for r in rerun.method_results() for i in r.items)
    later = compare(config, tracking_uri=uri, rerun_changed=True)
    assert len(lm.calls) == 2 * calls and all(r["reran"] == 0 and r["serving_now"] == now for r in later.rows)


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
