"""Results as data frames: a comparison's items, cells and pairs, an advice's candidates, a sweep's trials — each read
from the typed results the printed tables read, with one flattening rule for per-role columns, every column of its
declared type, and every row naming where it came from (run, experiment, config, each role's LM)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import dspy
import optuna
import pytest
from dspy.clients.cache import Cache

from dspy_for.errors import ConfigError
from dspy_for.experiments import compare
from dspy_for.experiments.advisor.result import Advice, CandidateOutcome, CandidatePair
from dspy_for.experiments.core.frame_columns import CELL_COLUMNS, ITEM_COLUMNS, PAIR_COLUMNS, fixed_names
from dspy_for.experiments.spec import DatasetConfig, ExperimentSpec, MethodConfig
from dspy_for.experiments.sweeps.frames import trials_frame
from dspy_for.stats import SequentialResult
from dspy_for.testing import ScriptedLM, for_responder


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    """cot (baseline) and FOR N=1 on the first 4 sample items, 2 epochs, on one scripted LM (passed as an object);
    run once for the module."""
    tmp_path = tmp_path_factory.mktemp("frames")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dspy, "cache", Cache(enable_disk_cache=False, enable_memory_cache=True, disk_cache_dir=""))
        mp.chdir(tmp_path)
        lm = ScriptedLM(for_responder(), cache=True)
        lm.kwargs["temperature"] = 0.7  # epochs must be able to differ
        spec = ExperimentSpec(
            lm=lm,
            datasets=[DatasetConfig(name="gsm8k", split="sample", first=4)],
            methods=[MethodConfig("cot"), MethodConfig("for", label="for_n1", options={"rounds": 1})],
            baseline="cot",
            epochs=2,
            experiment="frames",
            tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db",
        )
        return compare(spec)


def test_the_item_frame_has_one_row_per_item_method_and_epoch_with_per_role_columns(result):
    items = result.to_pandas()  # level="items" is the default
    assert len(items) == 4 * 2 * 2  # items × methods × epochs
    assert list(items.columns[: len(fixed_names(ITEM_COLUMNS))]) == fixed_names(ITEM_COLUMNS)
    assert sorted(set(items["epoch"])) == [0, 1]
    for_rows = items[items["method"] == "for_n1"]
    assert set(for_rows["method_name"]) == {"for"}
    # the one flattening rule: a per-role number is its total's column and the role
    for row in for_rows.to_dict("records"):
        roles = ("defender", "debater", "host")
        assert row["tokens"] == sum(row[f"tokens.{r}"] for r in roles)
        assert row["calls"] == sum(row[f"calls.{r}"] for r in roles) == 4
    cot = items[items["method"] == "cot"]
    assert cot["tokens.defender"].isna().all() and (cot["calls.task"] == 1).all()
    # the record's own values, nothing worked out again
    records = result.results["gsm8k"]["for_n1"].items
    assert list(for_rows["score"]) == [r.score for r in records]
    assert list(for_rows["answer"]) == [r.answer for r in records]
    assert list(for_rows["seconds"]) == [r.wall_time for r in records]
    assert for_rows["cost"].isna().all()  # a scripted LM has no price: absent, never $0
    assert for_rows["served_by"].isna().all()  # nothing recorded what served it: missing, not made up


def test_every_frame_column_has_its_declared_type(result):
    items = result.to_pandas()
    assert str(items["epoch"].dtype) == "Int64" and str(items["tokens.defender"].dtype) == "Int64"  # counts
    assert str(items["failed"].dtype) == "boolean" and str(items["cache_served"].dtype) == "boolean"  # flags
    assert str(items["gold"].dtype) == "string" and set(items["gold"]) == {str(i.gold) for i in _records(result)}
    assert str(items["started_at"].dtype).startswith("datetime64") and str(items["started_at"].dt.tz) == "UTC"
    first = result.results["gsm8k"]["cot"].items[0]
    assert items["started_at"].iloc[0].timestamp() == pytest.approx(first.started_at)
    # the methods in the table's order (cot, then for_n1), never alphabetically
    assert items["method"].cat.ordered and list(items["method"].cat.categories) == ["cot", "for_n1"]
    cells = result.to_pandas(level="cells")
    assert str(cells["n"].dtype) == "Int64" and str(cells["paired_n"].dtype) == "Int64"
    assert str(cells["mixed_serving"].dtype) == "boolean" and str(cells["accuracy"].dtype) == "float64"
    assert str(result.to_pandas(level="pairs")["paired_n"].dtype) == "Int64"


def test_every_row_says_where_it_came_from(result):
    """The comparison's MLflow run, its experiment, the config (a spec object has none: missing) and each role's LM;
    each record's MLflow trace, which is there to open."""
    from mlflow.tracking import MlflowClient

    for level in ("items", "cells", "pairs"):
        frame = result.to_pandas(level=level)
        assert set(frame["run_id"]) == {result.run_id} and set(frame["experiment"]) == {"frames"}, level
        assert frame["config"].isna().all(), level
    items = result.to_pandas()
    assert set(items[items["method"] == "for_n1"]["lm.debater"]) == {"scripted"}
    assert items[items["method"] == "cot"]["lm.debater"].isna().all() and set(items["lm.task"].dropna()) == {"scripted"}
    assert items["trace_id"].notna().all() and items["trace_id"].is_unique
    trace = MlflowClient(result.spec.tracking_uri).get_trace(items["trace_id"].iloc[0])
    assert trace.info.trace_metadata["dspy_for.item_id"] == items["item_id"].iloc[0]


