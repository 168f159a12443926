"""The usage data: counters per role (:class:`RoleUsage`), one LM call (:class:`CallRecord`), a collector
(:class:`Usage`), and the warning issued when an LM reports no usage or finish reason (:class:`UsageWarning`).

How calls get recorded into a :class:`Usage` is in :mod:`dspy_for.lm.recorder`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields

__all__ = ["CallRecord", "RoleUsage", "Usage", "UsageWarning"]


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
    """One LM call as seen by the usage layer (``error``: the exception's class name when not ``ok``)."""

    role: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cache_hit: bool
    finish_reason: str | None
    wall_time: float
    ok: bool = True
    error: str | None = None


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


class UsageWarning(UserWarning):
    """An LM reports no token usage or no finish reason (issued once per model)."""
