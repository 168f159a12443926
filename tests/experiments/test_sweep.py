from __future__ import annotations

import pytest

import dspy_for.experiments.core.prepare as run_mod
from dspy_for.errors import ConfigError
from dspy_for.experiments.sweeps.sweep import load_sweep_spec, sweep
from dspy_for.lm.pricing import PRICE_ATTR, Price
from dspy_for.testing import ScriptedLM, for_responder, system_text

CONFIG = """
method = "for"
study = "{study}"
lm = "openai/fake"
n_trials = 6
chunk_size = 2
objectives = {objectives}
sampler = "{sampler}"
[dataset]
name = "gsm8k"
split = "sample"
first = 6
[search.rounds]
type = "int"
low = 0
high = 3
[search.host]
type = "categorical"
choices = [true, false]
"""


# every role answers 27: right only on the first sample item
responder = for_responder(reasoning="r", questions=["How did you get that?"])


@pytest.fixture
def fake_lm(monkeypatch, tmp_path):
    lm = ScriptedLM(responder)
    monkeypatch.setattr(run_mod, "make_lm", lambda spec, **o: lm)
    monkeypatch.chdir(tmp_path)
    return lm


def _write(tmp_path, study="s", objectives='["accuracy"]', sampler="tpe", extra=""):
    p = tmp_path / f"{study}.toml"
    p.write_text(CONFIG.format(study=study, objectives=objectives, sampler=sampler) + extra)
    return p