def _records(result):
    return [i for by_label in result.results.values() for r in by_label.values() for i in r.items]


def test_the_cell_frame_reads_the_cells_the_table_prints(result):
    cells = result.to_pandas(level="cells")
    assert list(cells.columns[: len(fixed_names(CELL_COLUMNS))]) == fixed_names(CELL_COLUMNS)
    assert list(cells["method"]) == ["cot", "for_n1"] and set(cells["status"]) == {"measured"}
    for cell, row in zip(result.cells, cells.to_dict("records"), strict=True):
        s = cell.summary
        assert row["n"] == s.n and row["accuracy"] == s.accuracy and row["tokens_per_item"] == s.tokens_per_item
        assert (row["ci_low"], row["ci_high"]) == (s.ci_low, s.ci_high)
        assert row["epochs"] == 2 and row["answers"] == 8
        for role, tokens in s.tokens_per_item_by_role.items():
            assert row[f"tokens_per_item.{role}"] == tokens
            assert row[f"calls_per_item.{role}"] == s.calls_per_item_by_role[role]
    for_row = cells.set_index("method").loc["for_n1"]
    assert for_row["delta"] == result.cells[1].summary.delta
    assert for_row["paired_test"] == result.cells[1].summary.paired_test
    assert for_row["stats.rounds_used"] == 1.0  # a mapping field: <field>.<key>
    assert "spread.disagreeing" in cells.columns  # repeats: how the epochs disagree
    assert math.isnan(cells.set_index("method").loc["cot", "delta"])  # the baseline has no Δ: absent


def test_the_pair_frame_has_each_paired_test(result):
    pairs = result.to_pandas(level="pairs")
    assert list(pairs.columns[: len(fixed_names(PAIR_COLUMNS))]) == fixed_names(PAIR_COLUMNS)
    assert pairs[["method", "baseline", "score"]].astype(str).values.tolist() == [["for_n1", "cot", "accuracy"]]
    s = result.cells[1].summary
    assert pairs.iloc[0]["p_value"] == s.p_value and pairs.iloc[0]["paired_n"] == s.paired_n == 4


def test_an_unknown_level_names_the_ones_there_are(result):
    with pytest.raises(ConfigError, match=r"one of items, cells, pairs for a comparison, got 'rows'"):
        result.to_pandas(level="rows")


def test_a_notebook_shows_the_table_as_html(result):
    html = result._repr_html_()
    assert html.count("<table>") == 1 and "gsm8k — baseline: cot" in html
    assert "<td>for_n1</td>" in html and "<th>acc % [95% CI]</th>" in html and "<th>Δ pts</th>" in html


