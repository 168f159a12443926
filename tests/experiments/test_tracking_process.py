"""The command line's tracking process (:func:`~dspy_for.experiments.tracking.writer.start_tracking_process`): started
before the command imports DSPy, it serves the run's tracking store — MLflow's runs, params, metrics, tags, artifacts
and dataset inputs (:mod:`dspy_for.experiments.tracking.runs`) are made there, each waited for, its errors raised in
the run's process — so a comparison's own process never imports MLflow, and everything it tracked is in the store.
A tracking process that dies hands the store back to the run's process."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from dspy_for.cli_start import tracks
from dspy_for.experiments.reports.sketch import Sketch
from dspy_for.experiments.tracking import runs as runs_module
from dspy_for.experiments.tracking import served, store
from dspy_for.experiments.tracking import writer as writer_module
from dspy_for.experiments.tracking.tracker import TOKEN
from dspy_for.experiments.tracking.writer import start_tracking_process, store_server
from dspy_for.testing import OpenAICompatibleServer, for_responder

ROOT = Path(__file__).resolve().parents[2]

CONFIG = """
experiment = "served"
lm = "openai/test-model"
lm_options = {{ api_base = "{base}" }}
num_threads = 4
baseline = "cot"
[[methods]]
name = "cot"
[[methods]]
name = "single"
"""

#: the command line as ``dspy-for`` runs it, in a process of its own; what that process imported, printed at its exit
ENTRY = """
import atexit, json, sys
HEAVY = ("mlflow", "sqlalchemy", "pandas", "matplotlib", "numpy", "scipy", "dspy")
atexit.register(lambda: print("IMPORTED " + json.dumps(sorted(m for m in HEAVY if m in sys.modules))))
sys.argv = ["dspy-for", *sys.argv[1:]]
from dspy_for.cli_start import main
main()
"""


def _rows(tmp_path: Path, n: int) -> Path:
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} + 18?", "answer": "18"}) + "\n"
                            for i in range(n)))  # fmt: skip
    return data


def _command(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DSPY_CACHEDIR": str(tmp_path / "dspy-cache"), "CI": "true",
           "OPENAI_API_KEY": "sk-test"}  # fmt: skip
    env.pop(writer_module.MODE_ENV, None)
    return subprocess.run([sys.executable, "-c", ENTRY, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["compare", "c.toml"], True),
        (["advise", "--lm", "openai/x"], True),
        (["compare", "c.toml", "--dry-run"], False),
        (["compare", "--help"], False),
        (["sweep", "s.toml"], False),
        (["ask", "what?"], False),
        ([], False),
    ],
)
def test_only_a_command_that_writes_to_the_store_starts_a_tracking_process(argv, expected):
    assert tracks(argv) is expected


def test_the_tracking_process_starts_before_the_command_imports_dspy(tmp_path):
    """``cli_start.start`` starts the tracking process, serving the store, from a process that has not imported DSPy,
    litellm or MLflow (so that process's start-up runs beside the command's imports)."""
    code = textwrap.dedent("""
        import json, sys
        from dspy_for import cli_start
        cli_start.start(["compare", "c.toml"])
        from dspy_for.experiments.tracking.writer import store_server
        server = store_server()
        print(json.dumps({"serving": server is not None and server.mode == "process",
                          "loaded": sorted(m for m in ("dspy", "litellm", "mlflow") if m in sys.modules)}))
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(writer_module.MODE_ENV, None)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120, check=True)  # fmt: skip
    assert json.loads(out.stdout.splitlines()[-1]) == {"serving": True, "loaded": []}


