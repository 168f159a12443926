"""A fault-injecting OpenAI-compatible chat server for tests (127.0.0.1 only, a background thread).

``POST /v1/chat/completions`` answers with ``responder(messages, max_tokens)`` — like
:class:`dspy_for.testing.ScriptedLM`'s responder: a dict of output field values (formatted in DSPy's
ChatAdapter ``[[ ## field ## ]]`` format) or raw text. Answers honour ``max_tokens`` (or
``max_completion_tokens``, which litellm's ``openai/`` route sends) by truncating to that many
whitespace words with ``finish_reason="length"`` (else ``"stop"``), and report ``usage`` like
llama.cpp/vLLM: prompt tokens are the whitespace words of the messages, completion tokens the words
of the answer. ``GET /v1/models`` lists ``test-model``.

Faults (``set_fault(fault, times)``; ``times=None``: every request until changed):

* ``"500"`` / ``"503"``: that status with an OpenAI-style error body (503 says ``Retry-After: 0``);
* ``"stall"``: accept the request and never answer until the client gives up (bounded: at most
  :data:`STALL_SECONDS`, or until the server stops), then close the connection;
* ``"garbage"``: 200 with a body that is not JSON;
* ``"disconnect"``: close the socket without any response;
* ``"echo401"``: 401 whose error message echoes the request's ``Authorization`` header (the API key),
  as some providers do — for tests that keys never reach files.

Example::

    server = FaultServer(lambda messages, max_tokens: {"answer": "36"}).start()
    lm = dspy.LM("openai/test-model", api_base=server.base_url, api_key="sk-test", cache=False)
    server.set_fault("500", times=1)
    ...
    server.stop()
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from dspy.adapters.chat_adapter import ChatAdapter, FieldInfoWithName
from dspy.signatures.field import OutputField

__all__ = ["FAULTS", "IDLE_SECONDS", "STALL_SECONDS", "FaultServer", "Responder", "format_fields"]

#: responder(messages, max_tokens) -> dict of output field values or raw text
Responder = Callable[[list[dict[str, Any]], "int | None"], "dict[str, Any] | str"]

FAULTS = (None, "500", "503", "stall", "garbage", "disconnect", "echo401")
#: the longest a "stall" holds a request before closing it
STALL_SECONDS = 30.0
#: an idle keep-alive connection is closed after this many seconds
IDLE_SECONDS = 30.0
_MAX_BODY = 16 * 1024 * 1024


def format_fields(values: dict[str, Any]) -> str:
    """Output field values in DSPy's ChatAdapter format (``[[ ## name ## ]]`` sections), as ScriptedLM does."""
    fields = {FieldInfoWithName(name=name, info=OutputField()): value for name, value in values.items()}
    return ChatAdapter().format_field_with_value(fields)


