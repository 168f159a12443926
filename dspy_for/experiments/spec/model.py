"""One typed run specification: a TOML config, CLI flags or a Python object all become a validated spec
before anything runs (:mod:`dspy_for.experiments.spec.config` reads configs and flags): one path for every run.

:class:`RunSpec` is the core every run shares (LMs per role and their options, sampling, threads,
tracking, results, an optional judge); :class:`ExperimentSpec` adds datasets × methods for ``compare``;
:class:`~dspy_for.experiments.sweeps.spec.SweepSpec` adds a search space, objectives and storage;
:class:`ProgramSpec` one method and no dataset, for ``ask``.
API keys never go in a spec: they come from the environment (``OPENAI_API_KEY``, ...).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import dspy

from dspy_for.errors import ConfigError
from dspy_for.experiments.methods import CompileSpec, check_compile, get_method
from dspy_for.experiments.spec.checks import (
    LMLike,
    check_compiles,
    check_epochs_sample,
    check_priced,
    compile_lms,
    compile_roles,
    run_threads,
)
from dspy_for.experiments.spec.data import DatasetConfig, load_examples, positive_int
from dspy_for.experiments.spec.identity import prompts_fingerprint, stable_hash
from dspy_for.experiments.spec.settings import SETTINGS
from dspy_for.jsonwalk import leaves, walk
from dspy_for.judges import RUBRICS
from dspy_for.lm import check_lm_options, check_lm_spec, describe_lm, is_reasoning_model, lm_defaults
from dspy_for.lm.options import REASONING_MAX_TOKENS, SERVER_OPTIONS, TRANSPORT_OPTIONS

__all__ = ["DatasetConfig", "ExperimentSpec", "JudgeConfig", "MethodConfig", "ProgramSpec", "RunSpec"]
__all__ += ["load_examples", "prompts_fingerprint"]

DEFAULT_LM = "local/qwen2.5-coder-1.5b"


@dataclass
class MethodConfig:
    """One method of a run: a registry name, a label, its options, per-role LMs and an optional compile step
    (``{kind, data, trainset, valset, train_limit, val_limit, optimizer_lm, <optimizer options>}``)."""

    name: str
    label: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    role_lms: dict[str, LMLike] = field(default_factory=dict)
    compile: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.label = self.label or self.name

    @property
    def compile_step(self) -> CompileSpec | None:
        """Its ``compile`` table parsed and checked once per distinct table (None: no compile step)."""
        return check_compile(self.name, self.options, self.compile, label=self.label)

    def validate(self) -> None:
        """Its options (names, and values: the method is built without LMs, which calls nothing), its roles, their LM
        specs and its compile table (the splits: with the datasets) — the one check of a method in a run, before
        anything runs."""
        entry = get_method(self.name)
        entry.validate_options(self.options)
        entry.validate_roles(self.role_lms)
        for spec in (s for s in self.role_lms.values() if isinstance(s, str)):
            check_lm_spec(spec)
        self.compile_step  # noqa: B018  (parsed and checked: the splits with the datasets)


@dataclass
class JudgeConfig:
    """``[judge]``: an LM that grades every scored item — judged accuracy (``verify``) and the ``rubrics``
    scores (default all three: reasoning, coherence, holistic) — under its own role ``judge``."""

    lm: LMLike
    rubrics: list[str] = field(default_factory=list)
    verify: bool = True

    def validate(self) -> None:
        unknown = sorted(set(self.rubrics) - set(RUBRICS))
        if unknown:
            raise ConfigError(f"Unknown rubric `{unknown[0]}` in [judge]. Choose from: {', '.join(RUBRICS)}.")
        if isinstance(self.lm, str):
            check_lm_spec(self.lm)

    @property
    def scores(self) -> tuple[str, ...]:
        """The per-item scores this judge gives: ``judged_accuracy`` (if ``verify``) and ``quality.<rubric>``."""
        return (*(("judged_accuracy",) if self.verify else ()), *(f"quality.{r}" for r in self.rubrics or RUBRICS))


@dataclass(kw_only=True)
class RunSpec:
    """What every run shares: the LM of every role and its options, sampling, threads, tracking, results.

    ``lm`` and ``role_lms`` values are litellm model strings, ``local/<name>``, or (Python API) any ``dspy.BaseLM``
    object, used as is. ``lm_options`` apply to every role built from a string (``api_base``, ``timeout``,
    ``num_retries``, ``temperature``, ...); ``role_lm_options`` per role on top."""

    lm: LMLike = DEFAULT_LM
    role_lms: dict[str, LMLike] = field(default_factory=dict)
    lm_options: dict[str, Any] = field(default_factory=dict)
    role_lm_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    max_tokens: int | None = 1024
    seed: int = 0
    experiment: str = "dspy-for"
    cache: bool = True
    judge: JudgeConfig | None = None
    # run settings: each declared once in spec/settings.py (meaning, commands, flag, check); none changes a result
    num_threads: int | None = SETTINGS["num_threads"].default  # None: the local server's slots, else 1 (`threads`)
    tracking_uri: str | None = SETTINGS["tracking_uri"].default
    max_cost: float | None = SETTINGS["max_cost"].default  # enforced by the run core's SpendLimit
    epochs: int = SETTINGS["epochs"].default  # each its own record; `reducer` makes one value per item of them
    reducer: str = SETTINGS["reducer"].default
    traces: bool = SETTINGS["traces"].default
    dry_run: bool = SETTINGS["dry_run"].default  # the plan, not the run: dspy_for.experiments.core.plan
    threads = property(run_threads)  # items run at once: spec/checks.py's run_threads
    #: the command this kind of spec runs (which declared settings it takes)
    COMMAND: ClassVar[str] = ""
    #: fields that change no result (left out of fingerprints and result keys): the run settings, the experiment
    NOT_RESULTS: ClassVar[tuple[str, ...]] = ("experiment", *SETTINGS)

    # ------------------------------------------------------------------------------------- datasets

    def dataset_configs(self) -> list[DatasetConfig]:
        raise NotImplementedError

    def with_datasets(self: _S, **changes: Any) -> _S:
        """This spec with ``changes`` (``split``, ``limit``, ``first``, ``data_dir``) made to every dataset."""
        raise NotImplementedError

    def method_roles(self) -> set[str]:
        """Every role of every method this run may build (for checking per-role settings)."""
        raise NotImplementedError

    def _method_lms(self, role: str) -> list[LMLike]:
        """The LMs methods of this run give ``role`` themselves."""
        return []

    # -------------------------------------------------------------------------------- LMs per role

    def lm_for(self, role: str, method_role_lms: Mapping[str, LMLike] | None = None) -> LMLike:
        """The LM spec (or object) of ``role``: the method's own, else the run's per-role, else ``lm``."""
        return (method_role_lms or {}).get(role) or self.role_lms.get(role) or self.lm

    def lm_options_for(self, role: str) -> dict[str, Any]:
        return {**self.lm_options, **self.role_lm_options.get(role, {})}

    def lm_build_options(self, lm: str, role: str | None, temperature: float | None = None) -> dict[str, Any]:
        """The options ``lm`` (a spec string) is built with for ``role`` (None: the options every role shares): the
        role's LM options, the run's ``max_tokens`` (raised to :data:`~dspy_for.lm.factory.REASONING_MAX_TOKENS`
        for a reasoning model, whose reasoning counts against it) and the sampling defaults
        (:func:`~dspy_for.lm.lm_defaults`: temperature 1 for a reasoning model, else 0)."""
        options = dict(self.lm_options_for(role) if role else self.lm_options)
        if temperature is not None:
            options["temperature"] = temperature
        if self.max_tokens is not None and options.get("max_tokens") is None:
            reasoning = is_reasoning_model(lm, options)
            options["max_tokens"] = max(self.max_tokens, REASONING_MAX_TOKENS) if reasoning else self.max_tokens
        return {**lm_defaults(lm, options), **options}

    def role_settings(
        self, roles: Iterable[str], method_role_lms: Mapping[str, LMLike] | None = None
    ) -> dict[str, Any]:
        """What decides each role's answers (for result keys): its LM and the options that change results."""
        out: dict[str, Any] = {}
        for r in roles:
            lm = self.lm_for(r, method_role_lms)
            options = self.lm_options_for(r)
            if isinstance(lm, str) and is_reasoning_model(lm, options):
                options = self.lm_build_options(lm, r)  # the temperature and budget it runs at are not the defaults
            options = {k: v for k, v in options.items() if k not in TRANSPORT_OPTIONS + SERVER_OPTIONS}
            out[r] = {"lm": lm if isinstance(lm, str) else describe_lm(lm), **({"options": options} if options else {})}
        return out

    # ----------------------------------------------------------------------------------- validation

    def validate(self: _S) -> _S:
        datasets = self.dataset_configs()
        for d in datasets:
            d.validate()
        if self.judge is not None:
            self.judge.validate()
        roles = self.method_roles() | ({"judge"} if self.judge is not None else set())
        for where, mapping in (("role_lms", self.role_lms), ("role_lm_options", self.role_lm_options)):
            unknown = sorted(set(mapping) - roles)
            if unknown:
                raise ConfigError(
                    f"`{where}`: this run has no role `{unknown[0]}` (no method of it does). Its roles: "
                    f"{', '.join(sorted(roles))}. Fix the ROLE in `{where}` (`--role-lm ROLE=MODEL`)."
                )
        for spec in [self.lm, *self.role_lms.values()]:
            if isinstance(spec, str):
                check_lm_spec(spec)
        check_lm_options(self.lm_options)
        for options in self.role_lm_options.values():
            check_lm_options(options)
        for r in roles:  # a reasoning model's rules (temperature 1, a large enough budget), before anything runs
            for lm in {self.lm_for(r), *self._method_lms(r)}:
                if isinstance(lm, str):
                    self.lm_build_options(lm, r)
        for setting in SETTINGS.values():  # every run setting's value, as its declaration checks it
            if setting.name in self.__dataclass_fields__:
                setting.checked(getattr(self, setting.name))
        if self.max_cost is not None:
            check_priced(self, roles)
        if self.max_tokens is not None:
            positive_int(self.max_tokens, "max_tokens")
        return self

    # ------------------------------------------------------------------------------------ identity

    def fingerprint(self) -> str:
        """Hash of everything that changes results (not tracking or threading), naming the run's directory."""
        d = self.to_dict()
        for k in self.NOT_RESULTS:
            d.pop(k, None)
        for k in ("lm_options", "role_lm_options"):
            if not d.get(k):
                d.pop(k, None)
        return stable_hash(d)

    def item_key(
        self,
        dataset: DatasetConfig,
        method: MethodConfig,
        options: Mapping[str, Any],
        roles: Iterable[str],
        prompts: str = "",
        revision: int = 0,
    ) -> str:
        """Hash of what decides one item's result for ``method`` on ``dataset``: each role's LM and the
        options that change its answers, the options and compile settings, the prompts (``prompts``:
        :func:`prompts_fingerprint` of the built program), the dataset's name and split — but not how many
        items run (``limit``/``first``), where the data was read from, nor the other methods. Per-item
        results are stored under it and matched by each item's content, so a run grown from 10 to 50
        items only runs what is new, an edited data file re-runs exactly the changed items, and a role
        prompt edited in the library starts a fresh set of results instead of reusing stale ones.
        ``revision`` (the method's, when non-zero) does the same for a change of the method's code."""
        code = {"revision": revision} if revision else {}
        return stable_hash(
            {
                "roles": self.role_settings(roles, method.role_lms),
                "max_tokens": self.max_tokens,
                "seed": self.seed,
                "cache": self.cache,
                "dataset": {"name": dataset.name, "split": dataset.split},
                "method": {
                    "name": method.name,
                    "options": dict(options),
                    "compile": method.compile,
                    "prompts": prompts,
                    **code,
                },
            }
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data (LM objects described by :func:`describe_lm`, never copied)."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    def copy(self: _S) -> _S:
        """A copy whose config parts can be changed freely (LM objects are shared, not copied)."""
        memo: dict[int, Any] = {id(lm): lm for lm in _lms_in(self)}
        return copy.deepcopy(self, memo)


_S = TypeVar("_S", bound=RunSpec)


def _plain(value: Any) -> Any:
    """``value`` as plain data: dataclasses as dicts, LM objects described by :func:`describe_lm`."""
    return walk(value, lambda v: describe_lm(v) if isinstance(v, dspy.BaseLM) else v, with_dataclasses=True)


def _lms_in(value: Any) -> Iterable[dspy.BaseLM]:
    return (v for v in leaves(value, with_dataclasses=True) if isinstance(v, dspy.BaseLM))


@dataclass(kw_only=True)
class ProgramSpec(RunSpec):
    """One method's program with the run's LMs, and no dataset (``dspy-for ask``)."""

    method: MethodConfig

    COMMAND: ClassVar[str] = "ask"

    def dataset_configs(self) -> list[DatasetConfig]:
        return []

    def with_datasets(self, **changes: Any) -> ProgramSpec:
        return self

    def method_roles(self) -> set[str]:
        return set(get_method(self.method.name).roles)

    def _method_lms(self, role: str) -> list[LMLike]:
        return [self.method.role_lms[role]] if role in self.method.role_lms else []

    def validate(self) -> ProgramSpec:
        self.method.validate()
        return super().validate()


@dataclass(kw_only=True)
class ExperimentSpec(RunSpec):
    """A comparison: every method on every dataset (``dspy-for compare``)."""

    datasets: list[DatasetConfig]
    methods: list[MethodConfig]
    baseline: str | None = None
    results_dir: str | None = SETTINGS["results_dir"].default  # where items are kept: see items_dir
    autolog: bool = SETTINGS["autolog"].default
    rerun_changed: bool = SETTINGS["rerun_changed"].default  # used by the run's TrackedRun.settle
    recheck: int | None = SETTINGS["recheck"].default  # re-run N stored items per cell uncached: core/recheck.py
    match_budget: bool = False
    #: a sequential comparison (:mod:`dspy_for.experiments.sequential`): every method on one seeded item order,
    #: ``batch_size`` items at a time, each pair with the baseline tested after every batch (anytime-valid, ``alpha``
    #: split over the pairs) until every pair is resolved, ``max_items`` or ``max_total_tokens``
    sequential: bool = False
    max_items: int | None = None
    alpha: float = 0.05
    batch_size: int = 4
    max_total_tokens: int | None = None

    COMMAND: ClassVar[str] = "compare"
    NOT_RESULTS: ClassVar[tuple[str, ...]] = (
        *RunSpec.NOT_RESULTS,
        "baseline",
        # how many items a sequential comparison runs, never what an item answers
        "sequential",
        "max_items",
        "alpha",
        "batch_size",
        "max_total_tokens",
    )

    def dataset_configs(self) -> list[DatasetConfig]:
        return self.datasets

    def items_dir(self, tracking_root: Path) -> Path:
        """Where finished items are kept, to resume and to reuse: ``results_dir``, else ``compare/items`` under the
        tracking root (``compare`` and ``advise`` share it)."""
        return Path(self.results_dir) if self.results_dir else tracking_root / "compare" / "items"

    def with_datasets(self, **changes: Any) -> ExperimentSpec:
        return replace(self, datasets=[replace(d, **changes) for d in self.datasets])

    def method_roles(self) -> set[str]:
        """Every method's roles, and ``optimizer`` when a method compiles (the compile's LM is built for it)."""
        return {r for m in self.methods for r in get_method(m.name).roles} | compile_roles(self.methods)

    def _method_lms(self, role: str) -> list[LMLike]:
        return [m.role_lms[role] for m in self.methods if role in m.role_lms] + compile_lms(self.methods, role)

    def validate(self) -> ExperimentSpec:
        if not self.datasets:
            raise ConfigError("No dataset: add a `[[datasets]]` section or pass `--dataset NAME`.")
        if not self.methods:
            raise ConfigError("No method: add `[[methods]]` sections or pass `--methods a,b,c`.")
        labels = [m.label for m in self.methods]
        dupes = sorted({x for x in labels if labels.count(x) > 1})
        if dupes:
            raise ConfigError(f"Method label `{dupes[0]}` is used twice: give each `[[methods]]` a unique `label`.")
        for m in self.methods:
            m.validate()
        super().validate()
        check_compiles(self, self.methods, self.datasets)
        if self.baseline is not None and self.baseline not in labels:
            raise ConfigError(f"`baseline` `{self.baseline}` is not a method label. Labels: {', '.join(labels)}.")
        self._validate_sequential()
        check_epochs_sample(self)
        return self

    def _validate_sequential(self) -> None:
        for name in ("max_items", "batch_size", "max_total_tokens"):
            if getattr(self, name) is not None:
                positive_int(getattr(self, name), name)
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, int | float) or not 0 < self.alpha < 1:
            raise ConfigError(f"`alpha` must be a number in (0, 1), got {self.alpha!r}.")
        if self.rerun_changed and self.sequential:
            raise ConfigError("`rerun_changed` applies to a whole comparison: drop it or `--sequential`.")
        if not self.sequential:
            return
        if len(self.methods) < 2:
            raise ConfigError("`sequential = true` compares methods with the baseline: give at least two methods.")
        sized = [m.label for m in self.methods if get_method(m.name).sized is not None]
        if self.match_budget and sized:
            raise ConfigError(
                f"`match_budget` sizes {', '.join(sized)} from FOR's cost over the whole run, which a sequential "
                "comparison does not run: pass `--no-match-budget` (`match_budget = false`; then each runs with its "
                "own `k` or `N`) or drop `sequential`."
            )
