"""Where a sweep's study lives, and keeping its trials honest across workers and resumes.

* Storage: by default a journal file in ``mlruns/optuna/`` (Optuna's recommendation for several local
  processes); any SQLAlchemy URL otherwise (PostgreSQL for workers on many machines). A malformed or
  unreachable URL is a :class:`ConfigError` before anything runs.
* Workers take trials under a file lock and stop when ``n_trials`` are COMPLETE, PRUNED or RUNNING on a live
  worker. A RUNNING trial whose worker died (its pid is gone on this host, or — for RDB storages — its
  heartbeat stopped) is marked FAIL and re-enqueued with the same parameters; a FAIL trial (failed items,
  an error, or cut by ``--timeout``) is re-enqueued once when the sweep is resumed.
* Sampling: a seeded sweep seeds each trial's draws from its place among the trials that did not fail
  (:mod:`.sampling`), so a resumed sweep, or a second worker, does not repeat the first trials' parameters.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
from pathlib import Path
from typing import Any

from dspy_for.compat import optuna as optuna_compat
from dspy_for.errors import ConfigError, MissingDependencyError
from dspy_for.experiments.sweeps.spec import OBJECTIVES, SweepSpec
from dspy_for.secrets import hide_password

__all__ = ["HOST", "counted", "lock_path", "make_storage", "open_study", "recover_stale", "requeue_failed"]

logger = logging.getLogger("dspy_for.sweep")
HOST = socket.gethostname()


def _default_dir() -> Path:
    d = Path("mlruns") / "optuna"
    d.mkdir(parents=True, exist_ok=True)
    return d


def make_storage(url: str | None) -> Any:
    """None → a journal file in mlruns/optuna/; an SQLAlchemy URL → RDBStorage with heartbeats."""
    import optuna
    from optuna.storages import JournalStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    if url is None or url.startswith("journal:"):
        path = url[len("journal:") :] if url else str(_default_dir() / "journal.log")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        # a worker killed while holding the journal lock must not stall the others for long
        return JournalStorage(JournalFileBackend(path, lock_obj=JournalFileOpenLock(path, grace_period=5)))
    try:
        return RDBStorage(
            url,
            heartbeat_interval=5,
            grace_period=20,
            heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=3),
            engine_kwargs={"pool_pre_ping": True},
        )
    except (ImportError, ModuleNotFoundError) as exc:
        raise MissingDependencyError(
            f"Storage `{hide_password(url)}` needs a database driver: {exc}. For PostgreSQL "
            "install it with `pip install 'dspy-for[postgres]'`."
        ) from None
    except optuna.exceptions.StorageInternalError as exc:
        cause = " ".join(str(exc.__cause__ or exc).split())[:300]
        raise ConfigError(
            f"Cannot open storage `{hide_password(url)}`: {cause}. Check the URL and that the database "
            "server is running, or omit `--storage` to use the journal file in mlruns/optuna/."
        ) from None
    except Exception as exc:  # sqlalchemy's ArgumentError/OperationalError: a malformed or unreachable URL
        cause = " ".join(str(exc).split())[:300]
        raise ConfigError(
            f"`--storage` `{hide_password(url)}` is not a usable storage URL ({type(exc).__name__}: "
            f"{cause}). Use an SQLAlchemy URL such as postgresql://user@host/db or "
            "sqlite:///path.db, `journal:<path>`, or omit it."
        ) from None


def open_study(spec: SweepSpec) -> Any:
    import optuna

    directions = [optuna.study.StudyDirection[OBJECTIVES[o].upper()] for o in spec.objectives]
    return optuna.create_study(
        study_name=spec.study,
        storage=make_storage(spec.storage),
        directions=directions,
        sampler=_sampler(spec),
        pruner=_pruner(spec),
        load_if_exists=True,
    )


def _sampler(spec: SweepSpec) -> Any:
    """The spec's sampler, seeded per trial: a resumed sweep or a second worker does not repeat its draws."""
    import optuna

    from dspy_for.experiments.sweeps.sampling import TrialSeededSampler

    def make(seed: int | None) -> optuna.samplers.BaseSampler:
        if spec.sampler == "nsga2":
            return optuna.samplers.NSGAIISampler(seed=seed)
        if spec.sampler == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        return optuna.samplers.TPESampler(seed=seed, multivariate=spec.multi)

    return TrialSeededSampler(make, spec.seed)


def _pruner(spec: SweepSpec) -> Any:
    import optuna

    if spec.pruner in ("none", "paired") or spec.multi:  # paired: the objective prunes (see .pruning)
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0)


def lock_path(study_name: str, storage_url: str | None) -> Path:
    key = hashlib.sha256(f"{storage_url}|{study_name}".encode()).hexdigest()[:12]
    return _default_dir() / f"{key}.lock"


def worker_alive(trial: Any) -> bool:
    worker = trial.user_attrs.get("worker", "")
    host, _, pid = worker.rpartition(":")
    if host != HOST or not pid.isdigit():
        return True  # another machine: RDB heartbeats handle it
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover_stale(study: Any) -> None:
    """FAIL and re-enqueue RUNNING trials whose worker died (pid gone here, or heartbeat stale)."""
    import optuna
    from optuna.trial import TrialState

    storage = optuna_compat.storage_of(study)
    if isinstance(storage, optuna.storages.RDBStorage):
        optuna.storages.fail_stale_trials(study)  # heartbeat; its callback re-enqueues
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if not worker_alive(t):
            try:
                storage.set_trial_state_values(optuna_compat.trial_id(t), TrialState.FAIL)
            except (RuntimeError, optuna.exceptions.UpdateFinishedTrialError):
                continue
            study.enqueue_trial(t.params, user_attrs={"retry_of": t.number})
            logger.warning("trial %d was left RUNNING by a dead worker: re-enqueued", t.number)


def requeue_failed(study: Any) -> int:
    """Re-enqueue, once, every FAIL trial of an earlier session that has no retry yet (resume re-runs it)."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    retried = {t.user_attrs.get("retry_of") for t in trials}
    n = 0
    for t in trials:
        if t.state == TrialState.FAIL and t.number not in retried and t.params:
            study.enqueue_trial(t.params, user_attrs={"retry_of": t.number})
            n += 1
    if n:
        logger.warning("re-running %d failed trial(s) of an earlier session", n)
    return n


def counted(study: Any) -> int:
    """Trials that count towards ``n_trials``: COMPLETE, PRUNED, and RUNNING on a live worker."""
    from optuna.trial import TrialState

    n = 0
    for t in study.get_trials(deepcopy=False):
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED) or (t.state == TrialState.RUNNING and worker_alive(t)):
            n += 1
    return n
