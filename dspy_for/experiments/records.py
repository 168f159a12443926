"""Per-item records and the results file they are kept in.

An item ends in one of three ways, counted apart and never mixed:

* **scored** — the method answered and the metric scored it (right or wrong);
* **unparsed** — the method answered but its output could not be parsed: the model's fault, scored 0
  (it stays in accuracy, counted in ``unparsed``);
* **failed** — an LM call failed (connection refused, timeout, 5xx or 401 after retries) or the method
  raised: an **error**, excluded from accuracy and tokens/item, reported with its error class, and run
  again on resume.

A :class:`ResultStore` appends each finished record to a JSONL file as it finishes (secrets masked), and
matches stored records to items by their content (question and gold), so a killed run resumes without
redoing finished work and an edited data file re-runs exactly the changed items. A store is held under a
file lock while a run uses it: two runs of the same method at once never run an item twice (the second
waits, then reuses what the first finished).
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from dspy_for.datasets import content_key
from dspy_for.lm.usage import Usage
from dspy_for.secrets import redact, redact_obj
from dspy_for.stats import mean_with_ci

__all__ = ["ItemResult", "MethodResult", "ResultStore"]

logger = logging.getLogger("dspy_for.experiments")


@dataclass
class ItemResult:
    id: str
    question: str
    gold: Any
    prediction: dict[str, Any]
    score: float
    error: str | None = None
    usage: dict[str, dict[str, float]] = field(default_factory=dict)
    trajectory: list[dict[str, Any]] | None = None
    answers_by_round: list[dict[str, Any]] | None = None
    stats: dict[str, float] = field(default_factory=dict)
    wall_time: float = 0.0
    error_class: str | None = None  # failed items: the exception's class (APIConnectionError, Timeout, ...)
    unparsed: bool = False  # the method answered but its output could not be parsed (scored 0)
    # the judge's verdict ({correct, method: judge|rule, reasoning, coherence, holistic, error, lm}) and what
    # the judge's calls cost — kept apart from the method's own usage
    judge: dict[str, Any] | None = None
    judge_usage: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return content_key(self.question, self.gold)

    @property
    def failed(self) -> bool:
        return self.error is not None

    def to_json(self) -> str:
        return json.dumps(redact_obj(asdict(self)), default=str, ensure_ascii=False)

    @classmethod
    def from_json(cls, line: str) -> ItemResult:
        data = json.loads(line)
        known = {f.name for f in fields(cls)}
        if "error_class" not in data and str(data.get("error") or "").startswith("AdapterParseError"):
            # written before failed and unparsed were told apart: an unparsable answer is a wrong answer
            data = {**data, "error": None, "unparsed": True, "score": 0.0}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class MethodResult:
    """One method's records on one dataset, in the dataset's order. ``n`` counts every item;
    accuracy, its CI and tokens/item are over the ``scored`` items only (failed items are errors)."""

    label: str
    items: list[ItemResult]
    wall_time: float = 0.0
    reused_time: float = 0.0  # wall time of records reused from an earlier run

    @property
    def n(self) -> int:
        return len(self.items)

    @property
    def scored(self) -> list[ItemResult]:
        return [i for i in self.items if not i.failed]

    @property
    def n_scored(self) -> int:
        return len(self.scored)

    @property
    def n_failed(self) -> int:
        return sum(1 for i in self.items if i.failed)

    @property
    def n_unparsed(self) -> int:
        return sum(1 for i in self.items if i.unparsed and not i.failed)

    @property
    def all_failed(self) -> bool:
        return bool(self.items) and self.n_failed == self.n

    @property
    def scores(self) -> list[float]:
        return [i.score for i in self.scored]

    def scores_by_key(self) -> dict[str, float]:
        return {i.key: i.score for i in self.scored}

    @property
    def accuracy(self) -> float:
        """Accuracy over the scored items; NaN (absent, never 0.0) when no item was scored."""
        return mean_with_ci(self.scores)[0] if self.scores else math.nan

    @property
    def ci(self) -> tuple[float, float]:
        if not self.scores:
            return math.nan, math.nan
        _, lo, hi = mean_with_ci(self.scores)
        return lo, hi

    @property
    def usage(self) -> Usage:
        """Usage of the scored items (what the accuracy cost)."""
        return _merged(item.usage for item in self.scored)

    def per_item(self, counter: str = "served_tokens", role_name: str | None = None) -> float:
        """Mean per scored item of a usage counter (``served_tokens`` = what a cold run costs, ``tokens`` =
        spent now)."""
        if not self.scored:
            return math.nan  # nothing scored: no cost to report, not a cost of 0
        u = self.usage
        r = u[role_name] if role_name else u.total
        return float(getattr(r, counter)) / self.n_scored

    @property
    def tokens_per_item(self) -> float:
        return self.per_item("served_tokens")

    @property
    def calls_per_item(self) -> float:
        return self.per_item("calls")

    @property
    def stats_mean(self) -> dict[str, float]:
        keys = sorted({k for i in self.scored for k in i.stats})
        return {k: sum(i.stats.get(k, 0.0) for i in self.scored) / max(1, self.n_scored) for k in keys}

    def judge_values(self, score: str) -> dict[str, float]:
        """Per scored item (by content key) the judge's ``score``: ``judged_accuracy`` (0/1) or
        ``quality.<rubric>`` (items the judge could not grade have no quality score)."""
        out: dict[str, float] = {}
        for i in self.scored:
            if i.judge is None:
                continue
            value = i.judge.get("correct") if score == "judged_accuracy" else i.judge.get(score.split(".", 1)[-1])
            if value is not None:
                out[i.key] = float(value)
        return out

    @property
    def judge_errors(self) -> int:
        """Scored items the judge could not grade because its LM failed (graded again on the next run)."""
        return sum(1 for i in self.scored if (i.judge or {}).get("method") == "error")

    @property
    def judge_usage(self) -> Usage:
        return _merged(item.judge_usage for item in self.scored)

    def error_counts(self) -> Counter[str]:
        """Each distinct error (class and message, secrets masked) with how many items it failed."""
        return Counter(redact(i.error or "") for i in self.items if i.failed)


def _merged(usages: Iterable[dict[str, dict[str, float]]]) -> Usage:
    total = Usage()
    for usage in usages:
        total.merge(Usage.from_dict(usage))
    return total


class ResultStore:
    """Finished records of one method on one dataset, in a JSONL file (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._write_lock = threading.Lock()

    @classmethod
    def in_dir(cls, results_dir: str | Path, dataset: str, split: str, label: str, key: str) -> ResultStore:
        """The store of one method (``label``, run key ``key``) on one dataset split in a results directory:
        ``<results_dir>/<dataset>/<split>/<label>.<key>.jsonl``, the layout compare and the measurement
        scripts share, so each reuses what the other stored."""
        return cls(Path(results_dir) / dataset / split / f"{label}.{key}.jsonl")

    def load(self) -> dict[str, ItemResult]:
        """Records of earlier (possibly killed) runs by content key; failed ones are left out (re-run), a
        torn last line is ignored, and a later record of an item replaces an earlier one."""
        done: dict[str, ItemResult] = {}
        if not self.path.is_file():
            return done
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                item = ItemResult.from_json(line)
            except (json.JSONDecodeError, TypeError):
                continue
            if item.failed:
                done.pop(item.key, None)
            else:
                done[item.key] = item
        return done

    def append(self, item: ItemResult) -> None:
        with self._write_lock, self.path.open("a", encoding="utf-8") as f:
            f.write(item.to_json() + "\n")

    @contextmanager
    def exclusive(self) -> Iterator[ResultStore]:
        """Hold the store for one run; another process running the same method waits here."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.path) + ".lock")
        try:
            lock.acquire(timeout=0)
        except Timeout:
            logger.warning(
                "another run is evaluating %s: waiting for it, then reusing what it finished", self.path.name
            )
            lock.acquire()
        try:
            yield self
        finally:
            lock.release()
