"""A fast objective for the storage / worker tests (imported by worker processes by path)."""

from __future__ import annotations

import os
import time


def make(spec):
    delay = float(os.environ.get("FAKE_OBJECTIVE_DELAY", "0.2"))

    def objective(trial):
        x = trial.suggest_int("rounds", 0, 4)
        host = trial.suggest_categorical("host", [True, False])
        time.sleep(delay)
        trial.set_user_attr("tokens_per_item", 100.0 * (x + 1))
        return 0.1 * x + (0.05 if host else 0.0)

    return objective
