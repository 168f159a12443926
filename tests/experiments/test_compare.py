from __future__ import annotations

import os
from pathlib import Path

import dspy
import pytest
from rich.console import Console

import dspy_for.experiments.core.prepare as run_mod
from dspy_for.errors import ConfigError
from dspy_for.experiments.comparison import compare
from dspy_for.experiments.reports.table import rich_tables, table_text
from dspy_for.experiments.spec.config import load_spec
from dspy_for.testing import for_responder

SECRET = "sk-test-THIS-IS-A-FAKE-KEY-1234567890"


responder = for_responder()


CONFIG = """
experiment = "test"
lm = "openai/fake-model"
baseline = "cot"
[[datasets]]
name = "gsm8k"
split = "sample"
first = 4
[[methods]]
name = "single"
[[methods]]
name = "cot"
[[methods]]
name = "for"
label = "for_n1"
options = { rounds = 1 }
"""


@pytest.fixture
def scripted(install_scripted_lm):
    """Every LM the comparison builds is one scripted LM (with its DSPy cache on, in a temp dir)."""
    return install_scripted_lm(responder)


def _write(tmp_path: Path, text: str = CONFIG) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_end_to_end_into_a_temporary_tracking_store(scripted, tmp_path):
    import matplotlib.pyplot as plt
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    open_figures = plt.get_fignums()
    result = compare(_write(tmp_path), tracking_uri=uri)
    assert set(result.results["gsm8k"]) == {"single", "cot", "for_n1"}
    assert plt.get_fignums() == open_figures  # plots are saved and logged, none kept open (compare may run often)
    assert result.results["gsm8k"]["cot"].accuracy == 0.25  # only the first sample problem's answer is 27
    printed = Console(record=True, width=300)
    for table in rich_tables(result):
        printed.print(table)
    assert "for_n1 diagnostics: items 4, flips [round 1, right_to_wrong" in printed.export_text()  # not markup
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("test")
    runs = client.search_runs([exp.experiment_id])
    parent = [r for r in runs if r.data.tags.get("dspy_for.kind") == "comparison"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent[0].info.run_id]
    assert len(parent) == 1 and len(children) == 3
    by_label = {r.data.params["label"]: r for r in children}
    for_run = by_label["for_n1"]
    assert for_run.data.params["dataset"] == "gsm8k" and for_run.data.params["n"] == "4"
    assert for_run.data.params["source"] == "bundled sample" and "data_hash" in for_run.data.params
    assert for_run.data.metrics["accuracy"] == 0.25 and "accuracy_ci_high" in for_run.data.metrics
    assert for_run.data.metrics["calls_per_item.debater"] == 1.0 and "mean.rounds_used" in for_run.data.metrics
    assert "tokens_per_item.defender.spent" in for_run.data.metrics
    arts = {a.path for a in client.list_artifacts(for_run.info.run_id)}
    assert {"items.jsonl", "trajectories.jsonl", "for_n1.program.json"} <= arts
    parent_arts = {a.path for a in client.list_artifacts(parent[0].info.run_id)}
    assert {"summary.jsonl", "summary.txt", "frontier_gsm8k.png", "rounds_for_n1_gsm8k.png"} <= parent_arts
    assert "version.dspy" in parent[0].data.params and "git_commit" in parent[0].data.params
    text = table_text(result)
    assert "for_n1" in text and "(baseline)" in text and "p=" in text
    assert "n=4 is too few for any Δ to reach p<0.05" in " ".join(text.split())  # 4 items cannot resolve any
    # per-role tokens and the method's own stats, as the MLflow metrics have them
    row = next(r for r in result.rows if r["method"] == "for_n1")
    assert set(row["tokens_per_item_by_role"]) >= {"defender", "debater"}
    assert row["tokens_per_item_by_role"]["defender"] == for_run.data.metrics["tokens_per_item.defender"]
    assert row["stats"]["rounds_used"] == for_run.data.metrics["mean.rounds_used"]
    detail = next(line for line in text.splitlines() if line.startswith("for_n1: tokens/item by role:"))
    assert "debater" in detail and "defender" in detail and "rounds_used" in detail


def test_rerun_makes_no_new_lm_calls_and_gives_the_same_table(scripted, tmp_path):
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    first = compare(_write(tmp_path), tracking_uri=uri)
    calls = len(scripted.calls)
    second = compare(_write(tmp_path), tracking_uri=uri)
    assert len(scripted.calls) == calls
    strip = lambda rows: [{k: v for k, v in r.items() if k not in ("wall_time", "reused_time")} for r in rows]  # noqa: E731
    assert strip(first.rows) == strip(second.rows)


