"""How every request to an LM endpoint travels: one adaptive concurrency limit per endpoint, and retries.

* An **endpoint** is an ``(api_base, model)`` pair. Every LM object, thread, method and role of the process that
  calls the same endpoint shares its :class:`AdaptiveLimit`, so a comparison's load on one endpoint is bounded
  however many methods and threads it runs.
* The limit adapts as Inspect AI's adaptive connections do (AIMD): it starts at ``max_connections`` (None: no
  limit of its own, as many requests as the threads send), is halved when the endpoint answers with a rate
  limit (once per window of requests, and back to the last limit that ran clean when a probe above it is
  refused), and grows by one after as many successes in a row as the limit is, up to ``max_connections``.
* A failed request is retried by `tenacity <https://tenacity.readthedocs.io>`_:

  - **rate limits** (429, 503, 529 and "overloaded" answers) for as long as the waits of one call add up to less
    than ``max_retry_wait`` seconds (default :data:`DEFAULT_MAX_RETRY_WAIT`: minutes, not seconds);
  - **transient faults** (other 5xx answers, timeouts, dropped connections) at most ``num_retries`` times within
    the same bound;

  each after an exponential backoff with jitter, and never sooner than the endpoint's ``Retry-After``. While a call
  waits it holds no slot of the limit. A call that still fails raises its last error: an error in a run, never a
  score. Errors that retrying cannot mend (401, 400, a context overflow) are raised at once.

DSPy's own retry loop is left at zero for the LMs this transport drives (it would retry inside every attempt).
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tenacity import AsyncRetrying, RetryCallState, Retrying, retry_if_exception, wait_exponential, wait_random

__all__ = [
    "DEFAULT_MAX_RETRY_WAIT",
    "AdaptiveLimit",
    "Endpoint",
    "RetryPolicy",
    "endpoint",
    "endpoints",
    "is_rate_limit",
    "is_transient",
    "retry_after",
    "throttle_text",
]

#: the longest one call waits, in all, between retries of rate limits and faults (seconds)
DEFAULT_MAX_RETRY_WAIT = 300.0
#: how recently an endpoint must have been rate-limited for the progress line to say so (seconds)
_RECENT = 30.0
_RATE_LIMIT_STATUS = frozenset({429, 503, 529})

T = TypeVar("T")


# ------------------------------------------------------------------------------------------ the limit


class AdaptiveLimit:
    """A concurrency limit that halves on rate limits and grows back on success (thread-safe).

    ``ceiling``: the most requests in flight (None: no limit until the endpoint rate-limits).

    Two refinements keep it near what the endpoint takes instead of sawing between half and one over it, as TCP's
    congestion control does: a rate limit lowers the limit **once per window** (the answers to requests sent before
    the last decrease are not news: :meth:`acquire` returns the window a request was sent in); and the highest limit
    that ran a full streak without a rate limit is remembered, so a probe one above it that is refused falls back
    to it, and the next probe waits twice as many successes.
    """

    def __init__(self, ceiling: int | None = None) -> None:
        self.ceiling = ceiling
        self._limit: float = float(ceiling) if ceiling else math.inf
        self.in_flight = 0
        self.peak_in_flight = 0
        self.lowest: float = self._limit  # the lowest the limit went
        self.raised = 0  # how often it grew after a decrease
        self.decreased = 0  # how often it was lowered
        self._window = 0  # one more at each decrease
        self._streak = 0
        self._clean: int | None = None  # the highest limit that ran a full streak since the last halving
        self._patience = 1  # successes to wait, in multiples of the limit, before probing one higher
        self._cond = threading.Condition()

    @property
    def limit(self) -> int | None:
        """The current limit (None: no limit)."""
        return None if math.isinf(self._limit) else int(self._limit)

    def acquire(self) -> int:
        """Wait for a slot; return the window the request is sent in (for :meth:`on_rate_limit`)."""
        with self._cond:
            while self.in_flight >= self._limit:
                self._cond.wait()
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            return self._window

    def release(self) -> None:
        with self._cond:
            self.in_flight -= 1
            self._cond.notify()

    @contextmanager
    def slot(self) -> Any:
        window = self.acquire()
        try:
            yield window
        finally:
            self.release()

    def cap(self, ceiling: int) -> None:
        """Lower the ceiling to ``ceiling`` (a higher one leaves it as it is)."""
        with self._cond:
            if self.ceiling is None or ceiling < self.ceiling:
                self.ceiling = ceiling
                self._limit = min(self._limit, float(ceiling))

    def on_rate_limit(self, window: int | None = None) -> None:
        """A request sent in ``window`` was refused with a rate limit (None: a request of unknown window). Back to
        the last clean limit when the refusal came just above it, else half of what was in flight when that is
        lower than the limit: multiplicative decrease. A refusal of a request sent before the last decrease
        changes nothing."""
        with self._cond:
            if window is not None and window < self._window:
                return
            base = min(self._limit, self.in_flight + 1)
            if self._clean is not None and self._clean < base:
                self._limit = float(self._clean)
                self._patience = min(self._patience * 2, 64)
            else:
                self._limit = max(1.0, math.floor(base / 2))
                self._clean, self._patience = None, 1
            self.lowest = min(self.lowest, self._limit)
            self._streak = 0
            self._window += 1
            self.decreased += 1

    def on_success(self) -> None:
        """One more after ``limit`` successes in a row (``limit × patience`` above the last clean limit), up to
        the ceiling: additive increase."""
        with self._cond:
            if math.isinf(self._limit) or (self.ceiling is not None and self._limit >= self.ceiling):
                return
            self._streak += 1
            if self._streak >= self._limit and int(self._limit) > (self._clean or 0):  # a probe ran clean
                self._clean, self._patience = int(self._limit), 1
            wait = self._limit * (self._patience if self._limit >= (self._clean or 0) else 1)
            if self._streak >= wait:
                self._streak = 0
                self._limit += 1
                self.raised += 1
                self._cond.notify()


# ------------------------------------------------------------------------------------------- endpoints


@dataclass
class Endpoint:
    """One ``(api_base, model)``: its shared limit and what happened on it in this process."""

    key: tuple[str, str]
    limit: AdaptiveLimit
    rate_limited: int = 0  # rate-limit answers received
    failures: int = 0  # attempts that failed with a rate limit or a transient fault
    last_rate_limit: float = 0.0  # time.monotonic() of the last one
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def name(self) -> str:
        base, model = self.key
        return f"{model} at {base}" if base else model

    def note_failure(self, exc: BaseException) -> None:
        """Count a failed attempt (the limit hears of a rate limit from the attempt: :meth:`RetryPolicy.send`)."""
        with self._lock:
            self.failures += 1
            if is_rate_limit(exc):
                self.rate_limited += 1
                self.last_rate_limit = time.monotonic()

    @property
    def throttled(self) -> bool:
        """Rate-limited in the last half minute, or still held below what the threads ask for."""
        recent = self.rate_limited > 0 and time.monotonic() - self.last_rate_limit < _RECENT
        limit = self.limit.limit
        return recent or (limit is not None and self.rate_limited > 0 and limit < self.limit.peak_in_flight)


_ENDPOINTS: dict[tuple[str, str], Endpoint] = {}
_ENDPOINTS_LOCK = threading.Lock()


def endpoint(model: str, api_base: str | None, max_connections: int | None = None) -> Endpoint:
    """The process's one :class:`Endpoint` for ``(api_base, model)``; ``max_connections`` (first given wins,
    a lower one given later lowers it) caps its limit."""
    key = (str(api_base or "").rstrip("/"), model)
    with _ENDPOINTS_LOCK:
        found = _ENDPOINTS.get(key)
        if found is None:
            found = _ENDPOINTS[key] = Endpoint(key, AdaptiveLimit(max_connections))
        elif max_connections is not None:
            found.limit.cap(max_connections)
        return found


def endpoints() -> list[Endpoint]:
    with _ENDPOINTS_LOCK:
        return list(_ENDPOINTS.values())


def throttle_text() -> str:
    """``throttled: gpt-5-mini at … 3 in flight max (13 rate-limited)`` for each throttled endpoint, or ''."""
    parts = []
    for ep in endpoints():
        if ep.throttled:
            limit = ep.limit.limit
            at = f"concurrency {limit}" if limit is not None else "no limit"
            parts.append(f"throttled {ep.key[1]}: {at}, {ep.rate_limited} rate-limited")
    return "; ".join(parts)


# -------------------------------------------------------------------------------------------- errors


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None) or getattr(exc, "status_code", None)
    if status is None:
        response = getattr(exc, "response", None)
        status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def is_rate_limit(exc: BaseException | None) -> bool:
    """A 429, 503 or 529 answer, or one that says the endpoint is overloaded."""
    if exc is None:
        return False
    if type(exc).__name__ in ("LMRateLimitError", "RateLimitError"):
        return True
    if _status(exc) in _RATE_LIMIT_STATUS:
        return True
    return "overloaded" in str(exc).lower()[:500]


def is_transient(exc: BaseException) -> bool:
    """Worth another try: a rate limit, or a fault of the endpoint or the network (5xx, timeout, dropped)."""
    if is_rate_limit(exc):
        return True
    from dspy.utils.exceptions import is_retryable_lm_error

    if is_retryable_lm_error(exc if isinstance(exc, Exception) else Exception()):
        return True
    status = _status(exc)
    if status is not None:
        return status >= 500 or status == 408
    return type(exc).__name__ in ("APIConnectionError", "Timeout", "APITimeoutError", "ServiceUnavailableError")


def retry_after(exc: BaseException | None) -> float | None:
    """The endpoint's ``Retry-After`` hint in seconds, when the error carries one."""
    if exc is None:
        return None
    hint = getattr(exc, "retry_after", None)
    if hint is None:
        headers = getattr(getattr(exc, "response", None), "headers", None)
        if headers is not None:
            try:
                hint = headers.get("retry-after")
            except Exception:
                hint = None
    try:
        seconds = float(hint) if hint is not None else None
    except (TypeError, ValueError):
        return None
    return seconds if seconds is not None and math.isfinite(seconds) and seconds >= 0 else None


