"""A real (tiny) sweep against the local llama.cpp server: 2 items, 2 trials of FOR on the 0.5B model."""

from __future__ import annotations

import pytest

from dspy_for.experiments.sweeps.sweep import sweep

CONFIG = """
method = "for"
study = "llm"
lm = "local/qwen2.5-coder-0.5b"
max_tokens = 256
n_trials = 2
chunk_size = 1
enqueue = [{ rounds = 1 }, { rounds = 0 }]
[fixed]
host = false
[dataset]
name = "gsm8k"
split = "sample"
first = 2
[search.rounds]
type = "int"
low = 0
high = 1
"""


@pytest.mark.llm
def test_tiny_real_sweep(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "llm.toml"
    cfg.write_text(CONFIG)
    result = sweep(cfg, tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    trials = result.study.trials
    assert result.counts == {"COMPLETE": 2}
    assert [t.params["rounds"] for t in trials] == [1, 0]
    for t in trials:
        assert t.user_attrs["n_items"] == 2 and t.user_attrs["n_failed"] == 0
        assert len(t.user_attrs["intermediate"]) == 2 and 0.0 <= t.value <= 1.0
        assert t.user_attrs["tokens_per_item"] > 0
    # N = 0 is a prefix of the N = 1 run (Host off): served from the cache, nothing new spent
    assert trials[1].user_attrs["spent_tokens"] == 0 and trials[1].user_attrs["cached_tokens"] > 0