def test_a_methods_seconds_per_item_are_its_own_items_and_a_reused_record_keeps_its_time(scripted, tmp_path):
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    first = compare(_write(tmp_path), tracking_uri=uri)
    cot = first.results["gsm8k"]["cot"]
    row = next(r for r in first.rows if r["method"] == "cot")
    assert row["seconds_per_item"] == pytest.approx(sum(i.wall_time for i in cot.scored) / len(cot.scored))
    assert row["seconds_per_item"] < row["wall_time"]  # its own calls, not the pool's time
    second = compare(_write(tmp_path), tracking_uri=uri)  # every record reused: each keeps the time it took
    again = next(r for r in second.rows if r["method"] == "cot")
    assert again["seconds_per_item"] == row["seconds_per_item"] and again["reused_time"] > 0
    text = table_text(second)
    assert "s/item" in text.splitlines()[1] and "s/item*: includes results reused" in text


def test_killed_run_resumes_without_redoing_finished_items(scripted, tmp_path):
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    spec = load_spec(_write(tmp_path), tracking_uri=uri)
    compare(spec)
    (path,) = (tmp_path / "mlruns" / "compare" / "items" / "gsm8k" / "sample").glob("for_n1.*.jsonl")
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:2]) + '\n{"torn')  # killed mid-write
    from dspy.clients.cache import Cache

    dspy.cache = Cache(enable_disk_cache=False, enable_memory_cache=True, disk_cache_dir="", memory_max_entries=10)
    before = len(scripted.calls)
    result = compare(spec)
    new_calls = len(scripted.calls) - before
    assert new_calls == 2 * 4  # two FOR items redone (4 calls each), nothing else
    assert result.results["gsm8k"]["for_n1"].n == 4


def test_growing_the_subset_or_adding_a_method_runs_only_what_is_new(scripted, tmp_path):
    """Iterate on a few items, then grow the run: finished items of every method are reused from
    ``results_dir`` even without the DSPy cache (a fresh machine with the results committed)."""
    from dspy.clients.cache import Cache

    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    results = tmp_path / "results"
    compare(_write(tmp_path), tracking_uri=uri, first=2, methods="cot,for_n1", results_dir=str(results))
    assert sorted(p.name.split(".")[0] for p in (results / "gsm8k" / "sample").glob("*.jsonl")) == ["cot", "for_n1"]

    dspy.cache = Cache(enable_disk_cache=False, enable_memory_cache=True, disk_cache_dir="", memory_max_entries=10)
    before = len(scripted.calls)
    result = compare(_write(tmp_path), tracking_uri=uri, first=3, results_dir=str(results))
    new_calls = len(scripted.calls) - before
    # one new item for cot (1 call) and for_n1 (4 calls), three items for the newly added `single`
    assert new_calls == 1 + 4 + 3
    assert {label: r.n for label, r in result.results["gsm8k"].items()} == {"single": 3, "cot": 3, "for_n1": 3}

    # a changed option is a different result: nothing of the old FOR items is reused for it
    dspy.cache = Cache(enable_disk_cache=False, enable_memory_cache=True, disk_cache_dir="", memory_max_entries=10)
    before = len(scripted.calls)
    compare(
        _write(tmp_path, CONFIG.replace("rounds = 1", "rounds = 1, host = false")),
        tracking_uri=uri,
        first=3,
        methods="for_n1",
        baseline="for_n1",
        results_dir=str(results),
    )
    assert len(scripted.calls) - before == 3 * 3  # defender, debater, revise per item; no Host