def test_six_trial_study_with_pruning_and_nested_mlflow_runs(fake_lm, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    import dspy_for.experiments.sweeps.workers as sw

    # make trials with host=false hopeless after the first chunk so the median pruner stops them
    real = sw.default_objective

    def objective(spec, parent=None, deadline=None):
        inner = real(spec, parent, deadline)

        def wrapped(trial):
            if trial.number >= 2 and not trial.params.get("host", trial.suggest_categorical("host", [True, False])):
                trial.report(0.0, 0)
                if trial.should_prune():
                    import optuna

                    raise optuna.TrialPruned()
            return inner(trial)

        return wrapped

    monkeypatch.setattr(sw, "default_objective", objective)
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    result = sweep(_write(tmp_path), tracking_uri=uri)
    counts = result.counts
    assert counts.get("COMPLETE", 0) + counts.get("PRUNED", 0) == 6 and counts.get("PRUNED", 0) >= 1
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("sweeps")
    runs = client.search_runs([exp.experiment_id])
    parent = next(r for r in runs if r.data.tags.get("dspy_for.kind") == "sweep")
    trials = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(trials) == 6
    assert {r.data.tags["dspy_for.state"] for r in trials} == {"COMPLETE", "PRUNED"}
    assert any(r.data.tags.get("dspy_for.best") == "true" for r in trials)
    complete = [r for r in trials if r.data.tags["dspy_for.state"] == "COMPLETE"]
    assert all("accuracy" in r.data.metrics and "tokens_per_item" in r.data.metrics for r in complete)
    arts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert "optimization_history.png" in arts and "param_importances.png" in arts


def test_multi_objective_pareto_front(fake_lm, tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    result = sweep(
        _write(tmp_path, study="p", objectives='["accuracy", "tokens_per_item"]', sampler="nsga2"), tracking_uri=uri
    )
    front = result.study.best_trials
    assert front and all(len(t.values) == 2 for t in front)
    # nothing on the front is dominated by another complete trial
    for t in front:
        for o in result.study.trials:
            if o.values:
                assert not (o.values[0] >= t.values[0] and o.values[1] <= t.values[1] and o.values != t.values)
    client = MlflowClient(uri)
    parent = client.search_runs(
        [client.get_experiment_by_name("sweeps").experiment_id], filter_string="tags.`dspy_for.kind` = 'sweep'"
    )[0]
    assert "pareto_front.png" in {a.path for a in client.list_artifacts(parent.info.run_id)}


def test_resume_continues_the_same_study_without_recounting(fake_lm, tmp_path):
    cfg = _write(tmp_path, study="r")
    first = sweep(cfg, tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db", n_trials=3)
    assert first.counts == {"COMPLETE": 3}
    second = sweep(cfg, tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db", n_trials=5)
    assert second.counts == {"COMPLETE": 5} and second.parent_run_id == first.parent_run_id


def test_repeated_configurations_cost_no_new_calls_with_the_cache(tmp_path, monkeypatch):
    import dspy
    from dspy.clients.cache import Cache

    monkeypatch.setattr(
        dspy,
        "cache",
        Cache(enable_disk_cache=False, enable_memory_cache=True, disk_cache_dir="", memory_max_entries=100_000),
    )
    lm = ScriptedLM(responder, cache=True)
    monkeypatch.setattr(run_mod, "make_lm", lambda spec, **o: lm)
    monkeypatch.chdir(tmp_path)
    extra = ""
    p = tmp_path / "c.toml"
    p.write_text(
        CONFIG.format(study="c", objectives='["accuracy"]', sampler="random").replace("high = 3", "high = 1") + extra
    )
    result = sweep(p, tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db", n_trials=8)
    distinct = {tuple(sorted(t.params.items())) for t in result.study.trials}
    assert len(distinct) < 8  # configurations repeat over 8 trials of a 4-point space
    for t in result.study.trials:
        first = min(o.number for o in result.study.trials if o.params == t.params)
        if t.number != first:
            assert t.user_attrs["spent_tokens"] == 0 and t.user_attrs["cached_tokens"] > 0


def test_bad_sweep_configs(tmp_path):
    with pytest.raises(ConfigError, match="needs `method`"):
        load_sweep_spec(_bad(tmp_path, "n_trials = 3\n"))
    with pytest.raises(ConfigError, match="Unknown key `trials`"):
        load_sweep_spec(_bad(tmp_path, 'method = "for"\ntrials = 3\n'))
    with pytest.raises(ConfigError, match="objectives"):
        load_sweep_spec(_write(tmp_path, objectives='["speed"]'))
    with pytest.raises(ConfigError, match="Unknown option `round`"):
        load_sweep_spec(_write(tmp_path, extra='[search.round]\ntype = "int"\nlow = 0\nhigh = 1\n'))


def _bad(tmp_path, text):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    return p


def test_enqueued_baselines_run_first_and_once(fake_lm, tmp_path):
    cfg = _write(tmp_path, study="q")
    text = cfg.read_text().replace(
        "[dataset]", "enqueue = [{ rounds = 3, host = true }, { rounds = 0, host = false }]\n[dataset]", 1
    )
    cfg.write_text(text)
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    result = sweep(cfg, tracking_uri=uri, n_trials=3)
    trials = result.study.trials
    assert [t.params for t in trials[:2]] == [{"rounds": 3, "host": True}, {"rounds": 0, "host": False}]
    assert all(t.user_attrs.get("enqueued") for t in trials[:2]) and not trials[2].user_attrs.get("enqueued")
    resumed = sweep(cfg, tracking_uri=uri, n_trials=4)  # a resumed study does not enqueue them again
    assert sum(bool(t.user_attrs.get("enqueued")) for t in resumed.study.trials) == 2
    assert resumed.counts == {"COMPLETE": 4}


def test_temperature_goes_to_the_lms_unless_the_method_owns_it():
    from dspy_for.experiments.methods import get_method

    own, temperature = get_method("for").split_options({"rounds": 2, "temperature": 0.7})
    assert temperature == 0.7 and own == {"rounds": 2}
    # self-consistency samples at its own temperature; its LMs keep the default (0)
    own, temperature = get_method("self_consistency").split_options({"k": 5, "temperature": 0.9})
    assert temperature is None and own == {"k": 5, "temperature": 0.9}


def test_storage_password_never_reaches_mlflow(fake_lm, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    from dspy_for.experiments.sweeps import tracking as sweep_tracking

    spec = load_sweep_spec(_write(tmp_path, study="pw"), tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    spec.storage = "postgresql+psycopg2://sweeper:hunter2-secret@db.example:5432/optuna"
    run_id = sweep_tracking.start_parent(spec)
    run = MlflowClient(spec.tracking_uri).get_run(run_id)
    logged = " ".join(f"{k}={v}" for k, v in {**run.data.params, **run.data.tags}.items())
    assert "sweeper:***@db.example" in logged and "hunter2" not in logged


MULTI = """
method = ["for", "cot"]
study = "m"
lm = "openai/fake"
n_trials = 6
chunk_size = 3
objectives = ["accuracy", "tokens_per_item"]
sampler = "nsga2"
enqueue = [{ method = "for", rounds = 2 }, { method = "cot" }]
[fixed.for]
host = false
[dataset]
name = "gsm8k"
split = "sample"
first = 3
[search.for.rounds]
type = "int"
low = 0
high = 3
"""


def test_several_methods_in_one_pareto_study(fake_lm, tmp_path):
    cfg = tmp_path / "m.toml"
    cfg.write_text(MULTI)
    result = sweep(cfg, tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    trials = result.study.trials
    assert result.counts == {"COMPLETE": 6}
    assert trials[0].params == {"method": "for", "for.rounds": 2} and trials[1].params == {"method": "cot"}
    assert result.spec.decode(trials[0].params) == ("for", {"rounds": 2})
    for t in trials:  # FOR's options only exist on FOR trials
        assert ("for.rounds" in t.params) == (t.params["method"] == "for")
    tokens = {t.params["method"]: t.values[1] for t in trials[:2]}
    assert tokens["for"] > tokens["cot"]  # two debate rounds cost more than one chain of thought


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("[fixed.for]", "[fixed.cot]\nrounds = 1\n[fixed.for]"), "Unknown option `rounds` for method `cot`"),
        (("[search.for.rounds]", "[search.rounds]"), r"one table per method"),
        (('{ method = "cot" }', '{ method = "refine" }'), "needs `method` = one of"),
        (('method = ["for", "cot"]', 'method = ["for"]'), "at least two distinct methods"),
        (('lm = "openai/fake"', 'lm = "openai/fake"\nrole_lms = { critic = "openai/x" }'), "has no role `critic`"),
    ],
)
def test_bad_multi_method_configs(tmp_path, edit, message):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(MULTI.replace(*edit, 1))
    with pytest.raises(ConfigError, match=message):
        load_sweep_spec(cfg)


TEXTGRAD_SWEEP = """
method = "cot"
study = "tg"
lm = "openai/fake"
n_trials = 2
chunk_size = 3
pruner = "none"
compile = { kind = "textgrad", trainset = "sample", valset = "sample", train_limit = 6, val_limit = 3, epochs = 1 }
enqueue = [{ compile = { steps_per_epoch = 1, batch_size = 2 } }, { compile = { steps_per_epoch = 2, batch_size = 2 } }]
[dataset]
name = "gsm8k"
split = "sample"
first = 3
[search.compile.steps_per_epoch]
type = "int"
low = 1
high = 2
[search.compile.batch_size]
type = "int"
low = 1
high = 3
"""


def test_a_compile_then_evaluate_sweep_searches_textgrad_steps_and_batch_size(tmp_path, monkeypatch):
    import re

    from dspy_for.datasets import load_dataset

    gold = {e.question: e.answer for e in load_dataset("gsm8k", "sample")}

    def respond(messages, max_tokens):
        sys = system_text(messages)
        fields = re.findall(r"`(\w+)`", sys.split("Your output fields are:")[1].split("All interactions")[0])
        if fields == ["reasoning", "answer"]:  # the task: right only once TextGrad wrote GOOD into its prompt
            question = messages[-1]["content"].split("[[ ## question ## ]]")[1].split("Respond with")[0].strip()
            return {"reasoning": "r", "answer": str(gold[question] if "GOOD" in sys else -1)}
        return {f: "GOOD: show every step." for f in fields}  # gradient / optimizer roles

    lm = ScriptedLM(respond)
    monkeypatch.setattr(run_mod, "make_lm", lambda spec, **o: lm)
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "tg.toml"
    cfg.write_text(TEXTGRAD_SWEEP)
    result = sweep(cfg, tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    one_step, two_steps = result.study.trials
    assert one_step.params == {"compile.steps_per_epoch": 1, "compile.batch_size": 2}
    assert one_step.value == two_steps.value == 1.0  # TextGrad's update fixed the prompt (uncompiled: 0/3)
    # the searched option reached the optimizer: a second step costs more compile calls
    assert two_steps.user_attrs["compile_calls"] > one_step.user_attrs["compile_calls"] > 0
    assert one_step.user_attrs["compile_tokens"] > 0
    # under max_cost a trial's compile spends against it beside its items (USD 1 per million tokens here)
    setattr(lm, PRICE_ATTR, Price(input=1.0, output=1.0))
    priced = 'study = "tg_priced"\nmax_cost = 100\nlm_options = { price = { input = 1, output = 1 } }\n'
    cfg.write_text(TEXTGRAD_SWEEP.replace('study = "tg"\n', priced))
    trial = sweep(cfg, tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db", n_trials=1).study.trials[0]
    tokens = trial.user_attrs["compile_tokens"] + trial.user_attrs["spent_tokens"]
    assert trial.user_attrs["compile_tokens"] > 0 and trial.user_attrs["spent_usd"] == pytest.approx(tokens / 1e6)
    lm.calls.clear()
    monkeypatch.setattr(run_mod, "compile_for_run", lambda program, *a, **k: (program, None))
    cfg.write_text(TEXTGRAD_SWEEP.replace('study = "tg"', 'study = "tg_off"'))
    assert sweep(cfg, tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db").study.trials[0].value == 0.0


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda t: t.replace('compile = { kind = "textgrad"', 'compile = { kind = "adam"'),
            "`compile` of method `cot` needs `kind`",
        ),
        (lambda t: t.replace("[search.compile.batch_size]", "[search.compile.lr]"), "Unknown compile option `lr`"),
        (
            lambda t: "\n".join(line for line in t.splitlines() if not line.startswith("compile =")),
            "has no `compile` table",
        ),
    ],
)
def test_bad_compile_sweep_configs(tmp_path, edit, message):
    with pytest.raises(ConfigError, match=message):
        load_sweep_spec(_bad(tmp_path, edit(TEXTGRAD_SWEEP)))


ORACLE_SWEEP = """
method = "prorefine"
study = "oracle"
lm = "openai/fake"
n_trials = 1
chunk_size = 2
test_split = "sample"
fixed = { verifier = "oracle", n = 1 }
[dataset]
name = "gsm8k"
split = "sample"
first = 2
[search.k]
type = "int"
low = 8
high = 8
"""


def test_final_test_gives_label_using_methods_their_labels(fake_lm, tmp_path):
    """--final-test runs through the same path as compare: ProRefine's oracle verifier gets each item's gold
    (before, it failed every final-test item for want of `gold=`)."""
    path = tmp_path / "oracle.toml"
    path.write_text(ORACLE_SWEEP)
    result = sweep(path, final_test=True, tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    ft = result.final_test
    assert ft is not None and ft.summary.failed == 0 and ft.summary.n == 45 and result.ok
    assert result.n_scored >= 45 and result.n_failed == 0 and not result.stopped_by_cost


def test_every_trial_run_holds_one_trace_per_item(fake_lm, tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    result = sweep(
        _write(tmp_path, study="traced", objectives='["accuracy", "tokens_per_item"]', sampler="nsga2"),
        tracking_uri=uri,
        n_trials=2,
    )
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("sweeps")
    trial_runs = client.search_runs(
        [exp.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{result.parent_run_id}'"
    )
    assert len(trial_runs) == 2
    for run in trial_runs:
        traces = client.search_traces(
            locations=[exp.experiment_id],
            max_results=100,
            filter_string=f"metadata.`mlflow.sourceRun` = '{run.info.run_id}'",
        )
        assert len(traces) == 6  # the 6 validation items of the trial


def test_a_study_plot_that_fails_is_logged_and_never_fails_the_sweep(fake_lm, tmp_path, monkeypatch, caplog):
    import optuna
    from mlflow.tracking import MlflowClient

    def broken(*args, **kwargs):
        raise ValueError("the plot broke")

    monkeypatch.setattr(optuna.visualization.matplotlib, "plot_optimization_history", broken)
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    result = sweep(_write(tmp_path, study="p"), tracking_uri=uri, n_trials=2)
    assert result.counts == {"COMPLETE": 2} and result.ok
    assert "the study's plots could not be written (the sweep's results are kept): ValueError" in caplog.text
    parent = MlflowClient(uri).get_run(result.parent_run_id or "")
    assert parent.info.status == "FINISHED" and parent.data.tags["dspy_for.report_failed.the_study_plots"]
    assert parent.data.metrics["trials.complete"] == 2
