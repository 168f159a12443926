"""``compare(..., recheck=N)`` with a plain ``dspy.LM`` whose DSPy cache is on, against the OpenAI-compatible test
server: every answer is in DSPy's cache (a comparison into a fresh results store sends no request), yet the recheck
sends exactly the first N items of each cell to the server, once each, and leaves DSPy's cache and the results store
as they were."""

from __future__ import annotations

import dspy
from conftest import plain_lm
from dspy.clients.cache import Cache

from dspy_for.experiments.comparison import compare
from dspy_for.experiments.spec import DatasetConfig, ExperimentSpec, MethodConfig

N = 2


def _questions(requests: list[dict]) -> list[str]:
    """The question each request asked (its last user message's question, by the sample's first words)."""
    firsts = ("Mia buys", "A bakery", "Tom reads", "A farmer")
    out = []
    for body in requests:
        text = str(body["messages"][-1]["content"])
        out.append(next(q for q in firsts if q in text))
    return out


def test_the_recheck_reaches_the_server_for_exactly_n_items_per_cell_despite_the_cache(
    fault_server, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    memory = Cache(enable_disk_cache=False, enable_memory_cache=True, disk_cache_dir="", memory_max_entries=10_000)
    monkeypatch.setattr(dspy, "cache", memory)
    lm = plain_lm(fault_server, cache=True)

    def spec(results: str, **kw: object) -> ExperimentSpec:
        return ExperimentSpec(
            lm=lm,
            datasets=[DatasetConfig("gsm8k", split="sample", first=4)],
            methods=[MethodConfig("cot"), MethodConfig("single")],
            baseline="cot",
            traces=False,
            tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db",
            results_dir=str(tmp_path / results),
            **kw,
        )

    compare(spec("a"))
    assert len(fault_server.requests) == 8  # 4 items × 2 one-call methods, now in DSPy's cache
    compare(spec("b"))
    assert len(fault_server.requests) == 8  # a fresh results store: every answer came from DSPy's cache
    entries = len(memory.memory_cache)
    stored = {p.name: p.read_bytes() for p in (tmp_path / "b").rglob("*.jsonl")}

    out = compare(spec("b", recheck=N))

    sent = fault_server.requests[8:]
    assert sorted(_questions(sent)) == sorted(["Mia buys", "A bakery"] * 2)  # the first N items, once per cell
    assert len(memory.memory_cache) == entries  # no new entry in DSPy's cache
    assert {p.name: p.read_bytes() for p in (tmp_path / "b").rglob("*.jsonl")} == stored
    assert [(r.label, r.n, r.changed, r.failed) for r in out.recheck] == [("cot", N, 0, 0), ("single", N, 0, 0)]
    assert out.ok