def test_an_edited_role_prompt_does_not_reuse_stored_results(scripted, tmp_path, monkeypatch):
    """Stored per-item results belong to the prompts that produced them: after a role prompt changes in the
    library, the same config runs its items again instead of reporting the old prompt's results."""
    from dspy.clients.cache import Cache

    from dspy_for.modules import for_signatures

    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    results = tmp_path / "results"
    compare(_write(tmp_path), tracking_uri=uri, first=2, methods="for_n1", baseline="for_n1", results_dir=str(results))
    dspy.cache = Cache(enable_disk_cache=False, enable_memory_cache=True, disk_cache_dir="", memory_max_entries=10)
    before = len(scripted.calls)
    compare(_write(tmp_path), tracking_uri=uri, first=2, methods="for_n1", baseline="for_n1", results_dir=str(results))
    assert len(scripted.calls) == before  # same prompts: every item comes from results_dir

    monkeypatch.setattr(for_signatures.Debater, "__doc__", for_signatures.Debater.__doc__ + " Be brief.")
    compare(_write(tmp_path), tracking_uri=uri, first=2, methods="for_n1", baseline="for_n1", results_dir=str(results))
    assert len(scripted.calls) > before
    assert len(list((results / "gsm8k" / "sample").glob("for_n1.*.jsonl"))) == 2


def test_a_method_revision_does_not_reuse_results_stored_by_older_code(scripted, tmp_path, monkeypatch):
    """A fix that changes a method's answers bumps its ``revision``: the same config then runs its items
    again instead of reporting what the old code answered (revision 0 keeps every stored key)."""
    from dataclasses import replace

    from dspy.clients.cache import Cache

    from dspy_for.experiments.methods import entry as methods

    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    results = tmp_path / "results"
    dspy.cache = Cache(enable_disk_cache=False, enable_memory_cache=False, disk_cache_dir="", memory_max_entries=0)
    run = dict(tracking_uri=uri, first=2, methods="cot", baseline="cot", results_dir=str(results))
    compare(_write(tmp_path), **run)
    before = len(scripted.calls)
    monkeypatch.setitem(methods._REGISTRY, "cot", replace(methods.get_method("cot"), revision=0))
    compare(_write(tmp_path), **run)
    assert len(scripted.calls) == before  # revision 0 is the key every stored result has

    monkeypatch.setitem(methods._REGISTRY, "cot", replace(methods.get_method("cot"), revision=1))
    compare(_write(tmp_path), **run)
    assert len(scripted.calls) == before + 2
    assert len(list((results / "gsm8k" / "sample").glob("cot.*.jsonl"))) == 2


def test_one_failing_method_leaves_the_others_logged(scripted, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    real_build = run_mod.build_method

    def build(name, *a, **k):
        if name == "single":
            raise RuntimeError("boom")
        return real_build(name, *a, **k)

    monkeypatch.setattr(run_mod, "build_method", build)
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    result = compare(_write(tmp_path), tracking_uri=uri)
    assert "boom" in result.errors["gsm8k"]["single"] and set(result.results["gsm8k"]) == {"cot", "for_n1"}
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("test").experiment_id])
    statuses = sorted(r.info.status for r in runs)
    assert statuses == ["FAILED", "FINISHED", "FINISHED", "FINISHED"]
    assert any("FAILED" in r["method"] or "error" in r for r in result.rows)