def test_an_advices_candidates_records_and_pairs(result):
    cot, for_n1 = result.results["gsm8k"]["cot"], result.results["gsm8k"]["for_n1"]
    pair = SequentialResult(4, 0.0, -0.5, 0.5, 1.0, 40.0, False, 0, None, 0, 0, "binary", 0.05)
    advice = Advice(
        spec=result.spec,
        dataset="gsm8k",
        split="sample",
        signature="question -> answer: float",
        budget=None,
        margin=0.05,
        alpha=0.05,
        candidates=[
            CandidateOutcome("cot", "cot", {}, status="recommended", result=cot),
            CandidateOutcome("for_n1", "for", {"rounds": 1}, status="in the running", result=for_n1),
        ],
        pairs=[CandidatePair("cot", "for_n1", pair)],
        recommended="cot",
    )
    cells = advice.to_pandas()
    assert cells[["method", "method_name", "status", "recommended"]].astype(object).values.tolist() == [
        ["cot", "cot", "recommended", True],
        ["for_n1", "for", "in the running", False],
    ]
    assert str(cells["recommended"].dtype) == "boolean" and list(cells["method"].cat.categories) == ["cot", "for_n1"]
    assert cells.set_index("method").loc["for_n1", "options.rounds"] == 1
    assert cells.set_index("method").loc["for_n1", "accuracy"] == for_n1.accuracy
    assert len(advice.to_pandas(level="items")) == len(cot.items) + len(for_n1.items)
    pairs = advice.to_pandas(level="pairs")
    assert pairs[["method", "baseline", "paired_n", "resolved"]].astype(object).values.tolist() == [
        ["cot", "for_n1", 4, False]
    ]
    assert "<td>recommended</td>" in advice._repr_html_()
    documented = _documented("frame.candidates")
    assert [c for c in cells.columns if not _covered(c, documented)] == []


def test_a_sweeps_trials_with_each_option_as_a_column():
    study = optuna.create_study(direction="maximize")
    dist = {"rounds": optuna.distributions.IntDistribution(1, 3)}
    for rounds, value in ((1, 0.5), (3, 0.75)):
        trial = optuna.trial.create_trial(
            params={"rounds": rounds}, distributions=dist, value=value, user_attrs={"tokens_per_item": 100.0 * rounds}
        )
        study.add_trial(trial)
    origin = {"run_id": "r1", "experiment": "sweep", "config": "sweep.toml", "lm.task": "m"}
    trials = trials_frame(study, ["accuracy"], origin)
    assert trials[["trial", "state", "accuracy", "options.rounds", "tokens_per_item"]].astype(
        object
    ).values.tolist() == [
        [0, "COMPLETE", 0.5, 1, 100.0],
        [1, "COMPLETE", 0.75, 3, 300.0],
    ]
    assert set(trials["config"]) == {"sweep.toml"} and str(trials["trial"].dtype) == "Int64"
    assert str(trials["started"].dt.tz) == "UTC"
    assert [c for c in trials.columns if not _covered(c, _documented("frame.trials"))] == []
    with pytest.raises(ConfigError, match="a sweep keeps no item records"):
        trials_frame(study, ["accuracy"], origin, level="items")


REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"


def _documented(marker: str) -> list[str]:
    """The columns docs/reference.md lists after ``<!-- reference: marker -->``, in order."""
    lines = REFERENCE.read_text(encoding="utf-8").splitlines()
    start = lines.index(f"<!-- reference: {marker} -->")
    rows = []
    for line in lines[start + 3 :]:
        if not line.startswith("|"):
            break
        rows.append(re.match(r"\|\s*`([^`]+)`", line).group(1))
    return rows


def _covered(column: str, documented: list[str]) -> bool:
    patterns = [re.escape(d).replace(r"\<", "<").replace(r"\>", ">") for d in documented]
    return any(re.fullmatch(re.sub(r"<[^>]+>", ".+", p), column) for p in patterns)


def test_the_reference_lists_every_column_a_frame_has(result):
    frames = {
        "frame.items": result.to_pandas(),
        "frame.cells": result.to_pandas(level="cells"),
        "frame.pairs": result.to_pandas(level="pairs"),
    }
    for marker, frame in frames.items():
        documented = _documented(marker)
        missing = [c for c in frame.columns if not _covered(c, documented)]
        assert not missing, f"docs/reference.md [{marker}] does not list {missing}"
    assert _covered("tokens_per_item.defender", _documented("frame.cells"))
    assert not _covered("tokens_per_items", _documented("frame.cells"))  # the check can fail
