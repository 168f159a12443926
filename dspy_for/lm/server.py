"""The embedded default LM: a llama.cpp (llama-cpp-python) OpenAI-compatible server on 127.0.0.1.

One server per registry model is shared by every process on the machine:

* a state file ``<server dir>/<model>.json`` (pid, port, alias, who started it, and the *leases*: pids
  of processes using it) guarded by a file lock;
* a process that needs the model takes a lease on a healthy server, or starts one (``started_by =
  "library"``) if there is none; at exit it drops its lease, and the last lease holder stops a
  library-started server. Servers started with ``dspy-for serve`` (``started_by = "serve"``) or by
  anyone else are never stopped by the library.

The server's log goes to ``<server dir>/<model>.log``; a failed start shows its tail.

**Prompt cache** (opt-in: ``prompt_cache=True`` here, ``make_lm("local/NAME", prompt_cache=True)``,
``dspy-for serve NAME --prompt-cache``): a separate server per model (state file ``<model>.prompt-cache.json``,
alias ``<model>-<sha>-pc64``) that keeps the key/value states of prompt prefixes it has evaluated and
reuses the longest stored one, so each role's repeated instructions are computed once
(:mod:`dspy_for.lm.prompt_cache`). To keep answers a function of the prompt alone, it evaluates every prompt in fixed
chunks of :data:`PROMPT_CACHE_CHUNK` tokens counted from the first token and reuses only whole chunks:
a reused chunk is bit-identical to the one a fresh evaluation would compute. Answers can still differ
from the default server's, whose chunking follows the previous request (it reuses the longest common
prefix with the previous prompt, at any length), so the cache is part of the alias and of a result's key
(docs/prompt_cache.md).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import platformdirs
from filelock import FileLock

from dspy_for.errors import ConfigError, ServerError, require
from dspy_for.lm.prompt_cache import DEFAULT_PROMPT_CACHE_BYTES, PROMPT_CACHE_CHUNK
from dspy_for.lm.registry import get_model, list_models, model_path

__all__ = [
    "ServerInfo",
    "alias_for",
    "ensure_server",
    "healthy",
    "model_label",
    "release_server",
    "server_command",
    "server_dir",
    "start_server",
    "stop_server",
]

SERVER_DIR_ENV = "DSPY_FOR_SERVER_DIR"
DEFAULT_N_CTX = 4096


@dataclass
class ServerInfo:
    model: str
    alias: str
    host: str
    port: int
    pid: int
    started_by: str
    n_ctx: int
    n_threads: int
    leases: list[int] = field(default_factory=list)
    prompt_cache: bool = False

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"


def server_dir() -> Path:
    env = os.environ.get(SERVER_DIR_ENV)
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_cache_dir("dspy-for")) / "servers"


def alias_for(name: str, prompt_cache: bool = False) -> str:
    """Served model alias: the name plus the file's SHA-256 prefix, so cache keys differ per model file;
    with the prompt cache also ``-pc<chunk>``, so DSPy's response cache never mixes the two servers' answers."""
    alias = f"{name}-{get_model(name).sha256[:12]}"
    return f"{alias}-pc{PROMPT_CACHE_CHUNK}" if prompt_cache else alias


def model_label(model: str) -> str:
    """An LM's model name as a user wrote it: the local server's route (``hosted_vllm/<alias>``, what DSPy and the
    records name) back to ``local/<name>`` (``local/<name> (prompt cache)`` for that server); any other unchanged.
    For what is shown only: records, keys and costs keep the route, which names the model file too."""
    route, _, alias = model.partition("/")
    if route != "hosted_vllm" or not alias:
        return model
    for entry in list_models():
        for cached in (False, True):
            if alias == alias_for(entry.name, prompt_cache=cached):
                return f"local/{entry.name}" + (" (prompt cache)" if cached else "")
    return model


def _paths(name: str, prompt_cache: bool = False) -> tuple[Path, Path, Path]:
    d = server_dir()
    d.mkdir(parents=True, exist_ok=True)
    stem = f"{name}.prompt-cache" if prompt_cache else name
    return d / f"{stem}.json", d / f"{stem}.lock", d / f"{stem}.log"


def _read_state(path: Path) -> ServerInfo | None:
    try:
        return ServerInfo(**json.loads(path.read_text()))
    except (FileNotFoundError, json.JSONDecodeError, TypeError):
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


_PROMPT_CACHE_BOOT = "from dspy_for.lm.prompt_cache import run_prompt_cache_server; run_prompt_cache_server()"


def _check_prompt_cache_bytes(value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(
            f"`prompt_cache_bytes` must be an integer >= 0 (bytes of stored prefix states; 0 keeps only the "
            f"current context), got {value!r}. Set e.g. --prompt-cache-mb 1024."
        )


def server_command(
    name: str,
    *,
    port: int,
    n_ctx: int,
    n_threads: int,
    prompt_cache: bool = False,
    prompt_cache_bytes: int = DEFAULT_PROMPT_CACHE_BYTES,
) -> list[str]:
    """The command line that runs the server of registry model ``name`` (pulled).

    Without the prompt cache: llama-cpp-python's own server, as it always was. With it: the same server
    started through :func:`~dspy_for.lm.prompt_cache.run_prompt_cache_server`, in chunks of
    :data:`~dspy_for.lm.prompt_cache.PROMPT_CACHE_CHUNK` tokens, computing logits for the last prompt token
    only (no logprobs).
    """
    _check_prompt_cache_bytes(prompt_cache_bytes)
    args = ["--model", str(model_path(name)), "--model_alias", alias_for(name, prompt_cache)]
    args += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", str(n_threads)]
    if not prompt_cache:
        return [sys.executable, "-m", "llama_cpp.server", *args]
    chunk = str(PROMPT_CACHE_CHUNK)
    cache = ["--prompt_cache_bytes", str(prompt_cache_bytes), "--n_batch", chunk, "--n_ubatch", chunk]
    # logits of the last prompt token only (llama.cpp's own default; the server's is every token's, for
    # prompt logprobs): the output layer is a sixth of the 1.5B model's compute per prompt token
    return [sys.executable, "-c", _PROMPT_CACHE_BOOT, *cache, "--logits_all", "False", *args]


def start_server(
    name: str,
    *,
    port: int | None = None,
    n_ctx: int = DEFAULT_N_CTX,
    n_threads: int | None = None,
    started_by: str = "library",
    timeout: float = 180.0,
    prompt_cache: bool = False,
    prompt_cache_bytes: int = DEFAULT_PROMPT_CACHE_BYTES,
) -> tuple[ServerInfo, subprocess.Popen[bytes]]:
    """Start a server process for registry model ``name`` and wait until it is healthy.

    The caller must hold the model's lock (``ensure_server`` does) or be the only user (``serve``).
    ``prompt_cache``: the prompt-caching server (module docstring) instead of the default one.
    """
    require("llama_cpp.server", extra="local", package="llama-cpp-python[server]")
    _, _, log_path = _paths(name, prompt_cache)
    n_threads = n_threads or min(os.cpu_count() or 2, 8)
    if port is not None and _port_in_use(port):
        raise ServerError(
            f"Port {port} on 127.0.0.1 is already in use. Pick another `--port`, or omit it to use a free one."
        )
    port = port or _free_port()
    cmd = server_command(
        name,
        port=port,
        n_ctx=n_ctx,
        n_threads=n_threads,
        prompt_cache=prompt_cache,
        prompt_cache_bytes=prompt_cache_bytes,
    )
    alias = alias_for(name, prompt_cache)
    log = log_path.open("ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()
    info = ServerInfo(name, alias, "127.0.0.1", port, proc.pid, started_by, n_ctx, n_threads, [], prompt_cache)
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


_OWN_LEASES: set[tuple[str, bool]] = set()


def ensure_server(
    name: str,
    *,
    n_ctx: int = DEFAULT_N_CTX,
    n_threads: int | None = None,
    port: int | None = None,
    prompt_cache: bool = False,
) -> ServerInfo:
    """Return a healthy shared server for ``name``, starting one if none is running; takes a lease.

    ``prompt_cache``: the model's prompt-caching server, a separate one (module docstring).
    """
    get_model(name)
    state_path, lock_path, _ = _paths(name, prompt_cache)
    with FileLock(str(lock_path), timeout=600):
        info = _read_state(state_path)
        # a live server process is reused even when it is slow to answer the health check: llama.cpp
        # serves one request at a time, and a long generation for another process blocks /v1/models
        if info is not None and not _alive(info.pid):
            state_path.unlink(missing_ok=True)
            info = None
        if info is None:
            info, _ = start_server(name, n_ctx=n_ctx, n_threads=n_threads, port=port, prompt_cache=prompt_cache)
        me = os.getpid()
        info.leases = sorted({p for p in info.leases if _alive(p)} | {me})
        _write_state(state_path, info)
    if (name, prompt_cache) not in _OWN_LEASES:
        _OWN_LEASES.add((name, prompt_cache))
        atexit.register(release_server, name, prompt_cache)
    return info


def release_server(name: str, prompt_cache: bool = False) -> None:
    """Drop this process's lease; stop a library-started server when no live lease remains."""
    state_path, lock_path, _ = _paths(name, prompt_cache)
    _OWN_LEASES.discard((name, prompt_cache))
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


