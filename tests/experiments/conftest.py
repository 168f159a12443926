"""Fixtures shared by the experiments tests."""

from __future__ import annotations

from collections.abc import Callable

import dspy
import pytest
from dspy.clients.cache import Cache

import dspy_for.experiments.core.prepare as run_mod
from dspy_for.testing import Responder, ScriptedLM


@pytest.fixture
def install_scripted_lm(monkeypatch, tmp_path) -> Callable[[Responder], ScriptedLM]:
    """``install(responder)``: every LM a run builds becomes one scripted LM (DSPy's cache on, in memory), and
    the test runs in its temporary directory. The LM's ``built`` list records each (spec, options) asked for."""

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
        monkeypatch.chdir(tmp_path)
        return lm

    return install
