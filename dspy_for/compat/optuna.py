"""Optuna internals dspy-for relies on, behind one small surface (Optuna 5.x).

- :func:`storage_of` — ``Study._storage``: to fail a trial left RUNNING by a dead worker;
- :func:`trial_id` — ``Trial._trial_id`` / ``FrozenTrial._trial_id``: the storage's id of a trial;
- :func:`heartbeat` — ``optuna.storages._heartbeat.get_heartbeat_thread``: the RDB heartbeat of a trial
  run outside ``study.optimize`` (our workers use ask/tell to take trials under a lock).

:func:`check_supported` fails loudly when the installed Optuna lacks any of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dspy_for.errors import MissingDependencyError

if TYPE_CHECKING:
    from optuna.storages._heartbeat import BaseHeartbeatThread

__all__ = ["check_supported", "heartbeat", "storage_of", "trial_id"]

SUPPORTED = "optuna>=5.0,<6"


def check_supported() -> None:
    """Raise :class:`MissingDependencyError` naming the supported range if an internal is missing."""
    import optuna
    from optuna.storages import _heartbeat

    study = optuna.create_study()
    trial = study.ask()
    missing = [
        name
        for name, ok in (
            ("Study._storage", hasattr(study, "_storage")),
            ("Trial._trial_id", hasattr(trial, "_trial_id")),
            ("optuna.storages._heartbeat.get_heartbeat_thread", hasattr(_heartbeat, "get_heartbeat_thread")),
        )
        if not ok
    ]
    if missing:
        raise MissingDependencyError(
            f"Optuna {optuna.__version__} lacks {', '.join(missing)}, which dspy-for's sweeps use. "
            f"Install a supported version: `pip install '{SUPPORTED}'`."
        )


def storage_of(study: Any) -> Any:
    return study._storage


def trial_id(trial: Any) -> int:
    return int(trial._trial_id)


def heartbeat(trial: Any, study: Any) -> BaseHeartbeatThread:
    """A context manager that keeps ``trial``'s heartbeat alive (RDB storages with heartbeats; else no-op)."""
    from optuna.storages._heartbeat import get_heartbeat_thread

    return get_heartbeat_thread(trial_id(trial), storage_of(study))
