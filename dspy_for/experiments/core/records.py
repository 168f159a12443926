"""Per-item records and the results file they are kept in.

An item ends in one of three ways, counted apart and never mixed:

* **scored** — the method answered and the metric scored it (right or wrong);
* **unparsed** — the method answered but its output could not be parsed: the model's fault, scored 0
  (it stays in accuracy, counted in ``unparsed``);
* **failed** — an LM call failed (connection refused, timeout, 5xx or 401 after retries) or the method
  raised: an **error**, excluded from accuracy and tokens/item, reported with its error class, and run
  again on resume.

Records are kept, for resume, in a :class:`~dspy_for.experiments.core.store.ResultStore`.
"""

from __future__ import annotations

import functools
import json
import math
import types
import typing
from collections import Counter
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from dspy_for.datasets import content_key
from dspy_for.experiments.core.compile_step import CompileCost
from dspy_for.experiments.core.keys import example_key, record_key, unit_keys
from dspy_for.experiments.spec.settings import value_kind
from dspy_for.lm.pricing import Price
from dspy_for.lm.usage import RoleUsage, Usage
from dspy_for.secrets import may_need_redaction, needs_redaction, redact, redact_obj
from dspy_for.stats import Spread, clustered_interval, mean_with_ci, reduce_epochs, spread

__all__ = ["ItemResult", "MethodResult", "example_key", "record_key", "unit_keys"]


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
    wall_time: float = 0.0  # seconds the method took on this item (its call, start to end; not the metric, the judge)
    error_class: str | None = None  # failed items: the exception's class (APIConnectionError, Timeout, ...)
    unparsed: bool = False  # the method answered but its output could not be parsed (scored 0)
    # the judge's verdict ({correct, method: judge|rule, reasoning, coherence, holistic, error, lm}) and what
    # the judge's calls cost — kept apart from the method's own usage
    judge: dict[str, Any] | None = None
    judge_usage: dict[str, dict[str, float]] = field(default_factory=dict)
    started_at: float | None = None  # when the item started (Unix time, s); None in records written before it was kept
    origin: str | None = None  # the run that produced this record (an MLflow run id), when it was tracked
    epoch: int = 0  # which repeat of the item this record is (0: the first; runs with ``epochs = k`` have 0..k-1)
    #: what served this record's LM calls (the method's; the judge's are apart): one identity string per distinct
    #: serving stack (a hosted model's dated snapshot and ``system_fingerprint``; the embedded server's model
    #: SHA-256, build and slots: :mod:`dspy_for.lm.serving`), sorted; empty in records written
    #: before it was kept, or when no call reported one
    served_by: list[str] = field(default_factory=list)

    @property
    def item_key(self) -> str:
        """The item (its question and gold), whichever epoch."""
        return content_key(self.question, self.gold)

    @property
    def key(self) -> str:
        """This record: the item, and the epoch when it is a repeat (epoch 0 is keyed as the item alone)."""
        return record_key(self.item_key, self.epoch)

    @property
    def answer(self) -> str:
        """The answer as given (``answer``, else every output but the reasoning), to count which is most common."""
        if "answer" in self.prediction:
            return str(self.prediction["answer"])
        return json.dumps({k: v for k, v in self.prediction.items() if k != "reasoning"}, sort_keys=True, default=str)

    @property
    def failed(self) -> bool:
        return self.error is not None

    def to_json(self) -> str:
        """The record as one JSON line, every secret masked. Written as it stands (a record with nothing a secret could
        be: :func:`~dspy_for.secrets.may_need_redaction`), else copied and masked string by string."""
        text = json.dumps({f.name: getattr(self, f.name) for f in fields(self)}, default=_as_json, ensure_ascii=False)
        if not may_need_redaction(text):
            return text
        data = asdict(self)
        return json.dumps(redact_obj(data) if needs_redaction(data) else data, default=str, ensure_ascii=False)

    @classmethod
    def from_json(cls, line: str) -> ItemResult:
        """The record a results line keeps; a ``ValueError`` saying why when the line is not one (not JSON, JSON that
        is not an object, an object without a record's fields or with a field of another type)."""
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            raise ValueError("not JSON") from None
        if not isinstance(data, dict):
            raise ValueError(f"JSON that is not an object (a {type(data).__name__})")
        if "error_class" not in data and str(data.get("error") or "").startswith("AdapterParseError"):
            # written before failed and unparsed were told apart: an unparsable answer is a wrong answer
            data = {**data, "error": None, "unparsed": True, "score": 0.0}
        shapes = _shapes()
        missing = [f.name for f in fields(cls) if f.name not in data and _required(f)]
        if missing:
            raise ValueError(f"not a record: no {', '.join(f'`{m}`' for m in missing)}")
        wrong = [k for k, v in data.items() if k in shapes and not _fits(v, shapes[k])]
        if wrong:
            raise ValueError(f"not a record: {', '.join(f'`{k}`' for k in wrong)} of another type")
        return cls(**{k: v for k, v in data.items() if k in shapes})


