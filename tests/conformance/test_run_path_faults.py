"""``compare`` and ``sweep`` end to end through a plain ``dspy.LM`` (and through LM strings with
``lm_options``) pointed at the fault-injecting server: a number is either right or absent, and the user
is told why. Each test names the defect of issue 17 it pins down."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import CANARY_KEY, plain_lm
from typer.testing import CliRunner

from dspy_for.cli import app
from dspy_for.errors import ConfigError
from dspy_for.experiments import DatasetConfig, ExperimentSpec, MethodConfig, compare, sweep
from dspy_for.experiments.core import ResultStore

REPO = Path(__file__).resolve().parents[2]


def _spec(
    tmp_path: Path, lm, methods=("cot",), first: int = 3, experiment: str = "conformance", **kw
) -> ExperimentSpec:
    return ExperimentSpec(
        lm=lm,
        datasets=[DatasetConfig("gsm8k", "sample", first=first)],
        methods=[MethodConfig(m) for m in methods],
        tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db",
        results_dir=str(tmp_path / "results" / experiment),
        experiment=experiment,
        **kw,
    )


def _all_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())


def test_an_outage_is_failed_items_never_accuracy_zero(fault_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fault_server.set_fault("500")
    result = compare(_spec(tmp_path, plain_lm(fault_server), methods=("single", "cot", "refine")))
    cot = result.results["gsm8k"]["cot"]
    assert cot.n_failed == 3 and cot.n_scored == 0 and cot.all_failed and not result.ok
    refine = result.results["gsm8k"]["refine"]  # dspy.Refine swallows its attempts' errors: still an error here
    assert refine.n_failed == 3 and refine.n_scored == 0
    row = next(r for r in result.rows if r["method"] == "cot")
    assert row["accuracy"] is None and row["tokens_per_item"] is None  # absent, not 0.0
    assert result.item_errors()["LMServerError: [openai/test-model] injected internal server error"] == 9
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("conformance").experiment_id])
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert {r.info.status for r in children} == {"FAILED"}
    assert all("accuracy" not in r.data.metrics and r.data.metrics["failed_items"] == 3 for r in children)


def test_the_cli_prints_each_error_once_and_exits_non_zero(fault_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    fault_server.set_fault("echo401")  # the endpoint echoes the key in its error body
    args = [
        "compare",
        "--dataset",
        "gsm8k",
        "--split",
        "sample",
        "--first",
        "3",
        "--methods",
        "cot",
        "--lm",
        "openai/test-model",
        "--lm-option",
        f"api_base={fault_server.base_url}",
        "--lm-option",
        "num_retries=0",
        "--lm-option",
        "timeout=5",
        "--no-match-budget",
        "--tracking-uri",
        f"sqlite:///{tmp_path}/mlruns/mlflow.db",
        "--results-dir",
        str(tmp_path / "res"),
    ]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 1, out.output
    assert "3 item(s) failed: LMAuthError" in out.output.replace("\n", " ")
    assert out.output.count("item(s) failed: LMAuthError") == 1
    assert CANARY_KEY not in out.output
    assert CANARY_KEY.encode() not in _all_bytes(tmp_path)  # results files, MLflow store and artifacts


def test_a_failed_item_is_excluded_counted_and_retried_on_resume(fault_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = _spec(tmp_path, plain_lm(fault_server))
    fault_server.set_fault("500", times=1)  # a 5xx fault with num_retries=0 (a 503 is a rate limit: retried)
    first = compare(spec).results["gsm8k"]["cot"]
    assert (first.n_failed, first.n_scored) == (1, 2) and first.accuracy in (0.0, 0.5, 1.0)
    assert first.tokens_per_item == pytest.approx(
        sum(i.usage["total"]["prompt_tokens"] + i.usage["total"]["completion_tokens"] for i in first.scored) / 2
    )
    before = len(fault_server.requests)
    second = compare(spec).results["gsm8k"]["cot"]
    assert second.n_failed == 0 and second.n_scored == 3
    assert len(fault_server.requests) - before == 1  # only the failed item ran again


def test_stalls_disconnects_and_garbage_are_errors_not_answers(fault_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for fault in ("stall", "disconnect", "garbage"):
        fault_server.set_fault(fault)
        res = compare(_spec(tmp_path, plain_lm(fault_server, timeout=1), first=1, experiment=fault))
        cot = res.results["gsm8k"]["cot"]
        assert cot.n_failed == 1 and cot.n_scored == 0, fault


def test_unparsable_output_is_a_wrong_answer_counted_apart(fault_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fault_server.responder = lambda messages, max_tokens: "I cannot follow any format, sorry."
    res = compare(_spec(tmp_path, plain_lm(fault_server))).results["gsm8k"]["cot"]
    assert res.n_failed == 0 and res.n_unparsed == 3 and res.n_scored == 3 and res.accuracy == 0.0


def test_a_changed_data_file_reruns_exactly_the_changed_items(fault_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data" / "gsm8k"
    data.mkdir(parents=True)
    rows = [{"question": f"What is {i} + {i}?", "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"} for i in range(1, 5)]
    (data / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = _spec(tmp_path, plain_lm(fault_server))
    spec.datasets = [DatasetConfig("gsm8k", "test", data_dir=str(tmp_path / "data"))]
    compare(spec)
    before = len(fault_server.requests)
    rows[2]["answer"] = "#### 7"  # one gold changes (the file is re-shuffled the same way: positions stay)
    (data / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = compare(spec).results["gsm8k"]["cot"]
    assert len(fault_server.requests) - before == 1
    assert {i.gold for i in res.items} == {2.0, 4.0, 7.0, 8.0}


def test_a_warm_rerun_reports_the_cold_runs_tokens(fault_server, tmp_path, monkeypatch):
    import dspy

    import dspy_for.lm.factory as factory
    from dspy_for.lm import configure_cache

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(dspy, "cache", dspy.cache)  # restored after the test
    monkeypatch.setattr(factory, "_configured_dir", factory._configured_dir)
    configure_cache(tmp_path / "dspy_cache")
    cold = compare(_spec(tmp_path, plain_lm(fault_server, cache=True), methods=("cot", "for")))
    before = len(fault_server.requests)
    warm_spec = _spec(tmp_path, plain_lm(fault_server, cache=True), methods=("cot", "for"))
    warm_spec.results_dir = str(tmp_path / "fresh-results")  # nothing stored: every call is a cache hit
    warm = compare(warm_spec)
    assert len(fault_server.requests) == before
    for label in ("cot", "for"):
        c, w = cold.results["gsm8k"][label], warm.results["gsm8k"][label]
        assert w.tokens_per_item == pytest.approx(c.tokens_per_item) and c.tokens_per_item > 0
        assert w.usage.total.cached_tokens > 0 and w.usage.total.tokens == 0


_CONCURRENT = textwrap.dedent("""
    import sys
    from dspy_for.experiments import DatasetConfig, ExperimentSpec, MethodConfig, compare
    spec = ExperimentSpec(lm="openai/test-model", lm_options={{"api_base": {url!r}, "num_retries": 0}},
                          cache=False, datasets=[DatasetConfig("gsm8k", "sample", first=3)],
                          methods=[MethodConfig("cot")], results_dir="results", experiment="two-at-once")
    res = compare(spec)
    sys.exit(0 if res.ok else 1)
