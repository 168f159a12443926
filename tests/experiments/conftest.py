"""Fixtures shared by the experiments tests."""

from __future__ import annotations

from collections.abc import Callable

import dspy
import pytest
from dspy.clients.cache import Cache

import dspy_for.experiments.core.prepare as run_mod
import dspy_for.experiments.core.stored_lms as stored_mod
from dspy_for.testing import Responder, ScriptedLM


@pytest.fixture
def install_scripted_lm(monkeypatch, tmp_path) -> Callable[[Responder], ScriptedLM]:
    """``install(responder)``: every LM a run builds becomes one scripted LM (DSPy's cache on, in memory), and
    the test runs in its temporary directory. The LM's ``built`` list records each (spec, options) asked for. A run
    whose every item is stored builds none: the same LM stands for each of its LMs (as a ``StoredLM`` does, never
    called), not recorded in ``built``."""

    def install(responder: Responder) -> ScriptedLM:
        monkeypatch.setattr(
            dspy,
            "cache",
            Cache(enable_disk_cache=False, enable_memory_cache=True, disk_cache_dir="", memory_max_entries=10_000),
        )
        lm = ScriptedLM(responder, cache=True)
        lm.built = []  # type: ignore[attr-defined]

        def fake_make_lm(spec, **options):
            lm.built.append((spec, options))  # type: ignore[attr-defined]
            return lm

        monkeypatch.setattr(run_mod, "make_lm", fake_make_lm)
        monkeypatch.setattr(stored_mod, "stored_lm", lambda spec, lm_spec, *args: lm)
        monkeypatch.setattr(run_mod, "stored_lm", lambda spec, lm_spec, *args: lm)
        monkeypatch.chdir(tmp_path)
        return lm

    return install


@pytest.fixture
def no_lm_no_run(monkeypatch):
    """Building a run's LM (every role's goes through ``make_lm``), calling any LM, starting a process (the local
    server), pulling a model, opening a URL or pointing MLflow anywhere fails the test: what a dry run must never do. (Checking a compile table's
    options builds its optimizer around a placeholder ``dspy.LM`` that is never called, as the run's checks do.)"""
    import subprocess
    import urllib.request

    import litellm
    import mlflow

    import dspy_for.lm.factory as factory
    import dspy_for.lm.registry as registry

    def refuse(*args, **kwargs):
        raise AssertionError("a dry run must build no LM, call none, start no process and open no MLflow run")

    for owner, name in [
        (run_mod, "make_lm"),
        (run_mod, "role_lm"),
        (run_mod, "build_lms"),
        (factory, "make_lm"),
        (dspy.LM, "forward"),
        (dspy.LM, "aforward"),
        (litellm, "completion"),
        (litellm, "acompletion"),
        (subprocess, "Popen"),
        (urllib.request, "urlopen"),
        (registry, "pull_model"),
        (mlflow, "start_run"),
        (mlflow, "set_tracking_uri"),
    ]:
        monkeypatch.setattr(owner, name, refuse)
