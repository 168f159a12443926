"""``dspy-for advise`` / :func:`advise`: for the user's LM, task and token budget, which method should they run?

1. **Candidates** (:mod:`.candidates`): every registered method that reads no gold label, at the settings its registry
   entry declares — or those ``methods`` names. A method a budget sizes (self-consistency's k, Refine's N) is sized
   from CoT's measured cost: k = budget / CoT's tokens per item to the nearest whole call (the registry's one sizer),
   the budget lowered to what ``budget_usd`` buys at CoT's $/item when that is less (:mod:`.candidates`).
2. **Pilot**: each candidate runs the first ``pilot`` items of one seeded order; one over a budget (its measured
   tokens per item > ``budget``, or USD per item > ``budget_usd``) is dropped with that reason. No candidate left:
   an error naming ``--budget`` / ``--budget-usd`` (:mod:`.budget`; ``budget_usd`` needs every LM priced).
3. **Rounds** (:mod:`.rounds`): the rest run the next items batch by batch, every pair tested by an anytime-valid
   paired test (:class:`dspy_for.stats.PairedSequentialTest`) at α / pairs (Bonferroni: the error rate α holds over
   every pair tested). A candidate resolved worse than another is dropped. It stops when one is left (resolved best),
   when the rest are within ±``margin`` of the leader (the cheapest wins), or at ``max_items`` / ``timeout`` /
   ``max_cost`` (the leader, unresolved). With ``epochs`` > 1 and the mean reducer the tests are the bounded ones.
4. **Answer** (:mod:`.report`): the recommendation with its accuracy (Wilson CI), tokens and $ per item, its paired test
   against the runner-up and the items used; every candidate's fate; the frontier plot; an MLflow parent run with one
   child per candidate; and the Python line that builds the recommended module.

Every record is stored as it lands (a re-run resumes, reusing what is stored), a failed item is an error (never an
outcome of a test) and bad input fails before any LM call. ``docs/advise.md`` has the details.
"""

from __future__ import annotations

import warnings
from typing import Any

from dspy_for.experiments.advisor.driver import MARGIN, advise
from dspy_for.experiments.advisor.result import Advice, CandidateOutcome, CandidatePair

__all__ = ["MARGIN", "Advice", "CandidateOutcome", "CandidatePair", "advise"]


def __getattr__(name: str) -> Any:
    if name == "PairOutcome":  # deprecated: two candidates' test is a CandidatePair (compare's is a BaselinePair)
        warnings.warn("`PairOutcome` is now `CandidatePair`.", DeprecationWarning, stacklevel=2)
        return CandidatePair
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
