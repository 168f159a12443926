"""Imports paid once, before the threads start, and only what a command uses: each check runs in a fresh interpreter
and reads ``sys.modules`` (and which thread imported each module) after the command's import path or its run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dspy_for.testing import OpenAICompatibleServer, for_responder

#: third-party packages no command loads before it needs them (the tracking server's web stack, Optuna, plots,
#: statistics and the arrays under them, litellm)
HEAVY = (
    "mlflow", "optuna", "matplotlib", "statsmodels", "scipy", "numpy", "litellm", "pandas", "fastapi", "uvicorn", "flask"
)  # fmt: skip


REPORT = """
tops = sorted({m.split(".")[0] for m in sys.modules})
print(json.dumps({"tops": tops, "modules": sorted(sys.modules), "imported": IMPORTED}))
"""


def _child(code: str, cwd: Path | None = None) -> dict:
    """Run ``code`` in a fresh interpreter that records which thread imported each module, then report its modules."""
    recorder = textwrap.dedent(
        """
        import importlib.abc, json, sys, threading
        IMPORTED = []
        class Recorder(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                IMPORTED.append((threading.current_thread().name, name))
                return None
        sys.meta_path.insert(0, Recorder())
        """
    )
    env = {**os.environ, "OPENAI_API_KEY": "sk-test-key-0123456789"}
    out = subprocess.run(
        [sys.executable, "-c", recorder + textwrap.dedent(code) + REPORT],
        capture_output=True, text=True, check=False, env=env, cwd=cwd, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_cli_imports_no_heavy_package():
    got = _child("import dspy_for.cli\n")
    assert not set(HEAVY) & set(got["tops"])


def test_the_comparison_imports_neither_advise_nor_the_sweeps():
    got = _child("from dspy_for.experiments import compare\n")
    assert not set(HEAVY) & set(got["tops"])
    loaded = [
        m for m in got["modules"] if m.startswith(("dspy_for.experiments.advisor", "dspy_for.experiments.sweeps"))
    ]
    assert loaded == []


def test_a_dry_run_imports_no_mlflow_no_plotting_and_no_statistics(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text(CONFIG.format(base="http://127.0.0.1:9/v1", threads=2, headers=""))
    got = _child(
        f"""
        from dspy_for.experiments import compare
        compare({str(config)!r}, dry_run=True)
        """,
        cwd=tmp_path,
    )
    assert not {"mlflow", "matplotlib", "statsmodels", "scipy", "numpy", "optuna"} & set(
        got["tops"]
    )  # (litellm: its price map)


CONFIG = """
experiment = "imports"
lm = "openai/test-model"
lm_options = {{ api_base = "{base}"{headers} }}
num_threads = {threads}
baseline = "cot"
[[datasets]]
name = "gsm8k"
split = "sample"
first = 8
[[methods]]
name = "cot"
[[methods]]
name = "single"
"""


@pytest.mark.parametrize("routed", [False, True], ids=["dspy-engine", "through-litellm"])
def test_worker_threads_import_nothing_and_a_run_loads_no_tracking_server(tmp_path, routed):
    """The items' first LM calls are made in worker threads: what DSPy's engine — or, for an LM DSPy routes through
    litellm (a client option its own engine does not take), litellm's completion path — imports on a first call is
    imported on the main thread before the threads start."""
    with OpenAICompatibleServer(for_responder("18")) as server:
        config = tmp_path / "c.toml"
        headers = ', extra_headers = { "X-Test" = "1" }' if routed else ""
        config.write_text(CONFIG.format(base=server.base_url, threads=4, headers=headers))
        got = _child(
            f"""
            from dspy_for.experiments import compare
            result = compare({str(config)!r}, tracking_uri="sqlite:///{tmp_path}/mlruns/mlflow.db")
            assert result.ok, result.errors
            """,
            cwd=tmp_path,
        )
        assert server.requests  # the run reached the endpoint
    in_workers = sorted({m for thread, m in got["imported"] if thread.startswith("dspy-for-item")})
    assert in_workers == [], " ".join(in_workers)  # (64 threads would each wait on these imports)
    if routed:
        assert "litellm" in got["tops"]  # it was needed, and imported once, on the main thread
    assert not [m for m in got["modules"] if m.startswith(("mlflow.server", "optuna", "dspy_for.experiments.sweeps"))]