# ---------------------------------------------------------------------------------------- the policy


@dataclass(frozen=True)
class RetryPolicy:
    """How one LM retries: ``num_retries`` transient faults, rate limits until ``max_retry_wait`` seconds of
    waiting in all (see the module docstring)."""

    num_retries: int = 2
    max_retry_wait: float = DEFAULT_MAX_RETRY_WAIT
    backoff: float = 1.0  # the first backoff, in seconds (doubles each retry, with jitter, up to 60 s)

    def send(self, where: Endpoint, attempt: Callable[[], T]) -> T:
        """``attempt()`` under ``where``'s limit, retried as the policy says."""
        for trial in Retrying(**self._tenacity(where)):
            with trial:
                window: int | None = None
                try:
                    with where.limit.slot() as window:
                        out = attempt()
                except BaseException as exc:
                    _heard(where, exc, window)
                    raise
                where.limit.on_success()
        return out

    async def asend(self, where: Endpoint, attempt: Callable[[], Awaitable[T]]) -> T:
        async for trial in AsyncRetrying(**self._tenacity(where)):
            with trial:
                window = await asyncio.to_thread(where.limit.acquire)
                try:
                    out = await attempt()
                except BaseException as exc:
                    where.limit.release()
                    _heard(where, exc, window)
                    raise
                where.limit.release()
                where.limit.on_success()
        return out

    def _tenacity(self, where: Endpoint) -> dict[str, Any]:
        faults = [0]
        exponential = wait_exponential(multiplier=self.backoff, max=60.0) + wait_random(0, self.backoff)

        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            backoff = float(exponential(state))
            hint = retry_after(exc)
            if hint is None:
                return backoff
            return hint + random.uniform(0.0, min(1.0, 0.1 * hint + 0.05))  # never sooner than the endpoint asks

        def stop(state: RetryCallState) -> bool:
            exc = state.outcome.exception() if state.outcome else None
            if exc is not None:
                where.note_failure(exc)
                if not is_rate_limit(exc):
                    faults[0] += 1
                    if faults[0] > self.num_retries:
                        return True
            waited = state.idle_for + (state.upcoming_sleep or 0.0)
            return waited > self.max_retry_wait

        return {
            "retry": retry_if_exception(is_transient),
            "wait": wait,
            "stop": stop,
            "reraise": True,
        }


def _heard(where: Endpoint, exc: BaseException, window: int | None) -> None:
    """Tell ``where``'s limit of a rate limit answered to a request sent in ``window`` (after its slot is freed)."""
    if window is not None and is_rate_limit(exc):
        where.limit.on_rate_limit(window)
