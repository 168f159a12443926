"""Work already done is not done again: a run whose every item is stored builds no LM, starts no server, pulls no
model and starts no compile; its table comes from the stores, its LMs named, priced and identified from the config
as the built ones would be (a scripted first run, a plain ``dspy.LM`` against the test server, and the real local
model in ``test_nothing_to_run_llm.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

import dspy_for.experiments.core.prepare as prepare_mod
import dspy_for.experiments.core.stored_lms as stored_mod
from dspy_for.experiments.comparison import compare
from dspy_for.experiments.core.stored_lms import StoredLM, describe, stored_lms
from dspy_for.experiments.spec import ExperimentSpec, MethodConfig
from dspy_for.lm import server as local_server
from dspy_for.lm.pricing import LOCAL_PRICE, PRICE_ATTR
from dspy_for.lm.registry import list_models
from dspy_for.lm.serving import stack_identity
from dspy_for.testing import OpenAICompatibleServer, for_responder

LOCAL = f"local/{list_models()[0].name}"
CONFIG = """
experiment = "stored"
lm = "{lm}"
{options}
baseline = "cot"
[[datasets]]
name = "gsm8k"
split = "sample"
first = 3
[[methods]]
name = "single"
[[methods]]
name = "cot"
"""
COMPILED = """
[[methods]]
name = "cot"
label = "cot_bootstrap"
compile = { kind = "bootstrap", trainset = "sample", max_bootstrapped_demos = 1, train_limit = 2 }
"""
NUMBERS = ("n", "failed", "unparsed", "accuracy", "ci_low", "ci_high", "tokens_per_item", "calls_per_item", "calls")


def _write(tmp_path: Path, lm: str, extra: str = "", options: str = "") -> Path:
    path = tmp_path / "stored.toml"
    path.write_text(CONFIG.format(lm=lm, options=options) + extra)
    return path


def _refuse(*args, **kwargs):
    raise AssertionError("a run with nothing to run built an LM or started a server")


def _numbers(result) -> list[dict]:
    return [{k: r[k] for k in ("method", *NUMBERS)} for r in result.rows]


@pytest.fixture
def forbid(monkeypatch, tmp_path):
    """``forbid()``: from then on building any LM, starting a local server or pulling a model fails the test; the
    model directory is empty (the model is not pulled); returns the server directory (watched: nothing may appear)."""
    real_stored_lm = stored_mod.stored_lm

    def now() -> Path:
        monkeypatch.setattr(prepare_mod, "make_lm", _refuse)
        monkeypatch.setattr(local_server, "ensure_server", _refuse)
        monkeypatch.setattr(stored_mod, "stored_lm", real_stored_lm)  # the real StoredLM, not a scripted stand-in
        monkeypatch.setattr(prepare_mod, "stored_lm", real_stored_lm)
        monkeypatch.setenv("DSPY_FOR_MODEL_DIR", str(tmp_path / "no-models"))
        monkeypatch.setenv("DSPY_FOR_SERVER_DIR", str(tmp_path / "no-servers"))
        return tmp_path / "no-servers"

    return now


def test_a_stored_run_of_a_model_not_pulled_builds_no_lm_and_starts_no_server(install_scripted_lm, forbid, tmp_path):
    scripted = install_scripted_lm(for_responder())
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    config = _write(tmp_path, LOCAL)
    first = compare(config, tracking_uri=uri)
    assert first.ok and scripted.built  # the first run built its LMs (scripted) and stored every record

    servers = forbid()
    second = compare(config, tracking_uri=uri)  # every LM build and server start now fails the test
    assert second.ok and not any(second.errors.values())
    assert _numbers(second) == _numbers(first)  # the table, from the stores
    assert not servers.exists()  # no server started, not even its state directory
    cot = second.results["gsm8k"]["cot"]
    name = LOCAL.split("/", 1)[1]
    assert cot.lms == {"task": f"hosted_vllm/{local_server.alias_for(name)}"}  # as the built LocalLM names itself
    assert cot.prices["task"] == LOCAL_PRICE  # $0, as a local model's calls are priced
    assert cot.serving_now is None  # what serves it now is not asked (no server): no record is marked as changed

    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    (cell,) = client.search_runs(
        [client.get_experiment_by_name("stored").experiment_id],
        filter_string=f"tags.`mlflow.parentRunId` = '{second.run_id}' and params.label = 'cot'",
    )
    params = cell.data.params  # the LM as configured, as a built LocalLM describes itself (no server address)
    assert params["lm.task.spec"] == LOCAL and params["lm.task.model"] == cot.lms["task"]
    assert params["lm.task.model_sha256"] == local_server.get_model(name).sha256


def test_a_stored_compiled_cell_reads_its_program_back_and_never_compiles_again(install_scripted_lm, forbid, tmp_path):
    install_scripted_lm(for_responder())
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    config = _write(tmp_path, "openai/fake-model", COMPILED)
    first = compare(config, tracking_uri=uri)
    compiled = first.results["gsm8k"]["cot_bootstrap"]
    assert compiled.compile is not None and not compiled.compile.reused

    forbid()
    second = compare(config, tracking_uri=uri)  # no optimizer LM built: the compiled program is read back
    again = second.results["gsm8k"]["cot_bootstrap"]
    assert second.ok and _numbers(second) == _numbers(first)
    assert again.compile is not None and again.compile.reused and again.compile.usage == compiled.compile.usage

    for kept in (tmp_path / "mlruns").rglob("cot_bootstrap.*.compiled.json"):
        kept.unlink()
    third = compare(config, tracking_uri=uri)  # its records stored, its program gone: no compile is started
    assert third.ok and _numbers(third) == _numbers(first)
    assert third.results["gsm8k"]["cot_bootstrap"].compile is None  # absent, never made up


def test_a_stored_run_against_an_endpoint_sends_it_nothing(forbid, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-0123456789")
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    with OpenAICompatibleServer(for_responder("18")) as server:
        config = _write(tmp_path, "openai/test-model", options=f'lm_options = {{ api_base = "{server.base_url}" }}')
        first = compare(config, tracking_uri=uri)
        assert first.ok and server.requests
        server.reset_counters()
        forbid()
        second = compare(config, tracking_uri=uri)
        assert second.ok and server.requests == [] and _numbers(second) == _numbers(first)
        assert second.results["gsm8k"]["cot"].lms == first.results["gsm8k"]["cot"].lms == {"task": "openai/test-model"}


def test_a_stored_lm_says_of_itself_what_the_built_lm_says(monkeypatch, tmp_path):
    """Name, price and MLflow description: the same from the config as from the built LM."""
    monkeypatch.setenv("DSPY_FOR_CACHE_DIR", str(tmp_path / "cache"))
    name = LOCAL.split("/", 1)[1]
    fake = local_server.ServerInfo(name, local_server.alias_for(name), "127.0.0.1", 1, 0, "test", 2048, 1, build="b0")
    monkeypatch.setattr(local_server, "ensure_server", lambda *a, **k: fake)
    priced = {"price": {"input": 0.15, "output": 0.6}}
    cases = ((LOCAL, {}), (LOCAL, {"prompt_cache": False}), ("openai/gpt-4.1-mini", {}), ("openai/my-model", priced))
    for lm, options in cases:
        spec = ExperimentSpec(lm=lm, lm_options=options, datasets=[], methods=[MethodConfig("cot")], max_tokens=256)
        built = prepare_mod.build_lms(spec, spec.methods[0])[1]["task"]
        stored = stored_lms(spec, spec.methods[0])[1]["task"]
        assert isinstance(stored, StoredLM) and stored.model == built.model
        assert getattr(stored, PRICE_ATTR, None) == getattr(built, PRICE_ATTR, None)
        assert stack_identity(stored) is None  # not known without asking the server (the built one asked it)
        shown = {k: v for k, v in describe(built).items() if k != "api_host"}  # no server or endpoint address
        assert describe(stored) == shown
        with pytest.raises(RuntimeError, match="was not built"):
            stored("a question?")
