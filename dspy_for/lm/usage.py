"""Per-role usage accounting: LM calls, tokens spent, tokens served from cache, wall time.

DSPy's own usage tracker drops cache hits and only knows model names. dspy-for needs, for every
method result, the cost *per role* (defender, debater, task, feedback, ...) with cache hits counted
apart, because comparisons put cost beside accuracy and sweeps measure what the cache saved.

How it works:

* :func:`track_usage` opens a collector and installs one DSPy callback (``dspy.context(callbacks=...)``,
  which DSPy copies into ``dspy.Parallel`` / ``dspy.Evaluate`` worker threads). Every LM call made
  inside — by *any* ``dspy.BaseLM``: ``dspy.LM``, custom subclasses, ``make_lm`` LMs, scripted test
  LMs — is recorded into every open collector, so a module's own per-call usage and an experiment's
  grand total are both exact.
* Per call (``on_lm_start`` → ``on_lm_end``, matched by DSPy's per-call id, in the caller's own thread
  or task, so threads sharing one LM and ``acall`` are exact): the role and collectors in force at the
  start; the call's start and end (Unix time) and what it sent and returned (in memory only, for traces;
  a collector keeps that for its last ``content_window`` calls); the billed usage DSPy reports to
  ``dspy.settings.usage_tracker`` during the call (a per-call probe; none is reported for a cache hit);
  and DSPy's history entry for the call (found in ``lm.history`` by the identity of the returned
  outputs) for the finish reason and, on a cache hit, the original call's tokens (kept by the cache
  :func:`dspy_for.lm.configure_cache` installs).
* :func:`role` names the role of the calls made inside it; modules wrap each role predictor call.

Example::

    with track_usage() as usage, role("defender"):
        program(question="...")
    usage.total.completion_tokens

Where it lives: the data classes in :mod:`dspy_for.lm.usage_records`, :func:`role` in
:mod:`dspy_for.lm.roles`, the callback and :func:`track_usage` in :mod:`dspy_for.lm.recorder`; this module
re-exports them all.
"""

from __future__ import annotations

from dspy_for.lm.recorder import finish_reason_of, track_usage
from dspy_for.lm.roles import DEFAULT_ROLE, current_role, role
from dspy_for.lm.usage_records import CONTENT_WINDOW, CallContent, CallRecord, RoleUsage, Usage, UsageWarning

__all__ = [
    "CONTENT_WINDOW",
    "DEFAULT_ROLE",
    "CallContent",
    "CallRecord",
    "RoleUsage",
    "Usage",
    "UsageWarning",
    "current_role",
    "finish_reason_of",
    "role",
    "track_usage",
]
