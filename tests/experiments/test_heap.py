"""The garbage collector around a run (:mod:`dspy_for.experiments.core.heap`): while a run's items run, what existed
before them is out of the collector's passes; after the run it is back, so nothing made garbage meanwhile stays; a
tracked run holds it so until its end (its cells closed, its report drawn); the command line freezes what it imported
first thing and ends with its heap frozen, so the interpreter does not walk it once more on its way out."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import weakref

import pytest

import dspy_for.experiments.comparison as comparison_mod
import dspy_for.experiments.core.heap as heap_mod
import dspy_for.experiments.core.prepare as prepare_mod
from dspy_for.experiments import DatasetConfig, ExperimentSpec, MethodConfig, compare
from dspy_for.experiments.core import Evaluation, prepare_run
from dspy_for.experiments.core.heap import YOUNG_THRESHOLD, HeapHold, freeze_imports, frozen_heap, importing
from dspy_for.experiments.tracked_run import TrackedRun
from dspy_for.testing import OpenAICompatibleServer, ScriptedLM, for_responder


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


@pytest.fixture(autouse=True)
def _no_frozen_heap():
    assert gc.get_freeze_count() == 0, "a test before this one left the heap frozen"
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)
    heap_mod._imports_frozen = False


def test_the_heap_is_frozen_inside_and_back_after():
    with frozen_heap():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_garbage_made_during_the_block_is_collected_after_it():
    node = _Node()
    gone = weakref.ref(node)
    with frozen_heap():
        del node
        gc.collect()
        assert gone() is not None  # frozen: not walked while the block runs
    gc.collect()
    assert gone() is None  # back in the collector's reach: collected


def _walked(obj: object) -> bool:
    """Whether the collector's passes reach ``obj``: frozen objects are in none of its generations."""
    return any(o is obj for o in gc.get_objects())


def test_a_process_that_froze_objects_itself_is_left_as_it_is():
    # Objects, not the freeze count: a frozen object freed by its reference count leaves the count meanwhile.
    mine = [_Node()]
    gc.freeze()
    later = [_Node()]
    with frozen_heap():
        assert not _walked(mine)
        assert _walked(later)  # nothing more frozen
    assert not _walked(mine)  # not unfrozen behind its back


def test_a_hold_keeps_the_heap_frozen_until_it_is_released():
    hold = HeapHold()
    before = [_Node()]
    with frozen_heap(hold):
        pass
    assert not _walked(before)  # still out of the passes after the block
    made = [_Node()]
    assert _walked(made)
    with frozen_heap(hold):  # a later feed of the same run: what was made since stays in the collector's reach
        assert _walked(made) and not _walked(before)
    hold.release()
    assert gc.get_freeze_count() == 0 and _walked(before) and _walked(made)
    hold.release()  # twice: nothing more
    assert gc.get_freeze_count() == 0


def test_a_hold_collects_the_youngest_generation_less_often_until_it_is_released():
    before = gc.get_threshold()
    assert before[0] < YOUNG_THRESHOLD
    hold = HeapHold()
    with frozen_heap(hold):
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *before[1:])
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD  # held to the run's end
    hold.release()
    assert gc.get_threshold() == before


def test_a_hold_keeps_a_threshold_the_process_set_higher():
    gc.set_threshold(50_000, 20, 20)
    with frozen_heap():
        assert gc.get_threshold() == (50_000, 20, 20)
    assert gc.get_threshold() == (50_000, 20, 20)


def test_a_hold_over_a_heap_the_process_froze_itself_holds_nothing():
    mine = [_Node()]
    gc.freeze()
    hold = HeapHold()
    later = [_Node()]
    with frozen_heap(hold):
        assert _walked(later)
    hold.release()
    assert not hold.held and not _walked(mine)  # not unfrozen behind the process's back
    assert gc.get_threshold()[0] < YOUNG_THRESHOLD  # nor its collector's thresholds changed


def test_what_the_command_line_imported_is_frozen_until_a_run_takes_it_over_and_gives_it_back():
    imported = [_Node()]
    freeze_imports()
    assert not _walked(imported)
    made = [_Node()]
    hold = HeapHold()
    with frozen_heap(hold):  # the run's hold takes the imports' freeze over, and freezes what was made since
        assert not _walked(imported) and not _walked(made)
    hold.release()
    assert gc.get_freeze_count() == 0 and _walked(imported)


