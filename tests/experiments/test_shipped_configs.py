"""Every config shipped in experiments/ parses and validates (no LM, no data needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dspy_for.experiments.spec.config import load_spec
from dspy_for.experiments.sweeps.sweep import load_sweep_spec

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "experiments").glob("*.toml"))


def test_the_configs_are_there():
    names = {p.name for p in CONFIGS}
    assert {
        "quickstart.toml",
        "prorefine_measure.toml",
        "sweep_for.toml",
        "sweep_prorefine.toml",
        "sweep_pareto.toml",
        "sweep_textgrad.toml",
    } <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_config_validates(path):
    if path.name.startswith("sweep_"):
        spec = load_sweep_spec(path)
        assert spec.space is not None
    else:
        spec = load_spec(path)
        assert spec.methods and spec.datasets
