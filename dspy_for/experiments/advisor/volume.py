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
from dspy_for.experiments.advisor.result import RECOMMENDED, RUNNING, WORSE, Advice, AtVolume, CandidateOutcome
from dspy_for.experiments.core.cell import Cell
from dspy_for.experiments.core.costs import BreakEvenRow, breakeven_rows, cost_at, cost_unit, grid_pairs
from dspy_for.experiments.core.summarize import summarize
from dspy_for.experiments.methods import predictor_names
from dspy_for.experiments.spec import ExperimentSpec, MethodConfig
from dspy_for.optimizers import COMPILERS

__all__ = [
    "VALIDATION_SHARE",
    "cheapest_at",
    "check_volume",
    "check_volume_lms",
    "compiled_candidates",
    "volume_breakeven",
    "volume_rows",
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


def _cell(advice: Advice, c: CandidateOutcome) -> Cell:
    """A measured candidate as a cell: its summary, as the cost model reads it."""
    assert c.result is not None
    return Cell(advice.dataset, advice.split, c.label, c.method, summarize(c.result))


def cheapest_at(outcomes: Sequence[CandidateOutcome], volume: int) -> CandidateOutcome:
    """The candidate with the lowest cost per correct answer over ``volume`` items (then the more accurate)."""
    summaries = [summarize(c.result) for c in outcomes if c.result is not None]
    assert len(summaries) == len(outcomes), "every candidate weighed at the volume was measured"
    costs = [cost_at(summaries, s, volume) for s in summaries]
    best = min(
        range(len(outcomes)),
        key=lambda i: (math.inf if costs[i] is None else costs[i], -(summaries[i].accuracy or 0.0)),
    )
    return outcomes[best]


def volume_rows(advice: Advice) -> list[AtVolume]:
    """Every candidate measured in the rounds, with its cost per correct answer at the volume, compile included, in
    the unit of them all (:func:`~dspy_for.experiments.core.costs.cost_unit`)."""
    kept = [c for c in advice.candidates if c.measured and c.status in (RECOMMENDED, RUNNING, WORSE)]
    summaries = [_cell(advice, c).summary for c in kept]
    measured = [s for s in summaries if s is not None]
    unit = cost_unit(measured)
    return [AtVolume(s.method, unit, cost_at(measured, s, advice.volume or 1)) for s in measured]


def volume_breakeven(advice: Advice) -> list[BreakEvenRow]:
    """Each compiled candidate's break-even volumes against its uncompiled student and the most accurate
    uncompiled candidate measured in the rounds (:func:`~dspy_for.experiments.core.costs.breakeven_rows`)."""
    weighed = {r.method for r in advice.at_volume}
    kept = [c for c in advice.candidates if c.label in weighed and c.result is not None]
    cells = [_cell(advice, c) for c in kept]
    methods = [MethodConfig(name=c.method, label=c.label, options=dict(c.options), compile=c.compile) for c in kept]
    return breakeven_rows(cells, grid_pairs(methods, cells))
