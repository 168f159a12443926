"""The embedded default LM: llama.cpp's ``llama-server`` on 127.0.0.1, answering requests side by side.

The server answers ``slots`` requests at once (``--parallel``, continuous batching: on a CPU, decoding waits on memory,
so a batch of streams costs little more than one), each slot with ``n_ctx`` tokens of context of its own. Its binary is
built from pinned source (:mod:`dspy_for.lm.llama_build`). One server per registry model is shared by every process:

* a state file ``<server dir>/<model>.json`` (pid, port, alias, slots, build, who started it, and the *leases*: pids
  of processes using it) guarded by a file lock;
* a process that needs the model takes a lease on a running server, or starts one (``started_by = "library"``); at
  exit it drops its lease, and the last lease holder stops a library-started server. Servers started with
  ``dspy-for serve`` (``started_by = "serve"``) or by anyone else are never stopped by the library;
* a running server is used as it is: asked for other ``slots``, it serves with its own (a warning says so, and the
  serving identity names the slots that served).

Its log is ``<server dir>/<model>.log`` (the previous one kept as ``.log.1``); a failed start shows its tail. Prompt
reuse is llama.cpp's own (docs/prompt_cache.md): each slot reuses the longest prefix its next prompt shares with its
last, and idle slots' states are kept in ``cache_ram_mb`` MiB of host memory; a request can turn it off
(``cache_prompt: false``).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import platformdirs
from filelock import FileLock

from dspy_for.errors import ConfigError, ServerError
from dspy_for.lm.llama_build import ServerBuild, server_build
from dspy_for.lm.options import DEFAULT_SLOTS, check_slots
from dspy_for.lm.registry import get_model, model_path

__all__ = [
    "DEFAULT_CACHE_RAM_MB",
    "DEFAULT_N_CTX",
    "ServerInfo",
    "alias_for",
    "ensure_server",
    "healthy",
    "metrics",
    "release_server",
    "server_command",
    "server_dir",
    "start_server",
    "stop_server",
]

SERVER_DIR_ENV = "DSPY_FOR_SERVER_DIR"
#: context tokens per slot: FOR's longest turn in the stored results (a Defender's revision, 1,714 prompt + 1,024
#: completion tokens at max_tokens 1024) fits with room to spare for longer dialogues
DEFAULT_N_CTX = 4096
#: host memory for the states of idle slots' prompts, in MiB (``--cache-ram``; 0: none kept beyond the slots)
DEFAULT_CACHE_RAM_MB = 1024


@dataclass
class ServerInfo:
    model: str
    alias: str
    host: str
    port: int
    pid: int
    started_by: str
    n_ctx: int  # per slot
    n_threads: int
    leases: list[int] = field(default_factory=list)
    slots: int = DEFAULT_SLOTS
    build: str = ""  # what the server runs, e.g. "llama.cpp b0-0c1e57098" (ServerBuild.label)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"


def server_dir() -> Path:
    env = os.environ.get(SERVER_DIR_ENV)
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_cache_dir("dspy-for")) / "servers"


def alias_for(name: str) -> str:
    """Served model alias: the name plus the file's SHA-256 prefix, so cache keys differ per model file."""
    return f"{name}-{get_model(name).sha256[:12]}"


def _paths(name: str) -> tuple[Path, Path, Path]:
    d = server_dir()
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{name}.json", d / f"{name}.lock", d / f"{name}.log"


def _read_state(path: Path) -> ServerInfo | None:
    """The state in ``path``; None when there is none, or it is of an earlier server (without ``build``)."""
    try:
        data = json.loads(path.read_text())
        if not data.get("build"):
            return None
        known = {f.name for f in fields(ServerInfo)}
        return ServerInfo(**{k: v for k, v in data.items() if k in known})
    except (FileNotFoundError, json.JSONDecodeError, TypeError, AttributeError):
        return None


def _write_state(path: Path, info: ServerInfo) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(info)))
    os.replace(tmp, path)


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child still "exists": treat it as dead
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"
    return True


