"""``dspy-for ui``: the MLflow UI on the project's tracking store, safe to start on an offline machine.

A bare ``mlflow ui`` / ``mlflow server`` never answers offline: at start-up it imports litellm from inside
an MLflow post-import hook, litellm's failed model-cost-map download starts a retry thread whose logging
re-imports litellm, and the two threads deadlock on MLflow's import-hook lock and a module import lock
(see :mod:`dspy_for._offline`). :func:`serve_ui` runs ``python -m mlflow server`` as a child process with
:data:`UI_ENV` (litellm's bundled cost map, no MLflow telemetry, no background job runner), waits until it
answers, and on Ctrl-C / SIGTERM stops the child's whole process group.

The store is ``--tracking-uri``, else ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlruns/mlflow.db`` (artifacts
in ``mlruns/artifacts``), like every other command. A file store that does not exist yet is an error
(it says to run ``dspy-for compare`` first) rather than a new empty store, so running from the wrong
directory cannot silently show an empty UI. MLflow is never imported in this process.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlparse

from dspy_for._offline import OFFLINE_ENV, QUIET_ENV
from dspy_for.errors import DspyForError
from dspy_for.experiments.tracking.store import default_tracking_uri

__all__ = ["UI_ENV", "UIError", "mlflow_server_command", "port_in_use", "resolve_store", "serve_ui", "ui_environment"]

#: Set (forced) in the server's environment: without it ``mlflow server`` deadlocks offline at start-up.
UI_FORCED_ENV: dict[str, str] = dict(OFFLINE_ENV)
#: Defaults for the server's environment (a value already in the environment wins):
#: no usage telemetry sent to MLflow, and no job runner (7 huey consumer processes for GenAI scorer
#: jobs, which call hosted LMs; it also triples the start-up time on 2 cores). Set
#: ``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=true`` to get it back.
UI_DEFAULT_ENV: dict[str, str] = {**QUIET_ENV, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
UI_ENV: dict[str, str] = {**UI_DEFAULT_ENV, **UI_FORCED_ENV}

STOP_GRACE_SECONDS = 8.0


class UIError(DspyForError):
    """The MLflow UI could not be started: no store, a busy port, or a server that did not come up."""


def ui_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of the ``mlflow server`` child: ``base`` (default ``os.environ``) plus :data:`UI_ENV`."""
    env = dict(os.environ if base is None else base)
    for key, value in UI_DEFAULT_ENV.items():
        env.setdefault(key, value)
    env.update(UI_FORCED_ENV)
    return env


def resolve_store(tracking_uri: str | None = None) -> tuple[str, str | None]:
    """Return ``(backend_store_uri, default_artifact_root)`` for the UI, or raise :class:`UIError`.

    A relative SQLite path is made absolute (against the current directory) and must exist; its
    artifact root is ``<db dir>/artifacts`` as in :func:`~dspy_for.experiments.tracking.setup_tracking`.
    """
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()
    how = (
        "`--tracking-uri`"
        if tracking_uri
        else ("$MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI") else "the default store")
    )
    create_hint = (
        "Run an experiment first to create it, e.g. `dspy-for compare experiments/quickstart.toml` "
        "from the project directory, or pass `--tracking-uri` of an existing store."
    )
    scheme = urlparse(uri).scheme.lower()
    if scheme in ("http", "https"):
        raise UIError(f"{how} `{uri}` is an MLflow server already: open it in a browser instead of `dspy-for ui`.")
    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///") :])
        if not db.is_file():
            raise UIError(f"No MLflow store at `{db}` ({how} `{uri}`, in {Path.cwd()}). {create_hint}")
        db = db.resolve()
        return f"sqlite:///{db.as_posix()}", (db.parent / "artifacts").as_uri()
    if scheme in ("", "file"):
        store = Path(urlparse(uri).path if scheme == "file" else uri)
        if not store.is_dir():
            raise UIError(f"No MLflow file store at `{store}` ({how} `{uri}`). {create_hint}")
        return store.resolve().as_uri(), None
    return uri, None  # postgresql://, mysql://, ...: MLflow reports a bad one itself


