"""What ``advise`` returns: every candidate's fate with its measured numbers, every pair it tested, the
recommendation and how it was reached, and the Python line that builds it."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspy_for.datasets import signature_for
from dspy_for.experiments.core import MethodResult, SpendLimit
from dspy_for.experiments.core.costs import BreakEvenRow, Unit
from dspy_for.experiments.core.frame_columns import CANDIDATE_COLUMNS, PAIR_COLUMNS, typed_frame
from dspy_for.experiments.core.frames import (
    check_level,
    comparison_frame,
    flatten,
    lm_names,
    provenance,
    sequential_row,
)
from dspy_for.experiments.core.frames_html import html_table
from dspy_for.experiments.core.outcome import ComparisonResult, Outcome
from dspy_for.experiments.spec import DatasetConfig, ExperimentSpec
from dspy_for.stats import SequentialResult

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Advice", "AtVolume", "CandidateOutcome", "CandidatePair", "dollars_per_item", "flipped", "new_advice"]

# a candidate's fate
RECOMMENDED = "recommended"
RUNNING = "in the running"  # still open when the rounds ended (not recommended)
OVER_BUDGET = "over budget"
WORSE = "resolved worse"
FAILED = "failed"  # could not run, or every item it ran failed: an error, never a score
NOT_RUN = "not run"  # the timeout came before it was measured
SIZING = "sizing only"  # CoT run on the pilot only to size k and N (not a candidate)


def dollars_per_item(r: MethodResult | None) -> float | None:
    """USD per item of ``r`` (a cold run's cost); None when nothing was scored or an LM call has no price (never 0)."""
    if r is None or not r.n_scored:
        return None
    cost = r.cost_per_item
    return cost if math.isfinite(cost) else None


def flipped(r: SequentialResult) -> SequentialResult:
    """The result of A − B read as B − A."""
    turned = {"diff": -r.diff, "low": -r.high, "high": -r.low, "direction": -r.direction}
    return SequentialResult(**{**r.to_dict(), **turned, "wins": r.losses, "losses": r.wins})


@dataclass
class CandidateOutcome:
    """One candidate: its method and options as measured, what became of it and why, and its records."""

    label: str
    method: str
    options: dict[str, Any]
    status: str = RUNNING
    reason: str = ""
    result: MethodResult | None = None
    sized: str = ""  # how its sized option was set from the budget (empty: not sized)
    over: list[str] = field(default_factory=list)  # the budget flags it was dropped by (`--budget`, `--budget-usd`)
    compile: dict[str, Any] | None = None  # its compile table (``--compile``); None: not compiled
    compiled: Path | None = None  # where its compiled program is kept (``load_compiled`` reads it back)

    @property
    def measured(self) -> bool:
        return self.result is not None and self.result.n_scored > 0

    def row(self) -> dict[str, Any]:
        r = self.result
        lo, hi = r.ci if r is not None else (None, None)
        return {
            "label": self.label,
            "method": self.method,
            "options": self.options,
            "status": self.status,
            "reason": self.reason,
            "sized": self.sized,
            "n": r.n_scored if r is not None else 0,
            "failed": r.n_failed if r is not None else 0,
            "accuracy": r.accuracy if self.measured and r is not None else None,
            "ci_low": lo if self.measured else None,
            "ci_high": hi if self.measured else None,
            "tokens_per_item": r.tokens_per_item if self.measured and r is not None else None,
            **({"cost_per_item": cost} if (cost := dollars_per_item(r)) is not None else {}),
            **({"compile": r.compile.row() if r is not None and r.compile else None} if self.compile else {}),
        }


@dataclass(frozen=True)
class AtVolume:
    """A candidate's total cost per correct answer over the ``--volume`` items, its compile included, in ``unit``
    (None: unknown, or it answered nothing right)."""

    method: str
    unit: Unit
    cost_per_correct: float | None


@dataclass(frozen=True)
class CandidatePair:
    """The anytime-valid paired test of candidate ``a`` against candidate ``b`` (``result.diff`` = accuracy of a − b)
    on the items both scored after the pilot, as it stood when the rounds ended or when one of them left. (A
    comparison tests each method against its baseline:
    :class:`~dspy_for.experiments.sequential.BaselinePair`.)"""

    a: str
    b: str
    result: SequentialResult

    def row(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, **self.result.to_dict()}


@dataclass
class Advice(Outcome):
    """The answer of :func:`~dspy_for.experiments.advise` (a :class:`~dspy_for.experiments.core.outcome.RunOutcome`):
    which method to run, with its evidence."""

    spec: ExperimentSpec
    dataset: str
    split: str
    signature: str
    budget: float | None
    margin: float
    alpha: float
    budget_usd: float | None = None  # USD per item (`--budget-usd`)
    volume: int | None = None  # items the user will run (`--volume`): the recommendation's cost counts its compile
    compilers: list[str] = field(default_factory=list)  # `--compile`: each candidate with predictors tried compiled
    train: str | None = None  # `--train`: the file the compiled candidates were compiled on
    #: with a volume: each measured candidate's cost per correct answer at the volume
    at_volume: list[AtVolume] = field(default_factory=list)
    breakeven: list[BreakEvenRow] = field(default_factory=list)  # each compiled candidate's break-even volumes
    candidates: list[CandidateOutcome] = field(default_factory=list)
    pairs: list[CandidatePair] = field(default_factory=list)
    pair_alpha: float | None = None  # each pair's level: alpha / pairs (Bonferroni)
    recommended: str | None = None
    resolved: bool = False
    how: str = ""  # how the rounds ended, in a sentence
    items_used: int = 0  # items of the seeded order any candidate ran (pilot included)
    pilot_items: int = 0
    cot_tokens: float | None = None  # CoT's tokens per item on the pilot (what k and N were sized from)
    cot_cost: float | None = None  # CoT's USD per item on the pilot (None: unpriced or not measured)
    spend: SpendLimit | None = None  # what the session spent, against its ``max_cost``
    python_line: str | None = None
    run_id: str | None = None
    run_dir: Path | None = None
    plots: list[Path] = field(default_factory=list)
    elapsed: float = 0.0

    def outcome(self, label: str) -> CandidateOutcome:
        return next(c for c in self.candidates if c.label == label)

    @property
    def recommendation(self) -> CandidateOutcome | None:
        return self.outcome(self.recommended) if self.recommended else None

    def pair(self, a: str, b: str) -> CandidatePair | None:
        """The test of ``a`` against ``b`` (turned around when it was run as ``b`` against ``a``)."""
        for p in self.pairs:
            if (p.a, p.b) == (a, b):
                return p
            if (p.a, p.b) == (b, a):
                return CandidatePair(a, b, flipped(p.result))
        return None

    @property
    def runner_up(self) -> str | None:
        """The best other candidate that took part in the rounds (accuracy, then fewer tokens per item)."""
        others = [
            c
            for c in self.candidates
            if c.label != self.recommended and c.measured and c.status in (RUNNING, WORSE) and c.result is not None
        ]
        if not others:
            return None
        best = max(others, key=lambda c: (c.result.accuracy, -c.result.tokens_per_item))  # type: ignore[union-attr]
        return best.label

    def method_results(self) -> list[MethodResult]:
        return [c.result for c in self.candidates if c.result is not None]

    def to_pandas(self, level: str = "cells") -> pd.DataFrame:
        """The advice as a pandas data frame: ``cells`` (one row per candidate: its row in the advice's table, each
        option as ``options.<name>``), ``items`` (the candidates' records) or ``pairs`` (each candidate pair's
        anytime-valid test as it stood when the rounds ended); see :mod:`~dspy_for.experiments.core.frames`."""
        check_level("advice", level)
        measured = {c.label: c.result for c in self.candidates if c.result is not None}
        records = ComparisonResult(spec=self.spec, results={self.dataset: measured}, run_id=self.run_id)
        if level == "items":
            return comparison_frame(records, "items")
        order = [c.label for c in self.candidates]
        if level == "pairs":
            rows = [
                sequential_row(self.dataset, p.a, p.b, p.result, {"split": self.split, **self._origin(p.a)})
                for p in self.pairs
            ]
            return typed_frame(rows, PAIR_COLUMNS, order)
        return typed_frame([self._candidate_row(c) for c in self.candidates], CANDIDATE_COLUMNS, order)

    def _origin(self, label: str) -> dict[str, Any]:
        c = next((c for c in self.candidates if c.label == label), None)
        return provenance(self.run_id, self.spec, None, lm_names(self.spec, c.method if c else label))

    def _candidate_row(self, c: CandidateOutcome) -> dict[str, Any]:
        row: dict[str, Any] = {"dataset": self.dataset, "split": self.split, **self._origin(c.label)}
        for name, value in c.row().items():
            flatten({"label": "method", "method": "method_name"}.get(name, name), value, row)
        row["recommended"] = c.label == self.recommended
        row["served_by"] = "; ".join(sorted({s for i in c.result.items for s in i.served_by})) if c.result else None
        return row

    def _repr_html_(self) -> str:
        """The candidates in a notebook, as an HTML table (status, accuracy, tokens and dollars per item), the
        recommended one first."""
        rows = [{**c.row(), "recommended": "yes" if c.label == self.recommended else ""} for c in self.candidates]
        rows.sort(key=lambda r: r["recommended"] != "yes")
        columns = [("candidate", "label"), ("method", "method"), ("status", "status"), ("recommended", "recommended")]
        columns += [("n", "n"), ("failed", "failed"), ("acc %", "accuracy"), ("95% CI low", "ci_low")]
        columns += [("95% CI high", "ci_high"), ("tok/item", "tokens_per_item"), ("$/item", "cost_per_item")]
        return html_table(rows, [*columns, ("why", "reason")], f"advice on {self.dataset} ({self.split})")

    @property
    def could_not_run(self) -> dict[str, str]:
        """Candidates that never produced a record: they could not be built, or CoT, which sizes them, failed."""
        return {c.label: c.reason for c in self.candidates if c.status == FAILED and c.result is None}

    @property
    def ok(self) -> bool:
        """No failed item, no candidate that could not run and not stopped by ``max_cost``: every number shown was
        measured, as far as the rounds needed."""
        return self.n_failed == 0 and not self.could_not_run and not self.stopped_by_cost

    def to_dict(self) -> dict[str, Any]:
        runner = self.runner_up
        vs = self.pair(self.recommended, runner) if self.recommended and runner else None
        return {
            "dataset": self.dataset,
            "split": self.split,
            "signature": self.signature,
            "budget": self.budget,
            **({"budget_usd": self.budget_usd} if self.budget_usd is not None else {}),
            "margin": self.margin,
            "alpha": self.alpha,
            "pair_alpha": self.pair_alpha,
            "recommended": self.recommended,
            "resolved": self.resolved,
            "how": self.how,
            "runner_up": runner,
            "vs_runner_up": vs.row() if vs else None,
            "items_used": self.items_used,
            "pilot_items": self.pilot_items,
            "cot_tokens_per_item": self.cot_tokens,
            **({"cot_cost_per_item": self.cot_cost} if self.cot_cost is not None else {}),
            **self._spend_dict(),
            "python_line": self.python_line,
            "failed_items": self.n_failed,
            "candidates": [c.row() for c in self.candidates],
            "pairs": [p.row() for p in self.pairs],
            **self._volume_dict(),
        }

    def _volume_dict(self) -> dict[str, Any]:
        """With ``--volume``: it, the compilers and training file, each candidate's cost per correct answer at it
        (compile included) and the break-even volumes."""
        if self.volume is None:
            return {}
        costs = {r.method: {"cost_per_correct": r.cost_per_correct, "unit": r.unit} for r in self.at_volume}
        return {
            "volume": self.volume,
            "compile": self.compilers,
            "train": self.train,
            "at_volume": costs,
            "breakeven": [b.row() for b in self.breakeven],
        }

    def _spend_dict(self) -> dict[str, Any]:
        """What the session spent (absent when an LM call had no price) and its ``max_cost``, if any."""
        s = self.spend
        out: dict[str, Any] = {"stopped_by_cost": self.stopped_by_cost}
        if s is not None and s.unpriced_calls == 0:
            out["spent_usd"] = s.total
        if s is not None and s.max_cost is not None:
            out["max_cost"] = s.max_cost
        return out


def new_advice(
    spec: ExperimentSpec, d: DatasetConfig, asked: dict[str, Any], under: Path, *, pilot_items: int
) -> Advice:
    """An empty answer with its directory in ``under`` (for the plot), named by the spec's fingerprint and
    advise's own settings."""
    name = spec.fingerprint() + "-" + hashlib.sha256(json.dumps(asked, default=str).encode()).hexdigest()[:6]
    run_dir = under / name
    run_dir.mkdir(parents=True, exist_ok=True)
    return Advice(
        spec=spec,
        dataset=d.name,
        split=d.split,
        signature=signature_for(d.name),
        budget=asked["budget"],
        budget_usd=asked.get("budget_usd"),
        volume=asked.get("volume"),
        compilers=asked.get("compile") or [],
        train=asked.get("train"),
        margin=asked["margin"],
        alpha=spec.alpha,
        pilot_items=pilot_items,
        run_dir=run_dir,
    )
