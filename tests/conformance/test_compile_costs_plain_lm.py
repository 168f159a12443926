"""Compile cost and break-even against the local OpenAI-compatible test server, with a plain ``dspy.LM`` (a model
litellm's cost map prices, so every cost is in dollars) and with ``make_lm`` from the command line:

* ``compare`` with a ``compile`` table prints the compile's cost and the break-even volumes, and logs them;
* a re-run reuses the compiled program: no request reaches the server, the cost is marked reused and not spent;
* ``max_cost`` counts a new compile's dollars: a compile that spent past it leaves every item unstarted (exit 1), and
  a re-run with a higher ``max_cost`` reuses the compile (no compile request) and counts only the items;
* ``advise --volume --compile bootstrap --train`` end to end; its bad combinations exit 2 with no request made.

The task is a user's file of sums; the server answers a third of them wrong unless the prompt shows demos (a program
BootstrapFewShot compiled), so the compiled CoT is the more accurate and costs more per item."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import dspy
import pytest
from conftest import CANARY_KEY, output_fields, signature_responder
from typer.testing import CliRunner

from dspy_for.cli import app
from dspy_for.experiments import compare
from dspy_for.experiments.reports.table import table_text
from dspy_for.testing import user_text

MODEL = "gpt-4o-mini"  # priced by the cost map litellm bundles
CONFIG = """
experiment = "compile_costs"
cache = false
[[methods]]
name = "cot"
[[methods]]
name = "cot"
label = "cot_bootstrap"
compile = { kind = "bootstrap", trainset = "all", max_bootstrapped_demos = 2 }
"""


def sums(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any]:
    """Right on "What is 3 + i?" when i is not a multiple of 3, or when the prompt shows demos (several user turns)."""
    i = int(user_text(messages).split("What is 3 + ")[-1].split("?")[0])
    demos = sum(1 for m in messages if m.get("role") == "user") > 1
    return {"reasoning": "added", "answer": str(3 + i if demos or i % 3 else 0)}


def _jsonl(path: Path, numbers: range) -> Path:
    path.write_text("".join(json.dumps({"question": f"What is 3 + {i}?", "answer": 3 + i}) + "\n" for i in numbers))
    return path


@pytest.fixture
def task(fault_server, tmp_path, monkeypatch) -> Any:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    fault_server.responder = sums
    (tmp_path / "c.toml").write_text(CONFIG)
    return fault_server


def _flat(text: str) -> str:
    return " ".join(text.split())


def _run_flags(server: Any, tmp_path: Path) -> list[str]:
    """The LM (``make_lm`` of a priced model, on the server) and where the run is tracked and stored."""
    flags = ["--lm", f"openai/{MODEL}", "--lm-option", f"api_base={server.base_url}", "--lm-option", "num_retries=0"]
    return [
        *flags,
        "--tracking-uri",
        f"sqlite:///{tmp_path}/mlruns/mlflow.db",
        "--results-dir",
        str(tmp_path / "results"),
    ]


def _compare_args(server: Any, tmp_path: Path, *extra: str) -> list[str]:
    data = str(_jsonl(tmp_path / "sums.jsonl", range(18)))
    return [
        "compare",
        str(tmp_path / "c.toml"),
        "--data",
        data,
        "--first",
        "6",
        "--no-traces",
        *_run_flags(server, tmp_path),
        *extra,
    ]


def test_compare_prints_the_compile_cost_and_break_even_and_a_rerun_reuses_the_compile(task, tmp_path):
    from mlflow.tracking import MlflowClient

    lm = dspy.LM(f"openai/{MODEL}", api_base=task.base_url, api_key=CANARY_KEY, cache=False, num_retries=0)
    kw: dict[str, Any] = {"data": _jsonl(tmp_path / "sums.jsonl", range(18)), "first": 6, "lm": lm}
    kw.update(tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db", results_dir=str(tmp_path / "results"))
    result = compare(tmp_path / "c.toml", max_cost=1.0, **kw)
    compile_requests = len(task.requests) - 12  # 6 items of each method, one call each
    assert result.ok and compile_requests > 0
    rows = {r["method"]: r for r in result.rows}
    cost = rows["cot_bootstrap"]["compile"]
    assert rows["cot"]["compile"] is None and not cost["reused"] and cost["left_out"] == 6  # the scored items
    assert cost["train_items"] == 12 and cost["tokens_by_lm"] == {f"openai/{MODEL}": cost["tokens"]} and cost["tokens"]
    assert cost["usd"] > 0 and cost["seconds"] > 0  # priced by the cost map, timed
    assert rows["cot_bootstrap"]["accuracy"] == 1.0 > rows["cot"]["accuracy"]
    assert {r["model"] for r in task.requests} == {MODEL}  # the compile's calls and the items' on the one LM
    # the compile's dollars count against max_cost beside the items'
    items_usd = sum(r["spent_usd"] for r in result.rows)
    assert result.spend is not None and result.spend.total == pytest.approx(items_usd + cost["usd"])
    text = _flat(table_text(result))
    assert re.search(r"cot_bootstrap .*\d[\d,]* tok · \$[\d.]+ · [\d.]+s", text), text
    assert "break-even, in USD" in text and "cot_bootstrap vs cot (USD; fixed cost $" in text
    (pair,) = result.breakeven
    assert (pair.method, pair.against, pair.unit) == ("cot_bootstrap", "cot", "usd")
    assert any(p.name == "breakeven_jsonl_sums.png" and p.is_file() for p in result.plots)
    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    child = next(
        r
        for r in client.search_runs([r.info.experiment_id for r in [client.get_run(result.run_id or "")]])
        if r.data.tags.get("mlflow.runName", "").startswith("cot_bootstrap")
    )
    assert child.data.metrics["compile.usd"] == pytest.approx(cost["usd"]) and child.data.metrics["compile.reused"] == 0
    assert {"compile_usage.json", "compile_cost.json"} <= {a.path for a in client.list_artifacts(child.info.run_id)}

    # the same run again: the compiled program and the items are reused, no request reaches the server
    before = len(task.requests)
    again = compare(tmp_path / "c.toml", max_cost=1.0, **kw)
    assert len(task.requests) == before and again.ok
    reused = next(r for r in again.rows if r["method"] == "cot_bootstrap")["compile"]
    assert reused["reused"] and reused["tokens"] == cost["tokens"] and reused["usd"] == cost["usd"]
    assert again.spend is not None and again.spend.total == 0  # nothing spent: not the compile either
    assert "(reused)" in table_text(again)


def test_max_cost_stops_a_run_whose_compile_spent_past_it_and_a_rerun_reuses_the_compile(task, tmp_path):
    out = CliRunner().invoke(app, _compare_args(task, tmp_path, "--max-cost", "0.000001"), env={"COLUMNS": "250"})
    flat = _flat(out.output)
    compile_requests = len(task.requests)
    assert out.exit_code == 1, out.output
    assert compile_requests > 0 and "max_cost reached" in flat
    # every method was prepared (compiled) before any item started: no item of either starts
    assert "of max_cost $0.000001: reached, 12 item(s) not started" in flat
    assert "cot 0 not run" in flat and "cot_bootstrap 0 not run" in flat, flat
    # a higher max_cost resumes: the compile is reused (no compile request), only the items are spent
    out = CliRunner().invoke(app, _compare_args(task, tmp_path, "--max-cost", "1"), env={"COLUMNS": "250"})
    flat = _flat(out.output)
    assert out.exit_code == 0, out.output
    assert len(task.requests) == compile_requests + 12  # the items only
    assert "(reused)" in flat and "break-even, in USD" in flat


def test_a_compile_table_on_a_method_with_no_predictors_exits_2_before_any_request(task, tmp_path, no_predictors):
    (tmp_path / "c.toml").write_text(CONFIG.replace('name = "cot"\nlabel', 'name = "no_predictors"\nlabel'))
    out = CliRunner().invoke(app, _compare_args(task, tmp_path))
    assert out.exit_code == 2, out.output
    assert "has no predictors" in _flat(out.output) and "compile a method that has predictors" in _flat(out.output)
    assert task.requests == []


def _advise_args(server: Any, tmp_path: Path, *extra: str) -> list[str]:
    data = str(_jsonl(tmp_path / "sums.jsonl", range(24)))
    return ["advise", "--data", data, "--methods", "cot", "--margin", "0.5", *_run_flags(server, tmp_path), *extra]


def test_advise_volume_compile_train_end_to_end_and_resumed(task, tmp_path):
    train = _jsonl(tmp_path / "train.jsonl", range(100, 112))
    args = _advise_args(task, tmp_path, "--volume", "5000", "--compile", "bootstrap", "--train", str(train))
    out = CliRunner().invoke(app, args, env={"COLUMNS": "250"})
    flat = _flat(out.output)
    assert out.exit_code == 0, out.output
    assert "volume 5,000 items" in flat and "/correct @5,000" in flat
    assert re.search(r"cot_bootstrap compile: [\d,]+ tok · \$[\d.]+ · [\d.]+s", flat), flat
    assert "cot_bootstrap vs cot (USD; fixed cost $" in flat
    assert re.search(r"over 5,000 items: \$[\d.]+ per correct answer, compile included", flat), flat
    asked = [r["messages"][-1]["content"] for r in task.requests]
    assert any("What is 3 + 100?" in q for q in asked)  # the compile ran on the training file's items
    cached = list((tmp_path / "results").rglob("cot_bootstrap.*.compiled.json"))
    assert len(cached) == 1 and "load_compiled(program" in flat
    # a re-run reuses the compiled program and every stored item: no request, the compile's recorded cost shown
    before = len(task.requests)
    out = CliRunner().invoke(app, args, env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    assert len(task.requests) == before and "(reused)" in _flat(out.output)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--volume", "0"], "`--volume` is how many items you will run the method on"),
        (["--volume", "-5"], "give a positive integer"),
        (["--volume", "100", "--compile", "bootstrap"], "`--compile` compiles each candidate on your training items"),
        (
            ["--volume", "100", "--compile", "adam", "--train", "TRAIN"],
            "unknown compiler `adam`. Choose from: textgrad",
        ),
        (["--volume", "100", "--compile", "bootstrap", "--train", "missing.jsonl"], "`--train`: Data file"),
        (["--compile", "bootstrap", "--train", "TRAIN"], "say how many items you will run with `--volume N`"),
        (["--volume", "100", "--train", "TRAIN"], "`--train` is what `--compile` trains on"),
        (
            ["--volume", "100", "--methods", "cot,for", "--role-lm", "debater=openai/my-model"],
            "each needs a price, and `openai/my-model` (role `debater`) has none",
        ),
    ],
)
def test_advise_bad_volume_combinations_exit_2_before_any_request(task, tmp_path, extra, message):
    train = str(_jsonl(tmp_path / "train.jsonl", range(100, 104)))
    out = CliRunner().invoke(app, _advise_args(task, tmp_path, *[train if x == "TRAIN" else x for x in extra]))
    assert out.exit_code == 2, out.output
    assert message in _flat(out.output)
    assert task.requests == []


def test_a_compare_whose_every_answer_is_wrong_with_a_compiled_method_exits_0_with_its_table(task, tmp_path):
    """No correct answer: no cost per correct answer to plot (a log scale of nothing once failed the run after its
    last item); the table, the break-even lines and the MLflow runs stand, and the exit code is the items'."""
    task.responder = signature_responder(answer="-1")  # every sum wrong
    args = [a.replace(MODEL, "my-model") for a in _compare_args(task, tmp_path)]  # no price: costs in tokens
    out = CliRunner().invoke(app, args, env={"COLUMNS": "250"})
    flat = _flat(out.output)
    assert out.exit_code == 0, out.output
    assert re.search(r"cot 6 0\.0 \[", flat) and re.search(r"cot_bootstrap 6 0\.0 \[", flat), flat
    assert "cot_bootstrap vs cot (tokens of openai/my-model; fixed cost" in flat, flat
    assert "never the lower cost per correct answer" in flat
    assert "Traceback" not in out.output and "could not be written" not in flat
    assert list(tmp_path.rglob("breakeven_jsonl_sums_openai_my-model.png"))  # the total cost drawn, nothing else