def port_in_use(host: str, port: int) -> bool:
    """True if something already listens on ``host:port`` (an address that cannot be bound is a UIError)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UIError(f"`--host` {host!r} is not an address of this machine: {exc}.") from exc
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: TIME_WAIT is not "in use"
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise UIError(f"Cannot listen on {host}:{port}: {exc.strerror or exc}.") from exc
    return False


def mlflow_server_command(
    backend_store_uri: str, artifact_root: str | None, host: str, port: int, workers: int = 1
) -> list[str]:
    """The ``python -m mlflow server`` command line (one worker: a personal viewer on a small machine)."""
    cmd = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        backend_store_uri,
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        str(workers),
    ]
    if artifact_root:
        cmd += ["--default-artifact-root", artifact_root]
    return cmd


def _browse_host(host: str) -> str:
    """Where a browser on this machine reaches a server bound to ``host``."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def _answers(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via $http_proxy
    try:
        with opener.open(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - a recycled group id of someone else
        return False
    return True


def _stop(proc: subprocess.Popen[bytes], grace: float = STOP_GRACE_SECONDS) -> None:
    """SIGTERM the server's process group (uvicorn, its workers, any job runner), SIGKILL what outlives ``grace``."""
    if os.name != "posix":  # pragma: no cover - no process groups
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return
    pgid = proc.pid  # start_new_session=True: the child leads its own group
    if _group_alive(pgid):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(max(0.0, deadline - time.monotonic()))
    while _group_alive(pgid) and time.monotonic() < deadline:
        proc.poll()  # reap our child so that a zombie does not count as alive
        time.sleep(0.1)
    if _group_alive(pgid):
        os.killpg(pgid, signal.SIGKILL)
    proc.wait()


def serve_ui(
    tracking_uri: str | None = None,
    port: int = 5000,
    host: str = "127.0.0.1",
    ready_timeout: float = 120.0,
    workers: int = 1,
    echo: Callable[[str], None] | None = None,
) -> int:
    """Serve the MLflow UI until Ctrl-C / SIGTERM; return the exit code (0 after a requested stop).

    Raises :class:`UIError` (before starting anything) for a missing store, a busy port or a bad host,
    and after stopping the child if it exits or does not answer within ``ready_timeout`` seconds.
    ``echo`` receives the progress lines (default: print to stderr).
    """
    say = echo or (lambda line: print(line, file=sys.stderr, flush=True))
    if not 0 < port < 65536:
        raise UIError(f"`--port` must be between 1 and 65535, got {port}.")
    store, artifact_root = resolve_store(tracking_uri)
    if port_in_use(host, port):
        raise UIError(
            f"Port {port} on {host} is already in use (another `dspy-for ui` or `mlflow ui`?). "
            f"Stop that process or pick another port with `--port`, e.g. `--port {port + 1}`."
        )
    url = f"http://{_browse_host(host)}:{port}/"

    stop = threading.Event()
    previous: dict[signal.Signals, Any] = {}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, on_signal)
    say(f"starting the MLflow UI on {store} …")
    started = time.monotonic()
    proc = subprocess.Popen(
        mlflow_server_command(store, artifact_root, host, port, workers),
        env=ui_environment(),
        stdin=subprocess.DEVNULL,
        start_new_session=os.name == "posix",
    )
    try:
        while not _answers(url):
            if stop.is_set():
                say("stopping before the UI answered")
                return 0
            if proc.poll() is not None:
                raise UIError(
                    f"`mlflow server` exited with code {proc.returncode} before answering (its output is above)."
                )
            if time.monotonic() - started > ready_timeout:
                raise UIError(f"The MLflow UI did not answer at {url} within {ready_timeout:.0f} s.")
            stop.wait(0.25)
        say(f"MLflow UI at {url} (answered after {time.monotonic() - started:.1f} s; Ctrl-C stops it)")
        while not stop.wait(0.5):
            if proc.poll() is not None:
                say(f"`mlflow server` exited with code {proc.returncode}")
                return proc.returncode or 1
        say("stopping the MLflow UI …")
        return 0
    finally:
        _stop(proc)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
