"""The optional compile step of a run: a method's ``compile`` table (TextGrad, GEPA, MIPROv2, BootstrapFewShot)
applied to its program before it is evaluated, with one meaning of every option for compare and sweeps, and what
the compile cost (:class:`CompileCost`), kept beside the compiled program and read back when a run resumes.

**Which items a compile decides on.** Its train set is ``trainset`` (default the train split; ``train_limit``: a
seeded sample of N), its validation set the *last* ``val_limit`` items of ``valset`` (default val; all of it without a
limit; BootstrapFewShot takes none), and no validation item is trained on (the same split for both: its last items
validate, the others train), while a run scores a split's *first* items — and every item the run scores is left out
of both (matched by question and gold; how many is recorded as ``left_out``), so a compile never decides on an item a
reported cell scores, even when it trains on the split the run scores (a user's one-split data file). ``data``: a
JSONL file (``question`` / ``answer`` per line) whose one split ``all`` it trains and validates on instead of the
run's dataset (``advise --train``). The compiled program is kept with the items it decided on: a resumed run that now
scores one of them (grown to more items) is a :class:`ConfigError` naming the cached file to delete, never a silent
reuse.

**Spend.** A compile is never cut short by ``max_cost``; what a new one spent counts against it once it ends
(:meth:`~dspy_for.experiments.core.spend.SpendLimit.add_compile`), and once the limit is reached no new compile
starts (:class:`CompileNotStarted`; a program in the cache is still reused: it costs nothing).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import dspy

from dspy_for.datasets import content_key, dataset_info, register_jsonl
from dspy_for.datasets.user import USER_SPLIT
from dspy_for.errors import ConfigError
from dspy_for.experiments.spec.model import DatasetConfig, MethodConfig, load_examples
from dspy_for.lm.usage import RoleUsage, Usage
from dspy_for.optimizers import COMPILERS, compile_program, load_compiled

__all__ = ["CompileCost", "CompileNotStarted", "compile_for_run", "compile_sets"]


class CompileNotStarted(RuntimeError):
    """``max_cost`` was reached before a method's compile started: the method runs no item (``items`` of them are
    left out; a re-run with a higher ``max_cost`` compiles it and resumes)."""

    def __init__(self, label: str, items: int) -> None:
        super().__init__(f"{label}: not compiled, max_cost was reached before its compile started")
        self.label, self.items = label, items


@dataclass(frozen=True)
class CompileCost:
    """What a method's compile step cost, kept beside its compiled program.

    ``usage``: per role and ``total`` (``Usage.to_dict()``: calls, tokens, cache hits, ``cost_usd`` where every call
    is priced: litellm's map or the LM's ``price``), what ``compile_usage.json`` holds; ``tokens_by_lm``: prompt +
    completion tokens per LM (its model name), cache hits at their original size; ``seconds``: the compile's wall
    time (None: a program compiled before wall time was recorded); ``train_items`` / ``val_items``: how many items it
    trained and validated on, ``left_out`` how many the run scores were left out, ``items`` their content keys (what
    a resumed run checks). ``reused``: read back from the cached program — the cost is its first compile's, and
    none of it is spent by this run (:attr:`spent_usd` and :attr:`spent_tokens` are 0).
    """

    kind: str
    usage: dict[str, dict[str, float]]
    tokens_by_lm: dict[str, int] = field(default_factory=dict)
    seconds: float | None = None
    train_items: int = 0
    val_items: int = 0
    left_out: int = 0
    items: tuple[str, ...] = ()
    reused: bool = False

    @property
    def total(self) -> RoleUsage:
        return Usage.from_dict(self.usage).total

    @property
    def tokens(self) -> int:
        """Prompt + completion tokens of the compile, cache hits at their original size: what a cold compile costs."""
        return self.total.served_tokens

    @property
    def usd(self) -> float | None:
        """USD a cold compile costs (cache hits at their original price); None unless every call is priced."""
        return self.total.served_cost_usd

    @property
    def spent_usd(self) -> float | None:
        """USD this run spent compiling: 0 when the program was reused; None unless every call is priced."""
        spent = self.total.spent_usd
        return 0.0 if self.reused and spent is not None else spent

    @property
    def spent_tokens(self) -> int:
        """Tokens this run spent compiling (not served from a cache): 0 when the program was reused."""
        return 0 if self.reused else self.total.tokens

    def tokens_by_role(self) -> dict[str, int]:
        return {name: r.served_tokens for name, r in sorted(Usage.from_dict(self.usage).roles.items())}

    def usd_by_role(self) -> dict[str, float | None]:
        return {name: r.served_cost_usd for name, r in sorted(Usage.from_dict(self.usage).roles.items())}

    def row(self) -> dict[str, Any]:
        """As plain data, for the summary row, ``summary.jsonl`` and the break-even report."""
        return {
            "kind": self.kind,
            "tokens": self.tokens,
            "usd": self.usd,
            "seconds": self.seconds,
            "reused": self.reused,
            "spent_usd": self.spent_usd,
            "tokens_by_role": self.tokens_by_role(),
            "usd_by_role": self.usd_by_role(),
            "tokens_by_lm": dict(self.tokens_by_lm),
            "train_items": self.train_items,
            "val_items": self.val_items,
            "left_out": self.left_out,
        }

    def metrics(self) -> dict[str, float]:
        """MLflow metrics: ``compile.tokens``, ``compile.tokens.<role>``, ``compile.seconds`` and ``compile.usd`` when
        known (an unpriced cost is absent, never 0) and ``compile.reused`` (1: the first compile's cost, not spent)."""
        out = {"compile.tokens": float(self.tokens), "compile.reused": float(self.reused)}
        out.update({f"compile.tokens.{name}": float(tokens) for name, tokens in self.tokens_by_role().items()})
        if self.seconds is not None:
            out["compile.seconds"] = self.seconds
        if self.usd is not None:
            out["compile.usd"] = self.usd
        return out

    def save(self, cached: Path) -> None:
        """Beside the compiled program ``cached``: ``*.usage.json`` (usage per role) and ``*.cost.json`` (the rest)."""
        rest = {k: v for k, v in asdict(self).items() if k not in ("usage", "reused")}
        cached.with_suffix(".usage.json").write_text(json.dumps(self.usage), encoding="utf-8")
        cached.with_suffix(".cost.json").write_text(json.dumps(rest), encoding="utf-8")

    @classmethod
    def load(cls, cached: Path, kind: str) -> CompileCost:
        """The cost saved beside the compiled program ``cached``, marked ``reused`` (a program cached before
        ``*.cost.json`` was written has no wall time and no tokens per LM)."""
        usage = json.loads(cached.with_suffix(".usage.json").read_text(encoding="utf-8"))
        rest_path = cached.with_suffix(".cost.json")
        rest = json.loads(rest_path.read_text(encoding="utf-8")) if rest_path.is_file() else {"kind": kind}
        return cls(usage=usage, reused=True, **{**rest, "items": tuple(rest.get("items", ()))})


def compile_for_run(
    program: dspy.Module,
    method: MethodConfig,
    dataset: DatasetConfig,
    *,
    metric: Callable[..., Any],
    seed: int,
    optimizer_lm: dspy.BaseLM | None,
    cached: Path | None = None,
    scored: Iterable[dspy.Example] = (),
) -> tuple[dspy.Module, CompileCost]:
    """Compile ``program`` on ``trainset`` (default the train split; ``train_limit``: a seeded sample of N) with
    decisions on the last ``val_limit`` items of ``valset`` (default val) with ``optimizer_lm`` (built by the run from
    the table's ``optimizer_lm``, default the run's LM), leaving out every item of ``scored`` (the items the run
    scores: see the module docstring). ``cached``: where the compiled program and its :class:`CompileCost` are kept,
    so a resumed run loads them (``reused``) instead of compiling again (the run builds an optimizer LM only for a
    compile that runs: None when they are kept). Every predictor keeps its LM."""
    step = method.compile_step
    assert step is not None, f"{method.label} has no compile step"
    kind = step.kind
    scored = list(scored)
    trainset, valset, left_out = compile_sets(method, dataset, scored)
    scored_keys = {_key(ex) for ex in scored}
    if cached is not None and cached.is_file():
        cost = CompileCost.load(cached, kind)
        _check_reusable(cost, scored_keys, cached)
        return load_compiled(program, cached), cost
    result = compile_program(
        kind,
        program,
        trainset=trainset,
        valset=valset,
        metric=metric,
        seed=seed,
        optimizer_lm=optimizer_lm,
        **step.options,
    )
    cost = CompileCost(
        kind=kind,
        usage=result.usage,
        tokens_by_lm=result.tokens_by_lm,
        seconds=result.seconds,
        train_items=len(trainset),
        val_items=len(valset),
        left_out=left_out,
        items=tuple(sorted({_key(ex) for ex in [*trainset, *valset]})),
    )
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        result.program.save(str(cached))
        cost.save(cached)
    return result.program, cost


def compile_sets(
    method: MethodConfig, dataset: DatasetConfig, scored: Iterable[dspy.Example] = ()
) -> tuple[list[dspy.Example], list[dspy.Example], int]:
    """The items ``method``'s compile step trains and validates on (see the module docstring) and how many of the
    items the run scores (``scored``) were left out. Reads the data; builds and calls no LM."""
    step = method.compile_step
    assert step is not None, f"{method.label} has no compile step"
    source = _source(step.data, dataset)
    if source is dataset:
        step.check_splits(dataset_info(dataset.name).splits, label=method.label)
    trainset = load_examples(source, step.trainset, limit=step.train_limit)
    valset = load_examples(source, step.valset) if COMPILERS[step.kind].uses_valset else []  # bootstrap: none
    if step.val_limit:
        valset = valset[-step.val_limit :]
    trainset = _not_validating(method.label, trainset, valset)
    return _unscored(method.label, trainset, valset, {_key(ex) for ex in scored})


def _source(data: str | None, dataset: DatasetConfig) -> DatasetConfig:
    """Where a compile takes its items: the file ``data`` (a ``compile`` table's ``data``: its one split ``all``),
    else the run's ``dataset``."""
    if data is None:
        return dataset
    return DatasetConfig(name=register_jsonl(data).name, split=USER_SPLIT, seed=dataset.seed)


def _not_validating(label: str, trainset: list[dspy.Example], valset: list[dspy.Example]) -> list[dspy.Example]:
    """``trainset`` without the validation items (a compile never validates on an item it trained on); a
    :class:`ConfigError` naming the fix when none is left."""
    validating = {_key(ex) for ex in valset}
    train = [ex for ex in trainset if _key(ex) not in validating]
    if trainset and not train:
        raise ConfigError(
            f"`compile` of method `{label}`: every one of its {len(trainset)} `trainset` items is a validation item, "
            "and a compile never trains on those: give `val_limit` (the last N items validate, the others train), "
            "or a `trainset` other than `valset`."
        )
    return train


def _unscored(
    label: str, trainset: list[dspy.Example], valset: list[dspy.Example], scored: set[str]
) -> tuple[list[dspy.Example], list[dspy.Example], int]:
    """``trainset`` and ``valset`` without the items the run scores (content keys ``scored``), and how many were left
    out; a :class:`ConfigError` naming the fix when no training item is left."""
    train = [ex for ex in trainset if _key(ex) not in scored]
    val = [ex for ex in valset if _key(ex) not in scored]
    if not train:
        raise ConfigError(
            f"`compile` of method `{label}`: every one of its {len(trainset)} `trainset` items is an item the run "
            "scores, and a compile never decides on those: take `trainset` from a split the run does not score "
            "(default `train`), or score fewer items."
        )
    return train, val, len(trainset) - len(train) + len(valset) - len(val)


def _check_reusable(cost: CompileCost, scored: set[str], cached: Path) -> None:
    """A cached program is reused only if the run scores none of the items it was compiled on."""
    shared = len(scored.intersection(cost.items))
    if shared:
        raise ConfigError(
            f"The compiled program {cached} was compiled on {shared} item(s) this run now scores, so reusing it would "
            f"score items the compile decided on: delete it (and its {cached.with_suffix('.usage.json').name} and "
            f"{cached.with_suffix('.cost.json').name}) to compile again without them, or score fewer items."
        )


def _key(example: dspy.Example) -> str:
    return content_key(example.get("question"), example.get("answer"))
