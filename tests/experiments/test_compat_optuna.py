"""The Optuna internals sweeps use live behind dspy_for.compat.optuna; an Optuna without them fails loudly."""

from __future__ import annotations

import optuna
import pytest

from dspy_for.compat import optuna as compat
from dspy_for.errors import MissingDependencyError


def test_the_installed_optuna_is_supported():
    compat.check_supported()
    study = optuna.create_study()
    trial = study.ask()
    assert compat.trial_id(trial) == compat.trial_id(study.trials[0]) and compat.storage_of(study) is not None
    with compat.heartbeat(trial, study):  # in-memory storage: no heartbeat, still a usable context
        pass


def test_an_optuna_without_the_internals_is_refused_with_the_install_command(monkeypatch):
    from optuna.storages import _heartbeat

    monkeypatch.delattr(_heartbeat, "get_heartbeat_thread")
    with pytest.raises(MissingDependencyError, match=r"get_heartbeat_thread.*pip install 'optuna>=5.0,<6'"):
        compat.check_supported()
