"""`advise` in dollars, with scripted LMs whose price is given (every call costs its tokens × 1e-6 USD, so costs are
known exactly): `--budget-usd` sizes k from CoT's measured $/item (the smaller of it and the token budget) and drops
a candidate over it, names itself when nothing fits, and is refused before any LM call for an LM without a price;
the answer shows $/item only when priced; `max_cost` stops advise (unresolved, not ok, exit 1) and a re-run resumes;
`compare` and `sweep` stopped by `max_cost` exit 1 too; epochs > 1 under the mean reducer make the rounds' tests
bounded."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dspy_for.cli import app
from dspy_for.errors import ConfigError
from dspy_for.experiments import advise
from dspy_for.experiments.advisor.candidates import Candidate, sized_options, sizing_budget
from dspy_for.experiments.advisor.report import advice_lines
from dspy_for.experiments.core.spend import money
from dspy_for.lm.pricing import PRICE_ATTR, Price
from dspy_for.modules.for_signatures import DEBATER_INSTRUCTIONS, REVISE_INSTRUCTIONS
from dspy_for.testing import ScriptedLM, system_text, user_text

Install = Callable[[Callable[..., Any]], ScriptedLM]
PRICE = {"input": 1.0, "output": 1.0}  # USD per million tokens: a call costs its tokens × 1e-6
PRICE_FLAG = "price={input=1.0, output=1.0}"
PAD = " ".join(["word"] * 600)  # FOR's debate talks at length: far over 3.5 × CoT's cost (within max_tokens)


def _uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/mlruns/mlflow.db"


def _sums(tmp_path: Path, n: int = 12) -> Path:
    path = tmp_path / "sums.jsonl"
    path.write_text("".join(json.dumps({"question": f"What is 3 + {i}?", "answer": 3 + i}) + "\n" for i in range(n)))
    return path


def _answer(messages: list[dict[str, Any]]) -> int:
    return 3 + int(user_text(messages).split("What is 3 + ")[1].split("?")[0])


DEBATER, REVISE = DEBATER_INSTRUCTIONS.split(".")[0], REVISE_INSTRUCTIONS.splitlines()[0]


def sums(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any]:
    """CoT (and its samples) right on every sum; FOR's roles right and long-winded; the single prompt wrong."""
    system, answer = system_text(messages), _answer(messages)
    if DEBATER in system:
        return {"questions": [f"How did you add? {PAD}"]}
    if REVISE in system:
        return {"responses": [PAD], "error_found": "False", "error": "none", "reasoning": "ok", "answer": str(answer)}
    if "reasoning" not in system:
        return {"answer": str(answer + 1)}
    return {"reasoning": "added", "answer": str(answer)}


def _priced(install: Install, responder: Callable[..., Any] = sums) -> ScriptedLM:
    """The scripted LM with a given price (the option reaches the spec; the attribute, the cost recorder)."""
    lm = install(responder)
    setattr(lm, PRICE_ATTR, Price(**PRICE))
    return lm


# ------------------------------------------------------------------------------------------- sizing


def test_the_sizing_budget_is_the_smaller_of_the_token_budget_and_what_the_dollars_buy():
    assert sizing_budget(1000, None, 100, 1e-4) == (1000, "--budget")
    assert sizing_budget(None, 3e-4, 100, 1e-4) == pytest.approx((300, "--budget-usd"))
    assert sizing_budget(250, 3e-4, 100, 1e-4) == (250, "--budget")  # the tokens bind
    assert sizing_budget(None, 3e-4, 100, 0.0) == (None, "")  # a free CoT: dollars bound nothing
    sc = Candidate("self_consistency", "self_consistency", {}, "k")
    options, how = sized_options(sc, None, 100, budget_usd=0.0003, cot_cost=0.0001)
    assert options == {"k": 3} and "--budget-usd" in how  # 0.0003 / 0.0001 is 2.9999999999999996 in floats
    options, how = sized_options(sc, 250, 100, budget_usd=0.0003, cot_cost=0.0001)
    assert options == {"k": 2} and "250 / 100 → 2" in how  # 2.5 calls: a half rounds down
    options, how = sized_options(sc, None, 100, budget_usd=0.00015, cot_cost=0.0001)
    assert options is None and "needs k ≥ 2" in how
    options, how = sized_options(sc, None, 100, budget_usd=0.001, cot_cost=0.0)
    assert options == {} and "costs $0/item" in how


