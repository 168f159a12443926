"""Scripted LMs for deterministic tests of programs built with dspy-for (also useful in your own tests).

:class:`ScriptedLM` answers each call with a function of the messages, like a real LM behind DSPy's
adapters: it reports token usage (whitespace words), honours ``max_tokens`` (truncating and reporting
``finish_reason="length"``), records every call in ``calls``, takes ``delay`` seconds per call when asked (to
test timing), and works with :func:`dspy_for.track_usage` (which records every LM's calls) and, with
``cache=True``, with DSPy's cache (a cache hit takes no delay: the LM is not called).

:class:`OpenAICompatibleServer` (alias ``FaultServer``, in :mod:`dspy_for.testing.server`) serves the same kind of
responder over HTTP on 127.0.0.1, like a remote endpoint: latency, a concurrency limit answered with 429 and
``Retry-After``, injected faults, and reasoning models that refuse a temperature and spend reasoning tokens. It is
imported on first use: ``import dspy_for.testing`` starts nothing and imports no server module.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dspy.clients.engines.dummy_engine import AsyncDummyEngine, DummyEngine
from dspy.lm15 import Message, Response, TextPart, Usage
from dspy.utils.dummies import DummyLM

from dspy_for.errors import ConfigError
from dspy_for.lm.epochs import epoch_kwargs
from dspy_for.modules.for_signatures import DEBATER_INSTRUCTIONS, REVISE_INSTRUCTIONS

if TYPE_CHECKING:
    from dspy_for.testing.server import FaultServer, OpenAICompatibleServer

__all__ = [
    "FaultServer",
    "OpenAICompatibleServer",
    "Responder",
    "ScriptedLM",
    "for_responder",
    "system_text",
    "user_text",
]

_SERVER_NAMES = ("FaultServer", "OpenAICompatibleServer")


def __getattr__(name: str) -> Any:
    """The HTTP test server, imported on first use (``import dspy_for.testing`` loads no server code)."""
    if name in _SERVER_NAMES:
        from dspy_for.testing import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: responder(messages, max_tokens) -> dict of output field values (formatted like a model would) or raw text
Responder = Callable[[list[dict[str, Any]], "int | None"], "dict[str, Any] | str"]


def system_text(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")


def user_text(messages: list[dict[str, Any]]) -> str:
    return str(messages[-1].get("content", "")) if messages else ""


def for_responder(
    answer: str = "27",
    *,
    reasoning: str = "3 * 12 = 36; 36 - 9 = 27",
    questions: Sequence[str] = ("How did you get 27?",),
) -> Responder:
    """A responder that plays every FOR-Prompting role with one fixed ``answer``: the Debater asks ``questions``,
    the Defender's revision re-checks and keeps ``answer``, and every other call (the Defender's first answer,
    the Host, CoT, self-consistency's samples) gives ``reasoning`` and ``answer``."""
    debater = DEBATER_INSTRUCTIONS.split(".")[0]  # "You are the Debater" (also the free Debater's)
    revise = REVISE_INSTRUCTIONS.splitlines()[0]

    def respond(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any]:
        sys_text = system_text(messages)
        if debater in sys_text:
            return {"questions": list(questions)}
        if revise in sys_text:
            kept = {"responses": ["I re-checked."], "error_found": "False", "error": "none"}
            return {**kept, "reasoning": reasoning, "answer": answer}
        return {"reasoning": reasoning, "answer": answer}

    return respond


def _request_messages(request: Any) -> list[dict[str, Any]]:
    msgs = []
    if request.system is not None:
        system = request.system if isinstance(request.system, str) else "".join(p.text for p in request.system)
        msgs.append({"role": "system", "content": system})
    msgs.extend({"role": m.role, "content": m.text or ""} for m in request.messages)
    return msgs


class _ScriptedEngine(DummyEngine):
    complete_legacy = None  # use DSPy's canonical request path (the legacy shortcut is deprecated)

    def complete(self, request: Any) -> Response:
        if self.owner.delay:
            time.sleep(self.owner.delay)
        return self._respond(_request_messages(request), getattr(request.config, "max_tokens", None))

    def _respond(self, messages: list[dict[str, Any]], max_tokens: int | None) -> Response:
        owner: ScriptedLM = self.owner
        owner.calls.append({"messages": messages, "max_tokens": max_tokens})
        out = owner.responder(messages, max_tokens)
        text = owner._format_answer_fields(out) if isinstance(out, dict) else str(out)
        words = text.split(" ")
        finish = "stop"
        if max_tokens is not None and len(words) > max_tokens:
            text, finish = " ".join(words[:max_tokens]), "length"
            words = words[:max_tokens]
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in messages)
        return Response(
            id=None,
            model="scripted",
            message=Message.assistant([TextPart(text)]),
            finish_reason=finish,
            usage=Usage(input_tokens=prompt_tokens, output_tokens=len(words), total_tokens=prompt_tokens + len(words)),
        )


class _AsyncScriptedEngine(AsyncDummyEngine):
    complete_legacy = None

    async def complete(self, request: Any) -> Response:
        sync: _ScriptedEngine = self.sync
        if sync.owner.delay:
            await asyncio.sleep(sync.owner.delay)  # other tasks run meanwhile, as with a real server
        return sync._respond(_request_messages(request), getattr(request.config, "max_tokens", None))


class ScriptedLM(DummyLM):
    """A deterministic LM driven by ``responder(messages, max_tokens)``; each call takes ``delay`` seconds (0: none).

    Example::

        lm = ScriptedLM(lambda msgs, max_tokens: {"reasoning": "2+2=4", "answer": "4"})
    """

    def __init__(
        self, responder: Responder, *, cache: bool = False, model: str = "scripted", delay: float = 0.0
    ) -> None:
        if delay < 0:
            raise ConfigError(f"`delay` is the seconds each call takes: pass 0 or more (got {delay}).")
        super().__init__([])
        self.model = model
        self.delay = delay
        self.responder = responder
        self.calls: list[dict[str, Any]] = []
        self.cache = cache
        self._cache_responses = cache
        self._install_engine()

    def _install_engine(self) -> None:
        engine = _ScriptedEngine(self)
        self._engine_spec = engine
        self._async_engine_spec = _AsyncScriptedEngine(engine)

    def __call__(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        # each epoch of an item its own sample and cache entry, as with the LMs dspy-for builds
        return super().__call__(prompt, messages=messages, **epoch_kwargs(self, kwargs))

    async def acall(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        return await super().acall(prompt, messages=messages, **epoch_kwargs(self, kwargs))

    def copy(self, **kwargs: Any) -> ScriptedLM:
        copied = super().copy(**kwargs)
        copied.calls = self.calls  # copies share the call log, as they share the responder
        copied._install_engine()
        return copied