def _default_responder(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any] | str:
    return {"reasoning": "3 * 12 = 36", "answer": "36"}


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.1"
    timeout = IDLE_SECONDS  # an idle keep-alive connection is closed after this

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def setup(self) -> None:
        super().setup()
        with self.server.owner._lock:
            self.server.open_connections.add(self.connection)

    def finish(self) -> None:
        with self.server.owner._lock:
            self.server.open_connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    # ------------------------------------------------------------------ helpers

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode()
        self._send_raw(status, body, "application/json", headers)

    def _send_raw(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _read_body(self) -> dict[str, Any]:
        length = min(int(self.headers.get("Content-Length") or 0), _MAX_BODY)
        raw = self.rfile.read(length) if length > 0 else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_unparsed": raw.decode("utf-8", "replace")}
        return body if isinstance(body, dict) else {"_body": body}

    def _drop(self) -> None:
        """Close the connection without writing a response."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _stall(self) -> None:
        """Hold the request until the client gives up (its socket closes), the server stops, or the bound."""
        deadline = time.monotonic() + self.server.owner.stall_seconds
        while time.monotonic() < deadline and not self.server.owner._stopping.is_set():
            try:
                readable, _, _ = select.select([self.connection], [], [], 0.05)
                if readable and not self.connection.recv(1, socket.MSG_PEEK):
                    break  # the client closed its end
            except OSError:
                break
        self._drop()

    # ------------------------------------------------------------------ routes

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._send_json(
                200, {"object": "list", "data": [{"id": "test-model", "object": "model", "owned_by": "dspy-for-tests"}]}
            )
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        owner = self.server.owner
        body = self._read_body()
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        fault = owner._take_fault(body)
        if fault == "500":
            self._send_json(
                500, {"error": {"message": "injected internal server error", "type": "server_error", "code": None}}
            )
        elif fault == "503":
            self._send_json(
                503,
                {"error": {"message": "injected: service unavailable", "type": "server_error", "code": None}},
                headers={"Retry-After": "0"},
            )
        elif fault == "garbage":
            self._send_raw(200, b"<html>this is not JSON {{{", "application/json")
        elif fault == "disconnect":
            self._drop()
        elif fault == "stall":
            self._stall()
        elif fault == "echo401":
            auth = self.headers.get("Authorization", "")
            self._send_json(
                401,
                {
                    "error": {
                        "message": f"Incorrect API key provided: {auth}",
                        "type": "invalid_request_error",
                        "code": "invalid_api_key",
                    }
                },
            )
        else:
            self._answer(body)

    def _answer(self, body: dict[str, Any]) -> None:
        owner = self.server.owner
        messages = [
            {"role": m.get("role"), "content": _content_text(m.get("content"))}
            for m in body.get("messages") or []
            if isinstance(m, dict)
        ]
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
        max_tokens = int(max_tokens) if isinstance(max_tokens, int | float) and max_tokens > 0 else None
        try:
            out = owner.responder(messages, max_tokens)
        except Exception as exc:  # a broken responder is a 500, visible in the test
            self._send_json(500, {"error": {"message": f"responder failed: {exc!r}", "type": "server_error"}})
            return
        text = format_fields(out) if isinstance(out, dict) else str(out)
        words = text.split(" ")
        finish = "stop"
        if max_tokens is not None and len(words) > max_tokens:
            words, finish = words[:max_tokens], "length"
            text = " ".join(words)
        prompt_tokens = sum(len(str(m.get("content") or "").split()) for m in messages)
        completion_tokens = len(words)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        with owner._lock:
            owner.responses.append({"usage": usage, "finish_reason": finish, "text": text})
            n = len(owner.responses)
        self._send_json(
            200,
            {
                "id": f"chatcmpl-test-{n}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": str(body.get("model") or "test-model"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": finish,
                        "logprobs": None,
                    }
                ],
                "usage": usage,
            },
        )


def _content_text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: FaultServer
    open_connections: set[socket.socket]


class FaultServer:
    """An OpenAI-compatible chat server on 127.0.0.1 (free port, background thread) that injects faults."""

    def __init__(self, responder: Responder | None = None, *, stall_seconds: float = STALL_SECONDS) -> None:
        self.responder: Responder = responder or _default_responder
        self.fault: str | None = None
        self.fault_times: int | None = None
        self.requests: list[dict[str, Any]] = []
        #: what each answered request got: {"usage", "finish_reason", "text"} (faulted requests are not here)
        self.responses: list[dict[str, Any]] = []
        self.stall_seconds = float(stall_seconds)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._httpd.open_connections = set()
        host, port = self._httpd.server_address[:2]
        self.host = str(host)
        self.port = int(port)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread: threading.Thread | None = None

    def set_fault(self, fault: str | None, times: int | None = None) -> None:
        """Inject ``fault`` into the next ``times`` requests (None: every request until changed)."""
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; choose one of {FAULTS}")
        if times is not None and (isinstance(times, bool) or not isinstance(times, int) or times < 0):
            raise ValueError(f"times must be None or an integer >= 0, got {times!r}")
        with self._lock:
            self.fault, self.fault_times = fault, times

    def _take_fault(self, body: dict[str, Any]) -> str | None:
        with self._lock:
            self.requests.append(body)
            fault = self.fault
            if fault is None:
                return None
            if self.fault_times is not None:
                if self.fault_times <= 0:
                    self.fault, self.fault_times = None, None
                    return None
                self.fault_times -= 1
                if self.fault_times == 0:
                    self.fault, self.fault_times = None, None
            return fault

    def start(self) -> FaultServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"fault-server-{self.port}",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close every open connection (stalled or idle keep-alive ones too)."""
        self._stopping.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        with self._lock:
            connections = list(self._httpd.open_connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._httpd.server_close()

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
