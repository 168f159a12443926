"""Repeats per item (``epochs``): k records per item, each its own sample; reducers; intervals over items as clusters;
paired tests on per-item values; a failed epoch is an error that hides nothing else."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
from scipy.stats import t as student_t

from dspy_for.errors import ConfigError
from dspy_for.experiments import DatasetConfig, ExperimentSpec, MethodConfig, compare
from dspy_for.experiments.core import ItemResult, MethodResult
from dspy_for.experiments.reports.table import table_text
from dspy_for.lm import current_epoch
from dspy_for.stats import clustered_interval, paired_comparison, reduce_epochs, spread


def _spec(tmp_path, epochs: int, methods=("cot",), first: int = 3, **kw: Any) -> ExperimentSpec:
    return ExperimentSpec(
        lm="openai/scripted",
        lm_options={"temperature": 1.0},
        datasets=[DatasetConfig("gsm8k", "sample", first=first)],
        methods=[MethodConfig(m) for m in methods],
        tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db",
        results_dir=str(tmp_path / "results"),
        epochs=epochs,
        **kw,
    )


def _epoch_answer(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any]:
    """Right (gold 27 on the sample's first item, else a wrong 0) on even epochs, wrong on odd ones."""
    return {"reasoning": f"epoch {current_epoch()}", "answer": "27" if current_epoch() % 2 == 0 else "-1"}


# ------------------------------------------------------------------------------------------------ runs


def test_k_epochs_make_k_calls_per_item_a_rerun_none_and_raising_k_only_the_new(install_scripted_lm, tmp_path):
    lm = install_scripted_lm(_epoch_answer)  # its DSPy cache is on: only distinct rollout ids make new calls
    first = compare(_spec(tmp_path, epochs=3)).results["gsm8k"]["cot"]
    assert len(lm.calls) == 9 and first.n == 9 and first.n_scored == 3 and first.epochs == 3
    assert sorted({i.epoch for i in first.items}) == [0, 1, 2]
    assert len({(i.item_key, i.epoch) for i in first.items}) == 9
    compare(_spec(tmp_path, epochs=3))
    assert len(lm.calls) == 9  # a re-run replays every epoch from the results store
    raised = compare(_spec(tmp_path, epochs=4)).results["gsm8k"]["cot"]
    assert len(lm.calls) == 12 and raised.n == 12  # only epoch 3 of each item ran


def test_epoch_zero_is_the_run_without_repeats(install_scripted_lm, tmp_path):
    lm = install_scripted_lm(_epoch_answer)
    once = compare(_spec(tmp_path, epochs=1)).results["gsm8k"]["cot"]
    assert len(lm.calls) == 3 and all(i.epoch == 0 for i in once.items)
    twice = compare(_spec(tmp_path, epochs=2)).results["gsm8k"]["cot"]
    assert len(lm.calls) == 6 and twice.n == 6  # the stored run is epoch 0: only epoch 1 runs


def test_a_failed_epoch_is_an_error_and_hides_none_of_the_items_other_epochs(install_scripted_lm, tmp_path):
    def flaky(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any]:
        if current_epoch() == 1:
            raise RuntimeError("the endpoint went away")
        return {"reasoning": "r", "answer": "27"}

    install_scripted_lm(flaky)
    result = compare(_spec(tmp_path, epochs=3))
    cot = result.results["gsm8k"]["cot"]
    assert cot.n_failed == 3 and cot.n_answers == 6 and cot.n_scored == 3  # every item still has 2 scored epochs
    assert not result.ok and all(i.error is None or i.epoch == 1 for i in cot.items)
    assert all(len(rs) == 2 for rs in cot.epochs_by_item().values())


def test_the_table_says_items_by_epochs_the_reducer_and_the_spread(install_scripted_lm, tmp_path):
    install_scripted_lm(_epoch_answer)
    result = compare(_spec(tmp_path, epochs=2, first=1))
    text = table_text(result)
    assert "1×2" in text and "mean of its epochs" in text and "epochs disagree on 100% of items" in text
    row = next(r for r in result.rows if r["method"] == "cot")
    assert row["accuracy"] == 0.5 and row["epochs"] == 2 and row["reducer"] == "mean" and row["answers"] == 2
    maj = compare(_spec(tmp_path, epochs=2, first=1, reducer="majority", experiment="maj"))
    assert next(r for r in maj.rows if r["method"] == "cot")["accuracy"] == 1.0  # a tie: the first answer, right


def test_epochs_at_temperature_zero_are_refused_naming_the_fix(tmp_path):
    spec = _spec(tmp_path, epochs=4)
    spec.lm_options = {"temperature": 0}
    with pytest.raises(ConfigError, match="answers at temperature 0.*temperature=0.7"):
        spec.validate()
    spec.methods = [MethodConfig("self_consistency")]  # it samples at its own temperature: repeats can differ
    spec.validate()
    with pytest.raises(ConfigError, match="epochs"):
        _spec(tmp_path, epochs=0).validate()
    with pytest.raises(ConfigError, match="reducer"):
        _spec(tmp_path, epochs=2, reducer="median").validate()


def test_paired_tests_and_sequential_tests_take_per_item_values(install_scripted_lm, tmp_path):
    def by_role(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any]:
        text = str(messages)
        right = "reasoning" in text and current_epoch() != 2  # CoT: right in epochs 0, 1; single: always wrong
        return {"reasoning": "r", "answer": "27" if right else "-1"}

    install_scripted_lm(by_role)
    result = compare(_spec(tmp_path, epochs=3, methods=("single", "cot"), first=1))
    cot, single = result.results["gsm8k"]["cot"], result.results["gsm8k"]["single"]
    expected = paired_comparison(list(single.scores_by_key().values()), list(cot.scores_by_key().values()))
    row = next(r for r in result.rows if r["method"] == "single")
    assert row["delta"] == pytest.approx(expected.diff) and row["paired_n"] == 1  # one item, not three draws
    assert row["paired_test"] == expected.test == "paired_bootstrap"  # per-item means are not 0/1
    legend = table_text(result)
    assert "paired bootstrap p over per-item values" in legend and "McNemar" not in legend
    assert "can reach p<0.05" not in legend  # McNemar's floor on n does not hold for means
    seq = compare(_spec(tmp_path, epochs=3, methods=("single", "cot"), first=2, sequential=True, experiment="s"))
    assert seq.sequential and all(p.result.kind == "bounded" for p in seq.sequential)


# ------------------------------------------------------------------------------------------- statistics


def _record(q: str, epoch: int, score: float, answer: str, failed: bool = False) -> ItemResult:
    return ItemResult(
        id=q, question=q, gold="1", prediction={"answer": answer}, score=score, epoch=epoch,
        error="LMError: down" if failed else None,
    )  # fmt: skip


def test_reducers_on_a_scripted_sequence_of_answers():
    epochs = [(1.0, "7"), (0.0, "8"), (0.0, "8"), (1.0, "7")]
    scores, answers = [s for s, _ in epochs], [a for _, a in epochs]
    assert reduce_epochs(scores, answers, "mean") == 0.5
    assert reduce_epochs(scores, answers, "majority") == 1.0  # 7 and 8 tie: 7 was given first
    assert reduce_epochs(scores[:3], answers[:3], "majority") == 0.0  # 8 twice
    assert reduce_epochs([0.0, 0.0, 1.0], ["a", "b", "c"], "pass_at_k") == 1.0
    assert reduce_epochs([0.0, 0.0], ["a", "b"], "pass_at_k") == 0.0
    records = [_record("q1", e, s, a) for e, (s, a) in enumerate(epochs)] + [_record("q2", 0, 1.0, "7")]
    for reducer, expected in (("mean", [0.5, 1.0]), ("majority", [1.0, 1.0]), ("pass_at_k", [1.0, 1.0])):
        assert MethodResult("m", records, reducer=reducer).scores == expected


def test_the_clustered_interval_against_a_hand_computed_case():
    values = [1.0, 0.75, 0.5, 0.5, 0.25, 0.75]  # six items' means over their epochs
    mean = sum(values) / 6
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / 5)
    half = student_t.ppf(0.975, 5) * sd / math.sqrt(6)  # t(5) = 2.5706
    assert clustered_interval(values) == pytest.approx((mean, mean - half, mean + half))
    assert clustered_interval(values)[1:] == pytest.approx(
        (0.3498, 0.9002), abs=1e-4
    )  # by hand: 0.625 ± 2.5706 · 0.2622 / √6
    records = [_record(f"q{i}", e, float(e < round(v * 4)), "x") for i, v in enumerate(values) for e in range(4)]
    result = MethodResult("m", records)
    assert result.accuracy == pytest.approx(mean) and result.ci == pytest.approx((mean - half, mean + half))
    assert result.n_scored == 6 and result.n_answers == 24  # items are the clusters, not 24 draws


