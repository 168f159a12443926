"""The compile comparison's costs without any LM call: a compile table is checked with the spec (compare, sweep);
``max_cost`` counts what a new compile spent (a reused one: nothing) and needs the compile's LM priced; stored records
kept without a cost are priced at the LMs' declared price; and what ``advise --volume`` weighs: compiled candidates,
the cost per correct answer at the volume, the pick it changes."""

from __future__ import annotations

import pytest

from dspy_for.errors import ConfigError
from dspy_for.experiments.advisor.candidates import select_candidates
from dspy_for.experiments.advisor.result import CandidateOutcome
from dspy_for.experiments.advisor.rounds import cheapest
from dspy_for.experiments.advisor.volume import cheapest_at, check_volume, compiled_candidates
from dspy_for.experiments.core.compile_step import CompileCost
from dspy_for.experiments.core.costs import cost_at
from dspy_for.experiments.core.records import ItemResult, MethodResult
from dspy_for.experiments.core.shown import compile_cell
from dspy_for.experiments.core.spend import SpendLimit
from dspy_for.experiments.core.summarize import summarize
from dspy_for.experiments.reports.compiled import price_note
from dspy_for.experiments.spec.config import load_spec
from dspy_for.experiments.sweeps.spec import load_sweep_spec
from dspy_for.lm.pricing import Price


def _config(tmp_path, methods: str, top: str = 'lm = "openai/gpt-4o-mini"\n') -> str:
    path = tmp_path / "c.toml"
    path.write_text(f'{top}[[datasets]]\nname = "gsm8k"\nsplit = "sample"\n{methods}')
    return str(path)


def test_a_compile_table_is_checked_with_the_spec_before_any_lm_call(tmp_path, no_predictors):
    bad = f'[[methods]]\nname = "{no_predictors}"\ncompile = {{ kind = "bootstrap" }}\n'
    with pytest.raises(ConfigError, match="method `no_predictors` has no predictors.*compile a method that has"):
        load_spec(_config(tmp_path, bad))
    split = '[[methods]]\nname = "cot"\ncompile = { kind = "gepa", trainset = "sample", valset = "dev" }\n'
    with pytest.raises(ConfigError, match="`valset` must name a split of the dataset: one of train, val, test, sample"):
        load_spec(_config(tmp_path, split))
    sweep = tmp_path / "s.toml"
    sweep.write_text(
        f'method = "{no_predictors}"\ncompile = {{ kind = "bootstrap" }}\n[dataset]\nname = "gsm8k"\n'
        '[search.k]\ntype = "int"\nlow = 1\nhigh = 2\n'
    )
    with pytest.raises(ConfigError, match="has no predictors"):
        load_sweep_spec(sweep)


def test_max_cost_needs_the_compiles_optimizer_lm_priced_and_a_role_lm_for_it_is_refused(tmp_path):
    named = '[[methods]]\nname = "cot"\ncompile = { kind = "gepa", trainset = "sample", optimizer_lm = "openai/x" }\n'
    assert load_spec(_config(tmp_path, named)).method_roles() == {"task", "optimizer"}
    with pytest.raises(ConfigError, match="`max_cost` needs a price for every LM.*`openai/x` \\(role `optimizer`\\)"):
        load_spec(_config(tmp_path, named, 'lm = "openai/gpt-4o-mini"\nmax_cost = 1\n'))
    priced = 'lm = "openai/gpt-4o-mini"\nmax_cost = 1\nrole_lm_options = { optimizer = { price = { input = 1, output = 2 } } }\n'
    assert load_spec(_config(tmp_path, named, priced)).max_cost == 1.0  # its price given for the compile's role
    plain = '[[methods]]\nname = "cot"\ncompile = { kind = "bootstrap", trainset = "sample" }\n'
    with pytest.raises(ConfigError, match="a compile's LM is its table's `optimizer_lm`"):
        load_spec(_config(tmp_path, plain, 'lm = "openai/gpt-4o-mini"\nrole_lms = { optimizer = "openai/y" }\n'))


def _cost(usd: float | None, reused: bool = False) -> CompileCost:
    usage = {"task": {"calls": 3, "priced_calls": 3 if usd is not None else 0, "cost_usd": usd or 0.0}}
    return CompileCost(kind="bootstrap", usage=usage, reused=reused)


def test_a_new_compiles_dollars_count_against_max_cost_a_reused_one_does_not():
    limit = SpendLimit(1.0)
    limit.add_compile(_cost(0.25, reused=True))
    assert limit.spent == 0 and limit.unpriced_calls == 0  # spent before, by the run that compiled it
    limit.add_compile(_cost(0.25))
    limit.add_compile(_cost(None))  # unpriced: nothing added, its calls counted as unpriced
    assert limit.spent == 0.25 and limit.unpriced_calls == 3


def _item(question: str, score: float, usage: dict[str, dict[str, float]]) -> ItemResult:
    return ItemResult(id=question, question=question, gold=1, prediction={"answer": "1"}, score=score, usage=usage)


