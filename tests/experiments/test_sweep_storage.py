"""Real worker processes on one study: default journal store and PostgreSQL; a worker SIGKILLed mid-trial."""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dspy_for.experiments.sweeps.sweep import load_sweep_spec, open_study, run_study

HERE = Path(__file__).resolve().parent
CONFIG = """
method = "for"
study = "{study}"
lm = "openai/fake"
n_trials = {n}
{storage}
[dataset]
name = "gsm8k"
split = "sample"
first = 2
[search.rounds]
type = "int"
low = 0
high = 4
[search.host]
type = "categorical"
choices = [true, false]
"""
OBJECTIVE = "sweep_fake_objective:make"


def _spec(tmp_path, study, n, storage=None):
    p = tmp_path / f"{study}.toml"
    p.write_text(CONFIG.format(study=study, n=n, storage=f'storage = "{storage}"' if storage else ""))
    return load_sweep_spec(p)


def _accounted(study, n):
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == n, [(t.number, t.state.name) for t in trials]
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    return trials


def _four_workers(tmp_path, spec, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv("PYTHONPATH", f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("FAKE_OBJECTIVE_DELAY", "0.2")
    open_study(spec)
    study = run_study(spec, workers=4, objective_path=OBJECTIVE, timeout=300)
    trials = _accounted(study, spec.n_trials)
    workers = {t.user_attrs["worker"] for t in trials}
    assert len(workers) >= 2  # several processes really shared the study


_WORKER = """
import faulthandler, os, sys
faulthandler.dump_traceback_later(60, exit=True)
sys.path.insert(0, {here!r})
import pickle
from dspy_for.experiments.sweeps.workers import _worker_entry
with open({spec!r}, "rb") as f:
    spec = pickle.load(f)  # as multiprocessing's spawn hands the spec to a worker
_worker_entry(spec, {objective!r}, None, {cwd!r})
"""


def _kill_one_mid_trial(tmp_path, spec, monkeypatch):
    from optuna.trial import TrialState

    monkeypatch.chdir(tmp_path)
    open_study(spec)
    env = {**os.environ, "FAKE_OBJECTIVE_DELAY": "1.5", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    spec_file = tmp_path / "spec.pickle"
    spec_file.write_bytes(pickle.dumps(spec))
    code = _WORKER.format(here=str(HERE), spec=str(spec_file), objective=OBJECTIVE, cwd=str(tmp_path))
    victim = subprocess.Popen([sys.executable, "-c", code], env=env)
    study = open_study(spec)
    deadline = time.time() + 120
    while time.time() < deadline:
        running = [
            t
            for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if t.user_attrs.get("worker", "").endswith(f":{victim.pid}") and set(t.params) == {"rounds", "host"}
        ]  # killed once its parameters are drawn (both: the retry runs with exactly those)
        if running:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the victim worker never started a trial")
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    survivor = subprocess.run([sys.executable, "-c", code], env={**env, "FAKE_OBJECTIVE_DELAY": "0.1"}, timeout=120)
    assert survivor.returncode == 0
    trials = _accounted(open_study(spec), spec.n_trials)
    failed = [t for t in trials if t.state == TrialState.FAIL]
    retried = [t for t in trials if "retry_of" in t.user_attrs]
    assert len(failed) == 1 and failed[0].number == running[0].number
    assert [t.user_attrs["retry_of"] for t in retried] == [failed[0].number]
    assert retried[0].state == TrialState.COMPLETE and retried[0].params == failed[0].params


def test_four_local_workers_default_store(tmp_path, monkeypatch):
    _four_workers(tmp_path, _spec(tmp_path, "journal4", 12), monkeypatch)


def test_sigkilled_worker_default_store(tmp_path, monkeypatch):
    _kill_one_mid_trial(tmp_path, _spec(tmp_path, "journalkill", 4), monkeypatch)


# ------------------------------------------------------------------------------------------ PostgreSQL


def _pg_bin() -> Path | None:
    root = Path("/usr/lib/postgresql")
    for version in sorted(root.glob("*"), reverse=True) if root.is_dir() else []:
        if (version / "bin" / "initdb").is_file():
            return version / "bin"
    found = shutil.which("initdb")
    return Path(found).parent if found else None


@pytest.fixture
def postgres(tmp_path):
    """A throwaway PostgreSQL server on a free local port (Debian's binaries, run as user postgres)."""
    bindir = _pg_bin()
    if bindir is None:
        pytest.skip("PostgreSQL binaries not installed (Debian: apt-get install postgresql)")
    import pwd

    try:
        pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("no `postgres` system user to run the server as")
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="dspy-for-pg-"))  # pytest's tmp tree is private to root
    os.chmod(base, 0o755)
    data = base / "pgdata"
    sock = base / "pgsock"
    for d in (data, sock):
        d.mkdir()
        shutil.chown(d, "postgres", "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = ["runuser", "-u", "postgres", "--"]
    subprocess.run(
        [*run, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            *run,
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(data / "log"),
            "-w",
            "-o",
            f"-p {port} -k {sock} -h 127.0.0.1",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        subprocess.run(
            [*run, str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "optuna"],
            check=True,
            capture_output=True,
        )
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/optuna"
    finally:
        subprocess.run([*run, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.postgres
def test_four_workers_on_postgresql(tmp_path, monkeypatch, postgres):
    _four_workers(tmp_path, _spec(tmp_path, "pg4", 12, storage=postgres), monkeypatch)


@pytest.mark.postgres
def test_sigkilled_worker_on_postgresql(tmp_path, monkeypatch, postgres):
    _kill_one_mid_trial(tmp_path, _spec(tmp_path, "pgkill", 4, storage=postgres), monkeypatch)
