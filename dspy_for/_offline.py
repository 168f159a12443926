"""Offline-safe defaults, applied by ``import dspy_for`` before DSPy or litellm can be imported.

Why: when litellm is imported without ``LITELLM_LOCAL_MODEL_COST_MAP=True`` it downloads its model cost
map from GitHub *during the import*. Offline that first attempt fails (immediately when DNS fails, after
up to its 5 s timeout when packets are dropped, longer when the resolver hangs) and litellm starts a
background thread, ``litellm-model-cost-map-retry``, that logs a warning while the main thread is still
inside ``import litellm``. litellm's logging filter imports more of litellm on both threads. When the main
thread also holds MLflow's import-hook lock — as it does whenever litellm is imported from an MLflow
post-import hook, e.g. by ``mlflow server`` / ``mlflow ui`` at start-up through
``mlflow.server.jobs.utils`` — the two threads wait on each other forever (the retry thread holds a
module import lock and waits for MLflow's lock; the main thread holds MLflow's lock and waits for that
module). ``python -c "import mlflow.server.jobs.utils"`` hangs this way on every offline try; with the
variable set it returns in ~4 s.

Choice: ``import dspy_for`` sets ``LITELLM_LOCAL_MODEL_COST_MAP=True`` with :func:`os.environ.setdefault`,
so litellm uses the cost map bundled with the installed version (token *prices* of models newer than that
version may be missing; dspy-for's budgets count tokens, not dollars). ``import dspy_for`` itself does not
import litellm (DSPy loads it on first use), but every later import in the process — and every child
process, e.g. sweep workers — then skips the download. Set ``LITELLM_LOCAL_MODEL_COST_MAP=False`` before
importing dspy_for to get the remote map back. Likewise ``MLFLOW_DISABLE_TELEMETRY=true``: MLflow's usage telemetry
fetches its configuration over the network from a thread of the run's process and posts events; set it to ``false``
to keep it. ``dspy-for ui`` adds the server-side settings of :data:`dspy_for.experiments.tracking.ui.UI_ENV`.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

__all__ = ["OFFLINE_ENV", "QUIET_ENV", "apply_offline_defaults"]

#: Environment defaults that keep litellm from waiting on (or deadlocking over) the network at import.
OFFLINE_ENV: dict[str, str] = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
#: Environment defaults that keep MLflow's usage telemetry (a thread fetching its configuration over the network,
#: then posting events) out of a run's process.
QUIET_ENV: dict[str, str] = {"MLFLOW_DISABLE_TELEMETRY": "true"}


def apply_offline_defaults(env: MutableMapping[str, str] | None = None) -> None:
    """Set every :data:`OFFLINE_ENV` and :data:`QUIET_ENV` variable that ``env`` (default ``os.environ``) does not set
    yet."""
    target = os.environ if env is None else env
    for key, value in {**OFFLINE_ENV, **QUIET_ENV}.items():
        target.setdefault(key, value)


apply_offline_defaults()
