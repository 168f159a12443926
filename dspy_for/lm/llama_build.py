"""The embedded server's binary: llama.cpp's ``llama-server``, built here from pinned, verified source.

Build (``dspy-for models build-server``; ``scripts/setup.sh`` runs it when ``EXTRAS`` has ``local``):

1. ``pip download`` the llama-cpp-python sdist that ``models.toml`` pins (``[llama_server]``), with its SHA-256
   given to pip (``--hash``: pip checks the archive before anything in it runs), checked again here;
2. extract its ``vendor/llama.cpp`` (the llama.cpp source that release of llama-cpp-python ships);
3. configure with CMake and build the ``llama-server`` target only: portable CPU flags
   (:data:`PORTABLE_CPU_FLAGS`) and nothing that reaches the network (:data:`OFFLINE_FLAGS`);
4. keep the binary and a build record (``build.json``) in :func:`build_dir`, a directory of the user cache keyed by
   the source's SHA-256 and the flags, so every clone and worktree on the machine reuses one build.

``$DSPY_FOR_LLAMA_SERVER`` names a ``llama-server`` of your own instead (a GPU build, say); :func:`server_binary`
finds the one to run, or says how to get one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import IO

import platformdirs
from filelock import FileLock

from dspy_for.errors import ServerError
from dspy_for.lm.registry import llama_server_source

__all__ = [
    "BUILD_COMMAND",
    "LLAMA_SERVER_ENV",
    "OFFLINE_FLAGS",
    "PORTABLE_CPU_FLAGS",
    "ServerBuild",
    "build_dir",
    "build_server",
    "cmake_flags",
    "fingerprint_of",
    "server_binary",
    "server_build",
]

LLAMA_SERVER_ENV = "DSPY_FOR_LLAMA_SERVER"
BUILD_DIR_ENV = "DSPY_FOR_LLAMA_BUILD_DIR"
BUILD_COMMAND = "dspy-for models build-server"

# A portable CPU build (AVX2, no AVX-512, no AMX): llama.cpp's default native build uses the AMX tiles of CPUs that
# have them, and a kernel or sandbox that does not grant AMX kills the server on its first request (a general
# protection fault in libggml-cpu); a native build is also tied to the CPU it was built on, and the build is shared.
PORTABLE_CPU_FLAGS = (
    "-DGGML_NATIVE=OFF",
    "-DGGML_AVX=ON",
    "-DGGML_AVX2=ON",
    "-DGGML_FMA=ON",
    "-DGGML_F16C=ON",
    "-DGGML_AVX512=OFF",
    "-DGGML_AMX_TILE=OFF",
    "-DGGML_AMX_INT8=OFF",
    "-DGGML_AMX_BF16=OFF",
)
# Nothing reaches the network: no web UI (neither downloaded nor built with npm), no HTTPS client (no OpenSSL),
# no tests or examples; one static binary, so the build directory can move.
OFFLINE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
)
_RECORD = "build.json"
_BINARY = "llama-server"


@dataclass(frozen=True)
class ServerBuild:
    """A ``llama-server`` to run and what it is: ``fingerprint``, llama.cpp's ``b<build number>-<commit>`` (what its
    answers carry as ``system_fingerprint``); ``own``: a binary of the user's own (``$DSPY_FOR_LLAMA_SERVER``) rather
    than the pinned portable build."""

    binary: Path
    fingerprint: str
    own: bool = False

    @property
    def label(self) -> str:
        """How a serving identity names it: ``llama.cpp b0-0c1e57098`` (``own-build`` added for a user's binary)."""
        return f"llama.cpp {self.fingerprint}" + (" own-build" if self.own else "")


def cmake_flags() -> tuple[str, ...]:
    """Every CMake flag of the build (what :func:`build_dir` is keyed by beside the source)."""
    commit = llama_server_source().llama_cpp_commit
    # the sdist has no git history: the build names the commit its CHANGELOG gives
    return (*PORTABLE_CPU_FLAGS, *OFFLINE_FLAGS, f"-DLLAMA_BUILD_COMMIT={commit}", "-DLLAMA_BUILD_NUMBER=0")


def build_dir() -> Path:
    """Where the pinned build lives: ``<user cache>/dspy-for/llama-server/<source sha12>-<flags sha8>``."""
    env = os.environ.get(BUILD_DIR_ENV)
    root = Path(env).expanduser() if env else Path(platformdirs.user_cache_dir("dspy-for")) / "llama-server"
    flags = hashlib.sha256(" ".join(cmake_flags()).encode()).hexdigest()[:8]
    return root / f"{llama_server_source().sha256[:12]}-{flags}"


def _not_built(detail: str) -> ServerError:
    return ServerError(
        f"{detail} Build it with `{BUILD_COMMAND}` (once per machine: about 8 minutes on 2 cores; "
        f"`bash scripts/setup.sh` does it), or set {LLAMA_SERVER_ENV} to the path of a llama-server of your own."
    )


def server_binary() -> Path:
    """The ``llama-server`` the embedded server runs (:func:`server_build`)."""
    return server_build().binary


def server_build() -> ServerBuild:
    """The ``llama-server`` to run: ``$DSPY_FOR_LLAMA_SERVER`` when set, else the pinned build; a
    :class:`~dspy_for.errors.ServerError` naming the fix when there is none."""
    own = os.environ.get(LLAMA_SERVER_ENV)
    if own:
        path = Path(own).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ServerError(
                f"{LLAMA_SERVER_ENV}={own} is not an executable file. Point it at a llama-server binary, or unset "
                f"it to use the one `{BUILD_COMMAND}` builds."
            )
        return ServerBuild(path, _fingerprint(str(path), path.stat().st_mtime_ns), own=True)
    d = build_dir()
    binary = d / "bin" / _BINARY
    try:
        record = json.loads((d / _RECORD).read_text())
    except (FileNotFoundError, ValueError):
        raise _not_built(
            f"The embedded LM server (llama.cpp's llama-server) is not built yet (expected {binary})."
        ) from None
    if not binary.is_file():
        raise _not_built(f"The embedded LM server's binary is missing (expected {binary}).")
    return ServerBuild(binary, fingerprint_of(str(record.get("version", ""))))


def fingerprint_of(version: str) -> str:
    """llama.cpp's ``b<build>-<commit>`` from a ``llama-server --version`` text (``version: 0.5.0-dev (build 0,
    commit 0c1e57098)``, or the older ``version: 6500 (abc1234)``); ``unknown`` when it names none."""
    found = re.search(r"build (\d+), commit (\w+)", version) or re.search(r"version:\s*(\d+)\s*\((\w+)\)", version)
    return f"b{found.group(1)}-{found.group(2)}" if found else "unknown"


@cache
def _fingerprint(path: str, mtime_ns: int) -> str:
    """The fingerprint a user's ``llama-server`` states in ``--version`` (once per binary and modification time)."""
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ServerError(f"{LLAMA_SERVER_ENV}={path} could not be run (`--version`): {exc}") from None
    return fingerprint_of(proc.stdout + proc.stderr)


@dataclass(frozen=True)
class _Record:
    sdist: str
    sha256: str
    llama_cpp_commit: str
    flags: list[str]
    version: str


Progress = Callable[[str], None]


def build_server(
    *,
    force: bool = False,
    sdist: Path | None = None,
    jobs: int | None = None,
    progress: Progress | None = None,
) -> Path:
    """Build the pinned ``llama-server`` (module docstring) unless it is built already; returns the binary.

    ``sdist``: a downloaded copy of the pinned sdist to use instead of fetching it (verified all the same);
    ``jobs``: parallel compile jobs (default: the CPU count). A failure is a
    :class:`~dspy_for.errors.ServerError` with the tail of the build log.
    """
    say = progress or (lambda message: None)
    cmake, compiler = _tool("cmake"), _tool("c++")
    if cmake is None or compiler is None:
        raise ServerError(
            f"Building llama-server needs {'CMake' if cmake is None else 'a C++ compiler'}: `pip install cmake` (the "
            "`local` extra installs it) or Debian's `apt-get install cmake`, and a C/C++ compiler (`apt-get install "
            f"g++`); then run `{BUILD_COMMAND}` again."
        )
    target = build_dir()
    target.mkdir(parents=True, exist_ok=True)
    binary = target / "bin" / _BINARY
    with FileLock(str(target / "build.lock")):
        if not force and (target / _RECORD).is_file() and binary.is_file():
            say(f"llama-server is built already: {binary}")
            return binary
        (target / _RECORD).unlink(missing_ok=True)
        log_path = target / "build.log"
        source = llama_server_source()
        with tempfile.TemporaryDirectory(prefix="dspy-for-llama-build-") as tmp:
            archive = sdist or _download(source.sdist, source.sha256, Path(tmp), say)
            _verify(archive, source.sha256)
            say(f"extracting llama.cpp from {archive.name}")
            src = _extract_llama_cpp(archive, Path(tmp) / "src")
            build = Path(tmp) / "build"
            n = str(jobs or os.cpu_count() or 2)
            with log_path.open("w") as log:
                say(f"configuring (log: {log_path})")
                _run([cmake, "-S", str(src), "-B", str(build), *cmake_flags()], log, log_path)
                say(f"compiling llama-server on {n} jobs (about 8 minutes on 2 cores)")
                _run([cmake, "--build", str(build), "--target", _BINARY, "-j", n], log, log_path)
            built = build / "bin" / _BINARY
            if not built.is_file():
                raise ServerError(f"The build finished without {built}. See {log_path}, then run `{BUILD_COMMAND}`.")
            binary.parent.mkdir(parents=True, exist_ok=True)
            partial = binary.with_suffix(".partial")
            shutil.copy2(built, partial)
            os.replace(partial, binary)
        version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
        record = _Record(
            source.sdist,
            source.sha256,
            source.llama_cpp_commit,
            list(cmake_flags()),
            (version.stdout + version.stderr).strip(),
        )
        (target / _RECORD).write_text(json.dumps(asdict(record), indent=2))
    say(f"built {binary}")
    return binary


def _tool(name: str) -> str | None:
    """``name`` beside this Python (a virtualenv's own: the ``cmake`` wheel of the ``local`` extra), else on PATH."""
    here = Path(sys.executable).parent / name
    return str(here) if here.is_file() and os.access(here, os.X_OK) else shutil.which(name)


def _download(requirement: str, sha256: str, tmp: Path, say: Progress) -> Path:
    say(f"downloading {requirement} (source, SHA-256 pinned)")
    pins = tmp / "requirements.txt"
    pins.write_text(f"{requirement} --hash=sha256:{sha256}\n")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
    cmd += ["--disable-pip-version-check", "-q", "-d", str(tmp / "dl"), "-r", str(pins)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted((tmp / "dl").glob("*.tar.gz")) if (tmp / "dl").is_dir() else []
    if not found:
        raise ServerError(
            f"Could not download {requirement} from PyPI: {(proc.stderr or proc.stdout).strip()[-800:]}\n"
            f"Check that PyPI is reachable, or download the sdist yourself and run `{BUILD_COMMAND} --sdist FILE`."
        )
    return found[0]


def _verify(archive: Path, sha256: str) -> None:
    h = hashlib.sha256()
    with archive.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    if h.hexdigest() != sha256:
        raise ServerError(
            f"{archive} has SHA-256 {h.hexdigest()}, not the pinned {sha256}: refusing to build from it. "
            f"Run `{BUILD_COMMAND}` without --sdist to fetch the pinned sdist."
        )


def _extract_llama_cpp(archive: Path, dest: Path) -> Path:
    """Extract the sdist's ``vendor/llama.cpp`` into ``dest``; returns the source root."""
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in f"{m.name}/"]
        if not members:
            raise ServerError(f"{archive} has no vendor/llama.cpp: not a llama-cpp-python sdist.")
        tar.extractall(dest, members=members, filter="data")
    roots = sorted(dest.glob("*/vendor/llama.cpp"))
    if not roots:
        raise ServerError(f"{archive} has no vendor/llama.cpp: not a llama-cpp-python sdist.")
    return roots[0]


def _run(cmd: list[str], log: IO[str], log_path: Path) -> None:
    proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-25:])
        raise ServerError(
            f"Building llama-server failed (`{' '.join(cmd[:3])} …` exited with {proc.returncode}). "
            f"Last lines of {log_path}:\n{tail}\nFix the cause (a compiler, CMake >= 3.14), then run `{BUILD_COMMAND}`."
        )