def _as_json(value: Any) -> Any:
    """What :func:`dataclasses.asdict` then ``default=str`` make of a value JSON has no form for."""
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return str(value)


@functools.cache
def _shapes() -> dict[str, tuple[type, ...] | None]:
    """Each field of a record and the JSON types its value may have, from :class:`ItemResult`'s declarations (None:
    any value)."""
    return {name: _json_types(hint) for name, hint in typing.get_type_hints(ItemResult).items()}


def _json_types(hint: Any) -> tuple[type, ...] | None:
    if hint is Any:
        return None
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        parts = [_json_types(h) for h in typing.get_args(hint)]
        return None if any(p is None for p in parts) else tuple(t for p in parts if p is not None for t in p)
    kind = typing.get_origin(hint) or hint
    return (int, float) if kind is float else (kind,)  # a float may be written as an integer


def _required(f: Any) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


def _fits(value: Any, kinds: tuple[type, ...] | None) -> bool:
    """Whether a JSON value can be a field whose value has one of ``kinds`` (a bool is no number)."""
    if kinds is None:
        return True
    return isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)


@dataclass
class MethodResult:
    """One method's records on one dataset, in the dataset's order (an item's epochs in order). ``n`` counts every
    record; accuracy and its CI are over the items with a scored record, each item's value reduced from its scored
    epochs by ``reducer`` (:func:`~dspy_for.stats.reduce_epochs`; one epoch: its score); tokens/item is per scored
    record (one answer). Failed records are errors, left out of both. ``compile``: what the method's compile step
    cost (None: it has none); ``lms`` each role's LM (its model name) and ``prices`` each role's declared ``price``
    where it has one (what prices stored records kept without a cost: :meth:`record_costs`)."""

    label: str
    items: list[ItemResult]
    wall_time: float = 0.0
    reused_time: float = 0.0  # wall time of records reused from an earlier run
    reducer: str = "mean"
    compile: CompileCost | None = None
    lms: dict[str, str] = field(default_factory=dict)
    prices: dict[str, Price] = field(default_factory=dict)
    #: the identities of the stack the run's LMs talk to now (None: unknown, nothing new ran) and how many stored
    #: records it ran again because another stack served them (``rerun_changed``): see core/serving.py
    serving_now: list[str] | None = None
    reran: int = 0
    #: each record's MLflow trace in the run this result comes from, by record key (none: not traced, or unknown)
    trace_ids: dict[str, str] = field(default_factory=dict)
    #: the results file its records are kept in (None: the run keeps none)
    store: Path | None = None

    @property
    def n(self) -> int:
        return len(self.items)

    @property
    def scored(self) -> list[ItemResult]:
        return [i for i in self.items if not i.failed]

    @property
    def n_scored(self) -> int:
        """Items with at least one scored epoch (the clusters accuracy is taken over)."""
        return len(self.epochs_by_item())

    @property
    def n_answers(self) -> int:
        """Scored records: one per scored epoch of an item."""
        return len(self.scored)

    @property
    def epochs(self) -> int:
        """How many epochs the records span (1 for a run without repeats)."""
        return 1 + max((i.epoch for i in self.items), default=0)

    def epochs_by_item(self) -> dict[str, list[ItemResult]]:
        """Each item's scored records, by item key, in epoch order."""
        out: dict[str, list[ItemResult]] = {}
        for i in sorted(self.scored, key=lambda r: r.epoch):
            out.setdefault(i.item_key, []).append(i)
        return out

    def spread(self) -> Spread | None:
        """How the epochs of each item disagree (None without repeats)."""
        return spread([[r.score for r in rs] for rs in self.epochs_by_item().values()])

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
        """One value per item with a scored epoch, reduced from its epochs (its score when it has one)."""
        return list(self.scores_by_key().values())

    def scores_by_key(self) -> dict[str, float]:
        """Each item's value (by item key) reduced from its scored epochs by ``reducer``."""
        return {
            key: reduce_epochs([r.score for r in rs], [r.answer for r in rs], self.reducer)
            for key, rs in self.epochs_by_item().items()
        }

    @property
    def accuracy(self) -> float:
        """Accuracy over the scored items; NaN (absent, never 0.0) when no item was scored."""
        return mean_with_ci(self.scores)[0] if self.scores else math.nan

    @property
    def ci(self) -> tuple[float, float]:
        """95% interval of the accuracy over items: Wilson for 0/1 values; with repeats averaged per item, Student's t
        over the items as clusters (:func:`~dspy_for.stats.clustered_interval`); else a seeded bootstrap."""
        scores = self.scores
        if not scores:
            return math.nan, math.nan
        if value_kind(self.epochs, self.reducer) == "bounded":
            return clustered_interval(scores)[1:]
        _, lo, hi = mean_with_ci(scores)
        return lo, hi

    @property
    def usage(self) -> Usage:
        """Usage of the scored items (what the accuracy cost)."""
        return Usage.summed(item.usage for item in self.scored)

    def per_item(self, counter: str = "served_tokens", role_name: str | None = None) -> float:
        """Mean per scored item of a usage counter (``served_tokens`` = what a cold run costs, ``tokens`` =
        spent now)."""
        if not self.scored:
            return math.nan  # nothing scored: no cost to report, not a cost of 0
        u = self.usage
        r = u[role_name] if role_name else u.total
        return float(getattr(r, counter)) / self.n_answers

    @property
    def tokens_per_item(self) -> float:
        return self.per_item("served_tokens")

    @property
    def calls_per_item(self) -> float:
        return self.per_item("calls")

    @property
    def seconds_per_item(self) -> float:
        """The method's own time per scored record: the mean of each record's ``wall_time`` (its call on the item,
        start to end, as it ran; a reused record keeps its time) over the records that made at least one LM call of
        their own (one whose every call DSPy's cache served took no LM time: not what the method costs). When some
        calls of those records were served by the cache (e.g. a first call another method made before), the time is a
        lower bound on a cold run's (:attr:`seconds_partly_cached`). Records run side by side overlap, so these do not
        add up to the run's wall time; NaN (absent) when no such record was scored."""
        timed = [i.wall_time for i in self.scored if not _all_from_cache(i)]
        return sum(timed) / len(timed) if timed else math.nan

    @property
    def seconds_partly_cached(self) -> bool:
        """:attr:`seconds_per_item` counts records some of whose LM calls DSPy's cache served: a lower bound."""
        return any(_served_from_cache(i) for i in self.scored if not _all_from_cache(i))

    @property
    def cost_per_item(self) -> float:
        """USD per scored item, what a cold run costs (cache hits at their original price); NaN (absent, never 0)
        when nothing was scored or an LM call has no price."""
        served = self.usage.total.served_cost_usd
        return served / self.n_answers if self.scored and served is not None else math.nan

    def declared_cost_per_item(self) -> float | None:
        """USD per scored item from the tokens at each role's declared ``price`` (cache hits at their original
        size), for records kept without a cost (stored before costs were recorded); None unless
        :meth:`priced_by_declaration`."""
        scored = [c[None] or 0.0 for c, i in zip(self.record_costs(), self.items, strict=True) if not i.failed]
        return sum(scored) / max(1, self.n_answers) if self.priced_by_declaration() else None

    def priced_by_declaration(self) -> bool:
        """Whether this result's dollars come from each role's declared ``price`` at the records' tokens: some
        scored record was kept without a cost, and every role that made a call has a declared price."""
        if not self.scored or self.usage.total.served_cost_usd is not None:
            return False
        roles = [name for name, r in self.usage.roles.items() if r.calls]
        return bool(roles) and all(name in self.prices for name in roles)

    def record_costs(self) -> list[dict[str | None, float | None]]:
        """What each record cost, in USD, priced as this result's cells are (one rule for a cell and its items):
        ``{None: the record's total, role: that role's}``, each the cost its calls recorded (cache hits at their
        original price) or, when the result is :meth:`priced_by_declaration`, its tokens at the roles' declared
        prices; None where that is not known."""
        declared = self.priced_by_declaration()
        out = []
        for item in self.items:
            usage = Usage.from_dict(item.usage)
            row: dict[str | None, float | None] = {
                None: _declared_cost(usage.roles, self.prices) if declared else usage.total.served_cost_usd
            }
            for name, r in usage.roles.items():
                row[name] = _declared_cost({name: r}, self.prices) if declared else r.served_cost_usd
            out.append(row)
        return out

    @property
    def stats_mean(self) -> dict[str, float]:
        keys = sorted({k for i in self.scored for k in i.stats})
        return {k: sum(i.stats.get(k, 0.0) for i in self.scored) / max(1, self.n_answers) for k in keys}

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

    def served_by(self) -> dict[str, int]:
        """Each identity that served the scored records (``ItemResult.served_by``), with how many it served."""
        return dict(sorted(Counter(x for i in self.scored for x in i.served_by).items()))

    @property
    def mixed_serving(self) -> bool:
        """The scored records were served by more than one stack: more identities than the run has LMs, or one the
        stack it talks to now does not serve (another model snapshot, ``system_fingerprint``, llama.cpp build)."""
        served = set(self.served_by())
        lms = max(1, len(set(self.lms.values())))
        return len(served) > lms or (self.serving_now is not None and not served <= set(self.serving_now))

    @property
    def judge_errors(self) -> int:
        """Scored items the judge could not grade because its LM failed (graded again on the next run)."""
        return sum(1 for i in self.scored if (i.judge or {}).get("method") == "error")

    @property
    def judge_usage(self) -> Usage:
        return Usage.summed(item.judge_usage for item in self.scored)

    def error_counts(self) -> Counter[str]:
        """Each distinct error (class and message, secrets masked) with how many items it failed."""
        return Counter(redact(i.error or "") for i in self.items if i.failed)


def _served_from_cache(item: ItemResult) -> bool:
    """Whether DSPy's cache served any LM call of ``item`` (its ``cached_calls``)."""
    return bool(item.usage.get("total", {}).get("cached_calls"))


def _all_from_cache(item: ItemResult) -> bool:
    """Whether DSPy's cache served every LM call of ``item`` (it made none of its own)."""
    total = item.usage.get("total", {})
    return bool(total.get("cached_calls")) and total.get("cached_calls") == total.get("calls")


def _declared_cost(roles: Mapping[str, RoleUsage], prices: Mapping[str, Price]) -> float | None:
    """USD of ``roles``' calls at their declared ``prices`` (cache hits at their original size); None when a role
    that made a call has none."""
    called = {name: r for name, r in roles.items() if r.calls}
    if any(name not in prices for name in called):
        return None
    return sum(
        prices[name].cost(r.prompt_tokens + r.cached_prompt_tokens, r.completion_tokens + r.cached_completion_tokens)
        for name, r in called.items()
    )
