"""Stored results loaded back: ``load_results`` rebuilds the result ``compare`` returned from its config and results
directory — the same cells and frames, wall times apart — with no LM built or called; bad input (no records, a file
type or folder that is not there, a level that does not exist) fails with exit 2 and writes nothing."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pandas as pd
import pytest
from cot_and_for import config
from typer.testing import CliRunner

import dspy_for.experiments.core.prepare as prepare_mod
from dspy_for.cli import app
from dspy_for.errors import ConfigError
from dspy_for.experiments import compare, load_results
from dspy_for.experiments.core.prepare import prepare_run, result_key
from dspy_for.experiments.export import write_frame
from dspy_for.experiments.methods import list_methods
from dspy_for.experiments.reports.table import table_text
from dspy_for.experiments.spec import DatasetConfig, ExperimentSpec, MethodConfig
from dspy_for.testing import for_responder

CONFIG = config("load")
#: the run's wall clock is not stored (a loaded result's times are its records' own), and a loaded result talks to no
#: serving stack now
WALL = ["wall_time", "reused_time", "serving_now"]


@pytest.fixture
def scripted(install_scripted_lm):
    lm = install_scripted_lm(for_responder())
    lm.model = "openai/fake-model"  # the name the config's LM has (make_lm is replaced by this one LM)
    return lm


def _config(tmp_path: Path, text: str = CONFIG) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(f'tracking_uri = "sqlite:///{tmp_path}/mlruns/mlflow.db"\n' + text, encoding="utf-8")
    return path


def _no_lm(*args, **kwargs):
    raise AssertionError("loading stored results must not build an LM")


def test_the_result_key_is_found_without_an_lm_for_every_method(scripted, monkeypatch):
    spec = ExperimentSpec(
        lm="openai/fake-model",
        datasets=[DatasetConfig(name="gsm8k", split="sample")],
        methods=[MethodConfig(m.name) for m in list_methods()],
    )
    d = spec.datasets[0]
    built = {m.label: prepare_run(spec, d, m, examples=[]).key for m in spec.methods}
    monkeypatch.setattr(prepare_mod, "make_lm", _no_lm)
    assert {m.label: result_key(spec, d, m) for m in spec.methods} == built


def test_loaded_results_are_the_runs_cells_and_frames_without_an_lm(scripted, tmp_path, monkeypatch):
    config = _config(tmp_path)
    live = compare(config)
    calls = len(scripted.calls)
    monkeypatch.setattr(prepare_mod, "make_lm", _no_lm)
    loaded = load_results(config)
    assert len(scripted.calls) == calls
    strip = lambda rows: [{k: v for k, v in r.items() if k not in WALL} for r in rows]  # noqa: E731
    assert strip(loaded.rows) == strip(live.rows)
    assert all(r["reused_time"] > 0 for r in loaded.rows)  # every record was reused, at the time it took
    pd.testing.assert_frame_equal(
        live.to_pandas(level="cells").drop(columns=WALL), loaded.to_pandas(level="cells").drop(columns=WALL)
    )
    pd.testing.assert_frame_equal(live.to_pandas(), loaded.to_pandas())
    pd.testing.assert_frame_equal(live.to_pandas(level="pairs"), loaded.to_pandas(level="pairs"))


def test_a_failed_record_counts_until_a_later_run_finishes_it(scripted, tmp_path):
    def flaky(messages, max_tokens):
        if "Tom reads" in str(messages[-1]["content"]):
            raise RuntimeError("server hiccup")
        return for_responder()(messages, max_tokens)

    config = _config(tmp_path)
    scripted.responder = flaky
    live = compare(config)
    loaded = load_results(config)
    assert loaded.results["gsm8k"]["cot"].n_failed == live.results["gsm8k"]["cot"].n_failed == 1
    assert loaded.to_pandas()["failed"].sum() == 2  # one item, both methods
    scripted.responder = for_responder()
    compare(config)  # runs the failed item again
    assert load_results(config).n_failed == 0


def test_an_incomplete_cell_says_how_many_records_are_missing(scripted, tmp_path, caplog):
    config = _config(tmp_path)
    compare(config)
    (path,) = (tmp_path / "mlruns" / "compare" / "items" / "gsm8k" / "sample").glob("for_n1.*.jsonl")
    path.write_text("\n".join(path.read_text().splitlines()[:3]) + "\n")  # one record lost
    with caplog.at_level(logging.WARNING, logger="dspy_for.experiments"):
        loaded = load_results(config)
    assert "for_n1 on gsm8k: 1 of 4 record(s) are not stored" in caplog.text
    cells = loaded.to_pandas(level="cells").set_index("method")
    assert cells.loc["for_n1", "missing"] == 1 and cells.loc["cot", "missing"] == 0
    assert cells.loc["for_n1", "n"] == 3


def test_no_records_for_the_config_is_an_error_naming_the_fix(scripted, tmp_path):
    config = _config(tmp_path)
    with pytest.raises(ConfigError, match="No results directory"):
        load_results(config)
    compare(config, methods="cot", baseline="cot")
    with pytest.raises(ConfigError, match="has no stored records for this config"):
        load_results(config, lm="openai/other-model")
    partial = load_results(config)  # for_n1 never ran: a cell that did not run — not a number, not an error
    assert not partial.errors["gsm8k"] and partial.missing["gsm8k"]["for_n1"] == 4
    cells = partial.to_pandas(level="cells").set_index("method")
    assert cells.loc["for_n1", "status"] == "not run" and pd.isna(cells.loc["for_n1", "accuracy"])
    assert cells.loc["for_n1", "missing"] == 4 and pd.isna(cells.loc["for_n1", "error"])
    assert re.search(r"^for_n1\s+0\s+not run\s*$", table_text(partial), re.MULTILINE)


BAD_EXPORTS = [
    ("out.txt", [], "unknown file type '.txt'"),
    ("missing/out.csv", [], "the folder missing does not exist"),
    ("out.csv", ["--level", "rows"], "`level` must be one of items, cells, pairs"),
    ("out.csv", ["--lm", "openai/other-model"], "no stored records"),
]


def test_bad_export_input_exits_2_and_writes_nothing(scripted, tmp_path):
    config = _config(tmp_path)
    compare(config)
    before = sorted(p.name for p in tmp_path.iterdir())
    for to, extra, message in BAD_EXPORTS:
        out = CliRunner().invoke(app, ["export", str(config), "--to", to, *extra], env={"COLUMNS": "300"})
        assert out.exit_code == 2, out.output
        assert message in " ".join(out.output.split()), out.output
        assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_failed_write_leaves_no_partial_file_and_the_old_one_as_it_was(tmp_path, monkeypatch):
    target = tmp_path / "out.csv"
    target.write_text("old\n")

    def broken(self, path, **kwargs):
        Path(path).write_text("half a fi")
        raise OSError("disk full")

    monkeypatch.setattr(pd.DataFrame, "to_csv", broken)
    with pytest.raises(OSError, match="disk full"):
        write_frame(pd.DataFrame({"a": [1]}), target)
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["out.csv"]


def test_a_comparisons_run_id_stands_for_its_config(scripted, tmp_path, monkeypatch):
    config = _config(tmp_path)
    live = compare(config)
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    monkeypatch.setattr(prepare_mod, "make_lm", _no_lm)
    loaded = load_results(run_id=live.run_id, tracking_uri=uri)
    assert loaded.run_id == live.run_id and loaded.spec.fingerprint() == live.spec.fingerprint()
    strip = lambda rows: [{k: v for k, v in r.items() if k not in WALL} for r in rows]  # noqa: E731
    assert strip(loaded.rows) == strip(live.rows)
    with pytest.raises(ConfigError, match="No MLflow run 'nope'"):
        load_results(run_id="nope", tracking_uri=uri)
    from mlflow.tracking import MlflowClient

    child = next(
        r.info.run_id
        for r in MlflowClient(uri).search_runs([MlflowClient(uri).get_experiment_by_name("load").experiment_id])
        if r.data.tags.get("mlflow.parentRunId") == live.run_id
    )
    with pytest.raises(ConfigError, match="is not a comparison's parent run"):
        load_results(run_id=child, tracking_uri=uri)
    with pytest.raises(ConfigError, match="No MLflow store"):
        load_results(run_id=live.run_id, tracking_uri=f"sqlite:///{tmp_path}/elsewhere.db")


def test_a_compiled_methods_compile_cost_loads_back_as_reused(scripted, tmp_path, monkeypatch):
    text = CONFIG.replace('name = "cot"\n', 'name = "cot"\ncompile = { kind = "bootstrap", trainset = "sample" }\n', 1)
    config = _config(tmp_path, text)
    live = compare(config)
    monkeypatch.setattr(prepare_mod, "make_lm", _no_lm)
    loaded = load_results(config)
    first, again = live.results["gsm8k"]["cot"].compile, loaded.results["gsm8k"]["cot"].compile
    assert first is not None and again is not None and not first.reused and again.reused
    assert (again.kind, again.tokens, again.usage) == (first.kind, first.tokens, first.usage)
    cells = loaded.to_pandas(level="cells").set_index("method")
    assert cells.loc["cot", "compile.tokens"] == first.tokens and bool(cells.loc["cot", "compile.reused"])


def test_a_matched_budgets_sized_method_is_found_as_compare_sized_it(scripted, tmp_path):
    text = CONFIG.replace('baseline = "cot"', 'baseline = "cot"\nmatch_budget = true') + (
        '[[methods]]\nname = "self_consistency"\n'
    )
    config = _config(tmp_path, text.replace("first = 4", "first = 2"))
    live = compare(config)
    loaded = load_results(config)
    assert not loaded.errors["gsm8k"] and not loaded.missing
    strip = lambda rows: [{k: v for k, v in r.items() if k not in WALL} for r in rows]  # noqa: E731
    assert strip(loaded.rows) == strip(live.rows)
    assert loaded.results["gsm8k"]["self_consistency"].calls_per_item > 1  # sized to FOR's tokens, as it ran
