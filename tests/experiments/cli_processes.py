"""The ``dspy-for`` command line as real processes against the local OpenAI-compatible test server, for the tests of
what happens between processes and on the disk: the server's answers for every role, a command's arguments, its
environment, and a real read-only disk (a read-only bind mount in a mount namespace of the process's own; or, for a
user that is not root, a folder without write permission)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dspy_for.testing import OpenAICompatibleServer

__all__ = ["cli", "common_args", "compare_args", "env", "read_only_prefix", "respond"]


def respond(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, str]:
    """Answer CoT, FOR-Prompting's roles and the single call: 36, with a question for the Debater."""
    system = "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")
    out: dict[str, str] = {}
    if "`reasoning`" in system:
        out["reasoning"] = "3 * 12 = 36."
    if "`questions`" in system:
        out["questions"] = '["Which step gives 36?"]'
    for name in ("answer", "revised_answer", "final_answer"):
        if f"`{name}`" in system:
            out[name] = "36"
    return out


def common_args(server: OpenAICompatibleServer, tmp_path: Path, first: int = 3) -> list[str]:
    """The LM (the test server), the data (the bundled sample's first items) and where everything is kept."""
    return [
        "--lm",
        "openai/test-model",
        "--lm-option",
        f"api_base={server.base_url}",
        "--lm-option",
        "num_retries=0",
        "--dataset",
        "gsm8k",
        "--split",
        "sample",
        "--first",
        str(first),
        "--tracking-uri",
        f"sqlite:///{tmp_path}/mlruns/mlflow.db",
        "--results-dir",
        str(tmp_path / "results"),
    ]


def compare_args(methods: str, server: OpenAICompatibleServer, tmp_path: Path, first: int = 3) -> list[str]:
    head = ["compare", "--methods", methods, "--baseline", methods.split(",")[0], "--no-match-budget"]
    return [*head, *common_args(server, tmp_path, first)]


def env(tmp_path: Path) -> dict[str, str]:
    """A clean environment: offline litellm, a key the test server ignores, a cache of the test's own."""
    return {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "OPENAI_API_KEY": "sk-unused-by-the-test-server",
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "DSPY_FOR_CACHE_DIR": str(tmp_path / "cache"),
        "COLUMNS": "200",
    }


def cli(argv: list[str], tmp_path: Path, prefix: list[str] | None = None, timeout: float = 240) -> tuple[int, str]:
    """Run ``dspy-for ARGV`` (after ``prefix``, e.g. :func:`read_only_prefix`) in ``tmp_path``: exit code, output."""
    done = subprocess.run(
        [*(prefix or []), sys.executable, "-m", "dspy_for.cli", *argv],
        cwd=tmp_path,
        env=env(tmp_path),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done.returncode, done.stdout + done.stderr


def _bind_mount_works(probe: Path) -> bool:
    probe.mkdir(parents=True, exist_ok=True)
    if shutil.which("unshare") is None:
        return False
    script = 'mount --bind -o ro "$1" "$1" && ! touch "$1/probe" 2>/dev/null'
    done = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", str(probe)], capture_output=True)
    return done.returncode == 0 and not (probe / "probe").exists()


def read_only_prefix(folder: Path, tmp_path: Path) -> list[str]:
    """A command prefix under which ``folder`` is a read-only disk (writes fail with EROFS, even for root); for a
    user that is not root, no prefix: the folder's write permission is taken away instead. Skips the test where
    neither can be done (root without the right to make a mount namespace)."""
    if _bind_mount_works(tmp_path / "mount-probe"):
        script = 'mount --bind -o ro "$1" "$1" && shift && exec "$@"'
        return ["unshare", "-m", "sh", "-c", script, "sh", str(folder)]
    if os.geteuid() != 0:
        for path in [folder, *folder.rglob("*")]:
            path.chmod(path.stat().st_mode & ~0o222)
        return []
    pytest.skip("a read-only disk needs a mount namespace (unshare -m) or a user that is not root")
