"""`dspy-for ui` starts on an offline machine (a bare `mlflow ui` deadlocks there), answers, stops cleanly.

"Offline" here: the child environment has no LITELLM_LOCAL_MODEL_COST_MAP (so the command must set it)
and every outside HTTP(S) request goes through a proxy address where nothing listens, so litellm's
model-cost-map download fails at once exactly as on a machine without a network, even where there is one.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dspy_for.cli import app
from dspy_for.experiments.tracking.ui import UIError, port_in_use, resolve_store, serve_ui, ui_environment

runner = CliRunner()
ENV_SET_BY_THE_COMMAND = (
    "LITELLM_LOCAL_MODEL_COST_MAP",
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION",
    "MLFLOW_DISABLE_TELEMETRY",
    "MLFLOW_TRACKING_URI",
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _offline_env(**extra: str) -> dict[str, str]:
    """os.environ without what the command must set itself, with outside networking unavailable."""
    env = {k: v for k, v in os.environ.items() if k not in ENV_SET_BY_THE_COMMAND}
    dead = f"http://127.0.0.1:{_free_port()}"  # nothing listens: every proxied request is refused at once
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = dead
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.update(extra)
    return env


def _dspy_for() -> list[str]:
    script = Path(sys.executable).with_name("dspy-for")
    return [str(script)] if script.exists() else [sys.executable, "-m", "dspy_for.cli"]


def _status(url: str) -> int | None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=3) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def _server_group(port: int) -> int | None:
    """Process group of the `mlflow server` child listening on ``port`` (Linux /proc), or None."""
    proc_dir = Path("/proc")
    if not proc_dir.is_dir():
        return None
    for pid_dir in proc_dir.iterdir():
        try:
            argv = (pid_dir / "cmdline").read_bytes().split(b"\0")
            if b"mlflow" in argv and b"server" in argv and str(port).encode() in argv:
                stat = (pid_dir / "stat").read_text()
                return int(stat.rsplit(")", 1)[1].split()[2])
        except (OSError, ValueError, IndexError):
            continue
    return None


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A SQLite MLflow store with one experiment and one finished run, made with MLflow's client API."""
    from mlflow import MlflowClient

    root = tmp_path_factory.mktemp("ui_store") / "mlruns"
    root.mkdir()
    uri = f"sqlite:///{(root / 'mlflow.db').as_posix()}"
    client = MlflowClient(tracking_uri=uri)
    exp_id = client.create_experiment("ui-test", artifact_location=(root / "artifacts").as_uri())
    run = client.create_run(exp_id, run_name="ui-test-run")
    client.log_param(run.info.run_id, "method", "for")
    client.log_metric(run.info.run_id, "accuracy", 0.5)
    client.set_terminated(run.info.run_id)
    return uri


@pytest.mark.parametrize("job_runner", [None, "true"], ids=["default", "mlflow-job-runner-on"])
def test_ui_starts_offline_answers_and_stops_on_ctrl_c(store, tmp_path, job_runner):
    # "mlflow-job-runner-on" is MLflow's own default start-up, the one that deadlocked offline in issue #19.
    port = _free_port()
    env = _offline_env(**({"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": job_runner} if job_runner else {}))
    log = tmp_path / "ui.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*_dspy_for(), "ui", "--tracking-uri", store, "--port", str(port)],
            env=env,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    group = None
    try:
        started, status = time.monotonic(), None
        while time.monotonic() - started < 60 and proc.poll() is None:
            status = _status(f"http://127.0.0.1:{port}/")
            if status == 200:
                break
            time.sleep(0.5)
        assert status == 200, f"no HTTP 200 within 60 s (exit code {proc.poll()}):\n{log.read_text()[-4000:]}"
        group = _server_group(port)

        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0, log.read_text()[-4000:]
        output = log.read_text()
        assert f"MLflow UI at http://127.0.0.1:{port}/" in output
        assert _status(f"http://127.0.0.1:{port}/") is None
        if group is not None:  # every process of the server (uvicorn, workers, job runner) is gone
            deadline = time.monotonic() + 2
            while _group_alive(group) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not _group_alive(group)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if group is not None and _group_alive(group):
            os.killpg(group, signal.SIGKILL)


def test_port_in_use_is_a_clear_error_with_exit_code_2(store):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert port_in_use("127.0.0.1", port)
        with pytest.raises(UIError, match=f"Port {port} on 127.0.0.1 is already in use"):
            serve_ui(store, port=port)
        result = runner.invoke(app, ["ui", "--tracking-uri", store, "--port", str(port)])
    assert result.exit_code == 2
    assert "already in use" in result.output and "--port" in result.output
    assert not port_in_use("127.0.0.1", port)


def test_missing_store_says_how_to_create_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    result = runner.invoke(app, ["ui", "--port", str(_free_port())])
    assert result.exit_code == 2
    assert "No MLflow store" in result.output and "dspy-for compare" in result.output
    assert not (tmp_path / "mlruns").exists()  # nothing created on the way
    with pytest.raises(UIError, match="already"):
        resolve_store("http://127.0.0.1:5000")


def test_store_resolution_follows_the_other_commands(tmp_path, monkeypatch, store):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mlruns").mkdir()
    (tmp_path / "mlruns" / "mlflow.db").touch()
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri, artifacts = resolve_store()
    assert uri == f"sqlite:///{(tmp_path / 'mlruns' / 'mlflow.db').resolve().as_posix()}"
    assert artifacts == (tmp_path / "mlruns" / "artifacts").resolve().as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    assert resolve_store()[0] == store
    assert resolve_store("postgresql://u@h/db") == ("postgresql://u@h/db", None)


def test_server_environment_is_offline_safe():
    env = ui_environment({"LITELLM_LOCAL_MODEL_COST_MAP": "False", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "true"})
    assert env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"  # forced: without it the server deadlocks offline
    assert env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "true"  # a default only: an explicit choice wins
    assert ui_environment({})["MLFLOW_DISABLE_TELEMETRY"] == "true"


def test_import_dspy_for_sets_the_offline_default_and_keeps_an_explicit_choice():
    code = (
        "import os, sys, dspy_for; print(os.environ.get('LITELLM_LOCAL_MODEL_COST_MAP'), "
        "*(m in sys.modules for m in ('litellm', 'mlflow', 'optuna')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=_offline_env(), capture_output=True, text=True, timeout=120, check=True
    ).stdout.split()
    assert out == ["True", "False", "False", "False"]
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=_offline_env(LITELLM_LOCAL_MODEL_COST_MAP="False"),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.split()
    assert out[0] == "False"


def test_import_dspy_for_prevents_the_offline_import_deadlock():
    # Without `import dspy_for` first, this import hangs forever offline (litellm imported under MLflow's
    # import-hook lock while its cost-map retry thread imports too); with it, it takes a few seconds.
    code = "import dspy_for, mlflow.server.jobs.utils, litellm; print(litellm.model_cost is not None)"
    done = subprocess.run([sys.executable, "-c", code], env=_offline_env(), capture_output=True, text=True, timeout=90)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr[-3000:]
