"""The progress line: accuracy over scored items, failures apart, kept by running counts."""

from __future__ import annotations

from dspy_for.experiments.core import ItemResult, Landed, sinks
from dspy_for.experiments.core.sinks import ProgressBar, progress_text


def _item(i: int, score: float, failed: bool = False) -> ItemResult:
    return ItemResult(
        id=str(i), question=f"q{i}", gold="1", prediction={} if failed else {"answer": "1"}, score=score,
        error="LMError: down" if failed else None,
    )  # fmt: skip


def test_progress_counts_scored_items_and_failures_apart() -> None:
    assert progress_text([]) == "none scored yet"
    assert progress_text([_item(0, 0.0, failed=True)]) == "none scored yet, 1 failed"
    assert (
        progress_text([_item(0, 1.0), _item(1, 0.0), _item(2, 0.0, failed=True)]) == "acc 50.0% of 2 scored, 1 failed"
    )


def test_the_bar_shows_what_the_records_so_far_give(monkeypatch) -> None:
    monkeypatch.setattr(sinks, "throttle_text", lambda: "")  # no endpoint of an earlier test rate-limiting
    bar = ProgressBar("cot")
    bar.expect(3)
    records = [_item(0, 1.0), _item(1, 1.0, failed=True), _item(2, 0.0)]
    for r in records:
        bar.add(Landed(r, (), reused=False, changed=True))
    assert bar._bar.postfix == progress_text(records) == "acc 50.0% of 2 scored, 1 failed"
    bar.close(None, "FINISHED")  # type: ignore[arg-type]
