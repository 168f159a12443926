"""`advise` in dollars against the local OpenAI-compatible test server: a plain ``dspy.LM`` for a model litellm's
cost map prices (``gpt-5-mini``, which the server treats as a reasoning model) gets CoT's $/item from that map and
`budget_usd` drops a method over it; the same LM under a name the map does not price is refused before any request;
and from the command line (``make_lm``) `--budget-usd` sizes self-consistency's k from CoT's dollars."""

from __future__ import annotations

import re
from typing import Any

import dspy
import pytest
from conftest import CANARY_KEY, signature_responder
from typer.testing import CliRunner

from dspy_for.cli import app
from dspy_for.errors import ConfigError
from dspy_for.experiments import advise
from dspy_for.experiments.advisor.report import advice_lines
from dspy_for.testing import OpenAICompatibleServer

GPT5_IN, GPT5_OUT = 0.25e-6, 2e-6  # USD per token in the cost map litellm bundles for gpt-5-mini


@pytest.fixture
def server(tmp_path, monkeypatch) -> Any:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    s = OpenAICompatibleServer(signature_responder(), reasoning_models={"gpt-5-mini"}).start()
    yield s
    s.stop()


def _plain(server: OpenAICompatibleServer, model: str) -> dspy.LM:
    return dspy.LM(f"openai/{model}", api_base=server.base_url, api_key=CANARY_KEY, cache=False)


def test_budget_usd_with_a_plain_lm_the_cost_map_prices(server, tmp_path):
    kw: dict[str, Any] = {"dataset": "gsm8k", "split": "sample", "tracking_uri": f"sqlite:///{tmp_path}/mlruns/m.db"}
    kw = {**kw, "results_dir": str(tmp_path / "results"), "progress": False}
    with pytest.raises(ConfigError, match=r"`--budget-usd` .* `openai/test-model` .* no price"):
        advise(lm=_plain(server, "test-model"), methods="cot", budget_usd=0.01, **kw)
    assert server.responses == []  # refused before any request

    lm = _plain(server, "gpt-5-mini")
    probe = advise(lm=lm, methods="cot", budget_usd=1.0, max_items=4, **kw)
    cot = probe.outcome("cot").result
    assert cot is not None and cot.n_scored == 4 and probe.cot_cost is not None
    u = cot.usage.total
    assert u.reasoning_tokens > 0  # the server's reasoning model reasons
    expected = (u.prompt_tokens * GPT5_IN + u.completion_tokens * GPT5_OUT) / cot.n_answers
    assert probe.cot_cost == pytest.approx(expected)  # litellm's map, reasoning billed as completion

    budget_usd = 1.5 * probe.cot_cost
    advice = advise(lm=lm, methods="cot,for", budget_usd=budget_usd, max_items=8, **kw)
    for_ = advice.outcome("for")
    assert for_.status == "over budget" and for_.over == ["--budget-usd"]
    assert f"> budget ${budget_usd:g}/item" in for_.reason
    assert advice.recommended == "cot" and advice.ok
    text = "\n".join(advice_lines(advice))
    assert f"budget ${budget_usd:g}/item" in text and "$/item" in text


def test_budget_usd_sizes_k_from_the_command_line(server, tmp_path):
    args = ["advise", "--lm", "openai/gpt-4o-mini", "--lm-option", f"api_base={server.base_url}"]
    args += ["--dataset", "gsm8k", "--split", "sample", "--methods", "cot,self_consistency", "--max-items", "8"]
    args += ["--budget-usd", "0.0001", "--tracking-uri", f"sqlite:///{tmp_path}/mlruns/m.db"]
    out = CliRunner().invoke(app, args)
    flat = " ".join(out.output.split())
    assert out.exit_code == 0, out.output
    assert "budget $0.0001/item" in flat and "$/item" in flat
    sized = re.search(r"k = \$0\.0001 / CoT's \$([0-9.e-]+) per item on the pilot → (\d+)", flat)
    assert sized is not None, flat
    assert int(sized.group(2)) >= 2 and f"self_consistency (k={sized.group(2)})" in flat