def test_budget_usd_sizes_k_from_cots_dollars_and_drops_a_candidate_over_it(install_scripted_lm: Install, tmp_path):
    _priced(install_scripted_lm)
    kw: dict[str, Any] = {"lm": "openai/fake-model", "lm_options": {"price": PRICE}, "data": _sums(tmp_path)}
    kw = {**kw, "tracking_uri": _uri(tmp_path), "progress": False}
    probe = advise(**kw, methods="cot", budget_usd=1.0)
    tokens, cost = probe.cot_tokens, probe.cot_cost
    assert tokens is not None and cost is not None and cost == pytest.approx(tokens * 1e-6)  # known exactly
    assert probe.outcome("cot").row()["cost_per_item"] == pytest.approx(cost)

    budget_usd = 3.5 * cost
    advice = advise(**kw, methods="cot,self_consistency,for", budget_usd=budget_usd, budget=100 * tokens)
    sc, for_ = advice.outcome("self_consistency"), advice.outcome("for")
    assert sc.options == {"k": 3} and "--budget-usd" in sc.sized  # 3.5 calls: a half rounds down; the tokens allow 100
    assert for_.status == "over budget" and for_.over == ["--budget-usd"] and for_.result is not None
    over = f"{money(for_.result.cost_per_item, significant=3)}/item on the pilot's 4 item(s) > budget "
    assert over + f"{money(budget_usd, as_given=True)}/item" in for_.reason
    assert advice.budget_usd == budget_usd and advice.recommended in ("cot", "self_consistency")
    text = "\n".join(advice_lines(advice))
    assert f"budget {money(budget_usd, as_given=True)}/item" in text.splitlines()[0]
    assert "$/item" in text.splitlines()[2]  # the table's header
    rec = advice.recommendation
    assert rec is not None and rec.result is not None
    assert f"tokens/item and {money(rec.result.cost_per_item)}/item over" in text and "e-0" not in text
    d = advice.to_dict()
    assert d["budget_usd"] == budget_usd and d["cot_cost_per_item"] == pytest.approx(cost)
    assert all("cost_per_item" in row for row in d["candidates"] if row["n"])

    from mlflow.tracking import MlflowClient

    assert advice.run_id is not None
    metrics = MlflowClient(_uri(tmp_path)).get_run(advice.run_id).data.metrics
    assert metrics["advise.for.cost_per_item_usd"] == pytest.approx(for_.result.cost_per_item)
    assert metrics["advise.cost_per_item_usd"] == pytest.approx(rec.result.cost_per_item)

    tight = advise(**kw, methods="cot,self_consistency", budget_usd=budget_usd, budget=2.5 * tokens)
    assert tight.outcome("self_consistency").options == {"k": 2}  # now the token budget binds

    with pytest.raises(ConfigError, match=r"No candidate fits `--budget-usd` \$.*raise `--budget-usd` to at least \$"):
        advise(**kw, methods="cot,for", budget_usd=cost / 2)


def test_budget_usd_is_refused_before_any_lm_call_when_an_lm_has_no_price(install_scripted_lm: Install, tmp_path):
    lm = install_scripted_lm(sums)
    data = _sums(tmp_path, 6)
    with pytest.raises(ConfigError, match=r"`--budget-usd` .* `openai/fake-model` .* no price .*price=\{input="):
        advise(lm="openai/fake-model", data=data, budget_usd=0.01, tracking_uri=_uri(tmp_path))
    args = ["advise", "--lm", "openai/fake-model", "--data", str(data), "--budget-usd", "0.01"]
    out = CliRunner().invoke(app, [*args, "--tracking-uri", _uri(tmp_path)])
    assert out.exit_code == 2 and "--budget-usd" in out.output and "price" in out.output
    assert lm.calls == [] and lm.built == []

    unpriced = advise(lm="openai/fake-model", data=data, methods="cot", tracking_uri=_uri(tmp_path), progress=False)
    assert math.isnan(unpriced.outcome("cot").result.cost_per_item)  # type: ignore[union-attr]
    text = "\n".join(advice_lines(unpriced))
    assert "$/item" not in text and "$" not in text.splitlines()[0]  # absent, never $0
    assert "cost_per_item" not in unpriced.outcome("cot").row() and "spent_usd" not in unpriced.to_dict()


# ------------------------------------------------------------------------------------------ max_cost


