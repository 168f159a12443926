"""scripts/setup.sh runs pip only when the project's requirements changed since its last finished run, so a second
set-up (test.sh's own) installs nothing and reaches no network. Checked in a copy of the script beside a stand-in
``.venv/bin/python`` that logs what it is asked to run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STAND_IN = """#!/bin/sh
# a venv's python: answers `-c` by the real interpreter, logs `-m pip ...` and fails it when told to
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  echo "$*" >> "$PIP_LOG"
  exit "${PIP_EXIT:-0}"
fi
exec "$REAL_PYTHON" "$@"
"""


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup.sh", project / "scripts" / "setup.sh")
    shutil.copy(ROOT / "pyproject.toml", project / "pyproject.toml")
    python = project / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(STAND_IN)
    python.chmod(0o755)
    return project


def _setup(project: Path, log: Path, extras: str = "dev", pip_exit: int = 0) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "EXTRAS": extras,
        "PIP_LOG": str(log),
        "REAL_PYTHON": sys.executable,
        "PIP_EXIT": str(pip_exit),
    }
    return subprocess.run(
        ["bash", str(project / "scripts" / "setup.sh")], env=env, capture_output=True, text=True, timeout=60
    )


def _pip_calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_a_second_set_up_runs_no_pip_until_the_requirements_change(tmp_path):
    project, log = _project(tmp_path), tmp_path / "pip.log"
    first = _setup(project, log)
    assert first.returncode == 0, first.stderr
    assert _pip_calls(log) == [
        "-m pip install -q --disable-pip-version-check --upgrade pip",
        "-m pip install -q --disable-pip-version-check -e .[dev]",
    ]
    assert "no 'local'" in first.stdout

    assert _setup(project, log).returncode == 0
    assert len(_pip_calls(log)) == 2  # nothing changed: no pip, no network

    assert _setup(project, log, extras="dev,postgres").returncode == 0
    assert _pip_calls(log)[-1].endswith("-e .[dev,postgres]")  # other extras: pip again

    with (project / "pyproject.toml").open("a") as f:
        f.write("\n# a changed requirement\n")
    assert _setup(project, log, extras="dev,postgres").returncode == 0
    assert len(_pip_calls(log)) == 6  # a changed pyproject.toml: pip again


def test_a_set_up_whose_pip_failed_runs_pip_again_next_time(tmp_path):
    project, log = _project(tmp_path), tmp_path / "pip.log"
    failed = _setup(project, log, pip_exit=1)
    assert failed.returncode != 0
    assert not (project / ".venv" / ".dspy-for-setup").exists()
    assert _setup(project, log).returncode == 0
    assert len(_pip_calls(log)) == 3  # the failed upgrade, then both steps again
