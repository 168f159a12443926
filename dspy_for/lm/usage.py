"""Per-role usage accounting: LM calls, tokens spent, tokens served from cache, wall time.

DSPy's own usage tracker drops cache hits and only knows model names. dspy-for needs, for every
method result, the cost *per role* (defender, debater, task, feedback, ...) with cache hits counted
apart, because comparisons put cost beside accuracy and sweeps measure what the cache saved.

How it works:

* :func:`track_usage` opens a collector; every LM call made inside it (also in threads started by
  ``dspy.Parallel`` / ``dspy.Evaluate``, which copy DSPy's context) is recorded into every open
  collector, so a module's own per-call usage and an experiment's grand total are both exact.
* :func:`role` names the role of the calls made inside it; modules wrap each role predictor call.
* LMs record calls through :class:`UsageRecordingMixin`. ``dspy_for.make_lm`` returns LMs that have
  it; :class:`RecordingDummyLM` is the scripted test LM with it.

Example::

    with track_usage() as usage, role("defender"):
        program(question="...")
    usage.total.completion_tokens
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import dspy
from dspy.utils.dummies import DummyLM

__all__ = [
    "DEFAULT_ROLE",
    "CallRecord",
    "RecordingDummyLM",
    "RoleUsage",
    "Usage",
    "UsageRecordingMixin",
    "current_role",
    "role",
    "track_usage",
]

DEFAULT_ROLE = "lm"
_COLLECTORS_KEY = "dspy_for_usage_collectors"
_ROLE_KEY = "dspy_for_role"


@dataclass
class RoleUsage:
    """Counters for one role (or the total)."""

    calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0
    cached_completion_tokens: int = 0
    wall_time: float = 0.0

    @property
    def tokens(self) -> int:
        """Tokens spent (prompt + completion) on calls that were not cache hits."""
        return self.prompt_tokens + self.completion_tokens

    @property
    def cached_tokens(self) -> int:
        """Tokens that a cache hit served instead of the LM."""
        return self.cached_prompt_tokens + self.cached_completion_tokens

    @property
    def served_tokens(self) -> int:
        """All tokens the role saw: spent plus served from cache (what a cold run would cost)."""
        return self.tokens + self.cached_tokens

    def add(self, other: RoleUsage) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def to_dict(self) -> dict[str, float]:
        d: dict[str, float] = asdict(self)
        d["tokens"] = self.tokens
        d["cached_tokens"] = self.cached_tokens
        return d


@dataclass(frozen=True)
class CallRecord:
    """One LM call as seen by the usage layer."""

    role: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cache_hit: bool
    finish_reason: str | None
    wall_time: float
    ok: bool = True


@dataclass
class Usage:
    """Usage per role, plus the list of individual calls. Thread-safe to record into."""

    roles: dict[str, RoleUsage] = field(default_factory=dict)
    calls: list[CallRecord] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def record(self, call: CallRecord) -> None:
        with self._lock:
            r = self.roles.setdefault(call.role, RoleUsage())
            r.calls += 1
            r.wall_time += call.wall_time
            if call.cache_hit:
                r.cached_calls += 1
                r.cached_prompt_tokens += call.prompt_tokens
                r.cached_completion_tokens += call.completion_tokens
            else:
                r.prompt_tokens += call.prompt_tokens
                r.completion_tokens += call.completion_tokens
            self.calls.append(call)

    @property
    def total(self) -> RoleUsage:
        t = RoleUsage()
        for r in self.roles.values():
            t.add(r)
        return t

    def __getitem__(self, role_name: str) -> RoleUsage:
        return self.roles.get(role_name, RoleUsage())

    def merge(self, other: Usage) -> Usage:
        """Add ``other`` into this usage (in place) and return self."""
        with self._lock:
            for name, r in other.roles.items():
                self.roles.setdefault(name, RoleUsage()).add(r)
            self.calls.extend(other.calls)
        return self

    def to_dict(self) -> dict[str, dict[str, float]]:
        """JSON-serialisable: ``{role: counters, ..., "total": counters}``."""
        out = {name: r.to_dict() for name, r in sorted(self.roles.items())}
        out["total"] = self.total.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Mapping[str, float]]) -> Usage:
        u = cls()
        names = {f.name for f in fields(RoleUsage)}
        for name, counters in data.items():
            if name == "total":
                continue
            u.roles[name] = RoleUsage(**{k: v for k, v in counters.items() if k in names})  # type: ignore[arg-type]
        return u

    def __bool__(self) -> bool:
        return True


@contextmanager
def track_usage() -> Iterator[Usage]:
    """Collect every LM call made inside the block (and in DSPy worker threads it starts)."""
    usage = Usage()
    collectors = (*(dspy.settings.get(_COLLECTORS_KEY) or ()), usage)
    with dspy.context(**{_COLLECTORS_KEY: collectors}):
        yield usage


@contextmanager
def role(name: str) -> Iterator[None]:
    """Attribute LM calls made inside the block to role ``name``."""
    with dspy.context(**{_ROLE_KEY: name}):
        yield


def current_role() -> str:
    return dspy.settings.get(_ROLE_KEY) or DEFAULT_ROLE


class _Probe:
    """Stands in for DSPy's usage tracker during one call: sees billed usage (never cache hits)."""

    def __init__(self, parent: Any) -> None:
        self.parent = parent
        self.billed: dict[str, Any] | None = None
        self.entry: dict[str, Any] | None = None

    def add_usage(self, lm: str, usage_entry: dict[str, Any]) -> None:
        self.billed = dict(usage_entry or {})
        if self.parent is not None:
            self.parent.add_usage(lm, usage_entry)

    def __bool__(self) -> bool:
        return True


