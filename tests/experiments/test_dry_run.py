"""``dry_run``: the plan before the spend. Records stored by a real scripted-LM comparison are estimated by a dry run
(exactly, since a scripted LM answers every item alike), a method without records from its options and the LMs'
measured calls, another dataset from the same method's records elsewhere; ``max_cost``'s verdict; a compile step;
advise and sweep; and a dry run builds no LM, opens no MLflow run and calls nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dspy_for.datasets import load_dataset
from dspy_for.experiments import advise, compare, sweep
from dspy_for.experiments.core.plan import RunPlan
from dspy_for.experiments.methods import get_method
from dspy_for.experiments.reports.plan import plan_lines, plan_text
from dspy_for.experiments.sequential import seeded_order
from dspy_for.testing import for_responder

CONFIG = """
experiment = "dry"
lm = "openai/fake-model"
lm_options = {{ price = {{ input = 1000, output = 1000 }} }}
results_dir = "{results}"
baseline = "cot"
[[datasets]]
name = "gsm8k"
split = "sample"
first = {first}
[[methods]]
name = "cot"
[[methods]]
name = "for"
label = "for_n1"
options = {{ rounds = 1 }}
"""


def _config(tmp_path: Path, first: int = 3, extra: str = "") -> Path:
    path = tmp_path / f"c{first}.toml"
    path.write_text(CONFIG.format(results=tmp_path / "items", first=first) + extra)
    return path


@pytest.fixture
def stored(install_scripted_lm, tmp_path):
    """A scripted comparison of cot and FOR N = 1 on 3 items, its records in ``tmp_path/items``."""
    lm = install_scripted_lm(for_responder())
    result = compare(_config(tmp_path), tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db", traces=False)
    assert result.ok
    return lm, result


def _per_item(result, label):
    items = result.results["gsm8k"][label].items
    calls = [i.usage["total"]["calls"] for i in items]
    tokens = [i.usage["total"]["prompt_tokens"] + i.usage["total"]["completion_tokens"] for i in items]
    return sum(calls) / len(calls), sum(tokens) / len(tokens)


def test_stored_records_plan_nothing_to_run_and_grown_items_at_their_measured_cost(stored, tmp_path, no_lm_no_run):
    _, result = stored
    plan = compare(_config(tmp_path), dry_run=True)
    assert isinstance(plan, RunPlan) and plan.ok and plan.to_run == 0 and plan.stored == 6
    assert plan.total("calls") is not None and plan.total("calls").value == 0
    grown = compare(_config(tmp_path, first=5), dry_run=True)
    assert isinstance(grown, RunPlan) and grown.to_run == 4
    for label in ("cot", "for_n1"):
        cell = next(c for c in grown.cells if c.label == label)
        calls, tokens = _per_item(result, label)
        assert (cell.to_run, cell.stored) == (2, 3)
        assert cell.source == "this cell's records (3 items)"
        assert cell.calls.value == pytest.approx(2 * calls) and cell.tokens.value == pytest.approx(2 * tokens)
        assert cell.calls.low <= cell.calls.value <= cell.calls.high
        assert cell.usd is not None and cell.usd.value == pytest.approx(2 * tokens * 1000 / 1e6)


def test_a_method_without_records_is_counted_from_its_options_at_the_lms_measured_calls(stored, tmp_path):
    extra = '[[methods]]\nname = "for"\nlabel = "for_n2"\noptions = { rounds = 2, host = false }\n'
    plan = compare(_config(tmp_path, extra=extra), dry_run=True)
    cell = next(c for c in plan.cells if c.label == "for_n2")
    declared = get_method("for").calls_per_item({"rounds": 2, "host": False})
    assert declared == {"defender": (1, 3), "debater": (2, 4), "host": (0, 0)}
    assert cell.to_run == 3 and cell.source == "for's options × calls measured in for_n1 on gsm8k/sample"
    assert (cell.calls.low, cell.calls.high) == (3 * 3, 3 * 2 * 7)  # fewest (1 + 2), most twice (3 + 4)
    assert cell.seconds is not None and cell.seconds.value > 0  # the scripted calls' measured seconds


def test_another_dataset_is_estimated_from_the_same_methods_records_elsewhere(stored, tmp_path):
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + {i}?", "answer": 2 * i}) + "\n" for i in range(4)))
    plan = compare(_config(tmp_path), data=str(data), methods="cot", dry_run=True)
    (cell,) = plan.cells
    assert cell.to_run == 4 and cell.stored == 0
    assert cell.source == "cot on gsm8k/sample (3 items)"  # nothing measured this data yet: as they are


def test_max_cost_says_at_about_which_item_it_stops(stored, tmp_path):
    _, result = stored
    _, cot_tokens = _per_item(result, "cot")
    _, for_tokens = _per_item(result, "for_n1")
    # one thread: cot's 2 new items, then FOR's; $0.001 a token
    budget = (2 * cot_tokens + 1.5 * for_tokens) / 1000
    plan = compare(_config(tmp_path, first=5), max_cost=budget, dry_run=True)
    stop = plan.cost_stop
    assert stop is not None and stop.verdict == "would stop" and stop.at_item == 4 and stop.of_items == 4
    assert stop.during == "for_n1 on gsm8k/sample"
    assert any("would stop the run at about item 4 of 4" in line for line in plan_lines(plan))
    roomy = compare(_config(tmp_path, first=5), max_cost=budget * 10, dry_run=True)
    assert roomy.cost_stop is not None and roomy.cost_stop.verdict == "would not stop"


def test_on_several_threads_max_cost_counts_the_costliest_methods_items_first(stored, tmp_path):
    _, result = stored
    _, for_tokens = _per_item(result, "for_n1")
    # two threads start FOR's 2 new items (the most work left) before cot's, as the run does; $0.001 a token
    plan = compare(_config(tmp_path, first=5), max_cost=1.5 * for_tokens / 1000, num_threads=2, dry_run=True)
    stop = plan.cost_stop
    assert stop is not None and stop.verdict == "would stop" and stop.at_item == 2 and stop.of_items == 4
    assert stop.during == "for_n1 on gsm8k/sample"


def test_a_compile_step_is_planned_from_its_settings_then_reused_once_stored(install_scripted_lm, tmp_path):
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"question": f"{i} boxes of 12?", "answer": 12 * i}) + "\n" for i in range(8)))
    extra = f'[[methods]]\nname = "cot"\nlabel = "cot_boot"\ncompile = {{ kind = "bootstrap", data = "{train}" }}\n'
    config = _config(tmp_path, extra=extra)
    install_scripted_lm(for_responder())
    plan = compare(config, dry_run=True, methods="cot_boot", baseline="cot_boot")
    step, items = plan.cells
    assert (step.step, step.to_run, items.step) == ("compile", 1, "items")
    assert step.note.startswith("bootstrap: 4 demos") and "bootstrap settings × cot's options" in step.source
    assert step.calls.low == 4 and step.calls.high == 2 * 8  # 4 demos at least; at most every training item, twice
    compare(
        config,
        methods="cot_boot",
        baseline="cot_boot",
        tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db",
        traces=False,
    )
    again = compare(config, dry_run=True, methods="cot_boot", baseline="cot_boot")
    assert [(c.step, c.to_run, c.stored) for c in again.cells] == [("compile", 0, 1), ("items", 0, 3)]


def test_advise_gives_the_bound(tmp_path, no_lm_no_run):
    plan = advise(
        lm="openai/fake-model",
        dataset="gsm8k",
        split="sample",
        methods="cot,for",
        results_dir=str(tmp_path),
        dry_run=True,
    )
    assert isinstance(plan, RunPlan) and plan.command == "advise"
    items = len(load_dataset("gsm8k", "sample"))
    assert [c.label for c in plan.cells] == ["cot", "for"] and all(c.to_run == items for c in plan.cells)
    assert plan.bound.startswith("advise stops once its recommendation is resolved")
    assert "at most:" in plan_text(plan)


def test_a_sweep_gives_one_trials_range_over_its_space_and_n_trials(tmp_path, no_lm_no_run):
    config = tmp_path / "s.toml"
    config.write_text(
        f'method = "for"\nlm = "openai/fake-model"\nn_trials = 7\nstorage = "sqlite:///{tmp_path}/s.db"\n'
        '[dataset]\nname = "gsm8k"\nsplit = "sample"\nfirst = 2\n'
        '[search.rounds]\ntype = "int"\nlow = 0\nhigh = 3\n'
    )
    plan = sweep(config, dry_run=True)
    assert isinstance(plan, RunPlan) and plan.trials == 7 and plan.to_run == 14
    (cell,) = plan.cells
    # rounds 0: 2 calls (Defender, Host) an item; rounds 3: up to 2 × (4 + 6 + 1)
    assert (cell.calls.low, cell.calls.high) == (2 * 2, 2 * 2 * 11)
    total = plan.total("calls")
    assert total is not None and total.high == 7 * cell.calls.high
    assert not (tmp_path / "s.db").exists()  # no study was opened


def test_scripted_runs_make_calls_within_their_declared_range(install_scripted_lm, tmp_path):
    """Each method's measured calls per role lie within its registry entry's (fewest, twice the most)."""
    install_scripted_lm(for_responder())
    methods = {"self_consistency": {"k": 3}, "refine": {"N": 2}, "for": {"rounds": 2}, "prorefine": {"k": 8, "n": 2}}
    tables = "".join(
        f'[[methods]]\nname = "{name}"\noptions = {{ {", ".join(f"{k} = {v}" for k, v in o.items())} }}\n'
        for name, o in methods.items()
    )
    config = tmp_path / "m.toml"
    config.write_text(
        f'lm = "openai/fake-model"\nresults_dir = "{tmp_path / "items"}"\nbaseline = "refine"\n'
        '[[datasets]]\nname = "gsm8k"\nsplit = "sample"\nfirst = 2\n' + tables
    )
    result = compare(config, tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db", traces=False)
    for name, options in methods.items():
        declared = get_method(name).calls_per_item(options)
        for item in result.results["gsm8k"][name].items:
            for role, counters in item.usage.items():
                if role != "total":
                    lo, hi = declared[role]
                    assert lo <= counters["calls"] <= 2 * hi, (name, role, counters["calls"], declared[role])


def test_a_sequential_comparison_plans_its_bound_in_its_seeded_order(stored, tmp_path):
    plan = compare(_config(tmp_path, first=5), sequential=True, max_items=4, dry_run=True)
    assert plan.bound.startswith("a sequential comparison stops once every method is resolved")
    # the first 4 items of the run's seeded order over the first 5: those of the 3 stored among them are reused
    examples = load_dataset("gsm8k", "sample")[:5]
    order = seeded_order(examples, 0)[:4]
    new = sum(1 for ex in order if ex not in examples[:3])
    assert [(c.to_run, c.stored) for c in plan.cells] == [(new, 4 - new)] * 2


def test_a_configs_dry_run_key_plans_and_the_flag_turns_it_off(tmp_path, no_lm_no_run):
    config = tmp_path / "c.toml"
    config.write_text("dry_run = true\n" + CONFIG.format(results=tmp_path / "items", first=2))
    assert isinstance(compare(config), RunPlan)
    with pytest.raises(AssertionError, match="a dry run must"):  # the run itself: refused by the guard
        compare(config, dry_run=False)


def test_a_local_cell_with_nothing_stored_is_timed_at_the_models_measured_speed_at_its_slots(tmp_path, no_lm_no_run):
    """The registry's speed of the model at the slots the run serves it with: seconds per call stretched by how much
    slower each of the slots' streams runs than one alone; no number at slots nothing measured, or for a model with
    no measured speed."""
    from dspy_for.experiments.core.estimates import DEFAULT_CALL
    from dspy_for.lm.options import DEFAULT_SLOTS
    from dspy_for.lm.registry import get_model

    def plan(lm: str, **kw):
        return compare(
            lm=lm, dataset="gsm8k", split="sample", methods="cot", first=3, results_dir=str(tmp_path / "items"),
            dry_run=True, **kw,
        )  # fmt: skip

    speed = get_model("qwen2.5-coder-1.5b").speed
    (cell,) = plan("local/qwen2.5-coder-1.5b").cells
    per_call = speed.call_seconds(DEFAULT_CALL.prompt, DEFAULT_CALL.completion, DEFAULT_SLOTS)
    assert per_call is not None and cell.seconds is not None and cell.seconds.value == pytest.approx(3 * per_call)
    assert f"qwen2.5-coder-1.5b's measured speed with {DEFAULT_SLOTS} slot(s)" in cell.source
    (alone,) = plan("local/qwen2.5-coder-1.5b", lm_options={"slots": 1}).cells
    assert alone.seconds is not None and alone.seconds.value < cell.seconds.value  # one stream alone runs faster
    (unmeasured,) = plan("local/qwen2.5-coder-1.5b", lm_options={"slots": 3}).cells
    assert unmeasured.seconds is None and "measured speed" not in unmeasured.source
    assert plan("local/smollm2-135m").cells[0].seconds is None  # no speed in the registry: not measured
    assert plan("openai/fake-model").cells[0].seconds is None
    text = plan_text(plan("local/qwen2.5-coder-1.5b"))
    assert f"keeps {DEFAULT_SLOTS} items in flight" in text and "not measured" not in text
