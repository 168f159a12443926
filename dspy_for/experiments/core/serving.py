"""What served a run's records (:mod:`dspy_for.lm.serving` makes the identities), and the stored records a run
sends again to the stack it talks to now (``rerun_changed``).

Every LM call records the identity of the stack that served it; a record keeps the distinct identities of its
method's calls (``ItemResult.served_by``, sorted; the judge's calls are apart). The stack a run talks to *now* is, per
LM of the run, the embedded server's identity (known before any call) or, for an endpoint, what the run's first call
the cache did not answer reported; unknown (None) while one of its LMs has reported nothing — nothing new ran.

``rerun_changed`` runs again exactly the reused records whose identities the stack now does not serve (a record
without identities — kept before they were recorded, or by an LM that reports none — is never one of them); their
calls bypass DSPy's cache, so the stack now answers them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from dspy_for.errors import ConfigError
from dspy_for.experiments.core.prepare import PreparedRun
from dspy_for.experiments.core.records import MethodResult
from dspy_for.experiments.spec.model import ExperimentSpec
from dspy_for.lm.serving import served_set, stack_identity
from dspy_for.lm.usage import CallRecord

__all__ = ["Serving", "changed", "changed_records", "check_stored", "serving_now", "settle"]


@dataclass
class Serving:
    """What served one evaluation's LM calls: the first identity each LM (by model name) reported on a call DSPy's
    cache did not answer (``seen``); the identities of the stack it talks to now, once the driver knows them
    (``now``; None: unknown); the keys of the stored records it runs again (``rerun``)."""

    seen: dict[str, str] = field(default_factory=dict)
    now: list[str] | None = None
    rerun: set[str] = field(default_factory=set)

    def saw(self, calls: Sequence[CallRecord]) -> list[str]:
        """The identities that served ``calls`` (a record's ``served_by``), noting each LM's first fresh one."""
        for c in calls:
            if c.served_by and not c.cache_hit:
                self.seen.setdefault(c.model, c.served_by)
        return served_set(c.served_by for c in calls)


def serving_now(lms: Iterable[object], seen: Mapping[str, str]) -> list[str] | None:
    """The identities of the stack ``lms`` (a run's LMs) talk to now: each one's known before any call, else what
    its first fresh call reported (``seen``, by model name); None when one of them is not known."""
    out: set[str] = set()
    for lm in lms:
        known = stack_identity(lm) or seen.get(str(getattr(lm, "model", None) or type(lm).__name__))
        if known is None:
            return None
        out.add(known)
    return sorted(out)


def changed(served_by: Iterable[str], now: Iterable[str] | None) -> bool:
    """Whether a record served by ``served_by`` was served by a stack other than ``now`` (False when either is not
    known: a record without identities, or a stack that has not reported yet)."""
    served = set(served_by)
    return now is not None and bool(served) and not served <= set(now)


class Served(Protocol):
    """What :func:`settle` and :func:`changed_records` read of an evaluation
    (:class:`~dspy_for.experiments.core.run.Evaluation`): what served it, its run's LMs and its records."""

    serving: Serving

    @property
    def run(self) -> PreparedRun: ...

    @property
    def result(self) -> MethodResult: ...


def settle(evaluations: Sequence[Served]) -> None:
    """After evaluations ran side by side: each one's stack now (:func:`serving_now`, from what any of them saw: LMs
    shared by several report once)."""
    seen: dict[str, str] = {}
    for ev in evaluations:
        for model, identity in ev.serving.seen.items():
            seen.setdefault(model, identity)
    for ev in evaluations:
        lms = {id(lm): lm for lm in ev.run.role_lms.values()} or {id(ev.run.lm): ev.run.lm}
        ev.serving.now = serving_now(lms.values(), seen)


def changed_records(ev: Served) -> list[str]:
    """The keys of ``ev``'s records served by a stack other than the one it talks to now (none while that is not
    known): what ``rerun_changed`` runs again."""
    now = ev.serving.now
    return [r.key for r in ev.result.items if changed(r.served_by, now)] if now is not None else []


def check_stored(spec: ExperimentSpec, items_dir: Path) -> None:
    """``rerun_changed`` needs stored records to run again: a ConfigError, before anything is built, when the results
    directory holds none of this run's methods on its datasets."""
    if not spec.rerun_changed:
        return
    for d in spec.datasets:
        for m in spec.methods:
            for path in (items_dir / d.name / d.split).glob(f"{m.label}.*.jsonl"):
                if path.stat().st_size > 0:
                    return
    raise ConfigError(
        f"`rerun_changed` runs again stored records served by another stack, and {items_dir} holds none of this "
        "run's methods on its datasets and splits. Drop `--rerun-changed` (`rerun_changed = false`), or point "
        "`--results-dir` at the results to check."
    )
