"""A sweep's specification: the run core (:class:`~dspy_for.experiments.spec.RunSpec`) plus a search space,
objectives, sampler, pruner and storage. Parsed and validated — option names and the values at the ends
of every range — before any trial runs."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from dspy_for.errors import ConfigError
from dspy_for.experiments.methods import check_compile, get_method
from dspy_for.experiments.spec.checks import check_compiles, compile_lms, compile_roles
from dspy_for.experiments.spec.config import (
    Overrides,
    apply_overrides,
    parse_dataset,
    parse_judge,
    read_toml,
    split_settings,
)
from dspy_for.experiments.spec.model import DatasetConfig, LMLike, MethodConfig, RunSpec
from dspy_for.experiments.sweeps.search_space import (
    MethodChoice,
    SearchSpace,
    parse_method_choice,
    parse_search_space,
)

__all__ = ["OBJECTIVES", "SweepSpec", "load_sweep_spec"]

#: what a sweep can optimise, and in which direction; the judge's scores need a `[judge]` table
OBJECTIVES = {
    "accuracy": "maximize",
    "tokens_per_item": "minimize",
    "judged_accuracy": "maximize",
    "quality.reasoning": "maximize",
    "quality.coherence": "maximize",
    "quality.holistic": "maximize",
}


@dataclass(kw_only=True)
class SweepSpec(RunSpec):
    method: str | list[str]  # a list: the method is searched too (e.g. FOR vs ProRefine on one Pareto front)
    dataset: DatasetConfig
    search: dict[str, Any]
    fixed: dict[str, Any] = field(default_factory=dict)
    objectives: list[str] = field(default_factory=lambda: ["accuracy"])
    sampler: str = "tpe"
    pruner: str = "median"  # median | paired (anytime-valid, against the best trial so far) | none
    alpha: float = 0.05  # the paired pruner's error rate
    n_trials: int = 10
    chunk_size: int = 4
    study: str = "dspy-for-sweep"
    storage: str | None = None
    experiment: str = "sweeps"
    test_split: str = "test"
    enqueue: list[dict[str, Any]] = field(default_factory=list)
    # compile each trial's program before evaluating it: {kind, trainset, valset, train_limit, val_limit,
    # optimizer_lm, <optimizer options>}; searched optimizer options live under [search.compile.<option>]
    compile: dict[str, Any] | None = None
    #: this many failed trials in a row end the sweep (an endpoint that is down fails every trial)
    max_consecutive_failures: int = 3

    COMMAND: ClassVar[str] = "sweep"
    NOT_RESULTS: ClassVar[tuple[str, ...]] = (*RunSpec.NOT_RESULTS, "storage", "study", "max_consecutive_failures")

    @property
    def space(self) -> SearchSpace | MethodChoice:
        if isinstance(self.method, str):
            return parse_search_space(self.method, self.search, (self.compile or {}).get("kind"))
        return parse_method_choice(list(self.method), self.search)

    @property
    def methods(self) -> list[str]:
        return [self.method] if isinstance(self.method, str) else list(self.method)

    @property
    def multi(self) -> bool:
        return len(self.objectives) > 1

    def dataset_configs(self) -> list[DatasetConfig]:
        return [self.dataset]

    def with_datasets(self, **changes: Any) -> SweepSpec:
        return replace(self, dataset=replace(self.dataset, **changes))

    def method_roles(self) -> set[str]:
        """Every method's roles, and ``optimizer`` with a compile step (the compile's LM is built for it)."""
        return {r for m in self.methods for r in get_method(m).roles} | compile_roles(self._compiled())

    def _method_lms(self, role: str) -> list[LMLike]:
        return compile_lms(self._compiled(), role)

    def _compiled(self) -> list[MethodConfig]:
        """The method every trial compiles, with its fixed options (none without a compile step)."""
        return [MethodConfig(name=str(self.method), options=self.fixed, compile=self.compile)] if self.compile else []

    def fixed_for(self, method: str) -> dict[str, Any]:
        """Options held constant: ``[fixed]`` (one method) or ``[fixed.<method>]`` (several)."""
        return dict(self.fixed) if isinstance(self.method, str) else dict(self.fixed.get(method, {}))

    def suggest(self, trial: Any) -> tuple[str, dict[str, Any]]:
        space = self.space
        if isinstance(space, MethodChoice):
            return space.suggest(trial)
        return str(self.method), space.suggest(trial)

    def decode(self, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """A trial's parameters → (method, its options)."""
        space = self.space
        if isinstance(space, MethodChoice):
            return space.decode(params)
        return str(self.method), dict(params)

    def trial_method(self, params: dict[str, Any], label: str) -> MethodConfig:
        """The method a trial with ``params`` runs: fixed options + searched ones; searched compile options
        (``compile.<option>``) go to its compile table."""
        method, searched = self.decode(params)
        options = {**self.fixed_for(method), **{k: v for k, v in searched.items() if not k.startswith("compile.")}}
        compile_cfg = None
        if self.compile is not None:
            compile_cfg = {
                **self.compile,
                **{k[len("compile.") :]: v for k, v in searched.items() if k.startswith("compile.")},
            }
        return MethodConfig(name=method, label=label, options=options, compile=compile_cfg)

    def validate(self) -> SweepSpec:
        if not isinstance(self.method, str) and not (
            isinstance(self.method, list) and all(isinstance(m, str) for m in self.method)
        ):
            raise ConfigError(f"`method` must be a method name or a list of them, got {self.method!r}.")
        if self.compile is not None:
            if not isinstance(self.method, str):
                raise ConfigError("`compile` works with one `method`; sweep several methods without it.")
            check_compile(self.method, self.fixed, self.compile)  # the splits: once the dataset is checked
        space = self.space  # parses and validates the search space (and the method names)
        if not isinstance(self.method, str):
            extra = sorted(set(self.fixed) - set(self.methods))
            if extra or not all(isinstance(v, dict) for v in self.fixed.values()):
                raise ConfigError(
                    "With several methods, `[fixed]` has one table per method, e.g. "
                    f"[fixed.{self.methods[0]}]; got `{extra[0] if extra else self.fixed}`."
                )
        for m in self.methods:
            get_method(m).validate_options(self.fixed_for(m))
        _check_range_ends(self, space)
        for point in self.enqueue:
            space.validate_point(point)
        bad = [o for o in self.objectives if o not in OBJECTIVES]
        if bad or not 1 <= len(self.objectives) <= 2 or len(set(self.objectives)) != len(self.objectives):
            raise ConfigError(
                f"`objectives` must be one or two distinct names of {', '.join(OBJECTIVES)} "
                f'(e.g. ["accuracy"] or ["quality.reasoning", "tokens_per_item"]), got {self.objectives!r}.'
            )
        judged = [o for o in self.objectives if o.startswith(("quality.", "judged_"))]
        if judged and (self.judge is None or judged[0] not in self.judge.scores):
            raise ConfigError(
                f'Objective `{judged[0]}` is a judge score: add a `[judge]` table (lm = "...") that '
                "gives it, or pass `--judge-lm SPEC`."
            )
        if self.sampler not in ("tpe", "nsga2", "random"):
            raise ConfigError(f"`sampler` must be 'tpe', 'nsga2' or 'random', got {self.sampler!r}.")
        if self.pruner not in ("median", "paired", "none"):
            raise ConfigError(f"`pruner` must be 'median', 'paired' or 'none', got {self.pruner!r}.")
        if self.pruner == "paired" and not self.multi and self.objectives[0] == "tokens_per_item":
            raise ConfigError(
                '`pruner = "paired"` tests per-item accuracy or judge scores; with the objective tokens_per_item '
                'use `pruner = "median"`.'
            )
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, int | float) or not 0 < self.alpha < 1:
            raise ConfigError(f"`alpha` must be a number in (0, 1), got {self.alpha!r}.")
        for name in ("n_trials", "chunk_size", "max_consecutive_failures"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"`{name}` must be a positive integer, got {value!r}.")
        super().validate()
        check_compiles(self, self._compiled(), [self.dataset])
        return self