@pytest.mark.parametrize("traces", [True, False])
def test_a_comparison_from_the_command_line_never_imports_mlflow_and_tracks_everything(tmp_path, traces):
    """``dspy-for compare`` with a plain ``dspy.LM`` against the test server: its process never imports MLflow (nor its
    SQL store, nor pandas), matplotlib or numpy, and the store holds what a run tracked in the run's process did: the
    parent run with its spec and its plot (drawn by the tracking process), each cell's run with its params, metrics,
    dataset input, program and items, a trace per item (with traces), every run FINISHED and tagged with the command's
    own process."""
    from mlflow.tracking import MlflowClient

    n = 5
    with OpenAICompatibleServer(for_responder("18")) as server:
        config = tmp_path / "c.toml"
        config.write_text(CONFIG.format(base=server.base_url))
        uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
        flag = "--traces" if traces else "--no-traces"
        done = _command(
            tmp_path, "compare", str(config), "--data", str(_rows(tmp_path, n)), "--tracking-uri", uri, flag
        )
        requests = list(server.requests)
    assert done.returncode == 0, done.stderr[-3000:]
    imported = json.loads(done.stdout.split("IMPORTED ", 1)[1].splitlines()[0])
    assert imported == ["dspy"]
    assert {r["model"] for r in requests} == {"test-model"} and len(requests) == 2 * n

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("served")
    found = client.search_runs([exp.experiment_id])
    parent = next(r for r in found if r.data.tags.get("dspy_for.kind") == "comparison")
    cells = {r.data.params["label"]: r for r in found if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert set(cells) == {"cot", "single"}
    assert "spec.experiment" in parent.data.params and parent.info.status == "FINISHED"
    logged = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert logged >= {"summary.jsonl", "summary.txt", "frontier_jsonl_items.png"}, logged
    drawn = [p for p in tmp_path.rglob("frontier_jsonl_items.png") if "artifacts" not in p.parts]  # the run's folder
    assert [p.read_bytes()[:8] for p in drawn] == [b"\x89PNG\r\n\x1a\n"]
    processes = {r.data.tags[runs_module.PROCESS_TAG].split(":")[1] for r in found}
    assert len(processes) == 1 and processes != {str(os.getpid())}  # the command's process, not the tracking one
    for label, run in cells.items():
        assert run.info.status == "FINISHED" and run.data.metrics["n"] == float(n)
        assert run.data.params["method"] == label
        assert [d.dataset.digest for d in run.inputs.dataset_inputs] != []
        assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"items.jsonl", f"{label}.program.json"}
        stored = client.search_traces(locations=[exp.experiment_id], max_results=100,
                                      filter_string=f"metadata.`mlflow.sourceRun` = '{run.info.run_id}'")  # fmt: skip
        assert len(stored) == (n if traces else 0)
        origins = {json.loads(line)["origin"] for f in tmp_path.glob(f"mlruns/**/{label}.*.jsonl")
                   for line in f.read_text().splitlines()}  # fmt: skip
        assert origins == {run.info.run_id}
    assert "sk-test" not in json.dumps([r.data.params for r in found])