def stop_server(name: str, prompt_cache: bool = False) -> bool:
    """Stop the server for ``name`` whatever its leases (used by ``serve`` on exit and by tests)."""
    state_path, lock_path, _ = _paths(name, prompt_cache)
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
    on_ready: Callable[[ServerInfo], None] | None = None,
    prompt_cache: bool = False,
    prompt_cache_bytes: int = DEFAULT_PROMPT_CACHE_BYTES,
) -> ServerInfo:
    """Run a server in the foreground for other processes (``dspy-for serve``); returns when it exits.

    Ctrl-C or SIGTERM stops the server; library processes never stop it (``started_by = "serve"``).
    ``prompt_cache``: serve the prompt-caching server (``local/NAME`` LMs with ``prompt_cache=True`` use it).
    """

    def _on_sigterm(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    _check_prompt_cache_bytes(prompt_cache_bytes)
    state_path, lock_path, _ = _paths(name, prompt_cache)
    with FileLock(str(lock_path), timeout=600):
        existing = _read_state(state_path)
        if existing is not None and _alive(existing.pid) and healthy(existing):
            kind = "prompt-caching server" if prompt_cache else "server"
            raise ServerError(
                f"A {kind} for `{name}` is already running at {existing.base_url} (pid {existing.pid}). "
                "Use it, or stop it first."
            )
        info, proc = start_server(
            name,
            port=port,
            n_ctx=n_ctx,
            n_threads=n_threads,
            started_by="serve",
            prompt_cache=prompt_cache,
            prompt_cache_bytes=prompt_cache_bytes,
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
        stop_server(name, prompt_cache)
    return info
