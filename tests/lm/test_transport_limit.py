"""The per-endpoint adaptive limit: one decrease per window, and a refused probe falls back to the clean limit."""

from __future__ import annotations

import itertools

from dspy_for.lm.transport import AdaptiveLimit


def _round(limit: AdaptiveLimit, takes: int) -> int:
    """Send as many requests as the limit allows to an endpoint that takes ``takes`` at once: those beyond are
    refused (while the others are still in flight), then the others succeed. Returns how many were sent."""
    sent = limit.limit or 16
    windows = [limit.acquire() for _ in range(sent)]
    ok = min(sent, takes)
    for w in windows[ok:]:
        limit.release()
        limit.on_rate_limit(w)
    for _ in range(ok):
        limit.release()
        limit.on_success()
    return sent


def test_a_burst_of_refusals_from_one_window_lowers_the_limit_once() -> None:
    limit = AdaptiveLimit()
    windows = [limit.acquire() for _ in range(16)]
    for w in windows[4:]:  # 12 refused at once, 4 still in flight
        limit.release()
        limit.on_rate_limit(w)
    assert limit.decreased == 1
    assert limit.limit == 8  # half of the 16 in flight when the first refusal came, not halved 12 times
    late = limit.acquire()
    limit.release()
    limit.on_rate_limit(late)  # sent after the decrease: news
    assert limit.decreased == 2 and limit.limit == 2  # half of the 5 then in flight (4 + the refused one)


def test_the_limit_settles_at_what_the_endpoint_takes() -> None:
    limit = AdaptiveLimit()
    sent = [_round(limit, takes=4) for _ in range(200)]
    settled = sent[20:]
    assert sum(s == 4 for s in settled) / len(settled) > 0.9  # mostly at the endpoint's 4
    assert min(settled) >= 4  # a refused probe falls back to 4, never to half of it
    assert limit.raised > 0 and limit.decreased > 1


def test_a_refused_probe_falls_back_to_the_clean_limit_and_waits_twice_as_long() -> None:
    limit = AdaptiveLimit()
    limit.on_rate_limit()  # no window: always counts
    assert limit.limit == 1
    sent = [_round(limit, takes=4) for _ in range(40)]
    assert sent[:5] == [1, 2, 3, 4, 5]  # one more after each clean streak, then a probe of 5 is refused
    probes = [i for i, n in enumerate(sent) if n == 5]
    assert all(n in (4, 5) for n in sent[4:])  # a refused probe falls back to 4, the last clean limit
    gaps = [b - a for a, b in itertools.pairwise(probes)]
    assert gaps[:3] == [2, 4, 8]  # each refused probe doubles the wait before the next


def test_an_endpoint_that_takes_less_later_is_followed_down() -> None:
    limit = AdaptiveLimit()
    for _ in range(50):
        _round(limit, takes=8)
    for _ in range(50):
        _round(limit, takes=2)
    assert limit.limit is not None and 2 <= limit.limit <= 3
