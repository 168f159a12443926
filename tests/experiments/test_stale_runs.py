"""A run killed with SIGKILL (or crashed) cannot end its own MLflow runs: the next run in the experiment ends those a
process of this machine that is gone left RUNNING — KILLED, tagged with why — and says so in one line, while it
resumes the killed run's items without running a finished one again; a RUNNING run of a live process is left as it
is."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from cli_processes import cli, compare_args, env, respond
from mlflow.tracking import MlflowClient

from dspy_for.experiments.tracking.runs import PROCESS_TAG
from dspy_for.experiments.tracking.runs import process_tag as _process
from dspy_for.testing import OpenAICompatibleServer


def _stored(tmp_path: Path) -> list[dict]:
    files = list((tmp_path / "results").rglob("*.jsonl"))
    lines = files[0].read_text(encoding="utf-8").splitlines(keepends=True) if files else []
    return [json.loads(line) for line in lines if line.endswith("\n")]


def test_runs_a_sigkill_left_running_are_ended_killed_by_the_run_that_resumes(tmp_path: Path):
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    with OpenAICompatibleServer(respond, latency=0.3) as server:
        argv = compare_args("cot", server, tmp_path, first=8)
        proc = subprocess.Popen(
            [sys.executable, "-m", "dspy_for.cli", *argv],
            cwd=tmp_path,
            env=env(tmp_path),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while len(_stored(tmp_path)) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        proc.kill()
        proc.wait()
        finished = len(_stored(tmp_path))
        assert 2 <= finished < 8, "the run was not killed mid-way"

        client = MlflowClient(uri)
        experiments = [e.experiment_id for e in client.search_experiments()]
        left = {r.info.run_id for r in client.search_runs(experiments) if r.info.status == "RUNNING"}
        assert len(left) == 2  # the comparison's run and its cell's
        experiment = client.get_run(next(iter(left))).info.experiment_id
        live = client.create_run(experiment, tags={PROCESS_TAG: _process()}).info.run_id  # this process: alive

        before = len(server.requests)
        code, out = cli(argv, tmp_path)
        requests = len(server.requests) - before
    assert code == 0, out
    said = [line for line in out.splitlines() if "left RUNNING" in line]
    assert len(said) == 1 and f"pid {proc.pid}" in said[0] and "ended 2 MLflow run(s)" in said[0], out
    for run_id in left:
        run = client.get_run(run_id)
        assert run.info.status == "KILLED" and str(proc.pid) in run.data.tags["dspy_for.ended_stale"]
    assert client.get_run(live).info.status == "RUNNING"
    new = [r for r in client.search_runs(experiments) if r.info.run_id not in {*left, live}]
    assert len(new) == 2 and {r.info.status for r in new} == {"FINISHED"}
    stored = _stored(tmp_path)
    assert sorted(r["question"] for r in stored) == sorted({r["question"] for r in stored}) and len(stored) == 8
    assert requests == 8 - finished  # the items the killed run had not finished, each once (CoT: one call each)
