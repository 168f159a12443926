"""``advise --volume --compile``: a compiled candidate whose student's pilot with its demos is estimated over the budget
is never compiled (no compile request reaches the LM), one that can fit is compiled, and ``--dry-run`` shows the same
decision from the same stored pilot — with a scripted LM and a plain ``dspy.LM`` against the test server (the real
local model: ``test_advise_compile_fit_llm.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dspy_for.experiments import advise
from dspy_for.experiments.advisor.result import OVER_BUDGET
from dspy_for.experiments.core.plan import RunPlan
from dspy_for.testing import OpenAICompatibleServer, user_text

TRAIN = "Training sum"  # every training question says so: a request that does is a compile's


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _files(tmp_path: Path) -> tuple[Path, Path]:
    data = _jsonl(tmp_path / "task.jsonl", [{"question": f"What is 3 + {i}?", "answer": 3 + i} for i in range(8)])
    train = [{"question": f"{TRAIN}: what is 5 + {i}?", "answer": 5 + i} for i in range(6)]
    return data, _jsonl(tmp_path / "train.jsonl", train)


def answers(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any]:
    """Right on every sum, with a short reasoning."""
    text = user_text(messages)
    a, b = text.rsplit("is ", 1)[1].split("?")[0].split(" + ")
    return {"reasoning": "added the two numbers", "answer": str(int(a) + int(b))}


def _run(tmp_path: Path, lm: str, budget: float | None, *, compiled: bool = True, **kw: Any) -> Any:
    tmp_path.mkdir(exist_ok=True)
    data, train = _files(tmp_path)
    if compiled:
        kw.update(volume=1000, compile="bootstrap", train=train)
    return advise(
        lm=lm, data=data, methods="cot", budget=budget, pilot=2, max_items=4,
        tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db", progress=False, **kw,
    )  # fmt: skip


def _compiled_cells(plan: RunPlan) -> list[Any]:
    return [c for c in plan.cells if c.label == "cot_bootstrap"]


def _check_decision(tmp_path: Path, lm: str, compile_requests: Any, **kw: Any) -> None:
    """Within the budget CoT runs; with its demos it would not: not compiled, no compile request; the dry run after it
    says so from the stored pilot; a budget the compiled program fits is compiled (the check can fail)."""
    before = _run(tmp_path, lm, 1e9, dry_run=True, **kw)
    assert any("cot_bootstrap is compiled only if cot's pilot" in n for n in before.notes)  # nothing measured yet

    probe = _run(tmp_path / "probe", lm, None, compiled=False, **kw)  # CoT's tokens per item on the pilot
    cot = probe.outcome("cot").result
    assert cot is not None and cot.n_scored
    budget = 1.2 * cot.tokens_per_item  # CoT fits; a prompt with 4 demos (each about a call) does not
    compile_requests.clear()
    advice = _run(tmp_path, lm, budget, **kw)
    compiled = advice.outcome("cot_bootstrap")
    assert compiled.status == OVER_BUDGET and compiled.reason.startswith("not compiled: ")
    assert "tokens/item estimated (cot on 2 item(s) with 4 demos a prompt)" in compiled.reason
    assert compiled.over == ["--budget"] and compiled.result is None and compiled.compiled is None
    assert compile_requests() == 0  # never compiled: no request for a training item
    assert not list(tmp_path.rglob("cot_bootstrap.*.compiled.json"))

    plan = _run(tmp_path, lm, budget, dry_run=True, **kw)  # the same stored pilot: the same decision
    (compile_cell, items) = _compiled_cells(plan)
    assert compile_cell.to_run == items.to_run == 0 and compile_cell.note == compiled.reason
    assert not any("cot_bootstrap is compiled only if" in n for n in plan.notes)

    roomy = _run(tmp_path, lm, 100 * cot.tokens_per_item, **kw)  # it fits now: compiled, and its requests are seen
    assert roomy.outcome("cot_bootstrap").status != OVER_BUDGET and compile_requests() > 0
    plan = _run(tmp_path, lm, 100 * cot.tokens_per_item, dry_run=True, **kw)
    assert all(c.note == "" or "not compiled" not in c.note for c in _compiled_cells(plan))


def test_scripted_a_compile_over_the_budget_is_never_started(install_scripted_lm, tmp_path):
    lm = install_scripted_lm(answers)

    class Requests:
        seen = 0

        def clear(self) -> None:
            self.seen = len(lm.calls)

        def __call__(self) -> int:
            return sum(TRAIN in json.dumps(c, default=str) for c in lm.calls[self.seen :])

    _check_decision(tmp_path, "openai/fake-model", Requests())


def test_a_plain_lm_against_the_test_server_gets_no_compile_request(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-0123456789")
    with OpenAICompatibleServer(answers) as server:

        class Requests:
            def clear(self) -> None:
                server.reset_counters()

            def __call__(self) -> int:
                return sum(TRAIN in json.dumps(r) for r in server.requests)

        _check_decision(
            tmp_path, "openai/test-model", Requests(), lm_options={"api_base": server.base_url}, num_threads=2
        )


def test_without_a_budget_nothing_is_decided_before_the_compile(tmp_path):
    plan = _run(tmp_path, "openai/fake-model", None, dry_run=True)
    assert not any("compiled only if" in n for n in plan.notes)
    assert [c.step for c in _compiled_cells(plan)] == ["compile", "items"]
