"""MLflow tracking helpers. MLflow is imported only here (and lazily), never by modules or optimizers.

Default store: MLflow 3's recommended database backend, a SQLite file inside ``./mlruns/``
(``sqlite:///mlruns/mlflow.db``) with artifacts under ``./mlruns/artifacts``, created on first use;
overridable with ``--tracking-uri`` or ``$MLFLOW_TRACKING_URI``.

Nothing secret is logged: :func:`safe_params` and :func:`redact` drop or mask API keys, tokens and any
value equal to a secret-looking environment variable, in params, tags and artifact text.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = [
    "default_tracking_uri",
    "environment_params",
    "log_figure",
    "log_json_artifact",
    "log_table",
    "log_text_artifact",
    "redact",
    "safe_params",
    "setup_tracking",
]

_SECRET_KEY = re.compile(r"(api[_-]?key|token|secret|password|passwd|authorization|bearer|credential)", re.I)
_SECRET_VALUE = re.compile(r"\b(sk-[A-Za-z0-9_\-]{8,}|(?:hf|ghp|gho|xox[bap])_[A-Za-z0-9]{8,}|AKIA[0-9A-Z]{12,})")
_MAX_PARAM = 6000


def default_tracking_uri(root: str | os.PathLike[str] = ".") -> str:
    return f"sqlite:///{Path(root, 'mlruns', 'mlflow.db').as_posix()}"


def setup_tracking(uri: str | None, experiment: str) -> str:
    """Point MLflow at ``uri`` (or $MLFLOW_TRACKING_URI, or the default store); return the experiment id."""
    import mlflow

    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()
    artifact_root = None
    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///"):])
        db.parent.mkdir(parents=True, exist_ok=True)
        artifact_root = (db.parent / "artifacts").resolve().as_uri()
    mlflow.set_tracking_uri(uri)
    found = mlflow.get_experiment_by_name(experiment)
    if found is not None:
        exp_id = found.experiment_id
    else:
        exp_id = mlflow.create_experiment(experiment, artifact_location=artifact_root)
    mlflow.set_experiment(experiment_id=exp_id)
    return exp_id


def _secret_env_values() -> list[str]:
    return [v for k, v in os.environ.items() if _SECRET_KEY.search(k) and v and len(v) >= 6]


def redact(text: str) -> str:
    """Mask secret-looking substrings and the values of secret environment variables."""
    for value in _secret_env_values():
        text = text.replace(value, "***")
    return _SECRET_VALUE.sub("***", text)


def _flatten(d: Mapping[str, Any], prefix: str = "") -> Iterable[tuple[str, Any]]:
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            yield from _flatten(v, key + ".")
        else:
            yield key, v


def safe_params(d: Mapping[str, Any]) -> dict[str, str]:
    """Flatten, drop secret keys, mask secret values, and truncate to MLflow's param limit."""
    out = {}
    for key, value in _flatten(d):
        if _SECRET_KEY.search(key.rsplit(".", 1)[-1]):
            continue
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        out[key[:250]] = redact(text)[:_MAX_PARAM]
    return out


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "not installed"


def environment_params() -> dict[str, str]:
    """Package versions, Python, platform and the git commit (if any) of the working directory."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "", ""
    packages = ("dspy-for", "dspy", "litellm", "mlflow", "optuna", "llama-cpp-python")
    params = {f"version.{p}": _version(p) for p in packages}
    params.update({"python": platform.python_version(), "platform": platform.platform(),
                   "git_commit": commit or "unknown", "git_dirty": str(bool(dirty.strip()))})
    return params


def log_text_artifact(text: str, name: str) -> None:
    import mlflow

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_text(redact(text), encoding="utf-8")
        mlflow.log_artifact(str(path))


def log_json_artifact(obj: Any, name: str) -> None:
    log_text_artifact(json.dumps(obj, indent=2, default=str, ensure_ascii=False), name)


def log_table(rows: list[dict[str, Any]], name: str) -> None:
    """Log rows as JSONL (one object per line): easy to load with pandas, greppable."""
    log_text_artifact("".join(json.dumps(r, default=str, ensure_ascii=False) + "\n" for r in rows), name)


def log_figure(fig: Any, name: str) -> None:
    import mlflow

    mlflow.log_figure(fig, name)
