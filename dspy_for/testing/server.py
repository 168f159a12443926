"""An OpenAI-compatible chat server that behaves like a remote endpoint, for tests and benchmarks (127.0.0.1 only).

``POST /v1/chat/completions`` answers with ``responder(messages, max_tokens)`` (which may read the
whole request: :meth:`OpenAICompatibleServer.current_request`) — like
:class:`dspy_for.testing.ScriptedLM`'s responder: a dict of output field values (formatted in DSPy's
ChatAdapter ``[[ ## field ## ]]`` format) or raw text. Answers honour ``max_tokens`` (or
``max_completion_tokens``, which DSPy and litellm's ``openai/`` route send) by truncating to that many
whitespace words with ``finish_reason="length"`` (else ``"stop"``), and report ``usage`` like
llama.cpp/vLLM: prompt tokens are the whitespace words of the messages, completion tokens the words
of the answer. The request's ``model`` is echoed, unless ``model_snapshot`` names the model that answers (as a hosted
model answers with its dated snapshot, e.g. ``gpt-4.1-mini-2025-04-14``); ``system_fingerprint``, when set, is
returned with every answer (and every stream chunk), as OpenAI returns the backend configuration that served it. Both
are attributes that can change between two runs. ``GET /v1/models`` lists ``test-model`` (and the reasoning models).
A request with ``"stream": true`` is answered with OpenAI's server-sent events (``text/event-stream``): chat
completion chunks ``data: {...}`` (the role, then one chunk per word of the same answer, then the finish reason; with
``stream_options.include_usage``, a last chunk with ``usage`` and no choices), then ``data: [DONE]``.

Like a remote endpoint (constructor options, all off by default):

* ``latency``: each answer waits that many seconds (errors, refusals and 429s come at once);
* ``max_in_flight``: a chat request arriving while that many are being handled (latency included) gets 429 with
  ``Retry-After: <retry_after>`` and OpenAI's ``rate_limit_exceeded`` body;
* ``reasoning_models``: model names (as sent, or without a ``provider/`` prefix) answered like OpenAI's reasoning
  models: a ``temperature`` other than 1 or any ``max_tokens`` is refused with OpenAI's 400 body; each answer spends
  ``reasoning_tokens_per_call`` reasoning tokens, counted in ``usage.completion_tokens`` and in
  ``usage.completion_tokens_details.reasoning_tokens``; ``max_completion_tokens`` covers reasoning and visible text
  (the visible words are cut to what is left, ``finish_reason="length"``).

Faults (``set_fault(fault, times)``; ``times=None``: every request until changed):

* ``"500"`` / ``"503"``: that status with an OpenAI-style error body (503 says ``Retry-After: 0``);
* ``"429"``: 429 with ``Retry-After: <retry_after>``, whatever the load (``times=None``: a rate-limit storm);
* ``"overloaded"``: 529 with Anthropic's ``overloaded_error`` body. A retryable error both ways: ``dspy.LM``
  (DSPy 3.4's own engine) raises every 5xx as ``LMServerError`` and a 429 as ``LMRateLimitError`` (its ``retry_after``
  read from ``Retry-After``), and retries both under ``num_retries``, waiting ``Retry-After`` or else 2**attempt s;
  litellm's ``openai/`` route raises a 529 as ``litellm.APIError`` with ``status_code=529`` (its ``anthropic/`` route
  as ``litellm.InternalServerError``) and retries it (``litellm._should_retry``: 408, 409, 429 and every status
  >= 500). A 400 (``LMInvalidRequestError``, ``litellm.BadRequestError``) is retried by neither;
* ``"stall"``: accept the request and never answer until the client gives up (bounded: at most
  :data:`STALL_SECONDS`, or until the server stops), then close the connection;
* ``"garbage"``: 200 with a body that is not JSON;
* ``"disconnect"``: close the socket without any response;
* ``"echo401"``: 401 whose error message echoes the request's ``Authorization`` header (the API key),
  as some providers do — for tests that keys never reach files.

Counters (thread-safe; ``reset_counters()`` clears them): ``requests`` (every chat request body received),
``responses`` (what each answered request got), ``rate_limited`` (429s sent, by the limit or the fault),
``max_concurrency_seen`` (the most chat requests handled at once, latency included; those refused by
``max_in_flight`` are not handled, so with a limit it is at most the limit), ``in_flight`` (being handled now) and
``busy_seconds`` (from the first chat request received to the last answer sent: how long the calls took, without
the client's start-up and wrap-up).

Example::

    server = OpenAICompatibleServer(lambda messages, max_tokens: {"answer": "36"}, latency=0.5, max_in_flight=4)
    with server:
        lm = dspy.LM("openai/test-model", api_base=server.base_url, api_key="sk-test", cache=False)
        server.set_fault("500", times=1)
        ...
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Collection
from typing import Any

from dspy_for.testing._handler import IDLE_SECONDS, Handler, HTTPServer, Responder, default_responder, format_fields

__all__ = [
    "FAULTS",
    "IDLE_SECONDS",
    "STALL_SECONDS",
    "FaultServer",
    "OpenAICompatibleServer",
    "Responder",
    "format_fields",
]

FAULTS = (None, "500", "503", "429", "overloaded", "stall", "garbage", "disconnect", "echo401")
#: the longest a "stall" holds a request before closing it
STALL_SECONDS = 30.0


class OpenAICompatibleServer:
    """An OpenAI-compatible chat server on 127.0.0.1 (free port, background thread) that behaves like a remote
    endpoint (latency, a concurrency limit, reasoning models) and injects faults; see the module's docstring."""

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        stall_seconds: float = STALL_SECONDS,
        latency: float = 0.0,
        max_in_flight: int | None = None,
        retry_after: float = 1.0,
        reasoning_models: Collection[str] = (),
        reasoning_tokens_per_call: int = 64,
        model_snapshot: str | None = None,
        system_fingerprint: str | None = None,
    ) -> None:
        if latency < 0 or retry_after < 0 or stall_seconds < 0:
            raise ValueError("latency, retry_after and stall_seconds are seconds: pass 0 or more")
        if max_in_flight is not None and (not _is_int(max_in_flight) or max_in_flight < 1):
            raise ValueError(f"max_in_flight must be None or an integer >= 1, got {max_in_flight!r}")
        if not _is_int(reasoning_tokens_per_call) or reasoning_tokens_per_call < 0:
            raise ValueError(f"reasoning_tokens_per_call must be an integer >= 0, got {reasoning_tokens_per_call!r}")
        if isinstance(reasoning_models, str):
            raise ValueError("reasoning_models is a collection of model names, not one string")
        self.responder: Responder = responder or default_responder
        self.stall_seconds = float(stall_seconds)
        self.latency = float(latency)
        self.max_in_flight = max_in_flight
        self.retry_after = float(retry_after)
        self.reasoning_models = frozenset(reasoning_models)
        self.reasoning_tokens_per_call = int(reasoning_tokens_per_call)
        #: the ``model`` every answer names (None: the request's, echoed)
        self.model_snapshot = model_snapshot
        #: the ``system_fingerprint`` every answer carries (None: none)
        self.system_fingerprint = system_fingerprint
        self.fault: str | None = None
        self.fault_times: int | None = None
        #: every chat request body received (rate-limited and faulted ones too)
        self.requests: list[dict[str, Any]] = []
        #: what each answered request got: {"usage", "finish_reason", "text"} (faulted requests are not here)
        self.responses: list[dict[str, Any]] = []
        #: 429s sent (by ``max_in_flight`` or the "429" fault)
        self.rate_limited = 0
        #: the most chat requests handled at once (a request refused by ``max_in_flight`` is not handled)
        self.max_concurrency_seen = 0
        self._in_flight = 0
        self._first_request: float | None = None
        self._last_response: float | None = None
        self._lock = threading.Lock()
        self._answering = threading.local()  # the request each handler thread is answering
        self._stopping = threading.Event()
        self._httpd = HTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.owner = self
        self._httpd.open_connections = set()
        host, port = self._httpd.server_address[:2]
        self.host = str(host)
        self.port = int(port)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ faults and counters

    def set_fault(self, fault: str | None, times: int | None = None) -> None:
        """Inject ``fault`` into the next ``times`` requests (None: every request until changed)."""
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; choose one of {FAULTS}")
        if times is not None and (not _is_int(times) or times < 0):
            raise ValueError(f"times must be None or an integer >= 0, got {times!r}")
        with self._lock:
            self.fault, self.fault_times = fault, times

    @property
    def in_flight(self) -> int:
        """Chat requests being handled now (admitted, not yet answered)."""
        with self._lock:
            return self._in_flight

    @property
    def busy_seconds(self) -> float | None:
        """Seconds from the first chat request received to the last answer sent since the last reset (None: no
        answer yet)."""
        with self._lock:
            if self._first_request is None or self._last_response is None:
                return None
            return self._last_response - self._first_request

    def reset_counters(self) -> None:
        """Empty ``requests`` and ``responses``; ``rate_limited`` to 0, ``max_concurrency_seen`` to ``in_flight``,
        ``busy_seconds`` to None."""
        with self._lock:
            self.requests.clear()
            self.responses.clear()
            self.rate_limited = 0
            self.max_concurrency_seen = self._in_flight
            self._first_request = self._last_response = None

    def current_request(self) -> dict[str, Any] | None:
        """Inside a responder: the body of the request it is answering (its ``model``, ``temperature``, ...); else
        None."""
        request: dict[str, Any] | None = getattr(self._answering, "request", None)
        return request

    def is_reasoning_model(self, model: str) -> bool:
        """Whether ``model`` (a request's ``model`` field) is served like an OpenAI reasoning model."""
        names = self.reasoning_models
        return bool(names) and (
            model in names or model.partition("/")[2] in names or model in {n.partition("/")[2] for n in names}
        )

    def _admit(self, body: dict[str, Any]) -> bool:
        """Record a chat request; False if ``max_in_flight`` are already being handled (answer 429)."""
        with self._lock:
            self.requests.append(body)
            if self._first_request is None:
                self._first_request = time.monotonic()
            if self.max_in_flight is not None and self._in_flight >= self.max_in_flight:
                return False
            self._in_flight += 1
            self.max_concurrency_seen = max(self.max_concurrency_seen, self._in_flight)
            return True

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _count_rate_limited(self) -> None:
        with self._lock:
            self.rate_limited += 1

    def _record_response(self, response: dict[str, Any]) -> int:
        with self._lock:
            self.responses.append(response)
            self._last_response = time.monotonic()
            return len(self.responses)

    def _take_fault(self) -> str | None:
        with self._lock:
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

    # ------------------------------------------------------------------ life cycle

    def start(self) -> OpenAICompatibleServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"openai-compatible-server-{self.port}",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close every open connection (stalled, waiting or idle keep-alive ones too)."""
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

    def __enter__(self) -> OpenAICompatibleServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


#: the name the conformance tests have always used
FaultServer = OpenAICompatibleServer


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
