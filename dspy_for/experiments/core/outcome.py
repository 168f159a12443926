"""What every run's outcome tells alike: ``compare``'s :class:`~dspy_for.experiments.core.records.ComparisonResult`,
``sweep``'s :class:`~dspy_for.experiments.sweeps.SweepResult` and ``advise``'s
:class:`~dspy_for.experiments.advisor.Advice` all answer :class:`RunOutcome`, and the command line ends each of
them the same way."""

from __future__ import annotations

from typing import Protocol

from dspy_for.experiments.core.spend import SpendLimit

__all__ = ["RunOutcome"]


class RunOutcome(Protocol):
    """Items scored (right or wrong), failed (an error, never a score) and unparsed (scored wrong); what the run
    spent against its ``max_cost`` (``spend``) and whether that left work out (``stopped_by_cost``, one meaning:
    :attr:`SpendLimit.stopped <dspy_for.experiments.core.spend.SpendLimit.stopped>`); ``ok``: nothing failed and
    nothing asked for was left out, so every number shown was measured over everything asked for."""

    @property
    def n_scored(self) -> int: ...

    @property
    def n_failed(self) -> int: ...

    @property
    def n_unparsed(self) -> int: ...

    @property
    def spend(self) -> SpendLimit | None: ...

    @property
    def stopped_by_cost(self) -> bool: ...

    @property
    def ok(self) -> bool: ...
