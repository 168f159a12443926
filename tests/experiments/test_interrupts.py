"""Interrupted runs end in the right state: Ctrl-C (SIGINT) and a scheduler's stop (SIGTERM) mid-comparison leave
every MLflow run KILLED and every finished item stored; a results line torn by a crash is cut and its item run
again, once, on resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dspy
import pytest
from dspy.clients.cache import Cache

from dspy_for.experiments import DatasetConfig, ExperimentSpec, MethodConfig, compare
from dspy_for.experiments.core.sinks import RunInterrupted, critical, interruptible
from dspy_for.testing import ScriptedLM

SCRIPT = """
import time
import dspy
from dspy.clients.cache import Cache
from dspy_for.experiments import DatasetConfig, ExperimentSpec, MethodConfig, compare
from dspy_for.experiments.core.sinks import RunInterrupted, critical, interruptible
from dspy_for.testing import ScriptedLM

dspy.cache = Cache(enable_disk_cache=False, enable_memory_cache=False, disk_cache_dir="")

def slow(messages, max_tokens):
    time.sleep(0.4)
    return {{"reasoning": "3 * 12 = 36; 36 - 9 = 27", "answer": "27"}}

spec = ExperimentSpec(
    lm=ScriptedLM(slow), experiment="interrupts", tracking_uri={uri!r}, results_dir={results!r},
    datasets=[DatasetConfig(name="gsm8k", split="sample")], methods=[MethodConfig(name="cot")],
)
compare(spec)
"""


def _store_lines(results: Path) -> list[str]:
    files = list(results.rglob("*.jsonl"))
    return files[0].read_text().splitlines() if files else []


def _statuses(uri: str) -> dict[str, str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("interrupts")
    return {r.info.run_name: r.info.status for r in client.search_runs([exp.experiment_id])}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_mid_run_leaves_every_mlflow_run_killed_and_finished_items_stored(tmp_path: Path, sig):
    uri, results = f"sqlite:///{tmp_path}/mlruns/mlflow.db", tmp_path / "results"
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    script = textwrap.dedent(SCRIPT.format(uri=uri, results=str(results)))
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path, env=env)
    deadline = time.monotonic() + 120
    while len(_store_lines(results)) < 3:  # a few items finished
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended or never stored an item"
        time.sleep(0.05)
    proc.send_signal(sig)
    proc.wait(timeout=60)
    lines = _store_lines(results)
    assert 3 <= len(lines) < 45  # stopped mid-run, what finished kept ...
    assert all(json.loads(line)["error"] is None for line in lines)  # ... whole, and not as errors
    assert _statuses(uri) == {"compare-interrupts": "KILLED", "cot / gsm8k": "KILLED"}


def _spec(tmp_path: Path, lm: dspy.BaseLM, first: int) -> ExperimentSpec:
    return ExperimentSpec(
        lm=lm,
        experiment="torn",
        tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db",
        results_dir=str(tmp_path / "results"),
        datasets=[DatasetConfig(name="gsm8k", split="sample", first=first)],
        methods=[MethodConfig(name="cot")],
    )


def test_a_torn_last_line_is_cut_and_its_item_run_again_once(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(dspy, "cache", Cache(enable_disk_cache=False, enable_memory_cache=False, disk_cache_dir=""))
    asked: list[str] = []

    def responder(messages, max_tokens):
        asked.append(messages[-1]["content"])
        return {"reasoning": "r", "answer": "27"}

    compare(_spec(tmp_path, ScriptedLM(responder), first=3))
    store = next((tmp_path / "results").rglob("*.jsonl"))
    whole = store.read_text().splitlines()
    assert len(whole) == 3 and len(asked) == 3
    store.write_text("\n".join(whole[:2]) + "\n" + whole[2][: len(whole[2]) // 2])  # a crash tore the third record

    asked.clear()
    result = compare(_spec(tmp_path, ScriptedLM(responder), first=4))
    assert len(asked) == 2  # the torn item once, the new fourth item once; the first two reused
    lines = store.read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line whole again
    assert len(records) == 4 and len({r["question"] for r in records}) == 4
    assert result.results["gsm8k"]["cot"].n_scored == 4


@pytest.mark.parametrize(("sig", "raised"), [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, RunInterrupted)])
def test_a_signal_inside_a_write_is_raised_after_the_write(sig, raised):
    """An interrupt mid-write could leave the SQLite tracking store locked: it is raised once the write ends."""
    wrote = []
    with interruptible():
        with pytest.raises(raised), critical():
            os.kill(os.getpid(), sig)
            time.sleep(0.05)
            wrote.append("whole")
        assert wrote == ["whole"]
        with pytest.raises(raised):  # outside a write: at once
            os.kill(os.getpid(), sig)
            time.sleep(1)
            wrote.append("never")
    assert wrote == ["whole"]
