"""The usage data: counters per role (:class:`RoleUsage`), one LM call (:class:`CallRecord`) and what it sent
and returned (:class:`CallContent`), a collector (:class:`Usage`), and the warning issued when an LM reports no
usage or finish reason (:class:`UsageWarning`).

How calls get recorded into a :class:`Usage` is in :mod:`dspy_for.lm.recorder`.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

__all__ = ["CONTENT_WINDOW", "CallContent", "CallRecord", "RoleUsage", "Usage", "UsageWarning"]

#: a collector keeps what was sent and returned for its most recent calls only (older calls keep their counters
#: and times): a collector held across a long run (an optimizer's compile, a whole comparison) stays bounded
CONTENT_WINDOW = 1000


@dataclass
class RoleUsage:
    """Counters for one role (or the total).

    Reasoning tokens are completion tokens a reasoning model spent before its visible answer: counted in
    ``completion_tokens`` (they are billed as such) and apart in ``reasoning_tokens``. Cost: ``cost_usd`` of the
    calls that were not cache hits, ``cached_cost_usd`` what the replayed calls cost when they were made;
    ``priced_calls`` counts the calls whose cost is known (a failed call counts, at $0), so a cost is reported only
    when every call is priced (:attr:`served_cost_usd`), never as $0 for an LM nobody priced.
    """

    calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0
    cached_completion_tokens: int = 0
    wall_time: float = 0.0
    reasoning_tokens: int = 0
    cached_reasoning_tokens: int = 0
    priced_calls: int = 0
    cost_usd: float = 0.0
    cached_cost_usd: float = 0.0

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

    @property
    def priced(self) -> bool:
        """Every call has a known cost (and there was at least one)."""
        return self.calls > 0 and self.priced_calls == self.calls

    @property
    def spent_usd(self) -> float | None:
        """USD spent now (cache hits cost nothing); None when a call is not priced."""
        return self.cost_usd if self.priced else None

    @property
    def served_cost_usd(self) -> float | None:
        """USD a cold run costs (spent plus what the replayed calls cost); None when a call is not priced."""
        return self.cost_usd + self.cached_cost_usd if self.priced else None

    def add(self, other: RoleUsage) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def to_dict(self) -> dict[str, float]:
        d: dict[str, float] = asdict(self)
        d["tokens"] = self.tokens
        d["cached_tokens"] = self.cached_tokens
        return d


@dataclass(frozen=True)
class CallContent:
    """What one LM call sent and returned, as DSPy handed them to its callbacks (kept in memory only, never in a
    results file; may hold secrets an endpoint echoed: mask before writing it anywhere)."""

    sent: dict[str, Any]  # ``messages`` (chat) or ``prompt``, and the call's own keyword arguments (``kwargs``)
    returned: Any = None  # the LM's outputs (a list of completions); None when the call failed
    error: str | None = None  # the exception's message when the call failed


@dataclass(frozen=True)
class CallRecord:
    """One LM call as seen by the usage layer (``error``: the exception's class name when not ``ok``).

    ``started_at`` / ``ended_at``: Unix times (``time.time()``, seconds) at DSPy's ``on_lm_start`` and ``on_lm_end``
    (None for a record made by hand); ``wall_time`` is the same interval on the monotonic clock. ``served_by``: the
    identity of the serving stack (:mod:`dspy_for.lm.serving`). ``content``: what
    the call sent and returned, in memory only (:meth:`Usage.to_dict` never holds it; a collector keeps it for
    its last :data:`CONTENT_WINDOW` calls); None when dropped or not recorded.
    """

    role: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cache_hit: bool
    finish_reason: str | None
    wall_time: float
    ok: bool = True
    error: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    content: CallContent | None = field(default=None, compare=False, repr=False)
    reasoning_tokens: int = 0  # of the completion tokens, those spent reasoning (reasoning models)
    cost: float | None = None  # USD (a cache hit: what the original call cost); None: not priced
    #: what served the call (:mod:`dspy_for.lm.serving`: a hosted model's snapshot and ``system_fingerprint``, the
    #: embedded server's model hash, build and slots; a cache hit: the replayed call's, when DSPy's cache kept it);
    #: None when the LM reported none
    served_by: str | None = None

    def without_content(self) -> CallRecord:
        return self if self.content is None else replace(self, content=None)


@dataclass
class Usage:
    """Usage per role, plus the list of individual calls. Thread-safe to record into.

    ``content_window``: how many of the most recent calls keep their :class:`CallContent` (None: all, 0: none);
    an older call's record is replaced by one without it, so memory stays bounded however long the collector
    lives. The records of calls still in the window are shared with the other collectors that saw them.
    """

    roles: dict[str, RoleUsage] = field(default_factory=dict)
    calls: list[CallRecord] = field(default_factory=list)
    content_window: int | None = field(default=CONTENT_WINDOW, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def record(self, call: CallRecord) -> None:
        with self._lock:
            r = self.roles.setdefault(call.role, RoleUsage())
            r.calls += 1
            r.wall_time += call.wall_time
            if call.cost is not None or not call.ok:
                r.priced_calls += 1
            if call.cache_hit:
                r.cached_calls += 1
                r.cached_prompt_tokens += call.prompt_tokens
                r.cached_completion_tokens += call.completion_tokens
                r.cached_reasoning_tokens += call.reasoning_tokens
                r.cached_cost_usd += call.cost or 0.0
            else:
                r.prompt_tokens += call.prompt_tokens
                r.completion_tokens += call.completion_tokens
                r.reasoning_tokens += call.reasoning_tokens
                r.cost_usd += call.cost or 0.0
            self.calls.append(call)
            self._drop_old_content(1)

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
            self._drop_old_content(len(other.calls))
        return self

    def _drop_old_content(self, added: int) -> None:
        """The content of the calls that the last ``added`` records pushed out of the window (lock held)."""
        if self.content_window is None:
            return
        end = len(self.calls) - self.content_window
        for i in range(max(0, end - added), max(0, end)):
            self.calls[i] = self.calls[i].without_content()

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

    @classmethod
    def summed(cls, usages: Iterable[Mapping[str, Mapping[str, float]]]) -> Usage:
        """Stored usages (:meth:`to_dict`'s) added role by role, counter by counter, in order: what :meth:`merge` of
        each one's :meth:`from_dict` gives, without building a :class:`Usage` per record (a table reads thousands)."""
        sums: dict[str, dict[str, Any]] = {}
        for usage in usages:
            for role, counters in usage.items():
                if role == "total":
                    continue
                acc = sums.get(role)
                if acc is None:
                    acc = sums[role] = dict(_role_zero())
                for name, value in counters.items():
                    if name in acc:
                        acc[name] += value
        return cls.from_dict(sums)

    def __bool__(self) -> bool:
        return True


@functools.cache
def _role_zero() -> dict[str, Any]:
    """Each :class:`RoleUsage` counter at its starting value."""
    return {f.name: f.default for f in fields(RoleUsage)}


class UsageWarning(UserWarning):
    """An LM reports no token usage or no finish reason (issued once per model)."""
