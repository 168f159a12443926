"""An interrupted or killed comparison keeps the trace of every record it stored: Ctrl-C (SIGINT) mid-run against the
test server (the traces are stored before the run ends KILLED), and SIGKILL (the trace writer process stores what it
received after the run's process is gone); called from Python, and as the command line, whose tracking process keeps
the whole store. Read back from MLflow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dspy_for.testing import OpenAICompatibleServer, for_responder

SCRIPT = """
from dspy_for.experiments import compare
compare({config!r}, tracking_uri={uri!r}, results_dir={results!r})
"""
#: ``dspy-for compare`` as typed: its tracking store kept by the command line's tracking process
COMMAND = """
import sys
sys.argv = ["dspy-for", "compare", {config!r}, "--tracking-uri", {uri!r}, "--results-dir", {results!r}]
from dspy_for.cli_start import main
main()
"""
CONFIG = """
experiment = "interrupted"
lm = "openai/test-model"
lm_options = {{ api_base = "{base}" }}
num_threads = 4
baseline = "cot"
[[datasets]]
name = "gsm8k"
split = "sample"
[[methods]]
name = "cot"
"""


def _stored(results: Path) -> set[str]:
    files = list(results.rglob("*.jsonl"))
    lines = files[0].read_text().splitlines() if files else []
    return {json.loads(line)["id"] for line in lines if line.endswith("}")}


def _traced(uri: str) -> set[str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("interrupted")
    if exp is None:
        return set()
    found = client.search_traces(locations=[exp.experiment_id], max_results=1000)
    return {t.info.trace_metadata["dspy_for.item_id"] for t in found}


def _statuses(uri: str) -> set[str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    return {r.info.status for r in client.search_runs([client.get_experiment_by_name("interrupted").experiment_id])}


@pytest.mark.parametrize("how", [SCRIPT, COMMAND], ids=["library", "command line"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_every_stored_record_of_a_stopped_run_has_its_trace(tmp_path: Path, sig, how):
    uri, results = f"sqlite:///{tmp_path}/mlruns/mlflow.db", tmp_path / "results"
    env = {**os.environ, "OPENAI_API_KEY": "sk-test-key-0123456789"}
    with OpenAICompatibleServer(for_responder("18"), latency=0.3) as server:
        config = tmp_path / "c.toml"
        config.write_text(CONFIG.format(base=server.base_url))
        script = textwrap.dedent(how.format(config=str(config), uri=uri, results=str(results)))
        proc = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path, env=env, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 180
        while len(_stored(results)) < 8:  # items finished, their traces on their way
            assert proc.poll() is None and time.monotonic() < deadline, "the run ended or never stored an item"
            time.sleep(0.05)
        proc.send_signal(sig)
        proc.wait(timeout=120)
    stored = _stored(results)
    assert 8 <= len(stored) < 45  # stopped mid-run
    if sig == signal.SIGINT:
        assert proc.returncode in (130, -signal.SIGINT) and stored <= _traced(uri)  # stored before the run ended
        assert _statuses(uri) == {"KILLED"}  # the run and its cell, ended before the process exited
        return
    deadline = time.monotonic() + 120  # killed: its writer stores what it received, then ends
    while not stored <= _traced(uri) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert stored <= _traced(uri)