def _get(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _tokens(usage: Any) -> tuple[int, int]:
    if not usage:
        return 0, 0
    p = _get(usage, "prompt_tokens") or _get(usage, "input_tokens") or 0
    c = _get(usage, "completion_tokens") or _get(usage, "output_tokens") or 0
    return int(p), int(c)


def _first_response(entry: Mapping[str, Any] | None) -> Any:
    if not entry:
        return None
    resp = entry.get("response")
    if isinstance(resp, list | tuple):
        return resp[0] if resp else None
    return resp


def finish_reason_of(response: Any) -> str | None:
    """Finish reason of a provider response, whichever shape DSPy stored it in."""
    if response is None:
        return None
    reason = _get(response, "finish_reason")
    if reason is None:
        choices = _get(response, "choices")
        if choices:
            reason = _get(choices[0], "finish_reason")
    if reason is None:
        return None
    return str(getattr(reason, "value", reason))


class UsageRecordingMixin:
    """Mix into a ``dspy.BaseLM`` subclass (first in the MRO) to record every call.

    Recording costs nothing when no :func:`track_usage` block is open.
    """

    def __call__(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        collectors = dspy.settings.get(_COLLECTORS_KEY)
        if not collectors:
            return super().__call__(prompt, messages=messages, **kwargs)  # type: ignore[misc]
        probe = _Probe(dspy.settings.usage_tracker)
        start = time.perf_counter()
        ok = False
        try:
            with dspy.context(usage_tracker=probe):
                out = super().__call__(prompt, messages=messages, **kwargs)  # type: ignore[misc]
            ok = True
            return out
        finally:
            self._record_call(probe, collectors, time.perf_counter() - start, ok)

    async def acall(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        collectors = dspy.settings.get(_COLLECTORS_KEY)
        if not collectors:
            return await super().acall(prompt, messages=messages, **kwargs)  # type: ignore[misc]
        probe = _Probe(dspy.settings.usage_tracker)
        start = time.perf_counter()
        ok = False
        try:
            with dspy.context(usage_tracker=probe):
                out = await super().acall(prompt, messages=messages, **kwargs)  # type: ignore[misc]
            ok = True
            return out
        finally:
            self._record_call(probe, collectors, time.perf_counter() - start, ok)

    def update_history(self, entry: dict[str, Any]) -> None:
        tracker = dspy.settings.usage_tracker
        if isinstance(tracker, _Probe):
            tracker.entry = entry
        super().update_history(entry)  # type: ignore[misc]

    def _record_call(self, probe: _Probe, collectors: tuple[Usage, ...], wall: float, ok: bool) -> None:
        response = _first_response(probe.entry)
        cache_hit = ok and probe.billed is None
        if probe.billed is not None:
            p, c = _tokens(probe.billed)
        else:
            p, c = _tokens((probe.entry or {}).get("usage")) or (0, 0)
            if (p, c) == (0, 0):
                p, c = _tokens(_get(response, "usage"))
        call = CallRecord(
            role=current_role(),
            model=str(getattr(self, "model", type(self).__name__)),
            prompt_tokens=p,
            completion_tokens=c,
            cache_hit=cache_hit,
            finish_reason=finish_reason_of(response),
            wall_time=wall,
            ok=ok,
        )
        for usage in collectors:
            usage.record(call)


class RecordingDummyLM(UsageRecordingMixin, DummyLM):
    """``dspy.utils.DummyLM`` that records calls into :func:`track_usage` like a real LM.

    DummyLM reports no token usage, so token counters stay 0; calls, cache hits and roles count.
    """