def test_max_cost_stops_advise_unresolved_exits_1_and_a_rerun_resumes(install_scripted_lm: Install, tmp_path):
    lm = _priced(install_scripted_lm)
    data = _sums(tmp_path, 20)
    kw: dict[str, Any] = {"lm": "openai/fake-model", "lm_options": {"price": PRICE}, "data": data}
    kw["methods"] = "single,cot"
    stopped = advise(**kw, max_cost=1e-9, tracking_uri=_uri(tmp_path), progress=False)
    cot, single = stopped.outcome("cot"), stopped.outcome("single")
    assert stopped.stopped_by_cost and not stopped.ok and not stopped.resolved
    assert cot.result is not None and cot.result.n_scored == 1  # the item that ran before the spend was reached
    assert single.status == "not run" and "max_cost $0.000000001 was reached" in single.reason
    assert stopped.recommended == "cot" and "unresolved: max_cost $0.000000001 was reached" in stopped.how
    assert stopped.spend is not None and stopped.spend.spent > 1e-9 and stopped.spend.not_started > 0
    text = "\n".join(advice_lines(stopped))
    assert "recommended (unresolved): cot" in text
    spent = money(stopped.spend.total, decimals=4)
    assert f"spent {spent} of max_cost $0.000000001: reached" in text and "with a higher max_cost resumes" in text
    assert stopped.to_dict()["stopped_by_cost"] is True

    args = ["advise", "--lm", "openai/fake-model", "--lm-option", PRICE_FLAG, "--data", str(data)]
    args += ["--methods", "single,cot", "--max-cost", "1e-9", "--tracking-uri", _uri(tmp_path)]
    calls = len(lm.calls)
    out = CliRunner().invoke(app, args)
    flat = " ".join(out.output.split())
    assert out.exit_code == 1, out.output
    assert "max_cost reached:" in flat and "higher `--max-cost` to resume" in flat
    assert len(lm.calls) == calls + 1  # the stored item reused; one more item ran before the spend was reached

    calls = len(lm.calls)
    done = advise(**kw, max_cost=1.0, tracking_uri=_uri(tmp_path), progress=False)
    assert done.ok and not done.stopped_by_cost and done.resolved and done.recommended == "cot"
    ran = sum(c.result.n for c in done.candidates if c.result is not None)
    assert len(lm.calls) - calls == ran - 2  # CoT's two stored items were reused, not run again


def test_compare_stopped_by_max_cost_prints_its_spend_and_exits_1(install_scripted_lm: Install, tmp_path):
    _priced(install_scripted_lm)
    args = ["compare", "--data", str(_sums(tmp_path, 4)), "--methods", "cot", "--lm", "openai/fake-model"]
    args += ["--lm-option", PRICE_FLAG, "--tracking-uri", _uri(tmp_path)]
    out = CliRunner().invoke(app, [*args, "--max-cost", "1e-9"])
    flat = " ".join(out.output.split())
    assert out.exit_code == 1, out.output
    assert "of max_cost $0.000000001: reached, 3 item(s) not started" in flat and "max_cost reached:" in flat
    assert "item(s) failed" not in flat  # nothing failed: it was stopped
    again = CliRunner().invoke(app, [*args, "--max-cost", "1"])
    assert again.exit_code == 0, again.output
    assert "of max_cost $1" in again.output and "reached" not in again.output


SWEEP = """
method = "cot"
study = "costly"
lm = "openai/fake-model"
n_trials = 2
chunk_size = 2
[dataset]
name = "gsm8k"
split = "sample"
first = 4
[search.temperature]
type = "float"
low = 0.0
high = 1.0
"""


def test_sweep_stopped_by_max_cost_prints_its_spend_and_exits_1(install_scripted_lm: Install, tmp_path):
    _priced(install_scripted_lm, lambda messages, max_tokens: {"reasoning": "r", "answer": "27"})
    config = tmp_path / "sweep.toml"
    config.write_text(SWEEP)
    args = ["sweep", str(config), "--lm-option", PRICE_FLAG, "--tracking-uri", _uri(tmp_path), "--max-cost", "1e-9"]
    out = CliRunner().invoke(app, args)
    flat = " ".join(out.output.split())
    assert out.exit_code == 1, out.output
    assert "of max_cost $0.000000001: reached, 2 trial(s) not finished" in flat
    assert "max_cost reached:" in flat


# -------------------------------------------------------------------------------------------- epochs


@pytest.mark.parametrize(("reducer", "kind"), [("mean", "bounded"), ("majority", "binary")])
def test_advise_over_epochs_tests_per_item_values_bounded_under_the_mean(
    install_scripted_lm: Install, tmp_path, reducer, kind
):
    lm = install_scripted_lm(sums)
    data = _sums(tmp_path, 16)
    advice = advise(
        lm="openai/fake-model",
        lm_options={"temperature": 1.0},
        data=data,
        methods="single,cot",
        epochs=2,
        reducer=reducer,
        tracking_uri=_uri(tmp_path),
        progress=False,
    )
    assert advice.spec.epochs == 2 and advice.spec.reducer == reducer
    assert advice.pairs and all(p.result.kind == kind for p in advice.pairs)
    cot = advice.outcome("cot").result
    assert cot is not None and cot.epochs == 2 and cot.n == 2 * cot.n_scored  # two records per item
    assert advice.recommended == "cot" and advice.items_used == cot.n_scored  # items, not records
    assert len(lm.calls) == sum(c.result.n for c in advice.candidates if c.result is not None)