def test_failing_items_are_counted_not_fatal(scripted, tmp_path):
    def flaky(messages, max_tokens):
        if "Tom reads" in str(messages[-1]["content"]):
            raise RuntimeError("server hiccup")
        return responder(messages, max_tokens)

    scripted.responder = flaky
    cfg = CONFIG.replace("first = 4", "first = 4").replace('[[methods]]\nname = "single"\n', "")
    result = compare(_write(tmp_path, cfg), tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    cot = result.results["gsm8k"]["cot"]
    assert cot.n == 4 and cot.n_failed == 1 and "hiccup" in next(i.error for i in cot.items if i.error)


def test_secrets_never_reach_the_tracking_directory(scripted, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    cfg = CONFIG.replace(
        'lm = "openai/fake-model"', f'lm = "openai/fake-model"\nrole_lms = {{ host = "openai/{SECRET}" }}'
    )
    compare(_write(tmp_path, cfg), tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    hits = []
    for path in (tmp_path / "mlruns").rglob("*"):
        if path.is_file() and SECRET.encode() in path.read_bytes():
            hits.append(path)
    assert hits == []


def test_spec_validation_errors_are_clear(tmp_path):
    with pytest.raises(ConfigError, match="Unknown key `lm_spec`"):
        load_spec(_write(tmp_path, 'lm_spec = "x"\n'))
    with pytest.raises(ConfigError, match="Unknown option `rounds`"):
        load_spec(_write(tmp_path, CONFIG + '[[methods]]\nname = "cot"\nlabel = "x"\noptions = { rounds = 2 }\n'))
    with pytest.raises(ConfigError, match="used twice"):
        load_spec(_write(tmp_path, CONFIG + '[[methods]]\nname = "cot"\n'))
    with pytest.raises(ConfigError, match="Unknown split `dev`"):
        load_spec(_write(tmp_path), split="dev")
    with pytest.raises(ConfigError, match="does not exist"):
        load_spec(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="ROLE=MODEL"):
        load_spec(_write(tmp_path), role_lms=["debater"])


def test_flags_override_the_config(tmp_path):
    spec = load_spec(_write(tmp_path), methods="cot,for", limit=2, lm="openai/other", role_lms=["host=openai/h"])
    assert [m.label for m in spec.methods] == ["cot", "for_n1"]  # a name picks the configured method
    assert spec.datasets[0].limit == 2 and spec.lm == "openai/other" and spec.role_lms == {"host": "openai/h"}
    assert spec.fingerprint() != load_spec(_write(tmp_path)).fingerprint()


def test_matched_budget_sizes_baselines_from_for(scripted, tmp_path):
    cfg = CONFIG.replace('baseline = "cot"', 'baseline = "cot"\nmatch_budget = true').replace(
        '[[methods]]\nname = "single"\n',
        '[[methods]]\nname = "self_consistency"\n[[methods]]\nname = "refine"\n'
        '[[methods]]\nname = "defender_sc"\noptions = { stop = "agreement" }\n',
    )
    result = compare(_write(tmp_path, cfg), tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    r = result.results["gsm8k"]
    ratio = r["for_n1"].tokens_per_item / r["cot"].tokens_per_item
    k = max(1, round(ratio))
    assert r["self_consistency"].calls_per_item == pytest.approx(k)
    assert abs(r["self_consistency"].tokens_per_item - r["for_n1"].tokens_per_item) < r["cot"].tokens_per_item
    # Refine may spend up to k attempts, but stops at its first one whose answer parses (all of them here)
    assert k > 1 and r["refine"].calls_per_item == pytest.approx(1.0)
    # defender_sc gets the same k, as the cap of its adaptive stop rule (unanimous samples stop it early)
    assert all(i.stats["k"] == k for i in r["defender_sc"].items)
    assert r["defender_sc"].calls_per_item <= k
    assert os.path.exists(result.plots[0])


def test_refine_reward_asks_for_the_tasks_answer_not_cots_reasoning():
    from dspy_for.modules.refine import answer_parses_reward as _answer_parses_reward

    reward = _answer_parses_reward("question -> answer")
    assert reward({}, dspy.Prediction(reasoning="2 + 2 = 4", answer="4")) == 1.0
    assert reward({}, dspy.Prediction(reasoning="2 + 2 = 4", answer="")) == 0.0
    assert reward({}, dspy.Prediction(reasoning="2 + 2 = 4")) == 0.0


@pytest.mark.parametrize(
    ("method", "options", "message"),
    [
        ("for", "{ rounds = -1 }", "`rounds` must be an integer >= 0"),
        ("for", "{ rounds = 1.5 }", "`rounds` must be an integer >= 0"),
        ("prorefine", "{ k = 0 }", "`k` must be a positive integer"),
        ("prorefine", "{ n = -2 }", "`n` must be a positive integer"),
        ("refine", "{ N = 0 }", "`N` must be a positive integer"),
        ("self_consistency", "{ k = 0 }", "`k` must be a positive integer"),
        ("self_consistency", "{ temperature = -0.5 }", "`temperature` must be a number >= 0"),
        ("cot", "{ temperature = -1 }", "`temperature` must be >= 0"),
    ],
)
def test_bad_option_values_fail_before_anything_runs(tmp_path, method, options, message):
    cfg = CONFIG + f'[[methods]]\nname = "{method}"\nlabel = "bad"\noptions = {options}\n'
    with pytest.raises(ConfigError, match=message):
        load_spec(_write(tmp_path, cfg))


def test_the_cli_names_the_config_s_tracking_uri_where_to_browse_the_run(scripted, tmp_path):
    from typer.testing import CliRunner

    from dspy_for.cli import app

    uri = f"sqlite:///{tmp_path}/elsewhere/mlflow.db"
    config = _write(tmp_path, f'tracking_uri = "{uri}"\n' + CONFIG)
    out = CliRunner().invoke(app, ["compare", str(config)], env={"COLUMNS": "300"})
    assert out.exit_code == 0, out.output
    assert f"browse with: dspy-for ui --tracking-uri {uri}" in out.output