def healthy(info: ServerInfo, timeout: float = 2.0) -> bool:
    """The server answers ``GET /v1/models`` and serves the expected alias."""
    try:
        with urllib.request.urlopen(f"{info.base_url}/models", timeout=timeout) as resp:
            data = json.loads(resp.read())
        return any(m.get("id") == info.alias for m in data.get("data", []))
    except (urllib.error.URLError, OSError, ValueError):
        return False


def metrics(info: ServerInfo, timeout: float = 5.0) -> dict[str, float]:
    """The server's counters and gauges (``GET /metrics``) by name, without ``llamacpp:``: ``prompt_tokens_total``
    (prompt tokens evaluated), ``prompt_tokens_cached_total`` (reused), ``n_busy_slots_per_decode``, ..."""
    with urllib.request.urlopen(f"{info.root_url}/metrics", timeout=timeout) as resp:
        lines = resp.read().decode().splitlines()
    pairs = (line.removeprefix("llamacpp:").partition(" ") for line in lines if line.startswith("llamacpp:"))
    return {name: float(value) for name, _, value in pairs}


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def _tail(path: Path, n: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except FileNotFoundError:
        return "(no log)"


def _check_cache_ram(value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(
            f"`--prompt-cache-mb` must be an integer >= 0 (MiB of host memory for idle slots' prompt states; 0 keeps "
            f"none beyond the slots), got {value!r}. Set e.g. --prompt-cache-mb {DEFAULT_CACHE_RAM_MB}."
        )


def server_command(
    name: str,
    *,
    port: int,
    n_ctx: int,
    n_threads: int,
    slots: int = DEFAULT_SLOTS,
    cache_ram_mb: int = DEFAULT_CACHE_RAM_MB,
    build: ServerBuild | None = None,
) -> list[str]:
    """The command line of the server of registry model ``name`` (pulled): ``slots`` slots of ``n_ctx`` tokens each (a
    KV cache per slot: each has its whole context whatever the others hold), continuous batching, ``/metrics``."""
    check_slots(slots)
    _check_cache_ram(cache_ram_mb)
    binary = (build or server_build()).binary
    return [
        str(binary),
        *("--model", str(model_path(name)), "--alias", alias_for(name)),
        *("--host", "127.0.0.1", "--port", str(port)),
        *("--parallel", str(slots), "--ctx-size", str(n_ctx * slots), "--no-kv-unified", "--cont-batching"),
        *("--threads", str(n_threads), "--cache-ram", str(cache_ram_mb)),
        *("--metrics", "--no-ui", "--fit", "off"),
    ]


def start_server(
    name: str,
    *,
    port: int | None = None,
    n_ctx: int = DEFAULT_N_CTX,
    n_threads: int | None = None,
    slots: int = DEFAULT_SLOTS,
    cache_ram_mb: int = DEFAULT_CACHE_RAM_MB,
    started_by: str = "library",
    timeout: float = 180.0,
) -> tuple[ServerInfo, subprocess.Popen[bytes]]:
    """Start a server process for registry model ``name`` and wait until it is healthy; the caller holds the model's
    lock. A model not pulled, a server not built, a port in use: a clear error before anything starts."""
    model_path(name)  # not pulled: the command that pulls it
    build = server_build()  # not built: the command that builds it
    _, _, log_path = _paths(name)
    n_threads = n_threads or min(os.cpu_count() or 2, 8)
    if port is not None and _port_in_use(port):
        raise ServerError(
            f"Port {port} on 127.0.0.1 is already in use. Pick another `--port`, or omit it to use a free one."
        )
    port = port or _free_port()
    cmd = server_command(
        name, port=port, n_ctx=n_ctx, n_threads=n_threads, slots=slots, cache_ram_mb=cache_ram_mb, build=build
    )
    if log_path.exists():
        os.replace(log_path, log_path.with_suffix(".log.1"))
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    alias = alias_for(name)
    info = ServerInfo(name, alias, "127.0.0.1", port, proc.pid, started_by, n_ctx, n_threads, [], slots, build.label)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerError(
                f"The llama.cpp server for `{name}` exited with code {proc.returncode} while starting "
                f"(port {port}). Last lines of {log_path}:\n{_tail(log_path)}"
            )
        if healthy(info, timeout=1.0):
            return info, proc
        time.sleep(0.3)
    proc.kill()
    raise ServerError(
        f"The llama.cpp server for `{name}` did not become healthy within {timeout:.0f}s. "
        f"Last lines of {log_path}:\n{_tail(log_path)}"
    )


_OWN_LEASES: set[str] = set()


def ensure_server(
    name: str,
    *,
    n_ctx: int = DEFAULT_N_CTX,
    n_threads: int | None = None,
    port: int | None = None,
    slots: int | None = None,
) -> ServerInfo:
    """A running shared server for ``name`` (its :class:`ServerInfo` says which slots serve), started with ``slots``
    (None: :data:`DEFAULT_SLOTS`) if none is running; takes a lease."""
    get_model(name)
    if slots is not None:
        check_slots(slots)
    state_path, lock_path, _ = _paths(name)
    with FileLock(str(lock_path), timeout=600):
        info = _read_state(state_path)
        # a live server process is reused even when it is slow to answer the health check
        if info is not None and not _alive(info.pid):
            state_path.unlink(missing_ok=True)
            info = None
        if info is None:
            info, _ = start_server(name, n_ctx=n_ctx, n_threads=n_threads, port=port, slots=slots or DEFAULT_SLOTS)
        elif slots is not None and info.slots != slots:
            warnings.warn(
                f"The running server of `{name}` (pid {info.pid}, started by {info.started_by}) serves {info.slots} "
                f"slot(s), not the {slots} asked: using it as it is. To change its slots, stop it (or run "
                f"`dspy-for serve {name} --slots {slots}` once it is stopped).",
                UserWarning,
                stacklevel=2,
            )
        me = os.getpid()
        info.leases = sorted({p for p in info.leases if _alive(p)} | {me})
        _write_state(state_path, info)
    if name not in _OWN_LEASES:
        _OWN_LEASES.add(name)
        atexit.register(release_server, name)
    return info


def release_server(name: str) -> None:
    """Drop this process's lease; stop a library-started server when no live lease remains."""
    state_path, lock_path, _ = _paths(name)
    _OWN_LEASES.discard(name)
    with FileLock(str(lock_path), timeout=60):
        info = _read_state(state_path)
        if info is None:
            return
        me = os.getpid()
        info.leases = [p for p in info.leases if p != me and _alive(p)]
        if info.started_by == "library" and not info.leases:
            _terminate(info.pid)
            state_path.unlink(missing_ok=True)
        else:
            _write_state(state_path, info)


def stop_server(name: str) -> bool:
    """Stop the server for ``name`` whatever its leases (used by ``serve`` on exit and by tests)."""
    state_path, lock_path, _ = _paths(name)
    with FileLock(str(lock_path), timeout=60):
        info = _read_state(state_path)
        state_path.unlink(missing_ok=True)
    if info is None:
        return False
    _terminate(info.pid)
    return True


def _terminate(pid: int, grace: float = 5.0) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _alive(pid):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def serve_forever(
    name: str,
    *,
    port: int | None = None,
    n_ctx: int = DEFAULT_N_CTX,
    n_threads: int | None = None,
    slots: int = DEFAULT_SLOTS,
    cache_ram_mb: int = DEFAULT_CACHE_RAM_MB,
    on_ready: Callable[[ServerInfo], None] | None = None,
) -> ServerInfo:
    """Run a server in the foreground for other processes (``dspy-for serve``) until Ctrl-C or SIGTERM stops it."""

    def _on_sigterm(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    check_slots(slots, "--slots")
    _check_cache_ram(cache_ram_mb)
    state_path, lock_path, _ = _paths(name)
    with FileLock(str(lock_path), timeout=600):
        existing = _read_state(state_path)
        if existing is not None and _alive(existing.pid) and healthy(existing):
            raise ServerError(
                f"A server for `{name}` is already running at {existing.base_url} (pid {existing.pid}, "
                f"{existing.slots} slot(s)). Use it, or stop it first."
            )
        info, proc = start_server(
            name,
            port=port,
            n_ctx=n_ctx,
            n_threads=n_threads,
            slots=slots,
            cache_ram_mb=cache_ram_mb,
            started_by="serve",
        )
        _write_state(state_path, info)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        if on_ready is not None:
            on_ready(info)
        proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        stop_server(name)
    return info
