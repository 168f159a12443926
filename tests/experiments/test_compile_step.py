"""A run's compile step: what it costs is recorded beside the cached program (tokens per role and per LM, dollars where
priced, wall time) and read back on resume as reused, never as new spend; a compile decides on no item the run scores
(the validation items are a split's last, the scored ones its first); a bad ``compile`` table fails before any LM call.
Scripted LMs on the bundled GSM8K sample (45 items)."""

from __future__ import annotations

import json

import dspy
import pytest

import dspy_for.experiments.core.prepare as prepare_mod
from dspy_for.datasets import content_key, load_dataset
from dspy_for.errors import ConfigError
from dspy_for.experiments.core import prepare_run
from dspy_for.experiments.core.compile_step import CompileCost, CompileNotStarted, compile_for_run
from dspy_for.experiments.core.spend import SpendLimit
from dspy_for.experiments.methods import check_compile, compilable_methods, predictor_names
from dspy_for.experiments.spec.model import DatasetConfig, ExperimentSpec, MethodConfig, load_examples
from dspy_for.lm.pricing import PRICE_ATTR, Price
from dspy_for.metrics import metric_for
from dspy_for.testing import ScriptedLM, user_text

SAMPLE = load_dataset("gsm8k", "sample")
GOLD = {ex.question: ex.answer for ex in SAMPLE}
DATA = DatasetConfig(name="gsm8k", split="sample", first=3)
TABLE = {"kind": "bootstrap", "trainset": "sample", "valset": "sample", "train_limit": 12, "val_limit": 5}
#: a compiler that validates (BootstrapFewShot decides on its training items alone)
TEXTGRAD = {**TABLE, "kind": "textgrad", "epochs": 1, "steps_per_epoch": 1}


#: every request answered, whichever copy of the LM made it (DSPy's optimizers deep-copy the student with its LM)
ASKED: list[str] = []


def answer(messages, max_tokens):
    question = user_text(messages).split("[[ ## question ## ]]")[-1].split("Respond with")[0].strip()
    ASKED.append(question)
    return {"reasoning": "step by step", "answer": str(GOLD.get(question, -1))}


@pytest.fixture(autouse=True)
def _asked():
    ASKED.clear()


def key(ex: dspy.Example) -> str:
    return content_key(ex.get("question"), ex.get("answer"))


def compile_once(lm, cached, table=TABLE, scored=None, name="cot"):
    method = MethodConfig(name=name, label="cot_bootstrap", compile=dict(table) if isinstance(table, dict) else table)
    program = dspy.ChainOfThought("question -> answer: float")
    program.set_lm(lm)
    scored = load_examples(DATA) if scored is None else scored
    return compile_for_run(
        program, method, DATA, metric=metric_for("gsm8k"), seed=0, optimizer_lm=lm, cached=cached, scored=scored
    )


def test_the_compile_cost_is_recorded_and_a_resumed_run_reuses_it_without_spending(tmp_path):
    lm = ScriptedLM(answer, model="lm-task")
    setattr(lm, PRICE_ATTR, Price(input=1.0, output=2.0))  # USD per million prompt / completion tokens
    cached = tmp_path / "cot_bootstrap.k.compiled.json"
    program, cost = compile_once(lm, cached)
    assert len(program.predict.demos) == 4 and program.predict.lm is lm
    total = cost.usage["total"]
    assert cost.kind == "bootstrap" and not cost.reused and total["calls"] == len(ASKED) > 0
    assert cost.train_items == 12 - cost.left_out and cost.val_items == 0  # no validation set: none is loaded
    assert cost.tokens == total["tokens"] == cost.tokens_by_lm["lm-task"] > 0 and cost.spent_tokens == cost.tokens
    assert cost.usd == pytest.approx((total["prompt_tokens"] * 1.0 + total["completion_tokens"] * 2.0) / 1e6)
    assert cost.spent_usd == cost.usd and cost.usd_by_role() == {"task": cost.usd}
    assert cost.seconds is not None and cost.seconds > 0
    assert cost.row()["tokens_by_role"] == {"task": cost.tokens} and cost.row()["usd"] == cost.usd
    assert cost.metrics() == {
        "compile.tokens": float(cost.tokens),
        "compile.reused": 0.0,
        "compile.tokens.task": float(cost.tokens),
        "compile.seconds": cost.seconds,
        "compile.usd": cost.usd,
    }
    saved = json.loads(cached.with_suffix(".cost.json").read_text())
    assert saved["seconds"] == cost.seconds and saved["tokens_by_lm"] == {"lm-task": cost.tokens}
    assert json.loads(cached.with_suffix(".usage.json").read_text()) == cost.usage  # as before: usage per role
    # resumed: the program and its cost come back, no LM call, nothing spent, the first compile's cost kept
    ASKED.clear()
    again, reused = compile_once(lm, cached)
    assert ASKED == [] and reused.reused and again.predict.lm is lm
    assert [d["question"] for d in again.predict.demos] == [d["question"] for d in program.predict.demos]
    assert (reused.tokens, reused.usd, reused.seconds, reused.items) == (
        cost.tokens,
        cost.usd,
        cost.seconds,
        cost.items,
    )
    assert reused.spent_tokens == 0 and reused.spent_usd == 0.0 and reused.metrics()["compile.reused"] == 1.0


