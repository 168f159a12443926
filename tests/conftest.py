"""Shared fixtures: every test starts from clean DSPy settings, an isolated cache and no network waits."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Runs here must never wait on the network for litellm's model cost map.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import dspy
from dspy.dsp.utils.settings import DEFAULT_CONFIG

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DATASETS = REPO_ROOT.parent / "shared" / "datasets"


@pytest.fixture(autouse=True)
def reset_dspy_settings():
    """Reset DSPy's global configuration before and after each test."""
    dspy.configure(**{k: v for k, v in DEFAULT_CONFIG.items()})
    yield
    dspy.configure(**{k: v for k, v in DEFAULT_CONFIG.items()})


@pytest.fixture
def shared_datasets() -> Path:
    """The real benchmark files in ../shared/datasets; skips when this checkout has none beside it."""
    if not SHARED_DATASETS.is_dir():
        pytest.skip(f"real benchmark data not found at {SHARED_DATASETS}")
    return SHARED_DATASETS


@pytest.fixture
def no_predictors():
    """A registered method with no predictors (test only), by name: nothing for a compiler to tune."""
    from dspy_for.experiments.methods import MethodEntry, register_method
    from dspy_for.experiments.methods.entry import _REGISTRY

    class Plain(dspy.Module):
        def forward(self, **inputs: object) -> dspy.Prediction:
            return dspy.Prediction(answer=0.0)

    register_method(MethodEntry(name="no_predictors", description="test only", factory=lambda sig, lms: Plain()))
    yield "no_predictors"
    _REGISTRY.pop("no_predictors")
