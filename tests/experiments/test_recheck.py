"""``compare(..., recheck=N)``: the first N stored items of each cell re-run with DSPy's cache off, the changed answers
counted (wrong→right, right→wrong) next to each cell's stored Δ, logged to MLflow, and nothing written to the results
store or DSPy's cache; bad values refused before any LM call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dspy
import pytest
from cot_and_for import config
from typer.testing import CliRunner

from dspy_for.cli import app
from dspy_for.errors import ConfigError
from dspy_for.experiments.comparison import compare
from dspy_for.experiments.reports.recheck import recheck_lines, recheck_rows
from dspy_for.experiments.reports.table import table_text
from dspy_for.testing import for_responder

CONFIG = config("recheck")

# the sample split's first four questions begin so; their gold answers are 27, 170, 135 and 96
FIRST = ("Mia buys", "A bakery", "Tom reads", "A farmer")


class Answers:
    """A responder that answers every role of every method with ``answers[item]`` (the item found by its question),
    changed between runs by assigning to ``answers``."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers

    def __call__(self, messages: list[dict[str, Any]], max_tokens: int | None) -> Any:
        text = " ".join(str(m.get("content", "")) for m in messages)
        item = next(q for q in FIRST if q in text)
        return for_responder(self.answers[item])(messages, max_tokens)


def _store_bytes(results: Path) -> dict[str, bytes]:
    return {str(p.relative_to(results)): p.read_bytes() for p in sorted(results.rglob("*.jsonl"))}


def test_recheck_counts_changed_answers_and_writes_nothing_to_the_store_or_cache(install_scripted_lm, tmp_path):
    from mlflow.tracking import MlflowClient

    answers = Answers({"Mia buys": "27", "A bakery": "5", "Tom reads": "5", "A farmer": "5"})
    lm = install_scripted_lm(answers)
    config = tmp_path / "c.toml"
    config.write_text(CONFIG)
    uri, results = f"sqlite:///{tmp_path}/mlruns/mlflow.db", tmp_path / "results"
    first = compare(config, tracking_uri=uri, results_dir=str(results))
    assert first.recheck == [] and first.results["gsm8k"]["cot"].accuracy == 0.25
    stored = _store_bytes(results)
    assert len(stored) == 2
    cached = len(dspy.cache.memory_cache)
    calls = len(lm.calls)

    # the serving stack now answers item 1 wrong (right→wrong), item 2 right (wrong→right), item 3 differently
    # but still wrong; item 4 is past the 3 rechecked
    answers.answers = {"Mia buys": "28", "A bakery": "170", "Tom reads": "7", "A farmer": "96"}
    out = compare(config, tracking_uri=uri, results_dir=str(results), recheck=3)

    assert _store_bytes(results) == stored  # not one byte of the results store changed
    assert len(dspy.cache.memory_cache) == cached  # nor did DSPy's cache get an entry
    assert out.results["gsm8k"]["cot"].accuracy == 0.25  # the table is the stored records, as before
    assert len(lm.calls) > calls  # the re-runs reached the LM (every answer was in DSPy's cache)
    by_label = {r.label: r for r in out.recheck}
    assert list(by_label) == ["cot", "for_n1"]
    for r in out.recheck:
        assert (r.asked, r.n, r.changed, r.to_right, r.to_wrong, r.failed, r.not_run) == (3, 3, 3, 1, 1, 0, 0)
        assert [(a.stored, a.rerun) for a in r.answers] == [("27.0", "28.0"), ("5.0", "170.0"), ("5.0", "7.0")]
        assert r.rate is not None and r.rate.flips == 2 and r.rate.n == 3
    cot, for_n1 = by_label["cot"], by_label["for_n1"]
    assert cot.baseline and cot.band is None and cot.delta is None
    assert not for_n1.baseline and for_n1.delta == 0.0 and for_n1.paired_n == 4
    assert for_n1.band is not None and for_n1.band > 0.5  # 2 flips of 3 per cell on 4 items: a wide band

    lines = recheck_lines(out.recheck)
    assert "first 3 stored item(s) of each cell re-run with DSPy's cache off" in lines[0]
    assert "cot on gsm8k (sample) (baseline): 3 of 3 answers changed (1 wrong→right, 1 right→wrong" in lines[1]
    assert "its Δ +0.0 pts (p=1.00, n=4) against a noise band of ±" in lines[2] and "within it" in lines[2]
    assert "== gsm8k (sample split) ==" in table_text(out)

    client = MlflowClient(uri)
    assert out.run_id is not None
    logged = client.download_artifacts(out.run_id, "recheck.jsonl", str(tmp_path / "dl"))
    rows = [json.loads(x) for x in Path(logged).read_text().splitlines()]
    assert rows == recheck_rows(out.recheck) and rows[0]["changed"] == 3
    answers_file = client.download_artifacts(out.run_id, "recheck_answers.jsonl", str(tmp_path / "dl"))
    assert len(Path(answers_file).read_text().splitlines()) == 6