def test_records_stored_without_a_cost_are_priced_at_the_declared_price():
    usage = {"task": {"calls": 1, "prompt_tokens": 600, "completion_tokens": 100}}  # no cost recorded
    items = [_item(f"q{i}", float(i % 2), usage) for i in range(4)]
    unpriced = summarize(MethodResult("cot", items, lms={"task": "m-0.5b"}))
    assert unpriced.cost_per_item is None and unpriced.priced_at == {}  # no price: never a made-up number
    declared = MethodResult("cot", items, lms={"task": "m-0.5b"}, prices={"task": Price(input=0.02, output=0.04)})
    s = summarize(declared)
    assert s.cost_per_item == pytest.approx((600 * 0.02 + 100 * 0.04) / 1e6)
    assert s.priced_at == {"m-0.5b": Price(input=0.02, output=0.04)}
    assert s.row()["priced_at"] == {"m-0.5b": {"input": 0.02, "output": 0.04}}  # as summary.jsonl keeps it
    # its records priced the same way, one by one: the cell's dollars are their mean
    costs = [c[None] for c in declared.record_costs()]
    assert costs == [pytest.approx((600 * 0.02 + 100 * 0.04) / 1e6)] * 4 and sum(costs) / 4 == pytest.approx(
        s.cost_per_item
    )
    assert s.tokens_per_item_by_lm == {"m-0.5b": 700.0}
    assert "the declared `price`" in price_note([s]) and "m-0.5b $0.020 / $0.040" in price_note([s])


def test_the_compile_cell_says_tokens_dollars_seconds_and_reused():
    usage = {
        "task": {"calls": 2, "prompt_tokens": 41_000, "completion_tokens": 230, "priced_calls": 2, "cost_usd": 0.082}
    }
    cost = CompileCost("bootstrap", usage, seconds=95.2, reused=True)  # a Summary's `compile`
    assert compile_cell(cost) == "41,230 tok · $0.082 · 95s (reused)"
    unpriced = CompileCost("bootstrap", {"task": {"calls": 1, "prompt_tokens": 10}}, seconds=1.25)
    assert compile_cell(unpriced) == "10 tok · 1.2s"
    assert compile_cell(None) == "-"


def test_compiled_candidates_are_the_candidates_with_predictors_compiled_on_the_training_file(tmp_path, no_predictors):
    train = tmp_path / "train.jsonl"
    train.write_text("".join(f'{{"question": "q{i}", "answer": {i}}}\n' for i in range(10)))
    kinds, n = check_volume(500, "bootstrap,gepa", train)
    assert (kinds, n) == (["bootstrap", "gepa"], 10)
    chosen = select_candidates("cot,no_predictors")
    compiled = compiled_candidates(chosen, kinds, train, n)
    assert [c.label for c in compiled] == ["cot_bootstrap", "cot_gepa"]  # no predictors: nothing to compile
    data = str(train.resolve())
    assert compiled[0].compile == {"kind": "bootstrap", "data": data}  # trains on all of it
    assert compiled[1].compile == {"kind": "gepa", "data": data, "val_limit": 2}  # validates on its last quarter


def _summary(label: str, right: int, usd_per_item: float, compile_usd: float | None = None):
    return summarize(_measured(label, right, usd_per_item, compile_usd).result)


def test_the_cost_per_correct_answer_at_a_volume_counts_the_compile_once():
    plain, compiled = _summary("cot", 5, 0.002), _summary("cot_gepa", 6, 0.001, compile_usd=5.0)
    both = [plain, compiled]
    assert cost_at(both, plain, 100) == pytest.approx(0.004)
    assert cost_at(both, compiled, 100) == pytest.approx((5.0 + 0.1) / 60)  # the compile dominates at 100 items
    assert cost_at(both, compiled, 100_000) == pytest.approx((5.0 + 100) / 60_000)  # at 100,000 it pays for itself
    assert cost_at(both, compiled, 100_000) < cost_at(both, plain, 100_000)
    assert cost_at(both, _summary("never", 0, 0.001), 100) is None  # no correct answer: no finite cost per one


def _measured(label: str, right: int, usd_per_item: float, compile_usd: float | None = None) -> CandidateOutcome:
    usage = {"task": {"calls": 1, "priced_calls": 1, "cost_usd": usd_per_item, "prompt_tokens": 100}}
    items = [_item(f"q{i}", float(i < right), usage) for i in range(10)]
    compiled = None
    if compile_usd is not None:
        compiled = CompileCost("gepa", {"optimizer": {"calls": 1, "priced_calls": 1, "cost_usd": compile_usd}})
    return CandidateOutcome(label, "cot", {}, result=MethodResult(label, items, compile=compiled))


def test_among_tied_candidates_the_volume_decides_which_is_cheapest_per_correct_answer():
    plain, compiled = _measured("cot", 5, 0.002), _measured("cot_gepa", 6, 0.001, compile_usd=5.0)
    assert cheapest_at([plain, compiled], 100) is plain  # the compile is not paid back at 100 items
    assert cheapest_at([plain, compiled], 100_000) is compiled  # it is at 100,000
    assert cheapest([plain, compiled]) is compiled  # without a volume, as today: tokens per item (equal), then accuracy
