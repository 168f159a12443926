"""`compare --data FILE.jsonl` with a scripted LM: the user's own JSONL runs end to end from the command line and from
Python, numeric answers scored by the numeric rule and text answers by normalized exact match; `--data` with
`--dataset` or `--split` is refused before any LM call; `--dataset` without `--split` runs the val split; `--max-cost`
and `--budget-usd` out of range fail with exit 2 before any LM call."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dspy_for.cli import app
from dspy_for.datasets import DATASETS, dataset_info, register_jsonl
from dspy_for.errors import ConfigError
from dspy_for.experiments import compare
from dspy_for.experiments.spec.config import load_spec
from dspy_for.testing import ScriptedLM, system_text, user_text

CAPITALS = {"France": "Paris", "Italy": "Rome", "Spain": "Madrid", "Japan": "Tokyo"}


def _uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/mlruns/mlflow.db"


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _sums(tmp_path: Path, n: int = 6) -> Path:
    """Numeric answers, as JSON numbers and as strings that are one number."""
    rows = [{"question": f"What is 3 + {i}?", "answer": 3 + i if i % 2 else str(3 + i)} for i in range(n)]
    return _jsonl(tmp_path / "sums.jsonl", rows)


def _capitals(tmp_path: Path) -> Path:
    """Text answers (one in lower case: normalized exact match ignores case)."""
    rows = [{"question": f"Capital of {c}?", "answer": a.lower() if c == "Italy" else a} for c, a in CAPITALS.items()]
    return _jsonl(tmp_path / "capitals.jsonl", rows)


def sums_answers(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any]:
    """The right sum written as ``8.0``: the numeric rule accepts it, exact match would not."""
    i = int(user_text(messages).split("What is 3 + ")[1].split("?")[0])
    return {"reasoning": "added", "answer": f"{3 + i}.0"}


def capital_answers(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any]:
    """The right capital with an article and a full stop: normalized exact match accepts it, the numeric rule not."""
    country = next(c for c in CAPITALS if c in user_text(messages))
    return {"reasoning": "known", "answer": f"The {CAPITALS[country]}."}


Install = Callable[[Callable[..., Any]], ScriptedLM]


def _cli(tmp_path: Path, *args: str) -> list[str]:
    return [
        "compare",
        *args,
        "--methods",
        "cot",
        "--lm",
        "openai/fake-model",
        "--tracking-uri",
        _uri(tmp_path),
        "--results-dir",
        str(tmp_path / "results"),
    ]


def test_compare_data_runs_a_numeric_file_end_to_end_from_the_command_line(install_scripted_lm: Install, tmp_path):
    lm = install_scripted_lm(sums_answers)
    out = CliRunner().invoke(app, _cli(tmp_path, "--data", str(_sums(tmp_path))))
    assert out.exit_code == 0, out.output
    assert "jsonl_sums" in out.output and len(lm.calls) == 6
    assert "`answer` (float)" in system_text(lm.calls[0]["messages"])
    again = CliRunner().invoke(app, _cli(tmp_path, "--data", str(tmp_path / "sums.jsonl")))
    assert again.exit_code == 0 and len(lm.calls) == 6  # stored results reused: no new call


@pytest.mark.parametrize(
    ("make", "responder", "name", "metric", "answer_type"),
    [
        (_sums, sums_answers, "jsonl_sums", "numeric_match", "float"),
        (_capitals, capital_answers, "jsonl_capitals", "exact_match", "str"),
    ],
)
def test_compare_data_from_python_picks_the_metric_from_the_answers(
    install_scripted_lm: Install, tmp_path, make, responder, name, metric, answer_type
):
    lm = install_scripted_lm(responder)
    result = compare(None, data=make(tmp_path), methods="cot", lm="openai/fake-model", tracking_uri=_uri(tmp_path))
    assert [(d.name, d.split) for d in result.spec.datasets] == [(name, "all")]
    assert dataset_info(name).metric == metric and dataset_info(name).answer_type == answer_type
    cot = result.results[name]["cot"]
    assert cot.accuracy == 1.0 and result.ok  # each answer is right only under its own metric
    assert f"`answer` ({answer_type})" in system_text(lm.calls[0]["messages"])


def test_compare_data_replaces_the_configs_datasets_and_keeps_first(install_scripted_lm: Install, tmp_path):
    install_scripted_lm(sums_answers)
    config = tmp_path / "c.toml"
    config.write_text(
        'lm = "openai/fake-model"\n[[datasets]]\nname = "gsm8k"\nsplit = "test"\n[[methods]]\nname = "cot"\n'
    )
    spec = load_spec(config, data=_sums(tmp_path), first=2)
    assert [(d.name, d.split, d.first) for d in spec.datasets] == [("jsonl_sums", "all", 2)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dataset", "gsm8k"], "Both were given"),
        (["--split", "val"], "`--split` applies to `--dataset`; with `--data FILE.jsonl` drop it"),
        (["--data-dir", "somewhere"], "`--data-dir` applies to `--dataset`"),
    ],
)
def test_data_with_dataset_or_split_exits_2_before_any_lm_call(install_scripted_lm: Install, tmp_path, args, message):
    lm = install_scripted_lm(sums_answers)
    out = CliRunner().invoke(app, _cli(tmp_path, "--data", str(_sums(tmp_path)), *args))
    flat = " ".join(out.output.split())
    assert out.exit_code == 2 and message in flat, out.output
    assert "--data" in flat and lm.calls == [] and lm.built == []


def test_a_bad_data_file_exits_2_naming_the_line(install_scripted_lm: Install, tmp_path):
    lm = install_scripted_lm(sums_answers)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "a?", "answer": 1}\n{"question": "b?"}\n')
    out = CliRunner().invoke(app, _cli(tmp_path, "--data", str(bad)))
    assert out.exit_code == 2 and "line 2: no `answer`" in " ".join(out.output.split()) and lm.calls == []


def test_dataset_without_split_runs_val_and_the_split_flag_still_wins():
    assert load_spec(None, dataset="gsm8k", methods="cot", lm="openai/x").datasets[0].split == "val"
    assert load_spec(None, dataset="gsm8k", split="sample", methods="cot", lm="openai/x").datasets[0].split == "sample"
    assert {name: info.default_split for name, info in DATASETS.items()} == dict.fromkeys(DATASETS, "val")


def test_a_user_file_defaults_to_its_one_split(tmp_path):
    assert register_jsonl(_sums(tmp_path)).default_split == "all"


def test_the_split_default_reaches_the_library_from_the_command_line(monkeypatch):
    import dspy_for.cli as cli

    seen: dict[str, Any] = {}

    def fake(config: Path | None, overrides: Any) -> None:
        seen["spec"] = load_spec(config, overrides)
        raise ConfigError("stop here")

    monkeypatch.setattr(cli, "run_compare", fake)
    out = CliRunner().invoke(app, ["compare", "--dataset", "gsm8k", "--methods", "cot", "--lm", "openai/x"])
    assert out.exit_code == 2 and "stop here" in out.output, out.output
    assert [(d.name, d.split) for d in seen["spec"].datasets] == [("gsm8k", "val")]


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
@pytest.mark.parametrize("command", ["compare", "advise"])
def test_max_cost_out_of_range_exits_2_before_any_lm_call(install_scripted_lm: Install, tmp_path, command, value):
    lm = install_scripted_lm(sums_answers)
    data = str(_sums(tmp_path))
    args = (
        _cli(tmp_path, "--data", data)
        if command == "compare"
        else ["advise", "--lm", "openai/fake-model", "--data", data, "--tracking-uri", _uri(tmp_path)]
    )
    out = CliRunner().invoke(app, [*args, "--max-cost", value])
    flat = " ".join(out.output.split())
    assert out.exit_code == 2 and "`max_cost` is the USD a run may spend" in flat, out.output
    assert lm.calls == [] and lm.built == []


def test_sweep_max_cost_out_of_range_exits_2_before_any_lm_call(install_scripted_lm: Install, tmp_path):
    lm = install_scripted_lm(sums_answers)
    config = Path(__file__).resolve().parents[2] / "experiments" / "sweep_for.toml"
    out = CliRunner().invoke(
        app, ["sweep", str(config), "--lm", "openai/fake-model", "--tracking-uri", _uri(tmp_path), "--max-cost", "0"]
    )
    assert out.exit_code == 2 and "`max_cost`" in out.output and lm.calls == [] and lm.built == []


@pytest.mark.parametrize("value", ["0", "-0.01"])
def test_budget_usd_out_of_range_exits_2_before_any_lm_call(install_scripted_lm: Install, tmp_path, value):
    lm = install_scripted_lm(sums_answers)
    args = ["advise", "--lm", "openai/fake-model", "--data", str(_sums(tmp_path)), "--budget-usd", value]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 2 and "`--budget-usd` is USD per item" in " ".join(out.output.split()), out.output
    assert lm.calls == [] and lm.built == []


def test_max_cost_must_be_a_positive_number_in_python():
    with pytest.raises(ConfigError, match="`max_cost` is the USD a run may spend"):
        load_spec(None, dataset="gsm8k", methods="cot", lm="openai/x", max_cost=True)
    priced = {"price": {"input": 0.15, "output": 0.6}}  # max_cost needs a price for every LM
    assert load_spec(None, dataset="gsm8k", methods="cot", lm="openai/x", lm_options=priced, max_cost=2).max_cost == 2
    with pytest.raises(ConfigError, match="needs a price for every LM"):
        load_spec(None, dataset="gsm8k", methods="cot", lm="openai/x", max_cost=2)
