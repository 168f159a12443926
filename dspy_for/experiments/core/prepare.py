"""A spec becomes a prepared run: examples, metric, signature, the LM of every role, the program, an optional
compile step and judge — built once, before any item runs::

    run = prepare_run(spec, dataset, method)   # then dspy_for.experiments.core.run.evaluate(run, ...)

``compare``, every sweep trial, the sweep's final test, ``ask`` and the measurement scripts all prepare their
runs here, so an option, a slice, an LM, a compile step and a judge mean the same thing everywhere.

Work already done is not done again: given the records its results store holds (``stored``), a run whose every item
is stored builds no LM, starts no server and pulls no model (its LMs are
:class:`~dspy_for.experiments.core.stored_lms.StoredLM`, from the config), and starts no compile (a compiled program
kept beside its records is read back; a compile whose result no item would use is not started). An optimizer LM is
built only for a compile that runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import dspy

from dspy_for.datasets import signature_for
from dspy_for.experiments.core.compile_step import CompileCost, CompileNotStarted, compile_for_run
from dspy_for.experiments.core.judging import needs_verdict
from dspy_for.experiments.core.records import ItemResult, unit_keys
from dspy_for.experiments.core.spend import SpendLimit
from dspy_for.experiments.core.stored_lms import stored_lm, stored_lms
from dspy_for.experiments.methods import build_method, get_method
from dspy_for.experiments.spec.checks import COMPILE_ROLE
from dspy_for.experiments.spec.config import Overrides, apply_overrides
from dspy_for.experiments.spec.model import (
    DatasetConfig,
    ExperimentSpec,
    LMLike,
    MethodConfig,
    ProgramSpec,
    RunSpec,
    load_examples,
)
from dspy_for.experiments.spec.model import prompts_fingerprint as prompts_fingerprint
from dspy_for.judges import RUBRICS, Judge
from dspy_for.lm import make_lm, with_transport
from dspy_for.metrics import metric_for

__all__ = [
    "PreparedRun",
    "build_lms",
    "prepare_program",
    "prepare_run",
    "program_run",
    "result_key",
    "role_lm",
    "with_options",
]

Metric = Callable[..., Any]


@dataclass
class PreparedRun:
    """Everything one method needs to run on one dataset, built once from the spec (never changed after)."""

    spec: RunSpec
    dataset: DatasetConfig
    method: MethodConfig
    options: dict[str, Any]  # the method's own options (an LM temperature is on the LMs)
    examples: list[dspy.Example]
    metric: Metric
    signature: str
    lm: dspy.BaseLM  # the default LM (what roles without their own use; also dspy.context's)
    role_lms: dict[str, dspy.BaseLM]
    program: dspy.Module
    uses_labels: bool
    key: str  # names the per-item results (see RunSpec.item_key)
    compile_usage: dict[str, Any] | None = None
    compile_cost: CompileCost | None = None  # what the compile step cost (``reused``: its first compile's, not spent)
    compiled_path: Path | None = None  # where the compiled program is kept (``load_compiled`` reads it back)
    judge: Judge | None = None  # grades every scored item (the spec's [judge]); its calls are role `judge`
    judge_name: str = ""  # the judge's LM as recorded with each verdict (a verdict by another judge is redone)

    @property
    def roles(self) -> tuple[str, ...]:
        return get_method(self.method.name).roles

    @property
    def lms(self) -> list[dspy.BaseLM]:
        """Every LM the run may call: the default, each role's and the judge's (each once)."""
        judge = [self.judge.judge_lm] if self.judge is not None else []
        return list({id(lm): lm for lm in [self.lm, *self.role_lms.values(), *judge]}.values())


def role_lm(spec: RunSpec, lm: LMLike, role_name: str | None, temperature: float | None = None) -> dspy.BaseLM:
    """The one place a run builds an LM: ``lm`` (a spec string, or a user's LM object, whose requests then travel
    through the endpoint's shared limit and retries: :func:`~dspy_for.lm.with_transport`) with the run's
    ``max_tokens`` (at least :data:`~dspy_for.lm.factory.REASONING_MAX_TOKENS` for a reasoning model), cache and the
    LM options of ``role_name`` (None: the options every role shares): :meth:`RunSpec.lm_build_options`."""
    if isinstance(lm, dspy.BaseLM):
        return with_transport(lm.copy(temperature=temperature) if temperature is not None else lm)
    return make_lm(lm, cache=spec.cache, **spec.lm_build_options(lm, role_name, temperature))


def build_lms(
    spec: RunSpec, method: MethodConfig, temperature: float | None = None
) -> tuple[dspy.BaseLM, dict[str, dspy.BaseLM]]:
    """The LM of every role of ``method`` (and the run's default LM), each built once per distinct setting."""
    built: dict[str, dspy.BaseLM] = {}

    def make(lm: LMLike, role_name: str | None) -> dspy.BaseLM:
        options = spec.lm_options_for(role_name) if role_name else spec.lm_options
        key = json.dumps([lm if isinstance(lm, str) else id(lm), options], sort_keys=True, default=str)
        if key not in built:
            built[key] = role_lm(spec, lm, role_name, temperature)
        return built[key]

    default = make(spec.lm, None)
    roles = get_method(method.name).roles
    return default, {r: make(spec.lm_for(r, method.role_lms), r) for r in roles}


def prepare_program(method: str, signature: str, options: dict[str, Any], overrides: Overrides) -> dspy.Module:
    """One method's program for ``signature`` (``ask``), with no dataset: a :class:`ProgramSpec` built from
    ``overrides`` and validated like any run's — unknown options, roles and LM specs fail here, before any LM is
    built — and the LM of every role built by :func:`build_lms`, as in every run."""
    spec = apply_overrides(ProgramSpec(method=MethodConfig(name=method, options=dict(options))), overrides).validate()
    own, temperature = get_method(method).split_options(options)
    default, role_lms = build_lms(spec, spec.method, temperature)
    return build_method(method, signature, lm=default, role_lms=role_lms, **own)


def prepare_run(
    spec: RunSpec,
    dataset: DatasetConfig,
    method: MethodConfig,
    *,
    examples: list[dspy.Example] | None = None,
    compile_dir: Path | None = None,
    limit: SpendLimit | None = None,
    stored: Mapping[str, ItemResult] | None = None,
) -> PreparedRun:
    """Build one method's run: its examples, metric, signature, LM per role, program, compile step and judge.

    ``examples`` (default: :func:`load_examples` of ``dataset``) may be passed when the caller has them.
    ``compile_dir``: where a compiled program is kept, so a resumed run does not compile again. ``limit``: the run's
    ``max_cost``, which a new compile's spend counts against; once it is reached no new compile starts
    (:class:`~dspy_for.experiments.core.compile_step.CompileNotStarted`). ``stored``: the records the method's results
    store holds under its result key (by record key); when they hold every item of ``examples`` (each epoch, with
    this run's judge's verdict) the run has nothing to run and builds no LM (see the module docstring).
    """
    registered = get_method(method.name)
    options, temperature = registered.split_options(method.options)
    options = registered.with_defaults(options)  # checked with the spec; the program is built once, here
    sig = signature_for(dataset.name)
    metric = metric_for(dataset.name)
    examples = examples if examples is not None else load_examples(dataset)
    done = stored is not None and _nothing_to_run(spec, examples, stored, metric)
    default, role_lms = (stored_lms if done else build_lms)(spec, method, temperature)
    program = build_method(method.name, sig, lm=default, role_lms=role_lms, **options)
    key = result_key(spec, dataset, method, program)
    compile_cost = cached = None
    if (step := method.compile_step) is not None:
        cached = compile_dir / f"{method.label}.{key}.compiled.json" if compile_dir else None
        kept = cached is not None and cached.is_file()
        if limit is not None and limit.reached and not kept and not done:
            raise CompileNotStarted(method.label, len(examples) * spec.epochs)
        if kept or not done:  # every item stored and no compiled program kept: its result would not be used
            optimizer_lm = None if kept else role_lm(spec, _optimizer(step, spec), COMPILE_ROLE)
            program, compile_cost = compile_for_run(
                program,
                method,
                dataset,
                metric=metric,
                seed=spec.seed,
                optimizer_lm=optimizer_lm,
                cached=cached,
                scored=examples,
            )
            if limit is not None and compile_cost is not None:
                limit.add_compile(compile_cost)
    judge, judge_name = _judge(spec, metric, built=not done)
    return PreparedRun(
        spec=spec,
        dataset=dataset,
        method=method,
        options=options,
        examples=examples,
        metric=metric,
        signature=sig,
        lm=default,
        role_lms=role_lms,
        program=program,
        uses_labels=registered.uses_labels(options),
        key=key,
        compile_usage=compile_cost.usage if compile_cost else None,
        compile_cost=compile_cost,
        compiled_path=cached,
        judge=judge,
        judge_name=judge_name,
    )


def _optimizer(step: Any, spec: RunSpec) -> LMLike:
    return step.optimizer_lm if step.optimizer_lm is not None else spec.lm


def _nothing_to_run(
    spec: RunSpec, examples: list[dspy.Example], stored: Mapping[str, ItemResult], metric: Metric
) -> bool:
    """Whether ``stored`` (a method's records under its result key) holds every item of ``examples`` × epochs, judged
    by this run's judge if it has one, so the run calls no LM (``rerun_changed`` asks the LMs what serves them now)."""
    if (isinstance(spec, ExperimentSpec) and spec.rerun_changed) or not examples:
        return False
    keys = unit_keys(examples, spec.epochs)
    if not all(k in stored for k in keys):
        return False
    if spec.judge is not None:
        _, judge_name = _judge(spec, metric, built=False)
        return not any(needs_verdict(stored[k].judge, judge_name) for k in keys)
    return True


def result_key(spec: RunSpec, dataset: DatasetConfig, method: MethodConfig, program: dspy.Module | None = None) -> str:
    """The key ``method``'s per-item results on ``dataset`` are stored under (:meth:`RunSpec.item_key`): from its
    ``program`` as built, or, without one, from its program built with no LM (which builds and calls no LM: an LM
    does not change what a program's prompts say), so stored results are found without building an LM."""
    registered = get_method(method.name)
    if program is None:
        own, _ = registered.split_options(method.options)
        lms = dict.fromkeys(registered.roles)
        program = registered.build(signature_for(dataset.name), lms, registered.with_defaults(own))
    fingerprint = prompts_fingerprint(program)
    return spec.item_key(dataset, method, method.options, registered.roles, fingerprint, registered.revision)


def _judge(spec: RunSpec, metric: Metric, *, built: bool = True) -> tuple[Judge | None, str]:
    """The spec's judge, and its name as recorded with each verdict: a verdict is reused only from this judge
    (the same LM and the same grading prompt). ``built=False``: its LM is a
    :class:`~dspy_for.experiments.core.stored_lms.StoredLM` (a run whose every item holds this judge's verdict)."""
    if spec.judge is None:
        return None, ""
    lm = (role_lm if built else stored_lm)(spec, spec.judge.lm, "judge")
    judge = Judge(lm, fallback=metric, rubrics=spec.judge.rubrics or RUBRICS)
    name = json.dumps(
        {
            **spec.role_settings(["judge"], {"judge": spec.judge.lm}),
            "prompt": prompts_fingerprint(judge.predictor),
        },
        sort_keys=True,
    )
    return judge, name


def program_run(
    program: dspy.Module,
    examples: list[dspy.Example],
    metric: Metric,
    *,
    lm: dspy.BaseLM,
    dataset: DatasetConfig,
    label: str,
) -> PreparedRun:
    """A run of a program the caller built itself (e.g. compiled by hand in a measurement script), so it is scored
    by the same run core as every other: failures are errors, never scores. Nothing is stored (no result key)."""
    spec = ExperimentSpec(lm=lm, datasets=[dataset], methods=[MethodConfig(name="cot", label=label)])
    return PreparedRun(
        spec=spec,
        dataset=dataset,
        method=spec.methods[0],
        options={},
        examples=examples,
        metric=metric,
        signature="",
        lm=lm,
        role_lms={},
        program=program,
        uses_labels=False,
        key="",
    )


def with_options(method: MethodConfig, options: dict[str, Any]) -> MethodConfig:
    """``method`` with other options (e.g. sized to a matched budget), same label and LMs."""
    return replace(method, options=dict(options))