""")


def test_two_first_runs_at_once_both_succeed_and_never_run_an_item_twice(fault_server, tmp_path):
    code = _CONCURRENT.format(url=fault_server.base_url)
    env = {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "OPENAI_API_KEY": "sk-unused-by-the-test-server",
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "DSPY_FOR_CACHE_DIR": str(tmp_path / "cache"),
    }
    procs = [
        subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=env, stderr=subprocess.PIPE) for _ in range(2)
    ]
    errors = [p.communicate(timeout=240)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    assert len(fault_server.requests) == 3  # each item once, across both runs
    stored = list((tmp_path / "results" / "gsm8k" / "sample").glob("cot.*.jsonl"))
    assert len(stored) == 1 and len(ResultStore(stored[0]).load()) == 3


SWEEP = """
method = "for"
study = "{study}"
lm = "openai/test-model"
lm_options = {{ api_base = "{url}", num_retries = 0, timeout = 5 }}
cache = false
n_trials = 50
chunk_size = 2
[dataset]
name = "gsm8k"
split = "sample"
first = 2
[search.rounds]
type = "int"
low = {low}
high = 2
"""


def _sweep_cfg(tmp_path: Path, url: str, study: str = "s", low: int = 0) -> Path:
    path = tmp_path / f"{study}.toml"
    path.write_text(SWEEP.format(study=study, url=url, low=low))
    return path


def test_a_sweep_whose_trials_all_fail_stops_and_resumes_them(fault_server, tmp_path, monkeypatch):
    from dspy_for.experiments.sweeps.sweep import SweepError

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-unused-by-the-test-server")
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    fault_server.set_fault("500")
    with pytest.raises(SweepError, match="3 trials in a row failed"):
        sweep(_sweep_cfg(tmp_path, fault_server.base_url), tracking_uri=uri)
    fault_server.set_fault(None)
    result = sweep(_sweep_cfg(tmp_path, fault_server.base_url), tracking_uri=uri, n_trials=4)
    trials = result.study.get_trials(deepcopy=False)
    failed = [t for t in trials if t.state.name == "FAIL"]
    assert len(failed) == 3 and result.counts.get("COMPLETE") == 4
    retried = {t.user_attrs.get("retry_of") for t in trials}
    assert {t.number for t in failed} <= retried  # each failed trial ran again on resume


def test_bad_sweep_input_fails_before_any_lm_call(fault_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"\[search.rounds\] allows rounds = -2"):
        sweep(_sweep_cfg(tmp_path, fault_server.base_url, low=-2), tracking_uri=f"sqlite:///{tmp_path}/m.db")
    with pytest.raises(ConfigError, match="`--workers` must be a positive integer"):
        sweep(_sweep_cfg(tmp_path, fault_server.base_url), workers=0, tracking_uri=f"sqlite:///{tmp_path}/m.db")
    with pytest.raises(ConfigError, match="storage"):
        sweep(_sweep_cfg(tmp_path, fault_server.base_url), storage="postgresql+nodriver://x@127.0.0.1:1/db")
    with pytest.raises(ConfigError, match="not a usable storage URL|Cannot open storage"):
        sweep(_sweep_cfg(tmp_path, fault_server.base_url), storage="sqlite:////nonexistent-dir/x/y.db")
    assert fault_server.requests == []
    assert not (tmp_path / "m.db").exists()  # no MLflow run was created (and left RUNNING)


def test_the_sweep_timeout_ends_it_near_its_value_with_one_worker(fault_server, tmp_path, monkeypatch):
    import time

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-unused-by-the-test-server")
    real = fault_server.responder

    def slow(messages, max_tokens):
        time.sleep(0.3)
        return real(messages, max_tokens)

    fault_server.responder = slow
    start = time.monotonic()
    result = sweep(
        _sweep_cfg(tmp_path, fault_server.base_url, study="t"),
        timeout=2.0,
        tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db",
    )
    assert time.monotonic() - start < 30
    assert sum(result.counts.values()) < 50


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--lm", "local/no-such-model"], "no-such-model"),
        (["--lm", "gpt-4.1-mini"], "no provider prefix"),
        (["--role-lm", "critic=openai/x"], "has no role `critic`"),
        (["--methods", "for", "--lm-option", "api_key=sk-xyz12345678"], "environment only"),
    ],
)
def test_bad_compare_input_exits_2_before_any_call(fault_server, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(
        app,
        [
            "compare",
            "--dataset",
            "gsm8k",
            "--split",
            "sample",
            "--first",
            "1",
            "--methods",
            "cot",
            "--lm",
            "openai/test-model",
            *args,
        ],
    )
    assert out.exit_code == 2 and message in out.output.replace("\n", " "), out.output
    assert fault_server.requests == [] and not (tmp_path / "mlruns").exists()


def test_rich_markup_does_not_eat_the_range_in_the_error(fault_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(app, ["sweep", str(_sweep_cfg(tmp_path, fault_server.base_url, low=-1))])
    assert out.exit_code == 2 and "[search.rounds]" in out.output, out.output


def test_a_line_that_is_not_a_record_is_set_aside_and_only_its_item_runs_again(fault_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = _spec(tmp_path, plain_lm(fault_server), first=3)
    compare(spec)
    store = next((tmp_path / "results").rglob("*.jsonl"))
    lines = store.read_bytes().splitlines(keepends=True)
    store.write_bytes(lines[0] + b"\xff\xfe binary\n" + b"[1, 2]\n" + lines[2])  # the second record lost
    before = len(fault_server.requests)
    result = compare(spec)
    assert len(fault_server.requests) - before == 1  # its item, once (CoT: one call); the others reused
    assert store.with_name(store.name + ".unreadable").read_bytes() == b"\xff\xfe binary\n[1, 2]\n"
    assert result.results["gsm8k"]["cot"].n_scored == 3 and result.ok