def test_an_unpriced_lm_has_no_dollar_cost_and_an_older_cache_has_no_wall_time(tmp_path):
    lm = ScriptedLM(answer, model="lm-task")
    cached = tmp_path / "p.compiled.json"
    _, cost = compile_once(lm, cached)
    assert cost.usd is None and cost.spent_usd is None and "compile.usd" not in cost.metrics()
    cached.with_suffix(".cost.json").unlink()  # a program cached before the cost file was written
    old = CompileCost.load(cached, "bootstrap")
    assert old.reused and old.seconds is None and old.tokens_by_lm == {} and old.tokens == cost.tokens


def test_a_compile_leaves_out_every_item_the_run_scores_and_validates_on_the_splits_last_items(tmp_path):
    lm = ScriptedLM(answer)
    scored = load_examples(DATA)  # the first 3 items
    _, cost = compile_once(lm, tmp_path / "p.compiled.json", table=TEXTGRAD, scored=scored)
    train = load_dataset("gsm8k", "sample", limit=12, seed=0)
    validating = {key(ex) for ex in SAMPLE[-5:]}
    expected_out = sum(key(ex) in {key(s) for s in scored} for ex in train)
    expected_val = sum(key(ex) in validating for ex in train)
    assert expected_out > 0 and expected_val > 0  # the seeded sample holds both: each rule has something to do
    assert cost.left_out == expected_out and cost.train_items == 12 - expected_out - expected_val  # no val item trained
    assert cost.val_items == 5 and {key(ex) for ex in SAMPLE[-5:]} <= set(cost.items)  # the last 5: none scored
    assert not {key(s) for s in scored} & set(cost.items)
    # a run grown to the items the compile decided on (here its validation items) refuses the cached program, before
    # any LM call
    ASKED.clear()
    with pytest.raises(ConfigError, match=r"p\.compiled\.json was compiled on 5 item\(s\) this run now scores"):
        compile_once(lm, tmp_path / "p.compiled.json", table=TEXTGRAD, scored=[*scored, *SAMPLE[-5:]])
    # every training item scored: nothing left to train on
    with pytest.raises(ConfigError, match="every one of its 12 `trainset` items is an item the run scores"):
        compile_once(lm, tmp_path / "q.compiled.json", scored=SAMPLE)
    assert ASKED == []


