"""Seeded sampling that survives resumes and workers.

Optuna's seeded samplers seed one random stream per sampler object, that is per process: a sweep resumed in a new
process, or a second worker with the same seed, starts that stream again and draws the first trials' parameters
again (optuna/optuna#3255). :class:`TrialSeededSampler` gives each trial a sampler of its own, seeded from the
sweep's seed and the trial's place among the study's trials that did not fail. So a seeded sweep that is killed
and resumed draws what an uninterrupted one would have (the killed trial is re-run with its parameters, as a new
trial, and the trials after it keep their places), and two sweeps with the same seed draw the same parameters
for the same history, whatever else differs between them (their pruners, for instance). Samplers that learn from
the study (TPE, NSGA-II) still read the whole history from storage; only their random stream is per trial.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

__all__ = ["TrialSeededSampler", "trial_seed"]


def trial_seed(seed: int, place: int) -> int:
    """The seed of the trial at ``place`` (0-based, among the trials that did not fail) of a sweep seeded ``seed``."""
    return int(np.random.SeedSequence([seed, place]).generate_state(1)[0])


class TrialSeededSampler(BaseSampler):
    """Delegates every call to ``make(seed)``, a sampler built afresh for each trial (in ``before_trial``) with
    :func:`trial_seed`; unseeded (``seed=None``), each trial's sampler draws its own random seed."""

    def __init__(self, make: Callable[[int | None], BaseSampler], seed: int | None) -> None:
        self._make = make
        self._seed = seed
        self._current = make(seed)  # until the first trial: Optuna may ask before any trial exists

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        seed = None if self._seed is None else trial_seed(self._seed, _place(study, trial))
        self._current = self._make(seed)
        self._current.before_trial(study, trial)

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self._current.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return self._current.sample_relative(study, trial, search_space)

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        return self._current.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None) -> None:
        self._current.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._current.reseed_rng()


def _place(study: Study, trial: FrozenTrial) -> int:
    """The trial's number less the failed trials before it: the number it would have in a run where none failed."""
    failed = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
    return trial.number - sum(t.number < trial.number for t in failed)