def test_a_report_that_fails_is_logged_and_never_fails_a_finished_run(task, tmp_path, monkeypatch, caplog):
    from mlflow.tracking import MlflowClient

    from dspy_for.experiments.reports import table

    def broken(result: Any) -> dict[str, Any]:
        raise ValueError("the plot broke")

    monkeypatch.setattr(table, "figures", broken)
    lm = dspy.LM(f"openai/{MODEL}", api_base=task.base_url, api_key=CANARY_KEY, cache=False, num_retries=0)
    kw: dict[str, Any] = {"data": _jsonl(tmp_path / "sums.jsonl", range(18)), "first": 6, "lm": lm}
    kw.update(tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db", results_dir=str(tmp_path / "results"))
    result = compare(tmp_path / "c.toml", **kw)
    assert result.ok and {r["method"] for r in result.rows} == {"cot", "cot_bootstrap"} and result.plots == []
    assert "the plots could not be written (the run's results are kept): ValueError: the plot broke" in caplog.text
    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    parent = client.get_run(result.run_id or "")
    assert parent.info.status == "FINISHED" and parent.data.tags["dspy_for.report_failed.the_plots"]
    assert {"summary.jsonl", "summary.txt"} <= {a.path for a in client.list_artifacts(parent.info.run_id)}
    # the records stand: a re-run reuses every item
    before = len(task.requests)
    assert compare(tmp_path / "c.toml", **kw).ok and len(task.requests) == before


def test_advise_compiles_no_candidate_whose_uncompiled_pilot_is_over_the_budget(task, tmp_path):
    """FOR-Prompting's uncompiled pilot is over the budget: its compiled version is not compiled (no request
    shows its debater's or host's prompt beyond the pilot's), CoT's is."""
    task.responder = signature_responder_for_sums()
    train = _jsonl(tmp_path / "train.jsonl", range(100, 112))
    args = _advise_args(task, tmp_path, "--volume", "5000", "--compile", "bootstrap", "--train", str(train))
    args[args.index("cot")] = "cot,for"
    out = CliRunner().invoke(app, [*args, "--budget", "400"], env={"COLUMNS": "250"})
    flat = _flat(out.output)
    assert out.exit_code == 0, out.output
    assert "for_bootstrap" in flat and "not compiled: for, its uncompiled program, is over the budget" in flat, flat
    assert list((tmp_path / "results").rglob("cot_bootstrap.*.compiled.json"))
    assert not list((tmp_path / "results").rglob("for_bootstrap.*.compiled.json"))
    trained = [r for r in task.requests if "What is 3 + 10" in json.dumps(r["messages"][-1])]  # the training items
    assert trained and all(_fields(r) <= {"reasoning", "answer"} for r in trained)  # CoT's compile only


def signature_responder_for_sums() -> Any:
    """The sums answered right, every other field of any signature (FOR's roles) filled."""
    generic = signature_responder()

    def respond(messages: list[dict[str, Any]], max_tokens: int | None) -> Any:
        if "What is 3 + " in user_text(messages) and _asks_answer(messages):
            return sums(messages, max_tokens)
        return generic(messages, max_tokens)

    return respond


def _asks_answer(messages: list[dict[str, Any]]) -> bool:
    return [name for name, _ in output_fields(messages)] == ["reasoning", "answer"]


def _fields(request: dict[str, Any]) -> set[str]:
    return {name for name, _ in output_fields(request["messages"])}