@pytest.mark.parametrize(
    ("name", "table", "message"),
    [
        ("cot", {"kind": "adam"}, "needs `kind` = one of textgrad, gepa, mipro, mipro_fewshot, bootstrap, got 'adam'"),
        ("cot", ["bootstrap"], "must be a table"),
        ("no_predictors", {"kind": "bootstrap"}, "method `no_predictors` has no predictors.*compile a method that has"),
        ("cot", {"kind": "bootstrap", "trainset": "dev"}, "`trainset` must name a split of the dataset: one of train"),
        ("cot", {"kind": "bootstrap", "val_limit": 0}, "`val_limit` must be a positive integer"),
        ("cot", {"kind": "bootstrap", "max_demos": 3}, "Unknown option `max_demos` for compile kind `bootstrap`"),
        ("cot", {"kind": "gepa", "max_metric_calls": 0}, "`max_metric_calls` of compile kind `gepa`"),
        ("for", {"kind": "textgrad", "predictors": ["critic"]}, "has no predictor `critic`.*defender, revise"),
        ("for", {"kind": "textgrad", "predictors": "debater"}, "`predictors` must be a list"),
        ("cot", {"kind": "bootstrap", "optimizer_lm": "nope"}, "nope"),
    ],
)
def test_a_bad_compile_table_fails_before_any_lm_call(no_predictors, tmp_path, name, table, message):
    lm = ScriptedLM(answer)
    with pytest.raises(ConfigError, match=message):
        compile_once(lm, tmp_path / "p.compiled.json", table=table, name=name)
    with pytest.raises(ConfigError, match=message):  # the check the spec's validation calls, splits given
        check_compile(name, {}, table, label="cot_bootstrap", splits=("train", "val", "test", "sample"))
    assert ASKED == [] and not (tmp_path / "p.compiled.json").exists()


def test_which_registered_methods_a_compile_table_can_tune(no_predictors):
    assert predictor_names("for") == ["defender", "revise", "debater", "host"]
    assert predictor_names("cascade", {"first_samples": 2}) == [
        "samples.defender",
        "debate.defender",
        "debate.revise",
        "debate.debater",
        "debate.host",
    ]
    assert predictor_names(no_predictors) == []
    compilable = compilable_methods()
    assert {"cot", "for", "for_paper", "prorefine", "prorefine_paper", "cascade", "defender_sc"} <= set(compilable)
    assert no_predictors not in compilable


def test_prepare_run_keeps_the_compile_cost_and_routes_the_reloaded_program(tmp_path, monkeypatch):
    lm = ScriptedLM(answer, model="lm-task")
    monkeypatch.setattr(prepare_mod, "make_lm", lambda spec, **options: lm)
    method = MethodConfig(name="cot", label="cot_bootstrap", compile=dict(TABLE))
    spec = ExperimentSpec(lm="openai/fake", datasets=[DATA], methods=[method], cache=False)
    assert method.compile_step is not None and method.compile_step.kind == TABLE["kind"]
    first = prepare_run(spec, DATA, method, compile_dir=tmp_path)
    assert first.compile_cost is not None and not first.compile_cost.reused
    assert first.compile_usage == first.compile_cost.usage and first.compile_cost.tokens_by_lm == {
        "lm-task": first.compile_cost.tokens
    }
    ASKED.clear()
    again = prepare_run(spec, DATA, method, compile_dir=tmp_path)
    assert ASKED == [] and again.compile_cost is not None and again.compile_cost.reused
    assert again.program.predict.lm is again.role_lms["task"] and len(again.program.predict.demos) == 4
    assert again.compile_cost.tokens == first.compile_cost.tokens


def test_no_compile_starts_once_max_cost_is_reached_but_a_cached_program_is_reused(tmp_path, monkeypatch):
    lm = ScriptedLM(answer, model="lm-task")
    monkeypatch.setattr(prepare_mod, "make_lm", lambda spec, **options: lm)
    method = MethodConfig(name="cot", label="cot_bootstrap", compile=dict(TABLE))
    spec = ExperimentSpec(lm="openai/fake", datasets=[DATA], methods=[method], cache=False)
    reached = SpendLimit(1.0, earlier=1.0)
    with pytest.raises(CompileNotStarted) as stopped:
        prepare_run(spec, DATA, method, compile_dir=tmp_path, limit=reached)
    assert stopped.value.items == 3 and ASKED == []
    first = prepare_run(spec, DATA, method, compile_dir=tmp_path)  # compiled (no limit), then cached
    assert first.compile_cost is not None and first.compiled_path is not None and first.compiled_path.is_file()
    ASKED.clear()
    again = prepare_run(spec, DATA, method, compile_dir=tmp_path, limit=reached)  # costs nothing: it runs
    assert again.compile_cost is not None and again.compile_cost.reused and ASKED == []
