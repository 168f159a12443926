"""A seeded sweep's draws survive resumes, failed trials and a second worker (``TrialSeededSampler``)."""

from __future__ import annotations

import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from dspy_for.experiments.sweeps.sampling import trial_seed
from dspy_for.experiments.sweeps.sweep import load_sweep_spec, open_study

CONFIG = """
method = "for"
study = "{study}"
lm = "openai/fake"
sampler = "{sampler}"
storage = "journal:{journal}"
[dataset]
name = "gsm8k"
split = "sample"
[search.rounds]
type = "int"
low = 0
high = 4
"""
SPACE = {
    "rounds": IntDistribution(0, 4),
    "host": CategoricalDistribution([True, False]),
    "x": FloatDistribution(0.0, 1.0),
}
N = 14  # past TPE's 10 random start-up trials, so its model-based draws are compared too


def _open(tmp_path, study, sampler="tpe"):
    p = tmp_path / f"{study}.toml"
    p.write_text(CONFIG.format(study=study, sampler=sampler, journal=tmp_path / f"{study}.journal"))
    return open_study(load_sweep_spec(p))  # a new sampler object each time, as in a new process


def _value(params):
    return params["rounds"] + float(params["host"]) + params["x"]


def _run(study, n):
    """``n`` trials, each told its value; their parameters."""
    drawn = []
    for _ in range(n):
        trial = study.ask(SPACE)
        study.tell(trial, _value(trial.params))
        drawn.append(trial.params)
    return drawn


@pytest.mark.parametrize("sampler", ["tpe", "random", "nsga2"])
def test_a_resumed_sweep_draws_what_an_uninterrupted_one_would(tmp_path, sampler):
    whole = _run(_open(tmp_path, "whole", sampler), N)
    first = _run(_open(tmp_path, "resumed", sampler), 5)
    rest = _run(_open(tmp_path, "resumed", sampler), N - 5)  # reopened: Optuna's own seeded sampler restarts here
    assert first + rest == whole
    assert len({p["x"] for p in whole}) == N  # and nothing was drawn twice


def test_a_failed_trial_rerun_keeps_the_later_trials_draws(tmp_path):
    whole = _run(_open(tmp_path, "whole"), N)
    study = _open(tmp_path, "killed")
    before = _run(study, 4)
    killed = study.ask(SPACE)
    assert killed.params == whole[4]
    study.tell(killed, state=TrialState.FAIL)  # as recover_stale marks a dead worker's trial
    resumed = _open(tmp_path, "killed")
    resumed.enqueue_trial(killed.params)  # re-run with its parameters, as a new trial
    after = _run(resumed, N - 4)
    assert before + after == whole


def test_two_workers_with_one_seed_do_not_draw_alike(tmp_path):
    a, b = _open(tmp_path, "workers"), _open(tmp_path, "workers")  # two processes on one study
    drawn = [*_run(a, 1), *_run(b, 1), *_run(a, 1), *_run(b, 1)]
    assert len({p["x"] for p in drawn}) == 4
    assert drawn == _run(_open(tmp_path, "one-worker"), 4)  # and they draw what one worker would


def test_trial_seeds_differ_by_place_and_seed():
    seeds = {trial_seed(s, place) for s in range(3) for place in range(100)}
    assert len(seeds) == 300
    assert trial_seed(0, 7) == trial_seed(0, 7)
