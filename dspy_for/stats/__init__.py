"""Statistics for method comparisons.

* Fixed n (:mod:`dspy_for.stats.fixed`): :func:`wilson_interval`, :func:`bootstrap_interval`, :func:`mean_with_ci`,
  :func:`mcnemar_exact`, :func:`paired_bootstrap`, :func:`paired_comparison`, :func:`cohens_kappa`,
  :func:`smallest_resolvable_difference`, :func:`format_p_value`.
* Repeats per item (:mod:`dspy_for.stats.repeats`): :func:`reduce_epochs` (one value per item from its epochs),
  :func:`spread` (how the epochs disagree).
* Checked after every item (:mod:`dspy_for.stats.sequential`): :class:`PairedSequentialTest` (an anytime-valid
  paired test and confidence sequence), :func:`replay` on stored results, :func:`split_alpha` for several pairs.
* The serving stack's own noise (:mod:`dspy_for.stats.noise`): :func:`flip_rate` (how often a re-run answer scored
  differently), :func:`noise_band` (how far that alone moves a paired difference).
* Fixed against per-item cost (:mod:`dspy_for.stats.breakeven`): :func:`break_even` (after how many items a method
  with a larger fixed cost has the lower total cost per correct answer, with an interval from the accuracies').

What each statistic is, how it is built and where it comes from: ``docs/statistics.md``.
"""

from __future__ import annotations

from dspy_for.stats.breakeven import BreakEven, CostModel, break_even
from dspy_for.stats.fixed import (
    PairedResult,
    bootstrap_interval,
    cohens_kappa,
    format_p_value,
    mcnemar_exact,
    mean_with_ci,
    paired_bootstrap,
    paired_comparison,
    smallest_resolvable_difference,
    wilson_interval,
)
from dspy_for.stats.noise import FlipRate, flip_rate, noise_band
from dspy_for.stats.repeats import REDUCERS, Spread, check_reducer, clustered_interval, reduce_epochs, spread
from dspy_for.stats.sequential import (
    BettingConfidenceSequence,
    PairedSequentialTest,
    SequentialResult,
    calibrated_threshold,
    discordant_log_e,
    replay,
    split_alpha,
)

__all__ = [
    "REDUCERS",
    "BettingConfidenceSequence",
    "BreakEven",
    "CostModel",
    "FlipRate",
    "PairedResult",
    "PairedSequentialTest",
    "SequentialResult",
    "Spread",
    "bootstrap_interval",
    "break_even",
    "calibrated_threshold",
    "check_reducer",
    "clustered_interval",
    "cohens_kappa",
    "discordant_log_e",
    "flip_rate",
    "format_p_value",
    "mcnemar_exact",
    "mean_with_ci",
    "noise_band",
    "paired_bootstrap",
    "paired_comparison",
    "reduce_epochs",
    "replay",
    "smallest_resolvable_difference",
    "split_alpha",
    "spread",
    "wilson_interval",
]