def test_advise_from_the_command_line_keeps_its_store_in_the_tracking_process(tmp_path):
    """``dspy-for advise`` as typed against the test server: neither MLflow nor matplotlib in its process, its advice,
    its frontier plot and its candidates' runs in the store."""
    from mlflow.tracking import MlflowClient

    with OpenAICompatibleServer(for_responder("18")) as server:
        uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
        done = _command(tmp_path, "advise", "--lm", "openai/test-model", "--lm-option", f"api_base={server.base_url}",
                        "--data", str(_rows(tmp_path, 6)), "--methods", "cot,single", "--max-items", "6",
                        "--tracking-uri", uri)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    imported = set(json.loads(done.stdout.split("IMPORTED ", 1)[1].splitlines()[0]))
    assert imported - {"numpy", "scipy"} == {"dspy"}  # (its sequential tests compute with numpy)
    client = MlflowClient(uri)
    found = client.search_runs([e.experiment_id for e in client.search_experiments()])
    parent = next(r for r in found if r.data.tags.get("dspy_for.kind") == "advise")
    assert parent.info.status == "FINISHED"
    assert {"advice.json", "frontier_jsonl_items.png"} <= {a.path for a in client.list_artifacts(parent.info.run_id)}
    cells = {r.data.params["label"] for r in found if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert cells == {"cot", "single"}


@pytest.fixture
def serving(tmp_path, monkeypatch):
    """This process's store served by a tracking process of its own, for the test only; the store at ``uri``."""
    monkeypatch.delenv(writer_module.MODE_ENV, raising=False)
    monkeypatch.delitem(writer_module._WRITER, "writer", raising=False)
    monkeypatch.setattr(served, "STORE", {})
    monkeypatch.chdir(tmp_path)
    server = start_tracking_process()
    assert store_server() is server and server.mode == "process"
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    store.setup_tracking(uri, "served")
    yield uri
    writer_module._WRITER.pop("writer", None)
    if server._process is not None:
        server._process.kill()
        server._process.wait()


def _calls_made_here(monkeypatch) -> list[str]:
    made: list[str] = []
    for name in set(runs_module.__all__) - {"process_tag"}:  # the tag names the run's own process: made here
        real = getattr(runs_module, name)
        if callable(real):
            monkeypatch.setattr(
                runs_module, name, lambda *a, _real=real, _name=name: (made.append(_name), _real(*a))[1]
            )
    return made


def test_the_tracking_process_makes_the_stores_calls_and_the_run_waits_for_none_of_them(serving, monkeypatch):
    """A run is started under a token, its writes are sent and left: nothing waits until its id is asked for; every
    call is made in the tracking process, in order, the token standing for the run's id there."""
    from mlflow.tracking import MlflowClient

    made = _calls_made_here(monkeypatch)
    ref = store.start_run("served run", "served", tags={"k": "v"})
    assert ref.startswith(TOKEN)
    store.log_params(ref, {"a": {"b": 1}, "api_key": "sk-secret"})
    store.log_metrics(ref, {"acc": 0.5})
    child = store.start_run("child", "served", parent_id=ref)
    store.end_run(ref, "FINISHED")
    run_id, child_id = served.run_id(ref), served.run_id(child)
    served.settle()
    assert made == [] and run_id is not None and child_id is not None and not run_id.startswith(TOKEN)
    client = MlflowClient(serving)
    run = client.get_run(run_id)
    assert run.data.params == {"a.b": "1"} and run.data.metrics == {"acc": 0.5} and run.info.status == "FINISHED"
    assert run.data.tags["k"] == "v" and run.data.tags[runs_module.PROCESS_TAG] == runs_module.process_tag()
    assert client.get_run(child_id).data.tags["mlflow.parentRunId"] == run_id


def test_the_tracking_process_draws_a_plot_and_logs_it_and_a_plot_it_cannot_draw_is_an_error(serving, tmp_path,
                                                                                              monkeypatch):  # fmt: skip
    """A plot (a :class:`Sketch`) is drawn by the tracking process, which imported matplotlib beside its work: the file
    at its path, the artifact on its run; one matplotlib cannot draw raises in the run's process."""
    from mlflow.tracking import MlflowClient

    made = _calls_made_here(monkeypatch)
    ref = store.start_run("plotted", "served")
    fig = Sketch(figsize=(3, 2))
    fig.subplots().plot([1.0, 2.0], [0.5, 0.7], label="cot")
    store.log_figure(ref, fig, tmp_path / "frontier.png")
    assert made == [] and (tmp_path / "frontier.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    run_id = served.run_id(ref)
    assert [a.path for a in MlflowClient(serving).list_artifacts(run_id)] == ["frontier.png"]
    store.log_figure(None, fig, tmp_path / "kept here only.png")
    assert (tmp_path / "kept here only.png").exists()
    fig.subplots().no_such_method()
    with pytest.raises(AttributeError, match="no_such_method"):
        store.log_figure(ref, fig, tmp_path / "broken.png")


def test_a_write_the_store_refuses_is_a_warning_and_inside_waited_an_error(serving, caplog):
    from mlflow.exceptions import MlflowException

    with caplog.at_level(logging.WARNING, logger="dspy_for.tracing"):
        store.end_run("no-such-run", "FINISHED")
        served.settle()
    assert any("could not write to MLflow (end_run)" in r.getMessage() for r in caplog.records)
    with pytest.raises(MlflowException), served.waited():
        store.end_run("no-such-run", "FINISHED")


def test_a_run_the_store_could_not_start_has_no_id(serving, caplog):
    with caplog.at_level(logging.WARNING, logger="dspy_for.tracing"):
        ref = store.start_run("nowhere", "an experiment that does not exist")
        assert served.run_id(ref) is None
        served.settle()  # answered: its warning given
    assert any("could not write to MLflow (start_run)" in r.getMessage() for r in caplog.records)


def test_a_tracking_process_that_dies_hands_the_store_to_the_run(serving, monkeypatch, caplog):
    """The runs it started keep their ids; one it had not started is not written to (a warning); new ones are
    started here."""
    from mlflow.tracking import MlflowClient

    server = store_server()
    assert server is not None and server._process is not None
    started = store.start_run("started there", "served")
    started_id = served.run_id(started)
    server._process.kill()
    server._process.wait()
    deadline = time.monotonic() + 30
    while server._process is not None and time.monotonic() < deadline:  # its end seen: the store handed back
        time.sleep(0.05)
    made = _calls_made_here(monkeypatch)
    with caplog.at_level(logging.WARNING):
        store.end_run(started, "FINISHED")  # its id known: ended here
        run_id = store.start_run("after", "served")
        store.end_run(f"{TOKEN}never-answered", "FINISHED")
    assert {"end_run", "start_run"} <= set(made) and store_server() is None
    client = MlflowClient(serving)
    assert client.get_run(run_id).info.run_name == "after"
    assert client.get_run(str(started_id)).info.status == "FINISHED"
    messages = [r.getMessage() for r in caplog.records]
    assert any("the tracking process stopped" in m for m in messages)
    assert any("could not write to MLflow (end_run): its run was not started" in m for m in messages)


def test_a_comparison_with_a_scripted_lm_tracks_through_the_tracking_process(serving, install_scripted_lm, monkeypatch):
    from mlflow.tracking import MlflowClient

    from dspy_for.experiments.comparison import compare
    from dspy_for.testing import for_responder

    install_scripted_lm(for_responder("18"))
    made = _calls_made_here(monkeypatch)
    spec = Path("c.toml")
    spec.write_text('experiment = "served"\nlm = "openai/fake"\nbaseline = "cot"\n[[datasets]]\nname = "gsm8k"\n'
                    'split = "sample"\nfirst = 3\n[[methods]]\nname = "cot"\n')  # fmt: skip
    result: Any = compare(spec, tracking_uri=serving)
    assert result.ok and made == []
    client = MlflowClient(serving)
    cell = client.search_runs(
        [client.get_experiment_by_name("served").experiment_id],
        filter_string=f"tags.`mlflow.parentRunId` = '{result.run_id}'",
    )[0]
    assert cell.data.metrics["n"] == 3.0 and cell.info.status == "FINISHED"
    assert len(result.results["gsm8k"]["cot"].trace_ids) == 3
    assert {i.origin for i in result.results["gsm8k"]["cot"].items} == {cell.info.run_id}
    assert result.run_id == cell.data.tags["mlflow.parentRunId"]


def test_the_tracking_process_imports_with_its_collector_off_and_leaves_it_on():
    """Its large imports (MLflow, the trace builder, matplotlib) run with the collector off, what they made frozen
    after; two at once on two threads leave the collector on."""
    code = textwrap.dedent("""
        import gc, json, threading
        from dspy_for.experiments.tracking.tracker import _collector_off
        seen = []
        with _collector_off():
            seen.append(gc.isenabled())
            import json.tool  # noqa: F401
        frozen = gc.get_freeze_count()
        inside, go = threading.Event(), threading.Event()
        def other():
            with _collector_off():
                inside.set()
                go.wait()
        t = threading.Thread(target=other)
        t.start()
        inside.wait()
        with _collector_off():
            go.set()
        t.join()
        print(json.dumps({"off inside": seen == [False], "frozen": frozen > 0, "on after": gc.isenabled()}))
    """)
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    assert json.loads(out.stdout.splitlines()[-1]) == {"off inside": True, "frozen": True, "on after": True}
