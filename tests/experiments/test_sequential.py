"""`compare --sequential` and the sweep's paired pruner, with scripted LMs: a comparison stops as soon as a pair is
resolved (and says at which n), runs to `max_items` on identical methods, replays from stored results without an
LM call; a sweep trial resolved worse than the best one is pruned early."""

from __future__ import annotations

from pathlib import Path

import pytest

from dspy_for.datasets import load_dataset
from dspy_for.errors import ConfigError
from dspy_for.experiments.comparison import compare
from dspy_for.experiments.sweeps import sweep
from dspy_for.experiments.sweeps.pruning import resolved_worse
from dspy_for.testing import system_text, user_text

GOLD = {ex.question: ex.answer for ex in load_dataset("gsm8k", "sample")}


def _gold_of(messages) -> float:
    text = user_text(messages)
    return next(g for q, g in GOLD.items() if q in text)


def cot_right_single_wrong(messages, max_tokens):
    """CoT (its prompt asks for reasoning) answers every item right; the single prompt every item wrong."""
    gold = _gold_of(messages)
    if "reasoning" in system_text(messages):
        return {"reasoning": "worked it out", "answer": str(gold)}
    return {"answer": str(gold + 1)}


CONFIG = """
experiment = "seq"
lm = "openai/fake-model"
baseline = "single"
sequential = true
batch_size = 2
{extra}
[[datasets]]
name = "gsm8k"
split = "sample"
{methods}
"""
TWO = '[[methods]]\nname = "single"\n[[methods]]\nname = "cot"\n'


def _write(tmp_path: Path, methods: str = TWO, extra: str = "") -> Path:
    path = tmp_path / "seq.toml"
    path.write_text(CONFIG.format(methods=methods, extra=extra))
    return path


def test_a_pair_that_is_always_discordant_stops_early(install_scripted_lm, tmp_path: Path):
    lm = install_scripted_lm(cot_right_single_wrong)
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    result = compare(_write(tmp_path), tracking_uri=uri)
    (pair,) = result.sequential
    assert pair.method == "cot" and pair.result.resolved and pair.result.direction == 1
    stop = pair.result.stopped_at
    assert 3 <= stop < 20  # far fewer than the 45 items a fixed comparison would run
    runs = result.results["gsm8k"]
    assert runs["cot"].n == runs["single"].n < 45  # both stopped with the pair, batch by batch
    assert "resolved at n=" in next(line for line in pair.text().splitlines())

    from mlflow.tracking import MlflowClient

    parent = MlflowClient(uri).get_run(result.run_id)
    assert parent.data.tags["sequential.gsm8k.cot"] == "resolved"
    assert parent.data.metrics["sequential.gsm8k.cot.stopping_n"] == stop

    calls = len(lm.history)
    again = compare(_write(tmp_path), tracking_uri=uri)  # a replay of the stored results
    assert len(lm.history) == calls  # no LM call
    assert again.sequential[0].result.stopped_at == stop


def test_identical_methods_run_to_max_items_unresolved(install_scripted_lm, tmp_path: Path):
    install_scripted_lm(cot_right_single_wrong)
    twins = '[[methods]]\nname = "cot"\nlabel = "a"\n[[methods]]\nname = "cot"\nlabel = "b"\n'
    config = (
        _write(tmp_path, twins, extra="max_items = 10").read_text().replace('baseline = "single"', 'baseline = "a"')
    )
    (tmp_path / "seq.toml").write_text(config)
    result = compare(tmp_path / "seq.toml", tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    (pair,) = result.sequential
    assert not pair.result.resolved and pair.result.n == 10 and pair.result.stopped_at is None
    assert result.results["gsm8k"]["b"].n == 10 and "unresolved after n=10" in pair.text()


def test_sequential_input_errors_name_the_option(tmp_path: Path):
    with pytest.raises(ConfigError, match="max_items"):
        compare(_write(tmp_path, extra="max_items = 0"))
    with pytest.raises(ConfigError, match="match_budget"):
        compare(_write(tmp_path, TWO + '[[methods]]\nname = "self_consistency"\n', extra="match_budget = true"))
    with pytest.raises(ConfigError, match="alpha"):
        compare(_write(tmp_path, extra="alpha = 1.5"))


def test_resolved_worse_needs_a_resolved_difference():
    right, wrong = [1.0] * 40, [0.0] * 40
    assert resolved_worse(wrong, right, maximize=True, alpha=0.05, binary=True)
    assert not resolved_worse(right, wrong, maximize=True, alpha=0.05, binary=True)  # better is not pruned
    assert not resolved_worse(wrong[:3], right[:3], maximize=True, alpha=0.05, binary=True)  # too few items yet
    assert not resolved_worse(right, right, maximize=True, alpha=0.05, binary=True)


SWEEP = """
method = ["cot", "single"]
lm = "openai/fake-model"
n_trials = 2
chunk_size = 2
sampler = "random"
pruner = "paired"
study = "paired"
enqueue = [{{ method = "cot" }}, {{ method = "single" }}]
[dataset]
name = "gsm8k"
split = "sample"
first = 40
[search]
"""


def test_the_paired_pruner_stops_a_trial_resolved_worse_than_the_best(install_scripted_lm, tmp_path: Path):
    install_scripted_lm(cot_right_single_wrong)
    config = tmp_path / "sweep.toml"
    config.write_text(SWEEP.format())
    result = sweep(config, tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db", storage=None)
    by_method = {t.params["method"]: t for t in result.study.get_trials(deepcopy=False)}
    assert by_method["cot"].state.name == "COMPLETE"
    assert by_method["single"].state.name == "PRUNED"
    assert by_method["single"].user_attrs["n_items"] < 40  # stopped once resolved worse, not at the end


def test_a_sequential_comparison_loads_back_with_its_pairs(install_scripted_lm, tmp_path: Path):
    """From its run id: the same cells (none counted missing: it stopped early by design) and its anytime-valid
    pairs, as the pair frame's rows."""
    from dspy_for.experiments import load_results

    lm = install_scripted_lm(cot_right_single_wrong)
    lm.model = "openai/fake-model"  # the name the config's LM has (make_lm is replaced by this one LM)
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    live = compare(_write(tmp_path), tracking_uri=uri)
    loaded = load_results(run_id=live.run_id, tracking_uri=uri)
    wall = ("wall_time", "reused_time")
    assert [{k: v for k, v in r.items() if k not in wall} for r in loaded.rows] == [
        {k: v for k, v in r.items() if k not in wall} for r in live.rows
    ]
    assert loaded.sequential == live.sequential and not loaded.missing
    pairs = loaded.to_pandas(level="pairs")
    seq = pairs[pairs["paired_test"] == "sequential_binary"]
    assert seq[["method", "baseline", "resolved", "stopped_at"]].astype(object).values.tolist() == [
        ["cot", "single", True, live.sequential[0].result.stopped_at]
    ]
    from_config = load_results(_write(tmp_path), tracking_uri=uri)
    assert not from_config.missing and not from_config.sequential  # its pairs come back with the run id only
