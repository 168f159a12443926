"""The HTTP side of :class:`dspy_for.testing.server.OpenAICompatibleServer`: routes, faults, answers, error bodies."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from dspy.adapters.chat_adapter import ChatAdapter, FieldInfoWithName
from dspy.signatures.field import OutputField

#: responder(messages, max_tokens) -> dict of output field values or raw text (as dspy_for.testing.Responder)
Responder = Callable[[list[dict[str, Any]], "int | None"], "dict[str, Any] | str"]

_MAX_BODY = 16 * 1024 * 1024
#: an idle keep-alive connection is closed after this many seconds
IDLE_SECONDS = 30.0
_CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
#: Anthropic's answer when it is overloaded (HTTP 529)
OVERLOADED_BODY = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def format_fields(values: dict[str, Any]) -> str:
    """Output field values in DSPy's ChatAdapter format (``[[ ## name ## ]]`` sections), as ScriptedLM does."""
    fields = {FieldInfoWithName(name=name, info=OutputField()): value for name, value in values.items()}
    return ChatAdapter().format_field_with_value(fields)


def default_responder(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any] | str:
    return {"reasoning": "3 * 12 = 36", "answer": "36"}


def openai_error(message: str, type_: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def reasoning_refusal(body: dict[str, Any]) -> dict[str, Any] | None:
    """OpenAI's 400 body for a request a reasoning model refuses (a temperature but 1, or ``max_tokens``), or None."""
    temperature = body.get("temperature")
    if isinstance(temperature, int | float) and not isinstance(temperature, bool) and temperature != 1:
        return openai_error(
            f"Unsupported value: 'temperature' does not support {float(temperature)} with this model. "
            "Only the default (1) value is supported.",
            "invalid_request_error",
            code="unsupported_value",
            param="temperature",
        )
    if body.get("max_tokens") is not None:
        return openai_error(
            "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
            "invalid_request_error",
            code="unsupported_parameter",
            param="max_tokens",
        )
    return None


def seconds_text(seconds: float) -> str:
    """A ``Retry-After`` value as given: 1.0 -> "1", 0.5 -> "0.5"."""
    return str(int(seconds)) if float(seconds).is_integer() else str(seconds)


def _budget(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None


def _content_text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


class Handler(BaseHTTPRequestHandler):
    server: HTTPServer
    protocol_version = "HTTP/1.1"
    timeout = IDLE_SECONDS  # an idle keep-alive connection is closed after this
    _admitted = False  # this request counts in the server's in-flight requests

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def setup(self) -> None:
        super().setup()
        # an answer goes out as a few writes (headers, body, chunks): sent at once, not held back by Nagle's
        # algorithm until the client's delayed ACK (~40 ms per answer)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.owner._lock:
            self.server.open_connections.add(self.connection)

    def finish(self) -> None:
        with self.server.owner._lock:
            self.server.open_connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    # ------------------------------------------------------------------ helpers

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._send_raw(status, json.dumps(payload).encode(), "application/json", headers)

    def _send_raw(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status, "Overloaded" if status == 529 else None)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self._release()  # before the client can read the answer (and send its next request)
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
        owner = self.server.owner
        deadline = time.monotonic() + owner.stall_seconds
        while time.monotonic() < deadline and not owner._stopping.is_set():
            try:
                readable, _, _ = select.select([self.connection], [], [], 0.05)
                if readable and not self.connection.recv(1, socket.MSG_PEEK):
                    break  # the client closed its end
            except OSError:
                break
        self._drop()

    def _send_rate_limited(self, model: str) -> None:
        owner = self.server.owner
        owner._count_rate_limited()
        retry = seconds_text(owner.retry_after)
        limit = f" on requests in flight: Limit {owner.max_in_flight}" if owner.max_in_flight is not None else ""
        message = f"Rate limit reached for {model}{limit}. Please try again in {retry}s."
        self._send_json(429, openai_error(message, "requests", "rate_limit_exceeded"), {"Retry-After": retry})

    # ------------------------------------------------------------------ routes

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            names = ["test-model", *sorted(self.server.owner.reasoning_models)]
            data = [{"id": n, "object": "model", "owned_by": "dspy-for-tests"} for n in names]
            self._send_json(200, {"object": "list", "data": data})
        else:
            self._send_json(404, openai_error(f"no route {self.path}", "not_found"))

    def do_POST(self) -> None:
        owner = self.server.owner
        body = self._read_body()
        if self.path.rstrip("/") not in _CHAT_PATHS:
            self._send_json(404, openai_error(f"no route {self.path}", "not_found"))
            return
        model = str(body.get("model") or "test-model")
        if not owner._admit(body):
            self._send_rate_limited(model)
            return
        self._admitted = True
        try:
            self._chat(body, model)
        finally:
            self._release()

    def _release(self) -> None:
        """No longer in flight: the answer is about to go out (or none will)."""
        if self._admitted:
            self._admitted = False
            self.server.owner._leave()

    def _chat(self, body: dict[str, Any], model: str) -> None:
        owner = self.server.owner
        fault = owner._take_fault()
        if fault is not None:
            self._send_fault(fault, model)
            return
        reasoning = owner.is_reasoning_model(model)
        refusal = reasoning_refusal(body) if reasoning else None
        if refusal is not None:
            self._send_json(400, refusal)
            return
        if owner.latency > 0 and owner._stopping.wait(owner.latency):
            self._drop()  # the server stopped while this request waited
            return
        self._answer(body, model, reasoning)

    def _send_fault(self, fault: str, model: str) -> None:
        if fault == "500":
            self._send_json(500, openai_error("injected internal server error", "server_error"))
        elif fault == "503":
            self._send_json(
                503, openai_error("injected: service unavailable", "server_error"), headers={"Retry-After": "0"}
            )
        elif fault == "429":
            self._send_rate_limited(model)
        elif fault == "overloaded":
            self._send_json(529, OVERLOADED_BODY)
        elif fault == "garbage":
            self._send_raw(200, b"<html>this is not JSON {{{", "application/json")
        elif fault == "disconnect":
            self._drop()
        elif fault == "stall":
            self._stall()
        elif fault == "echo401":
            auth = self.headers.get("Authorization", "")
            message = f"Incorrect API key provided: {auth}"
            self._send_json(401, openai_error(message, "invalid_request_error", "invalid_api_key"))

    def _answer(self, body: dict[str, Any], model: str, reasoning: bool) -> None:
        owner = self.server.owner
        messages = [
            {"role": m.get("role"), "content": _content_text(m.get("content"))}
            for m in body.get("messages") or []
            if isinstance(m, dict)
        ]
        budget = _budget(body.get("max_tokens")) or _budget(body.get("max_completion_tokens"))
        owner._answering.request = body
        try:
            out = owner.responder(messages, budget)
        except Exception as exc:  # a broken responder is a 500, visible in the test
            self._send_json(500, openai_error(f"responder failed: {exc!r}", "server_error"))
            return
        finally:
            owner._answering.request = None
        text = format_fields(out) if isinstance(out, dict) else str(out)
        words = text.split(" ")
        # a reasoning model thinks first: its reasoning tokens come out of the same completion budget
        thought = owner.reasoning_tokens_per_call if reasoning else 0
        if budget is not None:
            thought = min(thought, budget)
        finish = "stop"
        if budget is not None and len(words) > budget - thought:
            words, finish = words[: budget - thought], "length"
            text = " ".join(words)
        prompt_tokens = sum(len(str(m.get("content") or "").split()) for m in messages)
        completion_tokens = len(words) + thought
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if reasoning:
            usage["completion_tokens_details"] = {"reasoning_tokens": thought}
        n = owner._record_response({"usage": usage, "finish_reason": finish, "text": text})
        head = {"id": f"chatcmpl-test-{n}", "created": int(time.time()), "model": owner.model_snapshot or model}
        if owner.system_fingerprint is not None:
            head["system_fingerprint"] = owner.system_fingerprint
        if body.get("stream") is True:
            options = body.get("stream_options")
            with_usage = isinstance(options, dict) and options.get("include_usage") is True
            self._send_stream(head, words, finish, usage if with_usage else None)
            return
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
        self._send_json(
            200, {**head, "object": "chat.completion", "choices": [{**choice, "logprobs": None}], "usage": usage}
        )

    def _send_stream(self, head: dict[str, Any], words: list[str], finish: str, usage: dict[str, Any] | None) -> None:
        """The answer as OpenAI's server-sent events: a role chunk, one content chunk per word, a chunk with the
        finish reason, a usage chunk (``stream_options.include_usage``), then ``data: [DONE]``."""
        chunk = {**head, "object": "chat.completion.chunk"}

        def event(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            return {
                **chunk,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
            }

        events = [event({"role": "assistant", "content": ""})]
        events += [event({"content": w if i == 0 else f" {w}"}) for i, w in enumerate(words)]
        events.append(event({}, finish))
        if usage is not None:
            events.append({**chunk, "choices": [], "usage": usage})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self._release()  # before the client can read the answer (and send its next request)
        self.end_headers()
        for data in [*(json.dumps(e) for e in events), "[DONE]"]:
            self._write_chunk(f"data: {data}\n\n".encode())
        self._write_chunk(b"")  # the end of the chunked body
        self.wfile.flush()

    def _write_chunk(self, data: bytes) -> None:
        """One HTTP/1.1 chunk (an empty one ends the body)."""
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


class HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256  # many clients connect at once (socketserver's 5 drops SYNs: 1 s client retries)
    owner: Any  # the OpenAICompatibleServer this serves (not imported: the server module imports this one)
    open_connections: set[socket.socket]