def test_the_spread_of_epochs():
    sp = spread([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 1.0, 0.0]])
    assert sp is not None and sp.items == 2 and sp.disagreeing == 0.5
    item_sd = math.sqrt(1 / 3)  # sample sd of 1, 0, 1, 0
    assert sp.epoch_sd == pytest.approx(item_sd / 2)
    assert sp.sampling_se == pytest.approx(math.sqrt((1 / 3) / 4) / 2)
    assert spread([[1.0], [0.0]]) is None
    failed = [_record("q", 0, 1.0, "x"), _record("q", 1, 0.0, "x", failed=True)]
    assert MethodResult("m", failed).scores == [1.0] and MethodResult("m", failed).n_failed == 1


def test_a_sequential_run_prints_the_fixed_runs_numbers_for_the_same_records(install_scripted_lm, tmp_path):
    def varied(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any]:
        text = str(messages)
        right = (len(text) + current_epoch()) % 3 != 0  # per-item means in [0, 1]: the paired bootstrap
        return {"reasoning": "r", "answer": "27" if right and "reasoning" in text else "-1"}

    install_scripted_lm(varied)
    spec = _spec(tmp_path, epochs=3, methods=("single", "cot"), first=6, batch_size=2)
    fixed = compare(spec)
    again = compare(replace(spec, sequential=True, experiment="s"))  # the same stored records, taken shuffled

    def rows(result: Any) -> dict[str, tuple[Any, ...]]:
        return {
            r["method"]: (r["accuracy"], r["delta"], r["delta_low"], r["delta_high"], r["p_value"]) for r in result.rows
        }

    assert rows(again) == rows(fixed)
