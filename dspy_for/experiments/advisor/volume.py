"""``advise --volume N --compile KINDS --train TRAIN.jsonl``: the candidates compiled on the user's training items, and
what each candidate costs per correct answer over the N items the user will run, its compile included.

* **Compiled candidates.** Each candidate with predictors is also tried compiled by each named compiler
  (label ``<candidate>_<kind>``, e.g. ``cot_bootstrap``), compiled once on the ``--train`` file — never on ``--data``:
  an item of both is left out of the compile — by the run path's compile step (``data`` in its ``compile`` table),
  cached beside its records and reused on a re-run with its recorded cost. A compiler that validates (GEPA, MIPROv2,
  TextGrad) validates on the file's last quarter (at least one item) and trains on the rest; BootstrapFewShot trains
  on all of it.
* **Cost at the volume.** ``(F + c·N) / (p·N)``: the compile's cost ``F`` once (its first compile's, also when
  reused: the answer does not change on a re-run), ``c`` per item, accuracy ``p``
  (:class:`~dspy_for.stats.CostModel`); in USD when every candidate's cost is priced and not all are $0, else in
  tokens — which needs one LM: a run of several LMs must price each (checked before any LM call).
* **The rule.** Today's margin rule, with "the cheapest" read as the lowest cost per correct answer at N items:
  one candidate left wins (resolved best); several within ±margin of the leader: the one cheapest at N wins; else
  the leader, unresolved. The budgets still bound the cost per item (compile not counted).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from dspy_for.datasets import register_jsonl
from dspy_for.datasets.user import read_user_rows
from dspy_for.errors import ConfigError, DatasetError
from dspy_for.experiments.advisor.budget import lm_priced
from dspy_for.experiments.advisor.candidates import Candidate
from dspy_for.experiments.advisor.result import RECOMMENDED, RUNNING, WORSE, Advice, CandidateOutcome
from dspy_for.experiments.core.summary import summarize
from dspy_for.experiments.methods import predictor_names
from dspy_for.experiments.reports.breakeven import USD, breakeven_rows, cost_unit, grid_pairs, method_costs
from dspy_for.experiments.spec import ExperimentSpec, MethodConfig
from dspy_for.optimizers import COMPILERS
from dspy_for.stats import CostModel

__all__ = [
    "VALIDATION_SHARE",
    "cheapest_at",
    "check_volume",
    "check_volume_lms",
    "compiled_candidates",
    "cost_at",
    "volume_breakeven",
]

#: a compiler that validates takes the last 1/VALIDATION_SHARE of the training file (at least one item)
VALIDATION_SHARE = 4


def check_volume(
    volume: Any, compile: str | Sequence[str] | None, train: str | Path | None
) -> tuple[list[str], int | None]:
    """``--volume``, ``--compile`` and ``--train`` checked before any LM call (a :class:`ConfigError` naming the fix
    otherwise): the compilers named, in order, and how many items the training file holds (None without one)."""
    if volume is not None and (isinstance(volume, bool) or not isinstance(volume, int) or volume < 1):
        raise ConfigError(
            f"`--volume` is how many items you will run the method on: give a positive integer (e.g. --volume 10000), "
            f"got {volume!r}."
        )
    kinds = [k.strip() for k in compile.split(",")] if isinstance(compile, str) else list(compile or [])
    kinds = [k for k in kinds if k]
    if compile is not None and not kinds:
        raise ConfigError(f"`--compile` is empty: name compilers, e.g. `--compile bootstrap,gepa` ({_known()}).")
    for k in kinds:
        if k not in COMPILERS:
            raise ConfigError(f"`--compile`: unknown compiler `{k}`. Choose from: {_known()}.")
    if len(set(kinds)) < len(kinds):
        raise ConfigError("`--compile` names a compiler twice: give each once.")
    if kinds and train is None:
        raise ConfigError(
            "`--compile` compiles each candidate on your training items: give them with `--train TRAIN.jsonl` "
            "(one JSON object per line with `question` and `answer`; never the `--data` items)."
        )
    if kinds and volume is None:
        raise ConfigError(
            "`--compile` weighs a compile's one-off cost against each item's: say how many items you will run with "
            "`--volume N`."
        )
    if train is not None and not kinds:
        raise ConfigError("`--train` is what `--compile` trains on: add `--compile bootstrap` (or drop `--train`).")
    if train is None:
        return kinds, None
    try:
        register_jsonl(train)
        n = len(read_user_rows(train))
    except DatasetError as exc:
        raise ConfigError(f"`--train`: {exc}") from None
    if n < 2 and any(COMPILERS[k].uses_valset for k in kinds):
        raise ConfigError(
            f"`--train` has {n} item(s), and a compiler that validates ({', '.join(kinds)}) needs at least 2: one to "
            "train on and one to validate on. Give more training items, or `--compile bootstrap`."
        )
    return kinds, n


def _known() -> str:
    return ", ".join(COMPILERS)


def compiled_candidates(
    chosen: Sequence[Candidate], kinds: Sequence[str], train: str | Path, n: int
) -> list[Candidate]:
    """Each candidate with predictors compiled by each of ``kinds`` on the file ``train`` of ``n`` items (its compile
    table: ``data`` the file; a compiler that validates on its last 1/:data:`VALIDATION_SHARE`)."""
    data = str(Path(train).expanduser().resolve())
    out = []
    for c in chosen:
        if not predictor_names(c.method, c.options):
            continue
        for kind in kinds:
            table: dict[str, Any] = {"kind": kind, "data": data}
            if COMPILERS[kind].uses_valset:
                table["val_limit"] = max(1, n // VALIDATION_SHARE)
            out.append(
                replace(
                    c,
                    label=f"{c.label}_{kind}",
                    compile=table,
                    note=f"{c.note} compiled by {kind}".strip(),
                    student=c.label,
                )
            )
    return out


def check_volume_lms(spec: ExperimentSpec) -> None:
    """Costs at a volume are compared in USD, or in the tokens of one LM: several LMs must each have a price (a local
    model's $0 does not tell them apart)."""
    roles = sorted(spec.method_roles())
    lms = {r: spec.lm_for(r) for r in roles}
    named = {str(lm) if isinstance(lm, str) else id(lm) for lm in lms.values()}
    if len(named) < 2:
        return
    for r, lm in lms.items():
        options = spec.lm_options_for(r)
        local = isinstance(lm, str) and lm.startswith("local/") and options.get("price") is None
        if local or not lm_priced(lm, options):
            name = lm if isinstance(lm, str) else getattr(lm, "model", type(lm).__name__)
            raise ConfigError(
                f"`--volume` compares what each candidate costs over your items, and this run's LMs differ: a token "
                f"of one is not a token of another, so each needs a price, and `{name}` (role `{r}`) has none"
                + (" (a local model costs $0)" if local else "")
                + ": give it one with `--lm-option price={input=0.15, output=0.60}` (USD per million tokens; "
                "`--role-lm-option ROLE:price=...` for one role)."
            )


def _row(dataset: str, c: CandidateOutcome) -> dict[str, Any]:
    assert c.result is not None
    return {"dataset": dataset, **summarize(c.result).row()}


def cost_at(rows: Sequence[dict[str, Any]], row: dict[str, Any], volume: int) -> float | None:
    """What ``row``'s method costs per correct answer over ``volume`` items, its compile included, in the unit of
    ``rows`` (:func:`~dspy_for.experiments.reports.breakeven.cost_unit`); None when unknown or when it answered
    nothing right (no finite cost per correct answer)."""
    costs = method_costs(row, cost_unit(rows))
    if costs is None or not row.get("accuracy"):
        return None
    fixed = sum(f for f, _ in costs.values())  # one unit: USD, or the tokens of the run's one LM
    per_item = sum(c for _, c in costs.values())
    return CostModel(fixed, per_item, row["accuracy"]).cost_per_correct(volume)


def cheapest_at(dataset: str, outcomes: Sequence[CandidateOutcome], volume: int) -> CandidateOutcome:
    """The candidate with the lowest cost per correct answer over ``volume`` items (then the more accurate)."""
    rows = [_row(dataset, c) for c in outcomes]
    costs = [cost_at(rows, r, volume) for r in rows]
    best = min(range(len(outcomes)), key=lambda i: (math.inf if costs[i] is None else costs[i], -rows[i]["accuracy"]))
    return outcomes[best]


def volume_rows(advice: Advice) -> list[dict[str, Any]]:
    """The summary row of every candidate measured in the rounds, with its cost per correct answer at the volume
    (``cost_per_correct``) and the unit (``unit``)."""
    kept = [c for c in advice.candidates if c.measured and c.status in (RECOMMENDED, RUNNING, WORSE)]
    rows = [_row(advice.dataset, c) for c in kept]
    unit = cost_unit(rows)
    for r in rows:
        r["unit"] = "usd" if unit == USD else "tokens"
        r["cost_per_correct"] = cost_at(rows, r, advice.volume or 1)
    return rows


def volume_breakeven(advice: Advice, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each compiled candidate's break-even volumes against its uncompiled student and the most accurate
    uncompiled candidate (:func:`~dspy_for.experiments.reports.breakeven.breakeven_rows`)."""
    by_label = {c.label: c for c in advice.candidates}
    methods = [
        MethodConfig(name=c.method, label=c.label, options=dict(c.options), compile=c.compile)
        for r in rows
        if (c := by_label[r["method"]])
    ]
    return breakeven_rows(rows, grid_pairs(methods, rows))
