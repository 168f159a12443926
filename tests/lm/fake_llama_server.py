"""A stand-in ``llama-server`` for tests that need the embedded server's process, not its model.

It takes llama-server's command line (``--port``, ``--alias``, ``--parallel``, ...; ``--version`` prints a version
like llama.cpp's), serves ``/health``, ``/v1/models`` (the alias), ``/metrics`` (llama.cpp's names) and
``/v1/chat/completions`` through :class:`dspy_for.testing.OpenAICompatibleServer`'s handler (DSPy-formatted answers
from :func:`dspy_for.testing.for_responder`, ``system_fingerprint`` like llama.cpp's), and writes what it was asked
to ``$FAKE_LLAMA_LOG``: one JSON line for its command line, then one per chat request body.

Environment: ``FAKE_LLAMA_LATENCY`` (seconds per answer), ``FAKE_LLAMA_FAIL`` (exit 1 while starting, with a line on
stderr), ``FAKE_LLAMA_VERSION`` (the ``--version`` text).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

from dspy_for.testing import for_responder
from dspy_for.testing._handler import Handler, HTTPServer
from dspy_for.testing.server import OpenAICompatibleServer

VERSION = "version: 0.5.0-dev (build 7, commit abc1234)\nbuilt with GNU 12.2.0 for Linux x86_64"
_LOCK = threading.Lock()


def _log(entry: dict[str, Any]) -> None:
    path = os.environ.get("FAKE_LLAMA_LOG")
    if path:
        with _LOCK, open(path, "a") as f:
            f.write(json.dumps(entry) + "\n")


def _flags(argv: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for i, arg in enumerate(argv):
        if arg.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else ""
            out[arg] = "" if nxt.startswith("--") else nxt
    return out


class FakeHandler(Handler):
    def do_GET(self) -> None:
        owner = self.server.owner
        path = self.path.rstrip("/")
        if path == "/health":
            self._send_json(200, {"status": "ok"})
        elif path in ("/v1/models", "/models"):
            self._send_json(200, {"object": "list", "data": [{"id": self.server.alias, "object": "model"}]})
        elif path == "/metrics":
            text = (
                f"llamacpp:requests_processing {owner.in_flight}\n"
                f"llamacpp:max_concurrency_seen {owner.max_concurrency_seen}\n"
                f"llamacpp:tokens_predicted_total {sum(r['usage']['completion_tokens'] for r in owner.responses)}\n"
            )
            self._send_raw(200, text.encode(), "text/plain; version=0.0.4")
        else:
            super().do_GET()

    def _read_body(self) -> dict[str, Any]:
        body = super()._read_body()
        _log({"request": body})
        return body


def main(argv: list[str]) -> int:
    if "--version" in argv:
        print(os.environ.get("FAKE_LLAMA_VERSION", VERSION), file=sys.stderr)
        return 0
    if os.environ.get("FAKE_LLAMA_FAIL"):
        print("error: failed to load model (a fake failure)", file=sys.stderr, flush=True)
        return 1
    flags = _flags(argv)
    _log({"argv": argv})
    owner = OpenAICompatibleServer(
        for_responder(), latency=float(os.environ.get("FAKE_LLAMA_LATENCY", "0")), system_fingerprint="b7-abc1234"
    )
    httpd = HTTPServer((flags.get("--host") or "127.0.0.1", int(flags["--port"])), FakeHandler)
    httpd.owner = owner
    httpd.open_connections = set()
    httpd.alias = flags.get("--alias", "")
    print(f"fake llama-server listening on port {flags['--port']} with {flags.get('--parallel')} slots", flush=True)
    httpd.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