def test_a_cell_with_no_stored_items_says_so(install_scripted_lm, tmp_path):
    install_scripted_lm(Answers(dict.fromkeys(FIRST, "1")))
    config = tmp_path / "c.toml"
    config.write_text(CONFIG)
    results = tmp_path / "results"
    out = compare(
        config,
        tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db",
        results_dir=str(results),
        recheck=2,
        first=2,
    )
    assert all(r.n == 2 and r.changed == 0 for r in out.recheck)  # a fresh run: its own records, re-run at once
    out.results["gsm8k"]["for_n1"].items.clear()  # as if none had been stored
    from dspy_for.experiments.core.recheck import recheck_cells

    again = recheck_cells(out.spec, out, results, feed=lambda feeds: None)  # nothing re-run: the notes alone
    assert again[1].note == "no stored items to re-run" and again[1].answers == ()
    assert "for_n1 on gsm8k (sample): no stored items to re-run" in "\n".join(recheck_lines(again))


@pytest.mark.parametrize("value", [0, -1, True, 1.5])
def test_a_bad_recheck_is_refused_before_any_lm_is_built(value, tmp_path):
    config = tmp_path / "c.toml"
    config.write_text(CONFIG)
    with pytest.raises(ConfigError, match="`recheck` must be"):
        compare(config, tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db", recheck=value)
    assert not (tmp_path / "mlruns").exists()


@pytest.mark.parametrize("value", ["0", "-3"])
def test_cli_recheck_zero_or_negative_exits_2_before_any_lm_call(value, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["compare", "--dataset", "gsm8k", "--split", "sample", "--first", "2", "--lm", "openai/never-called"]
    args += ["--lm-option", "api_base=http://127.0.0.1:9/v1", "--recheck", value]
    out = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert out.exit_code == 2, out.output
    assert "`recheck` must be a positive integer" in out.output
    assert not (tmp_path / "mlruns").exists()  # no run was started


def test_a_recheck_config_key_zero_exits_2(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "c.toml"
    config.write_text("recheck = 0\n" + CONFIG)
    out = CliRunner().invoke(app, ["compare", str(config)], env={"COLUMNS": "200"})
    assert out.exit_code == 2, out.output
    assert "`recheck` must be a positive integer" in out.output


def test_the_cli_prints_the_recheck_under_the_tables(install_scripted_lm, tmp_path):
    install_scripted_lm(Answers(dict.fromkeys(FIRST, "27")))
    config = tmp_path / "c.toml"
    config.write_text(CONFIG)
    args = ["compare", str(config), "--recheck", "1", "--no-traces", "--results-dir", str(tmp_path / "results")]
    args += ["--tracking-uri", f"sqlite:///{tmp_path}/mlruns/mlflow.db"]
    out = CliRunner().invoke(app, args, env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "gsm8k (sample split) — baseline: cot" in text
    assert "recheck: the first 1 stored item(s) of each cell re-run with DSPy's cache off" in text
    assert "cot on gsm8k (sample) (baseline): 0 of 1 answers changed (0 wrong→right, 0 right→wrong" in text
    assert "for_n1 on gsm8k (sample): 0 of 1 answers changed" in text and "its Δ +0.0 pts (p=1.00, n=4)" in text
