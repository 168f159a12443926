"""Results where analysts work, against an OpenAI-compatible endpoint: ``compare`` returns a result whose item frame
has one row per item × method × epoch and whose cell frame agrees with the printed table; ``load_results`` on the
run's config and results directory gives the same frames (wall times apart) while the endpoint receives no request;
``dspy-for export`` writes them as CSV, Parquet and JSONL — and the API key reaches none of them."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from conftest import CANARY_KEY, plain_lm
from typer.testing import CliRunner

from dspy_for.cli import app
from dspy_for.experiments import compare, load_results
from dspy_for.experiments.core.frame_columns import CELL_COLUMNS, ITEM_COLUMNS, fixed_names
from dspy_for.experiments.reports.table import table_text
from dspy_for.experiments.spec import DatasetConfig, ExperimentSpec, MethodConfig
from dspy_for.stats import format_p_value

#: the run's wall clock is not stored (a loaded result's times are its records' own), and a loaded result talks to no
#: serving stack now
WALL = ["wall_time", "reused_time", "serving_now"]


def _config(tmp_path: Path, base_url: str) -> Path:
    path = tmp_path / "export.toml"
    path.write_text(
        f"""
experiment = "export"
lm = "openai/test-model"
lm_options = {{ api_base = "{base_url}", num_retries = 0, timeout = 10 }}
cache = false
num_threads = 4
traces = false
baseline = "cot"
tracking_uri = "sqlite:///{tmp_path}/mlruns/mlflow.db"
results_dir = "{tmp_path}/results"
[[datasets]]
name = "gsm8k"
split = "sample"
first = 4
[[methods]]
name = "cot"
[[methods]]
name = "for"
label = "for_n1"
options = {{ rounds = 1 }}
""",
        encoding="utf-8",
    )
    return path


def _table_row(text: str, method: str) -> list[str]:
    line = next(x for x in text.splitlines() if re.match(rf"^{re.escape(method)}\s+\d", x))
    return re.split(r"\s{2,}", line.strip())


def _printed(row: dict, baseline: str) -> list[str]:
    """The table's cells for a cell-frame row, as the table writes them (method, n, acc [CI], Δ, tok/item, s/item)."""
    acc = f"{100 * row['accuracy']:.1f} [{100 * row['ci_low']:.1f}–{100 * row['ci_high']:.1f}]"
    delta = (
        "(baseline)" if row["method"] == baseline else f"{100 * row['delta']:+.1f} ({format_p_value(row['p_value'])})"
    )
    seconds = row["seconds_per_item"]
    return [row["method"], str(row["n"]), acc, delta, f"{row['tokens_per_item']:,.0f}", f"{seconds:.2f}"]


def test_frames_of_a_run_against_an_endpoint_are_loaded_back_and_exported_without_a_request(
    fault_server, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    config = _config(tmp_path, fault_server.base_url)
    result = compare(config)
    assert result.ok and len(fault_server.requests) == 4 * (1 + 4)  # cot: 1 call per item; FOR N=1 + Host: 4

    items = result.to_pandas()
    assert len(items) == 4 * 2 and list(items.columns[: len(fixed_names(ITEM_COLUMNS))]) == fixed_names(ITEM_COLUMNS)
    assert {c for c in items.columns if c.startswith("tokens.")} == {
        "tokens.task",
        "tokens.defender",
        "tokens.debater",
        "tokens.host",
    }
    answered = [r for r in fault_server.responses]
    assert items["tokens"].sum() == sum(r["usage"]["total_tokens"] for r in answered)  # every token the server gave
    assert (items["calls"].groupby(items["method"]).sum() == pd.Series({"cot": 4, "for_n1": 16})).all()

    cells = result.to_pandas(level="cells")
    assert list(cells.columns[: len(fixed_names(CELL_COLUMNS))]) == fixed_names(CELL_COLUMNS)
    text = table_text(result)
    for row in cells.to_dict("records"):
        assert _table_row(text, row["method"]) == _printed(row, "cot"), text

    sent = len(fault_server.requests)
    loaded = load_results(config, tmp_path / "results")
    assert len(fault_server.requests) == sent  # no LM call
    pd.testing.assert_frame_equal(items, loaded.to_pandas())
    pd.testing.assert_frame_equal(cells.drop(columns=WALL), loaded.to_pandas(level="cells").drop(columns=WALL))
    pd.testing.assert_frame_equal(result.to_pandas(level="pairs"), loaded.to_pandas(level="pairs"))

    for suffix, read in ((".csv", pd.read_csv), (".parquet", pd.read_parquet), (".jsonl", _read_jsonl)):
        for level, expected in (("items", items), ("cells", loaded.to_pandas(level="cells"))):
            target = tmp_path / f"{level}{suffix}"
            out = CliRunner().invoke(app, ["export", str(config), "--to", str(target), "--level", level])
            assert out.exit_code == 0, out.output
            written = read(target)
            assert list(written.columns) == list(expected.columns)
            assert written["method"].tolist() == expected["method"].tolist()
            assert written["accuracy" if level == "cells" else "score"].tolist() == pytest.approx(
                expected["accuracy" if level == "cells" else "score"].tolist()
            )
            assert CANARY_KEY not in target.read_text(encoding="utf-8", errors="replace")
    assert len(fault_server.requests) == sent


def _read_jsonl(path: Path) -> pd.DataFrame:
    return pd.read_json(path, lines=True)


def test_a_plain_dspy_lm_runs_results_load_back_from_the_spec(fault_server, tmp_path, monkeypatch):
    """The Python API with a user's own ``dspy.LM``: the spec holds the LM object; loading builds and calls none."""
    monkeypatch.chdir(tmp_path)
    spec = ExperimentSpec(
        lm=plain_lm(fault_server),
        datasets=[DatasetConfig(name="gsm8k", split="sample", first=3)],
        methods=[MethodConfig("cot"), MethodConfig("for", label="for_n1", options={"rounds": 1, "host": False})],
        baseline="cot",
        traces=False,
        experiment="plain",
        tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db",
        results_dir=str(tmp_path / "results"),
    )
    live = compare(spec)
    sent = len(fault_server.requests)
    assert sent == 3 * (1 + 3)
    loaded = load_results(spec)
    assert len(fault_server.requests) == sent
    pd.testing.assert_frame_equal(live.to_pandas(), loaded.to_pandas())
    pd.testing.assert_frame_equal(
        live.to_pandas(level="cells").drop(columns=WALL), loaded.to_pandas(level="cells").drop(columns=WALL)
    )
    assert loaded.to_pandas(level="cells")["tokens_per_item_by_lm.openai/test-model"].notna().all()