def _check_range_ends(spec: SweepSpec, space: SearchSpace | MethodChoice) -> None:
    """Every value a trial can draw at the ends of a range (and every choice) must be one the method takes:
    a `rounds` range from -2 would otherwise fail every trial it draws, one by one."""
    spaces = space.spaces if isinstance(space, MethodChoice) else {str(spec.method): space}
    for method, s in spaces.items():
        for p in s.params:
            if p.name.startswith("compile."):
                continue
            values = list(p.choices) if p.type == "categorical" else [p.low, p.high]
            for v in values:
                value = int(v) if p.type == "int" and v is not None else v
                try:
                    get_method(method).validate_options({**spec.fixed_for(method), p.name: value})
                except ConfigError as exc:
                    where = f"[search.{method}.{p.name}]" if isinstance(space, MethodChoice) else f"[search.{p.name}]"
                    raise ConfigError(
                        f"{where} allows {p.name} = {value!r}, which method `{method}` refuses: {exc} Narrow the range."
                    ) from None


def load_sweep_spec(
    path: str | Path | SweepSpec | None = None, overrides: Overrides | None = None, **kwargs: Any
) -> SweepSpec:
    """A sweep config (TOML) or a :class:`SweepSpec` (copied), plus overrides (an
    :class:`~dspy_for.experiments.spec.config.Overrides` or the same as keyword arguments) → a validated spec."""
    if isinstance(path, SweepSpec):
        spec = path.copy()
    else:
        data = read_toml(path, "Sweep config", "experiments/sweep_*.toml") if path is not None else {}
        settings = split_settings(data, SweepSpec, "the sweep config")
        if "method" not in data or "dataset" not in data:
            raise ConfigError("A sweep config needs `method` and a `[dataset]` table (name, split, first/limit).")
        dataset = parse_dataset(data.pop("dataset"), "[dataset]")
        judge = parse_judge(data.pop("judge", None), "the sweep config")
        spec = SweepSpec(dataset=dataset, judge=judge, **data, **settings)
    return apply_overrides(spec, overrides or Overrides.of(kwargs)).validate()