def test_a_process_that_froze_objects_itself_is_not_frozen_again_by_the_command_line():
    mine = [_Node()]
    gc.freeze()
    later = [_Node()]
    freeze_imports()
    assert _walked(later)
    with frozen_heap():
        assert _walked(later)  # still the process's freeze: no run takes it over
    assert not _walked(mine)


def test_a_large_import_runs_with_the_collector_off_and_joins_the_frozen_imports():
    freeze_imports()
    with importing():
        assert not gc.isenabled()
        made = [_Node()]
    assert gc.isenabled() and not _walked(made)


def test_a_large_import_in_a_process_that_froze_nothing_is_left_to_the_collector():
    with importing():
        made = [_Node()]
    assert gc.isenabled() and gc.get_freeze_count() == 0 and _walked(made)


def test_a_large_import_leaves_a_collector_that_was_off_off():
    gc.disable()
    try:
        with importing():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_tracking_store_opens_with_the_collector_off_and_mlflow_joins_the_frozen_imports(tmp_path):
    """In a fresh process, as the command line runs it: MLflow and its SQL store load with the collector off, and
    what they made is out of its passes after."""
    code = (
        "import gc, sys\n"
        "from dspy_for.experiments.core.heap import freeze_imports\n"
        "from dspy_for.experiments.tracking import store\n"
        "assert 'mlflow' not in sys.modules\n"
        "freeze_imports()\n"
        "seen = []\n"
        "count = lambda phase, info: seen.append(phase)\n"
        "gc.callbacks.append(count)\n"
        f"store.setup_tracking('sqlite:///{tmp_path}/mlflow.db', 'heap')\n"
        "gc.callbacks.remove(count)\n"
        "import mlflow.store.tracking.sqlalchemy_store as sql\n"
        "walked = any(o is sql.SqlAlchemyStore for o in gc.get_objects())\n"
        "print('enabled', gc.isenabled(), 'walked', walked, 'passes', len(seen) // 2)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split()[-6:] == ["enabled", "True", "walked", "False", "passes", "0"]


def test_a_process_with_its_collector_off_is_left_as_it_is():
    gc.disable()
    try:
        with frozen_heap():
            assert gc.get_freeze_count() == 0
    finally:
        gc.enable()


def _cot_run(spec_lm: str, threads: int, **options: str):
    data = DatasetConfig("gsm8k", "sample", first=6)
    method = MethodConfig("cot")
    spec = ExperimentSpec(
        lm=spec_lm, lm_options=options, datasets=[data], methods=[method], cache=False, num_threads=threads
    )
    return prepare_run(spec, data, method)


def test_items_run_with_the_heap_frozen_and_it_is_back_after(monkeypatch):
    seen: list[int] = []
    lock = threading.Lock()

    def responder(messages, max_tokens):
        with lock:
            seen.append(gc.get_freeze_count())
        return {"reasoning": "r", "answer": "1"}

    monkeypatch.setattr(prepare_mod, "make_lm", lambda spec, **options: ScriptedLM(responder, delay=0.05))
    run = _cot_run("openai/fake", threads=3)
    with Evaluation(run, progress=False) as ev:
        landed = ev.feed(run.examples)
    assert len(landed) == 6 and all(not i.error for i in landed)
    assert len(seen) == 6 and min(seen) > 0  # every call ran with what existed before the run frozen
    assert gc.get_freeze_count() == 0


def test_items_run_with_the_heap_frozen_against_a_server(monkeypatch):
    """A plain ``dspy.LM`` against the OpenAI-compatible test server: the server's handler (a thread of this
    process) sees the heap frozen at every request; after the run it is not."""
    seen: list[int] = []

    def responder(messages, max_tokens):
        seen.append(gc.get_freeze_count())
        return {"reasoning": "r", "answer": "1"}

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with OpenAICompatibleServer(responder) as server:
        run = _cot_run("openai/test-model", threads=3, api_base=server.base_url)
        with Evaluation(run, progress=False) as ev:
            landed = ev.feed(run.examples)
        models = {r["model"] for r in server.requests}
    assert len(landed) == 6 and all(not i.error for i in landed)
    assert models == {"test-model"}
    assert len(seen) == 6 and min(seen) > 0
    assert gc.get_freeze_count() == 0


def test_one_thread_runs_as_before():
    """One thread runs items in the caller's thread, as they come: nothing is frozen."""
    seen: list[int] = []

    def responder(messages, max_tokens):
        seen.append(gc.get_freeze_count())
        return {"reasoning": "r", "answer": "1"}

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(prepare_mod, "make_lm", lambda spec, **options: ScriptedLM(responder))
        run = _cot_run("openai/fake", threads=1)
        with Evaluation(run, progress=False) as ev:
            ev.feed(run.examples)
    assert seen == [0] * 6


def test_the_command_line_ends_with_its_heap_frozen():
    code = (
        "import gc, sys\n"
        "from dspy_for.cli import main\n"
        "sys.argv = ['dspy-for', '--help']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    print('exit', exc.code, 'frozen', gc.get_freeze_count())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    words = out.stdout.split()[-4:]  # after the help text
    assert words[:3] == ["exit", "0", "frozen"] and int(words[3]) > 0


def test_the_command_line_freezes_what_it_imported_first_thing():
    code = (
        "import gc\nimport dspy_for.cli as cli\ncli.app = lambda: print('frozen', gc.get_freeze_count())\ncli.main()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    words = out.stdout.split()
    assert words[0] == "frozen" and int(words[1]) > 0


COMPARE = """
experiment = "heap"
lm = "{lm}"
{options}
num_threads = 3
baseline = "cot"
[[datasets]]
name = "gsm8k"
split = "sample"
first = 4
[[methods]]
name = "cot"
"""


def _watch_the_run(monkeypatch) -> dict[str, list[int]]:
    """The freeze count when each cell closes and when the report is drawn, and inside the LM's calls."""
    seen: dict[str, list[int]] = {"close": [], "report": [], "threshold": []}
    close, report = TrackedRun.close, comparison_mod._report

    def closing(self, *args, **kwargs):
        seen["close"].append(gc.get_freeze_count())
        return close(self, *args, **kwargs)

    def reporting(*args, **kwargs):
        seen["report"].append(gc.get_freeze_count())
        seen["threshold"].append(gc.get_threshold()[0])
        return report(*args, **kwargs)

    monkeypatch.setattr(TrackedRun, "close", closing)
    monkeypatch.setattr(comparison_mod, "_report", reporting)
    return seen


def test_a_comparison_holds_the_heap_frozen_to_its_report_and_gives_it_back(install_scripted_lm, tmp_path, monkeypatch):
    calls: list[int] = []

    def responder(messages, max_tokens):
        calls.append(gc.get_freeze_count())
        return for_responder("18")(messages, max_tokens)

    install_scripted_lm(responder)
    seen = _watch_the_run(monkeypatch)
    config = tmp_path / "heap.toml"
    config.write_text(COMPARE.format(lm="openai/fake", options=""))
    result = compare(config, tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    assert result.ok and result.results["gsm8k"]["cot"].n_scored == 4
    assert len(calls) == 4 and min(calls) > 0
    assert seen["close"] and min(seen["close"]) > 0 and seen["report"] and min(seen["report"]) > 0
    assert seen["threshold"] == [YOUNG_THRESHOLD]
    assert gc.get_freeze_count() == 0 and gc.get_threshold()[0] < YOUNG_THRESHOLD


def test_a_comparison_against_a_server_holds_the_heap_frozen_to_its_report(tmp_path, monkeypatch):
    """A plain ``dspy.LM`` against the OpenAI-compatible test server."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-0123456789")
    seen = _watch_the_run(monkeypatch)
    with OpenAICompatibleServer(for_responder("18")) as server:
        config = tmp_path / "heap.toml"
        config.write_text(
            COMPARE.format(lm="openai/test-model", options=f'lm_options = {{ api_base = "{server.base_url}" }}')
        )
        result = compare(config, tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db")
        models = {r["model"] for r in server.requests}
    assert result.ok and result.results["gsm8k"]["cot"].n_scored == 4 and models == {"test-model"}
    assert seen["close"] and min(seen["close"]) > 0 and seen["report"] and min(seen["report"]) > 0
    assert seen["threshold"] == [YOUNG_THRESHOLD]
    assert gc.get_freeze_count() == 0 and gc.get_threshold()[0] < YOUNG_THRESHOLD
